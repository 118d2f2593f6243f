"""Pictures (issue 14 part 3): the op graph as Graphviz DOT (``--emit=dot``, ``nanoir.draw``)
and the quantization report as a figure (``QuantReport.plot``, ``nanoir-run --plot``).

The DOT text is always tested; rendering it needs Graphviz's ``dot`` and is skipped without it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from nanoir.lowering.stream_plan import StreamPlanPass

import nanoir
from nanoir.cli.opt import main as opt_main
from nanoir.cli.run import main as run_main
from nanoir.dot import GraphvizMissingError, to_dot
from nanoir.errors import FileFormatError

FLOAT = """\
func.func @main(%x: tensor<?x3x?x5xf32>) -> tensor<?x4x?x3xf32> {
  %w = nf.constant "w" dense<0.5> : tensor<4x3x3x3xf32>
  %c = nf.conv %x, %w : (tensor<?x3x?x5xf32>, tensor<4x3x3x3xf32>) -> tensor<?x4x?x3xf32>
  %r = nf.relu %c : tensor<?x4x?x3xf32>
  %a = nf.add %r, %c : (tensor<?x4x?x3xf32>, tensor<?x4x?x3xf32>) -> tensor<?x4x?x3xf32>
  func.return %a : tensor<?x4x?x3xf32>
}
"""

PER_CHANNEL = """\
func.func @main(%x: tensor<?x4xf32>) -> tensor<?x3xf32> {
  %q = nq.fake_quant %x {bits = 4 : i64, exp = dense<2> : tensor<1xi8>} : tensor<?x4xf32>
  %w = nf.constant "fc" dense<0.25> : tensor<3x4xf32>
  %wq = nq.fake_quant %w {bits = 8 : i64, exp = dense<[[5], [6], [7]]> : tensor<3x1xi8>} : tensor<3x4xf32>
  %y = nf.linear %q, %wq : (tensor<?x4xf32>, tensor<3x4xf32>) -> tensor<?x3xf32>
  func.return %y : tensor<?x3xf32>
}
"""

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is missing")

NODE = re.compile(r'^\s*(v\d+) \[label = "((?:[^"\\]|\\.)*)", shape = \w+\];$')
EDGE = re.compile(r"^\s*(v\d+) -> (v\d+)(?: \[label = \"(\d+)\"\])?;$")


def parse_dot(text: str) -> tuple[dict[str, str], list[tuple[str, str, int | None]]]:
    """Nodes (id -> label, ``\\n`` as newlines) and edges of nanoir's DOT; checks the frame."""
    lines = text.splitlines()
    assert lines[0].startswith("digraph ") and lines[0].endswith("{") and lines[-1] == "}"
    assert text.count("{") == text.count("}")
    nodes: dict[str, str] = {}
    edges: list[tuple[str, str, int | None]] = []
    for line in lines:
        if m := NODE.match(line):
            assert m[1] not in nodes, f"node {m[1]} declared twice"
            nodes[m[1]] = m[2].replace("\\n", "\n").replace('\\"', '"')
        elif m := EDGE.match(line):
            edges.append((m[1], m[2], int(m[3]) if m[3] else None))
    return nodes, edges


def quantized() -> object:
    module = nanoir.parse(FLOAT)
    rng = np.random.default_rng(0)
    nanoir.quantize(
        module,
        [rng.standard_normal((2, 3, 6, 5)) for _ in range(2)],
        bias_correction=False,
        calibrator="absmax",
    )  # the picture of the program as written (no added bias), at the exponents pinned below
    return module


def streamed_hw() -> object:
    hw = nanoir.lower_to_hw(quantized())
    StreamPlanPass(steps="2:1,3:5").apply(nanoir.make_context(), hw)
    return hw


def ops_of(module: object) -> list:
    from xdsl.dialects.func import FuncOp

    func = next(op for op in module.walk() if isinstance(op, FuncOp))
    return [op for op in func.walk() if op is not func], func


def test_dot_has_a_node_per_op_and_an_edge_per_use() -> None:
    module = quantized()
    text = to_dot(module)
    nodes, edges = parse_dot(text)
    ops, func = ops_of(module)
    args = func.body.block.args
    assert len(nodes) == len(ops) + len(args)
    # Every edge joins declared nodes; one edge per operand, numbered when there are several.
    for a, b, _ in edges:
        assert a in nodes and b in nodes
    assert len(edges) == sum(len(op.operands) for op in ops)
    assert sorted(i for _, _, i in edges if i is not None) == [0, 0, 1, 1]
    labels = list(nodes.values())
    # One node per op, with its type and the printer's names.
    for op in ops:
        assert (
            sum(
                label.split("\n")[0].endswith(f"= {op.name}") or label == op.name
                for label in labels
            )
            >= 1
        )
    printed = str(module)
    for name in ("%x_1", "%w_1", "%c_1", "%r_1", "%a_1"):
        assert name in printed
        assert any(label.startswith(f"{name} = nq.fake_quant") for label in labels), name
    # Shapes, bits, exponents (per channel for the weights) and the constant's name.
    assert any("%x (argument 0)\n?x3x?x5 f32" in label for label in labels)
    assert any(label.startswith("%w_1 = nq.fake_quant\n8-bit exp 8 (4 ch)") for label in labels)
    assert any(label.startswith("%x_1 = nq.fake_quant\n8-bit exp 5") for label in labels)
    assert any('%w = nf.constant\n"w"\n4x3x3x3 f32' in label for label in labels)
    assert "?x4x?x3 f32" in text
    # The edge from the conv's fake-quant to the add is operand 1; from relu's it is 0.
    ids = {label.split(" ")[0]: node for node, label in nodes.items()}
    add = ids["%a"]
    assert (ids["%c_1"], add, 1) in edges and (ids["%r_1"], add, 0) in edges


def test_dot_of_a_streamed_program_shows_layout_and_caches() -> None:
    hw = streamed_hw()
    nodes, edges = parse_dot(to_dot(hw))
    ops, func = ops_of(hw)
    assert len(nodes) == len(ops) + 1
    assert all(a in nodes and b in nodes for a, b, _ in edges)
    labels = {label.split(" ")[0]: label for label in nodes.values()}
    conv = labels["%c"]
    assert conv.startswith("%c = nh.conv")
    assert "?x4x?x3 i32 exp 13 BCMD" in conv
    assert "stream out ?x4x1x3; cache ?x3x3x5 (45 values)" in conv
    assert "4x3x3x3 i8 exp 8 CCDD" in labels["%w"]
    assert "stream in ?x3x1x5" in labels["%x"] and "8-bit exp 5" in labels["%x"]
    assert "shift=[9]" in labels["%c_1"]
    assert "streamed along dim 2, steps 2:1, 3:5" in to_dot(hw)


def test_dot_of_per_channel_exponents_and_odd_names() -> None:
    module = nanoir.parse(PER_CHANNEL.replace('"fc"', '"fc \\"x\\""'))
    text = to_dot(module)
    nodes, _ = parse_dot(text)
    labels = list(nodes.values())
    assert any("8-bit exp [5, 6, 7]" in label for label in labels)
    assert any("4-bit exp 2" in label for label in labels)
    assert any('"fc \\"x\\""' in label or 'fc "x"' in label for label in labels)


def test_nanoir_opt_emit_dot(tmp_path: Path) -> None:
    hw = tmp_path / "hw.mlir"
    hw.write_text(str(nanoir.lower_to_hw(quantized())))
    out = tmp_path / "hw.dot"
    code = opt_main([str(hw), "-p", 'stream-plan{steps="2:1,3:5"}', "--emit=dot", "-o", str(out)])
    assert code == 0
    text = out.read_text()
    nodes, edges = parse_dot(text)
    assert len(nodes) == 8 and len(edges) == 8
    assert "BCMD" in text and "cache ?x3x3x5 (45 values)" in text


def test_draw_without_graphviz_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    target = tmp_path / "g.svg"
    with pytest.raises(GraphvizMissingError, match="apt-get install graphviz") as info:
        nanoir.draw(quantized(), target)
    assert isinstance(info.value, nanoir.Error)
    assert not target.exists()
    # The DOT text needs no Graphviz.
    nanoir.draw(quantized(), tmp_path / "g.dot")
    assert parse_dot((tmp_path / "g.dot").read_text())[0]


def test_draw_refuses_unknown_suffixes(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match=r"\.svg, \.png, \.pdf"):
        nanoir.draw(quantized(), tmp_path / "g.jpg")
    assert not (tmp_path / "g.jpg").exists()


@needs_dot
def test_draw_renders_svg_png_pdf(tmp_path: Path) -> None:
    module = streamed_hw()
    nanoir.draw(module, tmp_path / "g.svg")
    svg = (tmp_path / "g.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    for expected in ("%c = nh.conv", "%c_1 = nh.requant", "func.return", "%x (argument 0)"):
        assert expected in texts
    assert any("BCMD" in t for t in texts) and any("45 values" in t for t in texts)
    nanoir.draw(module, str(tmp_path / "g.png"))
    png = (tmp_path / "g.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 1000
    nanoir.draw(module, tmp_path / "g.PDF")
    assert (tmp_path / "g.PDF").read_bytes().startswith(b"%PDF")


@needs_dot
def test_draw_writes_through_special_files_and_keeps_mode(tmp_path: Path) -> None:
    nanoir.draw(quantized(), os.devnull)  # written through, never replaced
    assert Path(os.devnull).exists() and not Path(os.devnull).is_file()
    target = tmp_path / "g.svg"
    target.write_text("old")
    target.chmod(0o640)
    nanoir.draw(quantized(), target)
    assert "<svg" in target.read_text() and (target.stat().st_mode & 0o777) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["g.svg"]  # no temporary file left


def test_draw_is_public() -> None:
    from nanoir.dot import draw

    assert "draw" in nanoir.__all__ and nanoir.draw is draw


# -- the report figure ------------------------------------------------------------------------


def measured() -> object:
    module = quantized()
    rng = np.random.default_rng(1)
    return nanoir.report(module, [3 * rng.standard_normal((2, 3, 6, 5)) for _ in range(2)])


def test_report_figure_names_every_layer() -> None:
    pytest.importorskip("matplotlib")
    rep = measured()
    fig = rep.figure()
    texts = [t.get_text() for t in fig.findobj(match=lambda a: hasattr(a, "get_text"))]
    for row in rep.rows:
        assert any(t.startswith(f"{row.name} ({row.kind}, {row.bits}b)") for t in texts), row.name
    assert any("vs its own input" in t for t in texts)
    assert any("vs the float program" in t for t in texts)
    assert any(t.startswith("output 0:") for t in texts)
    # The worst fake-quant (lowest SQNR against its own input) is marked red on the axis.
    worst = min(rep.rows, key=lambda r: r.sqnr)
    labels = fig.axes[-1].get_xticklabels()
    red = [lab.get_text() for lab in labels if lab.get_color() == "tab:red"]
    assert red == [f"{worst.name} ({worst.kind}, {worst.bits}b)"]


def _check_png(path: Path, min_size: tuple[int, int] = (300, 300)) -> None:
    image = pytest.importorskip("matplotlib.image").imread(str(path))
    height, width = image.shape[:2]
    assert width >= min_size[0] and height >= min_size[1]
    rgb = image[..., :3]
    assert rgb.std() > 0.05  # not blank
    assert len(np.unique(rgb.reshape(-1, 3), axis=0)) > 20  # bars, text and axes in colour


def test_report_plot_png_and_svg(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    rep = measured()
    rep.plot(tmp_path / "report.png")
    _check_png(tmp_path / "report.png")
    rep.plot(str(tmp_path / "report.svg"))
    svg = (tmp_path / "report.svg").read_text()
    assert "<svg" in svg
    with pytest.raises(FileFormatError, match=r"\.png, \.svg or \.pdf"):
        rep.plot(tmp_path / "report.gif")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.png", "report.svg"]


def test_report_plot_without_matplotlib(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rep = measured()
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(nanoir.Error, match=r"pip install nanoir\[plot\]"):
        rep.plot(tmp_path / "report.png")
    assert not (tmp_path / "report.png").exists()


def test_nanoir_run_report_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    program = tmp_path / "q.mlir"
    program.write_text(str(quantized()))
    data = tmp_path / "x.npy"
    np.save(data, 3 * np.random.default_rng(2).standard_normal((6, 3, 6, 5)))
    out = tmp_path / "report.png"
    argv = [str(program), "--input", str(data), "--report", "--plot", str(out)]
    assert run_main([*argv, "--batch-size", "4"]) == 0
    assert "vs float dB" in capsys.readouterr().out
    _check_png(out)
    # --plot needs --report and a figure suffix, checked before anything runs.
    assert run_main([str(program), "--input", str(data), "--plot", str(tmp_path / "b.png")]) == 1
    assert "give --report too" in capsys.readouterr().err
    assert run_main([*argv[:-1], str(tmp_path / "b.jpg")]) == 1
    assert ".png, .svg or .pdf" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.mlir", "report.png", "x.npy"]


def test_dot_names_values_per_function_as_the_printer_does() -> None:
    two = """\
func.func @a(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.relu %x : tensor<4xf32>
  func.return %y : tensor<4xf32>
}
func.func @b(%x: tensor<4xf32>) -> tensor<4xf32> {
  %y = nf.relu %x : tensor<4xf32>
  %y2 = nf.relu %y : tensor<4xf32>
  func.return %y2 : tensor<4xf32>
}
"""
    text = to_dot(nanoir.parse(two))
    nodes, edges = parse_dot(text)
    assert text.count("subgraph cluster_") == 2
    assert 'label = "func.func @a";' in text and 'label = "func.func @b";' in text
    labels = sorted(nodes.values())
    assert labels.count("%x (argument 0)\n4 f32") == 2
    assert labels.count("%y = nf.relu\n4 f32") == 2 and "%y2 = nf.relu\n4 f32" in labels
    assert len(nodes) == 7 and len(edges) == 5
    assert all(a in nodes and b in nodes for a, b, _ in edges)
