"""nanoir.Target: the TOML file read field by field, and every bad file one clear error.

kills: a malformed file reported without its line and column (the position dropped from
tomllib's message), an unknown field or section accepted silently (a typo'd ``buffer_byte``
would leave the buffer unbounded), a lane width chosen as the widest instead of the narrowest
that holds the weights, a weight width accepted with no lane width for it, the example file
in examples/ drifting from the one shipped inside nanoir, the example's op list drifting from
the .ne hw rows it claims to list.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import nanoir
from nanoir.target import ALL_BITS, ROUNDINGS, Target, TargetError, engine_op_names, load_target

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "targets" / "nanoengine_example.toml"


def test_the_example_reads_with_every_field() -> None:
    t = load_target(EXAMPLE)
    assert t.name == "nanoengine-example"
    assert t.weight_bits == {1, 2, 4, 8} and t.activation_bits == ALL_BITS
    assert t.unsigned and t.rounding == ROUNDINGS
    assert (t.clock_mhz, t.vector_lanes) == (200.0, 64.0)
    assert dict(t.lanes) == {1: 1024.0, 2: 512.0, 4: 256.0, 8: 128.0}
    assert (t.buffer_bytes, t.bandwidth_bytes_per_cycle, t.stream_dim) == (262144, 16.0, 2)
    assert t.host_gmacs == 2.0
    assert "NOT A VENDOR'S FIGURES" in EXAMPLE.read_text()


def test_the_shipped_example_is_the_examples_file() -> None:
    shipped = Path(nanoir.target.__file__).parent / "targets" / "nanoengine_example.toml"
    assert shipped.read_text() == EXAMPLE.read_text()
    assert Target.example() == load_target(EXAMPLE).__class__.example()


def test_the_examples_ops_are_the_ne_hw_rows() -> None:
    """The example lists "every op the .ne hw rows express": exactly the HW_OPS table (and
    nh.constant, written as Unpack); the default (no ops field) takes them all too."""
    from nanoir.grammar.ne.hw import HW_OPS

    rows = {r.cls.name.removeprefix("nh.") for r in HW_OPS} | {"constant"}
    assert load_target(EXAMPLE).ops == rows
    assert rows == engine_op_names()
    assert all(Target().takes_op(op) for op in rows)


def test_defaults_limit_nothing() -> None:
    t = Target.from_toml("")
    assert t.ops is None and t.buffer_bytes is None
    assert all(t.takes_bits(b) and t.takes_bits(b, weight=True) for b in range(1, 17))


def test_a_code_runs_on_the_narrowest_width_that_holds_it() -> None:
    t = Target.from_toml("[engine]\nweight_bits = [4, 8]\n[compute]\nlanes = { 4 = 100, 8 = 50 }")
    assert t.takes_bits(3, weight=True) and t.takes_bits(8, weight=True)
    assert not t.takes_bits(9, weight=True)
    assert [t.lanes_for(b) for b in (1, 3, 4, 5, 8)] == [100.0, 100.0, 100.0, 50.0, 50.0]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("name = 'x'\n[engine\nops = []", "f.toml:2:8"),
        ("[compute]\nlanes = { 8 = 64 ", "f.toml:2:18"),
        ("name = [1,", "f.toml:1:11"),
    ],
)
def test_malformed_toml_names_file_line_and_column(text: str, where: str) -> None:
    with pytest.raises(TargetError, match=f"^{where}: error: not a TOML file"):
        Target.from_toml(text, "f.toml")


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("name = 3", "name"),
        ("speed = 3", "speed"),
        ("[engine]\nops = ['conv', 'warp']", "engine.ops"),
        ("[engine]\nops = 'conv'", "engine.ops"),
        ("[engine]\nweight_bits = [3, 32]", "engine.weight_bits"),
        ("[engine]\nactivation_bits = []", "engine.activation_bits"),
        ("[engine]\nunsigned = 1", "engine.unsigned"),
        ("[engine]\nrounding = ['nearest']", "engine.rounding"),
        ("[compute]\nclock_mhz = -1", "compute.clock_mhz"),
        ("[compute]\nclock_mhz = inf", "compute.clock_mhz"),
        ("[compute]\nlanes = { x = 3 }", "compute.lanes.x"),
        ("[compute]\nlanes = { 8 = 0 }", "compute.lanes.8"),
        ("[memory]\nbuffer_byte = 10", "memory.buffer_byte"),
        ("[memory]\nbuffer_bytes = 1.5", "memory.buffer_bytes"),
        ("[memory]\nstream_dim = 0", "memory.stream_dim"),
        ("[host]\ngmacs = true", "host.gmacs"),
        ("engine = 3", "engine"),
        ("[engine]\nweight_bits = [16]\n[compute]\nlanes = { 8 = 64 }", "compute.lanes"),
    ],
)
def test_a_bad_field_is_named(text: str, field: str) -> None:
    with pytest.raises(TargetError, match=f"^f.toml: error: {field}: "):
        Target.from_toml(text, "f.toml")


def test_files_that_are_no_target(tmp_path: Path) -> None:
    with pytest.raises(nanoir.Error, match="cannot read target"):
        load_target(tmp_path / "missing.toml")
    with pytest.raises(nanoir.Error, match="regular file"):
        load_target(tmp_path)
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"name = '\xff'")
    with pytest.raises(TargetError, match="not UTF-8"):
        load_target(bad)
    big = tmp_path / "big.toml"
    big.write_text("#" * (2**20 + 2))
    with pytest.raises(TargetError, match="at most 1 MiB"):
        load_target(big)


def test_with_ops_checks_the_names() -> None:
    assert Target().with_ops({"conv", "nh.relu"}).ops == {"conv", "relu"}
    with pytest.raises(TargetError, match="'warp' is not an nh op"):
        Target().with_ops({"warp"})


def test_the_cli_refuses_a_bad_target_before_running(tmp_path: Path) -> None:
    from nanoir.cli.opt import main

    bad = tmp_path / "t.toml"
    bad.write_text("[memory]\nbuffer_bytes = -3\n")
    program = tmp_path / "p.mlir"
    program.write_text("")
    assert main([str(program), "--hw-target", str(bad), "--inspect"]) == 1
