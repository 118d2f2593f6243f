"""One per-layer table for every report nanoir prints: the quantization report
(``nanoir.report``), the engine-or-host inspection (``nanoir.inspect``) and the cost estimate
(``nanoir.estimate``) each fill a :class:`LayerTable` and print it the same ways:

- :meth:`LayerTable.text`: aligned plain-text columns (what ``str()`` of each report is), a
  dashed rule under the header, notes after the rows;
- :meth:`LayerTable.rich`: a ``rich`` table for a terminal (``nanoir-opt`` on a tty);
- :meth:`LayerTable.records`: one dict per row, the JSON form (``json.dumps``-able values);
- :func:`bar_chart`: one bar per row of a numeric column, coloured by a group column, as a PNG,
  SVG or PDF (matplotlib, the ``plot`` extra), written like the report's figure.

    LayerTable(["layer", "MACs"], [["conv1", 1024]], left=1).text()
    ->  layer  MACs
        -----  ----
        conv1  1024
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nanoir.errors import Error, FileFormatError
from nanoir.files import check_output_path, write_atomically, writes_through

__all__ = [
    "PLOT_FORMATS",
    "LayerTable",
    "PlotUnavailableError",
    "bar_chart",
    "figure_class",
    "require_matplotlib",
    "write_figure",
]

Cell = str | int | float | None


def _text(value: Cell) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 1e4 else str(value)
    return value


@dataclass
class LayerTable:
    """Rows of cells under ``columns``; the first ``left`` columns are left-aligned (names),
    the rest right-aligned (numbers). ``cells`` formats a cell as text where a report wants
    its own form (its float precision); ``notes`` follow the rows."""

    columns: list[str]
    rows: list[list[Cell]] = field(default_factory=list)
    left: int = 1
    notes: list[str] = field(default_factory=list)
    cells: Callable[[int, Cell], str] | None = None
    """``cells(column index, value) -> text``; None: a default form (3 significant digits)."""
    keys: list[str] | None = None
    """JSON keys of the columns (default: the titles)."""

    def cell_text(self, i: int, value: Cell) -> str:
        if self.cells is not None:
            return self.cells(i, value)
        return _text(value)

    def text_rows(self) -> list[list[str]]:
        return [[self.cell_text(i, v) for i, v in enumerate(row)] for row in self.rows]

    def text(self) -> str:
        """Aligned columns two spaces apart, a dashed rule under the header, then the notes."""
        lines = [list(self.columns)] + self.text_rows()
        widths = [max(len(line[i]) for line in lines) for i in range(len(self.columns))]
        out = [
            "  ".join(
                cell.ljust(w) if i < self.left else cell.rjust(w)
                for i, (cell, w) in enumerate(zip(line, widths))
            )
            for line in lines
        ]
        out.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(out + self.notes)

    def rich(self, title: str | None = None) -> Any:
        """The table as a ``rich.table.Table`` (notes as its caption)."""
        # lazy: rich loads only to print on a terminal
        from rich.table import Table

        table = Table(title=title, caption="\n".join(self.notes) or None)
        for i, c in enumerate(self.columns):
            table.add_column(c, justify="left" if i < self.left else "right")
        for row in self.text_rows():
            table.add_row(*row)
        return table

    def records(self) -> list[dict[str, Any]]:
        """One dict per row, keyed by :attr:`keys` (the JSON form; infinities as strings)."""
        keys = self.keys or self.columns

        def plain(v: Cell) -> Any:
            if isinstance(v, float) and not math.isfinite(v):
                return str(v)
            return v

        return [{k: plain(v) for k, v in zip(keys, row)} for row in self.rows]


class PlotUnavailableError(ImportError, Error):
    """Drawing a figure needs matplotlib, which is not installed."""


PLOT_FORMATS = ("png", "svg", "pdf")
"""The figure formats nanoir writes, by the path's suffix."""


def figure_class() -> Any:
    """matplotlib's ``Figure`` (headless), or a :class:`PlotUnavailableError` saying how to
    get it (``pip install nanoir[plot]``)."""
    try:
        # lazy: matplotlib (the `plot` extra) loads only to draw
        from matplotlib.figure import Figure
    except ImportError as e:
        raise PlotUnavailableError(
            f"drawing a report needs matplotlib ({e}): pip install nanoir[plot]"
        ) from None
    return Figure


def require_matplotlib() -> None:
    """A :class:`PlotUnavailableError` unless matplotlib imports."""
    figure_class()


def write_figure(fig: Any, path: str | os.PathLike[str], what: str = "the report figure") -> None:
    """Write ``fig`` to ``path`` (``.png``, ``.svg`` or ``.pdf`` by the suffix), atomically; a
    special file such as ``/dev/stdout`` is written through (PNG unless named otherwise)."""
    name = os.fspath(path)
    suffix = os.path.splitext(name)[1].lower().lstrip(".")
    if suffix not in PLOT_FORMATS and writes_through(name):
        suffix = "png"  # a device or pipe such as /dev/stdout: PNG bytes
    if suffix not in PLOT_FORMATS:
        raise FileFormatError(
            f"{name}: {what} is written as .png, .svg or .pdf; name the file with one of "
            "those suffixes"
        )
    check_output_path(name)
    write_atomically(name, lambda f: fig.savefig(f, format=suffix, dpi=110))


GROUP_COLOURS = {"engine": "tab:blue", "host": "tab:orange", "boundary": "tab:gray"}


def bar_chart(
    table: LayerTable,
    value: str,
    *,
    label: str | list[str] = "column",
    group: str | None = None,
    title: str | None = None,
    unit: str = "",
) -> Any:
    """A matplotlib ``Figure``: one horizontal bar per row, its length ``value``'s column,
    its colour ``group``'s (``engine``/``host``/``boundary`` have fixed colours), rows in
    table order from the top, each labelled by the ``label`` column (or the given labels)."""
    fig_cls = figure_class()
    if isinstance(label, str):
        names = [str(r[table.columns.index(label)]) for r in table.rows]
    else:
        names = list(label)
    values = [float(r[table.columns.index(value)] or 0) for r in table.rows]
    groups = [str(r[table.columns.index(group)]) for r in table.rows] if group else []
    n = max(len(names), 1)
    fig = fig_cls(figsize=(8.0, max(2.5, 0.28 * n + 1.2)), layout="constrained")
    ax = fig.subplots()
    ys = list(range(len(names)))[::-1]
    colours = [GROUP_COLOURS.get(g, "tab:green") for g in groups] if groups else None
    ax.barh(ys, values, color=colours)
    ax.set_yticks(ys)
    ax.set_yticklabels(names, fontsize=7)
    ax.set_xlabel(f"{value}" + (f" ({unit})" if unit else ""))
    ax.grid(axis="x", alpha=0.3)
    if groups:
        # lazy: matplotlib is loaded by figure_class above
        from matplotlib.patches import Patch

        seen = list(dict.fromkeys(groups))
        handles = [Patch(color=GROUP_COLOURS.get(g, "tab:green"), label=g) for g in seen]
        ax.legend(handles=handles, loc="lower right", fontsize=8)
    ax.set_title(title or f"{value} per layer")
    return fig
