"""One writer per nh op (``OPS``): the op's exact integer semantics (the kernels of
:mod:`nanoir.runtime.nh`) as standard ONNX nodes on the forms of :mod:`.graph`, by family:
products (:mod:`.products`: the kernel each conv, linear and matmul runs on), requantization
(:mod:`.requant`), elementwise ops and tables (:mod:`.elementwise`), pools (:mod:`.pools`), data
movement (:mod:`.movement`), reductions and prefix sums (:mod:`.reductions`) and the integer algorithms of softmax and the norms
(:mod:`.algorithms`). An op added to nh gets its writer in its family's ``WRITERS``
(docs/ADDING_AN_OP.md); until then the exporter names it.
"""

from __future__ import annotations

from nanoir.dialects import nh
from nanoir.grammar.onnx.integer.algorithms import WRITERS as ALGORITHMS
from nanoir.grammar.onnx.integer.common import Writer
from nanoir.grammar.onnx.integer.elementwise import WRITERS as ELEMENTWISE
from nanoir.grammar.onnx.integer.host import HOST
from nanoir.grammar.onnx.integer.movement import WRITERS as MOVEMENT
from nanoir.grammar.onnx.integer.pools import WRITERS as POOLS
from nanoir.grammar.onnx.integer.pools import requant_or_pool_first
from nanoir.grammar.onnx.integer.products import WRITERS as PRODUCTS
from nanoir.grammar.onnx.integer.recurrent import WRITERS as RECURRENT
from nanoir.grammar.onnx.integer.reductions import WRITERS as REDUCTIONS
from xdsl.ir import Operation

OPS: dict[type[Operation], Writer] = {
    **PRODUCTS,
    nh.RequantOp: requant_or_pool_first,  # (a max pool after it: the pool first)
    **ELEMENTWISE,
    **POOLS,
    **MOVEMENT,
    **ALGORITHMS,
    **REDUCTIONS,
    **RECURRENT,  # nh.recurrent as Scan loops
    **HOST,  # nh.to_host / nh.from_host; the host's own ops: host.host_writer
}
"""The writer of each nh op."""
