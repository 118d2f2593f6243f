"""Every op of nf, nq and nh has FileCheck tests (issue 31, section 4), so the next op cannot
slip in without them:

- a round trip: the op in a ``.mlir`` file under ``tests/filecheck/dialects/<dialect>/`` that
  runs ``NANOIR_ROUNDTRIP`` (custom and generic syntax, parsed back);
- a pass test: the op in a ``.mlir`` file under ``tests/filecheck/lowering/`` (an nf op as the
  input of a lowering, an nh op in what it checks).

The op names come from the ``Dialect`` objects, so an op added to a dialect's list is checked
at once. Only IR lines and FileCheck directives count (not prose comments, not ``CHECK-NOT``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from nanoir.dialects.nf import NF
from nanoir.dialects.nh import NH
from nanoir.dialects.nq import NQ
from xdsl.ir import Dialect

FILECHECK = Path(__file__).resolve().parents[1] / "filecheck"
DIALECTS = {d.name: d for d in (NF, NQ, NH)}
_DIRECTIVE = re.compile(r"//\s*[A-Z][A-Z0-9_]*(-NEXT|-SAME|-DAG|-LABEL|-COUNT-\d+)?:")


def ir_lines(text: str) -> str:
    """The lines of a ``.mlir`` test that show IR: code and FileCheck directives (a prose
    comment or a ``CHECK-NOT`` line naming an op tests nothing about it)."""
    lines = []
    for line in text.splitlines():
        s = line.strip()
        if not s.startswith("//") or _DIRECTIVE.match(s):
            lines.append(s)
    return "\n".join(lines)


def mentions(text: str, op_name: str) -> bool:
    """Whether ``op_name`` (``nf.add``) appears as a whole op name, custom (``nf.add %x``) or
    generic (``"nf.add"(%x)``): not as a prefix of another op (``nf.add_x``) or an SSA name."""
    return re.search(rf"(?<![\w.%]){re.escape(op_name)}(?![\w])", text) is not None


def op_names(dialect: Dialect) -> list[str]:
    return sorted(op.name for op in dialect.operations)


def roundtrip_text(dialect: str) -> str:
    parts = []
    for path in sorted((FILECHECK / "dialects" / dialect).glob("*.mlir")):
        text = path.read_text()
        if "NANOIR_ROUNDTRIP" in text:
            parts.append(ir_lines(text))
    return "\n".join(parts)


def lowering_text() -> str:
    return "\n".join(
        ir_lines(p.read_text()) for p in sorted((FILECHECK / "lowering").glob("*.mlir"))
    )


def test_the_matcher_sees_ir_and_directives_only():
    """kills: a check that counts an op named in prose, in a CHECK-NOT line or as the prefix
    of a longer op name (each would hide a missing test)."""
    text = ir_lines(
        "// nf.max_unpool is not tested here\n"
        "// CHECK-NOT: nf.embedding\n"
        "// CHECK-NEXT: %0 = nf.layer_norm %x\n"
        '  %1 = "nh.softmax"(%x) : (t) -> t\n'
        "  %2 = nf.add_x %y\n"
    )
    assert mentions(text, "nf.layer_norm") and mentions(text, "nh.softmax")
    assert not mentions(text, "nf.max_unpool")
    assert not mentions(text, "nf.embedding")
    assert not mentions(text, "nf.add")
    assert not mentions("%nf.add = nf.relu %x", "nf.add")


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_every_op_has_a_roundtrip_test(dialect: str):
    """kills: an op added to the dialect with no round-trip ``.mlir`` test (issue 31 found 22:
    nf/nh embedding, group_norm, layer_norm, max_pool_indices, max_unpool, maximum, minimum,
    recurrent, upsample_bilinear, upsample_zero, nh.softmax, nh.log_softmax)."""
    text = roundtrip_text(dialect)
    missing = [n for n in op_names(DIALECTS[dialect]) if not mentions(text, n)]
    assert not missing, (
        f"no round-trip test under tests/filecheck/dialects/{dialect}/ (a file that runs "
        f"NANOIR_ROUNDTRIP) shows: {', '.join(missing)}"
    )


@pytest.mark.parametrize("dialect", sorted(DIALECTS))
def test_every_op_has_a_lowering_test(dialect: str):
    """kills: an op added to the dialect that no pass test under tests/filecheck/lowering/
    reads (nf, nq) or produces (nh)."""
    text = lowering_text()
    missing = [n for n in op_names(DIALECTS[dialect]) if not mentions(text, n)]
    assert not missing, (
        f"no test under tests/filecheck/lowering/ shows: {', '.join(missing)} (add a case to a "
        "lower-to-hw*.mlir file, or a new one)"
    )
