"""What ``nanoir.testing.programs`` draws is valid IR (its consumers' property tests assume it)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from nanoir.dialects import nf

from nanoir.testing.programs import examples, random_nq_program


@settings(max_examples=examples(60), deadline=None)
@given(st.data())
def test_drawn_pads_verify(data: st.DataObject) -> None:
    """Pads after ops that shrink a dim to 1 or 2 (global pooling, strided convs): a reflect
    pad reflects at most size - 1 rows a side, or the verifier refuses it (issue 31 §2 item 10:
    torch and onnxruntime refuse wider ones). kills: the old drawing, up to 1 row a side on
    any dim under 3 (a reflect pad of 1 on a dim of 1)."""
    module, _ = random_nq_program(
        data.draw, max_ops=4, kinds=("adaptive_avgpool", "conv", "pad", "pad")
    )
    module.verify()
    for op in module.walk():
        if isinstance(op, nf.PadOp) and op.mode.data == nf.PadMode.REFLECT:
            shape, pads = nf.tensor_shape(op.input), nf.array_values(op.pads) or ()
            for d, size in enumerate(shape):
                assert max(pads[d], pads[len(shape) + d]) < max(size, 1), (shape, pads)
