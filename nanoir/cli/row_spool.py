"""Collecting a streamed output's rows on disk as they come, for ``nanoir-run --stream``.

A stream may be longer than memory, so ``nanoir-run --stream`` keeps neither its input (it is
memory-mapped) nor its outputs in memory: each output's rows are appended, as they come, to an
anonymous temporary file with the streamed dim first; at the end ``write_npy`` lays them out
as the ``.npy`` of the whole output (its header says the final shape), copying one
``[rows, trailing dims]`` block at a time. The output file itself is written atomically
(``nanoir.files.write_atomically``), so a failed stream leaves no partial file.
"""

from __future__ import annotations

import tempfile
from typing import IO, Any

import numpy as np
from numpy.lib import format as npy

__all__ = ["RowSpool"]


class RowSpool:
    """One output's rows along ``dim``, spooled to a temporary file (an output without that
    dim is kept whole, in memory: it is one unit)."""

    def __init__(self, dim: int):
        self.dim = dim
        self.rows = 0
        self.rest: tuple[int, ...] | None = None
        """The output's shape without the streamed dim."""
        self.dtype: np.dtype[Any] | None = None
        self.whole: np.ndarray | None = None
        self._file: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in close())

    def add(self, y: np.ndarray | None) -> None:
        """Append the rows of one push (``None``: nothing new)."""
        if y is None:
            return
        if y.ndim <= self.dim:
            self.whole = y
            return
        rest = y.shape[: self.dim] + y.shape[self.dim + 1 :]
        if self.rest is None:
            self.rest, self.dtype = rest, y.dtype
        assert rest == self.rest and y.dtype == self.dtype, (rest, self.rest, y.dtype)
        if y.shape[self.dim]:
            self._file.write(np.ascontiguousarray(np.moveaxis(y, self.dim, 0)).tobytes())
            self.rows += y.shape[self.dim]

    @property
    def shape(self) -> tuple[int, ...]:
        if self.whole is not None:
            return tuple(self.whole.shape)
        rest = self.rest or ()
        return (*rest[: self.dim], self.rows, *rest[self.dim :])

    def _rows_first(self) -> np.ndarray:
        """The spooled rows as ``[rows, *rest]`` (memory-mapped)."""
        assert self.rest is not None and self.dtype is not None
        self._file.flush()
        return np.memmap(self._file, dtype=self.dtype, mode="r", shape=(self.rows, *self.rest))

    def array(self) -> np.ndarray:
        """The whole output in memory (for printing or an ``.npz``)."""
        if self.whole is not None:
            return self.whole
        if self.rest is None:
            raise ValueError("the stream produced no rows of this output")
        if self.rows == 0:
            return np.zeros(self.shape, dtype=self.dtype)
        return np.moveaxis(np.array(self._rows_first()), 0, self.dim)

    def write_npy(self, f: IO[bytes]) -> None:
        """Write the whole output as ``.npy`` to ``f``, one ``[rows, *trailing]`` block at a
        time (C order: every index of the dims before the streamed one in turn)."""
        if self.whole is not None or self.rows == 0:
            np.save(f, self.array(), allow_pickle=False)
            return
        assert self.dtype is not None
        header = {"descr": npy.dtype_to_descr(self.dtype), "fortran_order": False}
        header["shape"] = self.shape
        npy.write_array_header_2_0(f, header)  # type: ignore[no-untyped-call]
        rows = self._rows_first()
        for index in np.ndindex(*self.shape[: self.dim]):
            f.write(np.ascontiguousarray(rows[(slice(None), *index)]).tobytes())

    def close(self) -> None:
        self._file.close()
