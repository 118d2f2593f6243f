"""Write an nf + nq program as ONNX: standard QDQ (opset 21) or NanoEngine-PyTorch's form.

Needs the ``onnx`` extra (`pip install nanoir[onnx]`), imported on first use.

    builtin.module { func.func @main } --this module--> onnx.ModelProto --> bytes

Every nf op is written by its row of the `.ne` nq level (`ne.nq.NQ_OPS`): the row's writer
gives the op type and the attributes, exactly as for a `.ne` file, and this module turns
them into a `NodeProto`. What ONNX spells differently from the `.ne` rows (which use the
opset < 11 attribute forms) is translated here: Pad's `pads`/`value`, Split's `split`,
Clip's `min`/`max` and Resize's sizes (or scales) become constant inputs, `nf.silu` (`.ne`
Swish, ONNX opset 24) is written `Mul(x, Sigmoid(x))`, and Reshape's shape is an int64
initializer (`-1` for the dynamic dim), as are Gather's indices and Expand's shape. Float constants are initializers
named after the `nf.constant`; a dynamic dim is a symbolic dim (`N` for the batch).
`nf.embedding` (the `.ne` Embedding row) is `Gather(table, indices, axis=0)`; a program input
read only as indices (`nf.is_index_input`) is an int64 graph input, other indices are Cast to
int64 (the reader maps a Gather of a constant table by an int64 graph input back).
`nf.compare` (1 and 0 in its float type) is ONNX's comparison, whose bool result is cast back
(a logical predicate's operands cast to bool first; `ne` is `Not(Equal)`), and `nf.where`'s
condition is cast to bool.
`nf.recurrent` is ONNX's LSTM / GRU / RNN, one node per layer (ONNX's W/R/B and gate order,
`Y` transposed to nf's layout; not the `.ne` row's attributes, which ONNX does not have); a
reshape to a dim of size 0 is written with `allowzero = 1`. Every written file passes
`onnx.checker`'s full check (strict shape and type inference).

Two flavours (`FLAVORS`), of the quantizers (`nq.fake_quant`):

- ``"qdq"`` (opset 21): `QuantizeLinear` -> `DequantizeLinear` with scale `2**-exp` (a float32
  power of two), zero point 0, per tensor or per axis (the one dim along which `exp` varies).
  Codes are int8 for 5-8 bits, int4 for 2-4 bits and int16 for 9-16 bits; unsigned codes
  (`signed = false`) are uint8, uint4 and uint16 with zero point 0 (standard ONNX, the
  same power-of-two scale). QuantizeLinear rounds half to even and saturates to the code
  type, so:

  * an activation quantizer (of a computed value) must round `half_even`: a `trunc`, `floor`
    or `half_up` one is refused (`OnnxExportError`, naming the op and pointing at the
    ``"nanoengine"`` flavour), never written silently wrong; so is a 1-bit activation (the
    sign rule has no QuantizeLinear form), a >16-bit one, and one narrower than its code
    type with per-channel exponents (see the next point);
  * an activation narrower than its code type (2-3, 5-7 or 9-15 bits, per tensor) is an
    int4/int8/int16 (uint...) QuantizeLinear -> DequantizeLinear followed by
    `Clip(qmin * 2**-k, qmax * 2**-k)`: the bounds are on the grid, so clamping
    after rounding is the same as saturating the narrow code (a Clip *before* an int4
    QuantizeLinear would say the same, but onnxruntime 1.32's Clip/Q fusion fails on int4);
  * a quantizer of a constant (weights, biases, any named parameter) is written as its codes
    (an integer initializer computed by nanoir with the op's own rounding, whatever it is)
    and one `DequantizeLinear`: exact for every rounding mode. 1-bit constants are ±1 int8
    codes with scale `2**exp` (1-bit's magnitude); int32 codes for 17-32 bits.

- ``"nanoengine"`` (opset 17): NanoEngine-PyTorch's own export: every quantizer is a custom
  node `Q` in the domain `t2e.qmodel` with inputs `(x, k)`, `k` the int8 exponent tensor
  broadcast as torch broadcasts it (`[1]`, `[C]` for a 1-D bias, `[C,1,1,1]` for a weight,
  `[1,C,1,1]` for per-channel activations: a shorter per-channel exponent gets leading 1s)
  and attribute `bit_len`. NanoEngine
  truncates and reads signed codes, so any other rounding and unsigned codes are refused.

Running a QDQ file in onnxruntime 1.32: disable its graph optimizers `QDQPropagationTransformer`
(it inserts a QuantizeLinear with a mismatched zero point type around a Reshape of opset-21
int8 QDQ, onnxruntime issue #27845), `ClipQuantRewrite` (fails on an int4 QuantizeLinear after
a Clip) and, for int4, `ReluQuantRewrite` (drops a Relu before an int4 QuantizeLinear: wrong
outputs) and `QDQSelectorActionTransformer` (gives MaxPool int4 codes): `disabled_optimizers`
of `InferenceSession`. With them disabled, the test models' outputs equal nanoir's nq run
element for element at 8 and 4 bits (BENCHMARKS.md).

What ONNX cannot say is an `OnnxExportError` (a `nanoir.Error`, an `ExportError`) naming the
op: an nf op without an NQ_OPS row (`nf.custom`, nh ops), nf.linear on a value of rank other
than 2 in the nanoengine flavour (QDQ writes it as MatMul of the transposed weight + Add), a
SpaceToDepth in CRD mode (ONNX's is DCR only), a ConvTranspose whose output_padding is not
below its strides, nf.gelu in the nanoengine flavour (opset 17 has no Gelu), nf.softmax /
nf.log_softmax between fake-quants (their nq semantics is an integer algorithm, not ONNX's
float Softmax; float ones are written as Softmax/LogSoftmax with opset 13's axis) or with a
mask, a quantizer
whose exponents vary along more than one dim, a 2- or 3-bit activation with per-channel
exponents, an exponent whose scale is no normal float32.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from nanoir.dialects import nf
from nanoir.dialects.dense import dense_to_numpy
from nanoir.dialects.nq import FakeQuantOp
from nanoir.dialects.traits import IntegerAlgorithm, LookupTable
from nanoir.grammar.ne.errors import ExportError
from nanoir.grammar.ne.nq import row_of
from nanoir.grammar.ne.nq_families import COMPARES
from nanoir.grammar.ne.schema import main_function
from nanoir.grammar.ne.syntax_tree import Float
from nanoir.runtime.numerics.compare import LOGICAL
from nanoir.runtime.numerics.quant import RoundingMode, qmax, qmin, quantize_to_int
from xdsl.dialects.builtin import DYNAMIC_INDEX, ModuleOp, TensorType, f16, f32, f64
from xdsl.dialects.func import ReturnOp
from xdsl.ir import Operation, SSAValue

__all__ = [
    "FLAVORS",
    "NANOENGINE_DOMAIN",
    "OnnxExportError",
    "export_onnx_bytes",
    "export_onnx_model",
]

FLAVORS = ("qdq", "nanoengine")
"""The ONNX forms `export_onnx_model` writes (see the module docstring)."""

NANOENGINE_DOMAIN = "t2e.qmodel"
"""The ONNX domain of NanoEngine-PyTorch's quantizer node `Q`."""

QDQ_OPSET = 21
NANOENGINE_OPSET = 17

_ELEM = {f32: 1, f16: 10, f64: 11}  # ONNX TensorProto FLOAT, FLOAT16, DOUBLE
_INT64 = 7  # ONNX TensorProto INT64: an embedding's indices (nf.is_index_input)
_BOOL = 9  # ONNX TensorProto BOOL: what comparisons give and And/Or/Xor/Where read

_RECURRENT_TYPE = {"lstm": "LSTM", "gru": "GRU", "rnn_tanh": "RNN", "rnn_relu": "RNN"}
_ONNX_GATES = {"LSTM": (0, 3, 1, 2), "GRU": (1, 0, 2), "RNN": (0,)}
"""For each ONNX gate (LSTM i, o, f, c; GRU z, r, h), the torch gate (LSTM i, f, g, o; GRU
r, z, n) that holds it: the inverse of the reader's permutation (``grammar/onnx/recurrent``)."""


class OnnxExportError(ExportError):
    """The program cannot be written as ONNX in the flavour asked for; the message names the
    op and why (and, for a quantizer QDQ cannot express, the flavour that can)."""


def _onnx() -> Any:
    try:
        import onnx  # lazy: an optional dependency (the `onnx` extra), loaded on first write
    except ImportError:
        raise OnnxExportError(
            "onnx export: writing ONNX needs the onnx package: pip install nanoir[onnx]"
        ) from None
    return onnx


def _code_type(bits: int, constant: bool, signed: bool = True) -> tuple[int, Any] | None:
    """(ONNX element type, NumPy dtype) of `bits`-wide codes, or None if QDQ has none.
    Unsigned codes (2..16 bits: nq has no 1-bit unsigned form) are UINT4, UINT8 or UINT16."""
    if not signed:
        if bits <= 4:
            return 21, np.uint8  # UINT4, given to onnx.helper as uint8 values
        return (2, np.uint8) if bits <= 8 else (4, np.uint16)
    if bits <= 1:
        return (3, np.int8) if constant else None
    if bits <= 4:
        return 22, np.int8  # INT4, given to onnx.helper as int8 values
    if bits <= 8:
        return 3, np.int8
    if bits <= 16:
        return 5, np.int16
    return (6, np.int32) if constant else None


class _Writer:
    def __init__(self, module: ModuleOp, flavor: str) -> None:
        if flavor not in FLAVORS:
            raise OnnxExportError(
                f"onnx export: unknown flavour {flavor!r} (known: {', '.join(FLAVORS)})"
            )
        self.onnx = _onnx()
        self.helper = self.onnx.helper
        self.flavor = flavor
        try:
            self.func = main_function(module)
        except ExportError as e:
            raise OnnxExportError(str(e).replace("nanoengine export", "onnx export")) from None
        self.names: dict[SSAValue, str] = {}
        self.taken: set[str] = set()
        self.counts: dict[str, int] = {}
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self.const_values: dict[SSAValue, nf.ConstantOp] = {}

    # -- names ----------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.]", "_", base) or "v"
        name, i = base, 0
        while name in self.taken:
            i += 1
            name = f"{base}_{i}"
        self.taken.add(name)
        return name

    def node_name(self, op_type: str) -> str:
        k = self.counts.get(op_type, 0)
        self.counts[op_type] = k + 1
        return self.fresh(f"{op_type}_{k}")

    def value_name(self, value: SSAValue) -> str:
        """The name of a value read by a node (a float constant becomes an initializer)."""
        if value not in self.names:
            owner = value.owner
            if isinstance(owner, nf.ConstantOp):
                base = owner.sym_name.data if owner.sym_name is not None else "const"
                name = self.fresh(base)
                self.initializer(name, np.asarray(dense_to_numpy(owner.value)))
                self.names[value] = name
            else:
                raise OnnxExportError(
                    "onnx export: a value is read that no op of @main's body defines"
                )
        return self.names[value]

    def initializer(self, name: str, array: Any, elem_type: int | None = None) -> str:
        array = np.asarray(array)
        if elem_type is None:
            tensor = self.onnx.numpy_helper.from_array(np.array(array, order="C"), name)
        else:
            tensor = self.helper.make_tensor(
                name, elem_type, list(array.shape), array.reshape(-1).tolist()
            )
        self.initializers.append(tensor)
        return name

    def const(self, base: str, array: Any, elem_type: int | None = None) -> str:
        return self.initializer(self.fresh(base), array, elem_type)

    def add_node(
        self,
        op_type: str,
        inputs: list[str],
        outputs: list[str],
        attrs: dict[str, Any] | None = None,
        domain: str = "",
    ) -> None:
        self.nodes.append(
            self.helper.make_node(
                op_type,
                inputs,
                outputs,
                name=self.node_name(op_type),
                domain=domain,
                **(attrs or {}),
            )
        )

    def result_names(self, op: Operation) -> list[str]:
        names = []
        for i, r in enumerate(op.results):
            hint = r.name_hint or (op.name.split(".")[-1] + ("" if i == 0 else f"_{i}"))
            self.names[r] = self.fresh(hint)
            names.append(self.names[r])
        return names

    # -- value types ----------------------------------------------------------------------
    def value_info(self, name: str, value: SSAValue) -> Any:
        t = value.type
        if not isinstance(t, TensorType) or t.get_element_type() not in _ELEM:
            raise OnnxExportError(f"onnx export: '{name}' of type {t} is not a float tensor")
        dims: list[int | str] = []
        for i, d in enumerate(t.get_shape()):
            dims.append(("N" if i == 0 else f"d{i}") if d == DYNAMIC_INDEX else int(d))
        elem = _ELEM[t.get_element_type()]
        if value in self.func.body.block.args and nf.is_index_input(value):
            elem = _INT64  # token ids, read by Gather as torch's int64 (the reader maps it back)
        return self.helper.make_tensor_value_info(name, elem, dims)

    # -- quantizers -----------------------------------------------------------------------
    def fake_quant(self, op: FakeQuantOp) -> None:
        bits = op.bits.value.data
        mode = op.rounding_mode
        exp = np.asarray(dense_to_numpy(op.exp)).astype(np.int64)
        source = op.input.owner
        constant = isinstance(source, nf.ConstantOp)
        x = "" if constant and self.flavor == "qdq" else self.value_name(op.input)
        (out,) = self.result_names(op)
        if self.flavor == "nanoengine":
            if mode != RoundingMode.TRUNC and constant and bits > 1:
                # A constant rounded otherwise (bias correction's nearest codes): its codes,
                # written on the grid, where Q's truncation keeps them exactly.
                assert isinstance(source, nf.ConstantOp)
                w = np.asarray(dense_to_numpy(source.value), np.float64)
                codes = quantize_to_int(w, bits, exp, mode, signed=op.is_signed)
                x = self.const(f"{out}_on_grid", np.ldexp(codes, -exp).astype(np.float32))
            elif (
                mode != RoundingMode.TRUNC
                and isinstance(source, Operation)
                and source.has_trait(LookupTable)
            ):
                raise OnnxExportError(
                    f"onnx export (nanoengine flavour): nq.fake_quant '{out}' quantizes the "
                    f"lookup table of {source.name}, rounded {mode.value} (with bias "
                    "correction, quantize rounds what it computes offline, tables included, to "
                    "the nearest code); NanoEngine's Q truncates toward zero, so this flavour "
                    "cannot write it: write onnx_flavor='qdq' (activations rounding half_even), "
                    "or quantize with bias_correction=False (NanoEngine-PyTorch's configuration: "
                    "every rounding trunc) for this flavour; lowered to nh (lower_to_hw), any "
                    "rounding is written as exact integer ONNX"
                )
            elif mode != RoundingMode.TRUNC:
                raise OnnxExportError(
                    f"onnx export (nanoengine flavour): nq.fake_quant '{out}' rounds {mode.value}; "
                    "NanoEngine's Q truncates toward zero, so only trunc rounding has this form "
                    "(write onnx_flavor='qdq' for half_even)"
                )
            if not op.is_signed:
                raise OnnxExportError(
                    f"onnx export (nanoengine flavour): nq.fake_quant '{out}' has unsigned codes "
                    "(signed = false); NanoEngine's Q reads signed codes only (write "
                    "onnx_flavor='qdq': uint QuantizeLinear with zero point 0)"
                )
            rank = len(nf.tensor_shape(op.input))
            if exp.size > 1 and exp.ndim < rank:  # per channel: [1, C, 1, 1] as torch writes it
                exp = exp.reshape((1,) * (rank - exp.ndim) + exp.shape)
            k = self.const(f"{out}_k", exp.astype(np.int8))
            self.add_node(
                "Q",
                [x, k],
                [out],
                {"bit_len": bits},
                domain=NANOENGINE_DOMAIN,
            )
            return
        rank = len(nf.tensor_shape(op.input))
        axis, scale_exp = self._axis(op, out, exp, rank)
        scale = np.exp2(scale_exp.astype(np.float64) * (1 if bits == 1 else -1))
        if np.any(np.abs(scale_exp) > 126):
            raise OnnxExportError(
                f"onnx export: nq.fake_quant '{out}' has an exponent beyond ±126, whose scale "
                "is no normal float32"
            )
        signed = op.is_signed
        code = _code_type(bits, constant, signed)
        packed = (21, 22)  # UINT4, INT4: written with onnx.helper, not from a NumPy array
        attrs = {} if axis is None else {"axis": axis}
        scale_name = self.const(f"{out}_scale", scale.astype(np.float32))
        if constant:
            assert isinstance(source, nf.ConstantOp)
            elem, dtype = code  # type: ignore[misc]  # constants always have a code type
            values = np.asarray(dense_to_numpy(source.value))
            codes = quantize_to_int(values, bits, exp, mode, signed=signed).astype(dtype)
            base = source.sym_name.data if source.sym_name is not None else out
            codes_name = self.const(f"{base}_codes", codes, elem if elem in packed else None)
            zero = self.const(
                f"{out}_zero", np.zeros(scale.shape, dtype), elem if elem in packed else None
            )
            self.add_node("DequantizeLinear", [codes_name, scale_name, zero], [out], attrs)
            return
        if mode != RoundingMode.HALF_EVEN:
            raise OnnxExportError(
                f"onnx export (qdq flavour): nq.fake_quant '{out}' of an activation rounds "
                f"{mode.value}, but QuantizeLinear rounds half to even; write "
                "onnx_flavor='nanoengine' (--emit=onnx-nanoengine) for trunc rounding, or "
                "quantize with rounding='half_even'"
            )
        if code is None:
            what = "1-bit (sign rule)" if bits == 1 else f"{bits}-bit"
            raise OnnxExportError(
                f"onnx export (qdq flavour): nq.fake_quant '{out}' is a {what} activation "
                "quantizer, which QuantizeLinear cannot express; write "
                "onnx_flavor='nanoengine' (--emit=onnx-nanoengine)"
            )
        elem, dtype = code
        width = 4 if bits <= 4 else 8 if bits <= 8 else 16
        container = f"{'' if signed else 'u'}int{width}"
        if bits != width and axis is not None:
            lo, hi = qmin(width, signed=signed), qmax(width, signed=signed)
            raise OnnxExportError(
                f"onnx export (qdq flavour): nq.fake_quant '{out}' is a {bits}-bit activation "
                f"quantizer with per-channel exponents; {container} saturates at {lo}..{hi} "
                "and Clip takes scalar bounds, so it has no QDQ form"
            )
        zero = self.const(
            f"{out}_zero", np.zeros(scale.shape, dtype), elem if elem in packed else None
        )
        codes = self.fresh(f"{out}_codes")
        self.add_node("QuantizeLinear", [x, scale_name, zero], [codes], attrs)
        if bits == width:
            self.add_node("DequantizeLinear", [codes, scale_name, zero], [out], attrs)
            return
        # Narrower than its container (2-3, 5-7, 9-15 bits): the container's codes clamped to
        # the narrow range after dequantizing (the bounds are on the grid, so clamping after
        # rounding equals saturating the narrow code)
        wide = self.fresh(f"{out}_{container}")
        self.add_node("DequantizeLinear", [codes, scale_name, zero], [wide], attrs)
        step = float(scale.reshape(-1)[0])
        lo = self.const(f"{out}_min", np.asarray(qmin(bits, signed=signed) * step, np.float32))
        hi = self.const(f"{out}_max", np.asarray(qmax(bits, signed=signed) * step, np.float32))
        self.add_node("Clip", [wide, lo, hi], [out])

    def _axis(self, op: FakeQuantOp, out: str, exp: Any, rank: int) -> tuple[int | None, Any]:
        """(axis or None for per tensor, the exponents as a scalar or a 1-D vector)."""
        if exp.size == 1:
            return None, exp.reshape(())
        shape = (1,) * (rank - exp.ndim) + exp.shape
        varying = [i for i, d in enumerate(shape) if d != 1]
        if len(varying) != 1:
            raise OnnxExportError(
                f"onnx export (qdq flavour): nq.fake_quant '{out}' has exponents of shape "
                f"{list(exp.shape)} varying along more than one dim; QDQ is per tensor or "
                "per axis"
            )
        return varying[0], exp.reshape(-1)

    # -- recurrent layers -------------------------------------------------------------------
    def recurrent(self, op: nf.RecurrentOp) -> None:
        """nf.recurrent as ONNX's LSTM / GRU / RNN, one node per layer: torch's weights
        regrouped into ONNX's ``W [D, G*H, F]``, ``R [D, G*H, H]``, ``B [D, 2*G*H]`` in ONNX's
        gate order (the reader's permutation, inverted); ``Y [T, D, N, H]`` transposed and
        reshaped to nf's ``[T, N, D*H]`` (and to ``[N, T, D*H]`` for ``batch_first``);
        ``h_n``/``c_n`` the layers' ``Y_h``/``Y_c`` concatenated. A quantized recurrent op is
        its integer cell, which ONNX's float ops do not compute bit for bit: refused."""
        layout = op.layout
        if op.gates is not None:
            raise OnnxExportError(
                "onnx export: nf.recurrent between fake-quants is an integer cell "
                "(nanoir.runtime.numerics.recurrent) that ONNX's float LSTM/GRU/RNN does not "
                "compute bit for bit; export the float (nf) program, or lower it to nh "
                "(written as exact integer ONNX)"
            )
        op_type = _RECURRENT_TYPE[layout.mode]
        weights = []
        for w in op.weights:
            owner = w.owner
            if not isinstance(owner, nf.ConstantOp):
                raise OnnxExportError(
                    "onnx export: nf.recurrent's weights must be constants (ONNX's W, R and B)"
                )
            weights.append(np.asarray(dense_to_numpy(owner.value)))
        outputs = self.result_names(op)
        base = outputs[0]
        dirs, hidden = layout.dirs, layout.hidden
        order = _ONNX_GATES[op_type]
        rows = np.concatenate([np.arange(g * hidden, (g + 1) * hidden) for g in order])
        x = self.value_name(op.input)
        if layout.batch_first:
            seq = self.fresh(f"{base}_time_major")
            self.add_node("Transpose", [x], [seq], {"perm": [1, 0, 2]})
            x = seq
        states = [None if v is None else self.value_name(v) for v in (op.h0, op.c0)]
        finals: list[list[str]] = [[], []]
        for layer, cells in enumerate(layout.cells(weights)):
            stem = f"{base}_l{layer}"
            w = self.const(f"{stem}_W", np.stack([c[0][rows] for c in cells]))
            r = self.const(f"{stem}_R", np.stack([c[1][rows] for c in cells]))
            inputs = [x, w, r]
            if layout.has_biases:
                biases = [np.concatenate([c[2][rows], c[3][rows]]) for c in cells]
                inputs.append(self.const(f"{stem}_B", np.stack(biases)))
            else:
                inputs.append("")
            inputs.append("")  # sequence_lens
            for state in states[: 2 if op_type == "LSTM" else 1]:
                if state is None:
                    inputs.append("")
                    continue
                if layout.layers == 1:
                    inputs.append(state)
                    continue
                part = self.fresh(f"{stem}_initial")
                bounds = [
                    self.const(f"{stem}_from", np.asarray([layer * dirs], np.int64)),
                    self.const(f"{stem}_to", np.asarray([(layer + 1) * dirs], np.int64)),
                ]
                self.add_node("Slice", [state, *bounds], [part])
                inputs.append(part)
            while inputs and not inputs[-1]:
                inputs.pop()
            attrs: dict[str, Any] = {
                "hidden_size": hidden,
                "direction": "bidirectional" if layout.bidirectional else "forward",
            }
            if op_type == "GRU":
                attrs["linear_before_reset"] = 1  # torch's GRU
            if op_type == "RNN":
                attrs["activations"] = ["Relu" if layout.mode == "rnn_relu" else "Tanh"] * dirs
            y, y_h = self.fresh(f"{stem}_Y"), self.fresh(f"{stem}_Y_h")
            outs = [y, y_h]
            if op_type == "LSTM":
                outs.append(self.fresh(f"{stem}_Y_c"))
                finals[1].append(outs[2])
            finals[0].append(y_h)
            self.add_node(op_type, inputs, outs, attrs)
            moved = self.fresh(f"{stem}_Y_t")
            self.add_node("Transpose", [y], [moved], {"perm": [0, 2, 1, 3]})
            last = layer == layout.layers - 1
            x = outputs[0] if last and not layout.batch_first else self.fresh(f"{stem}_out")
            keep = self.const(f"{stem}_shape", np.asarray([0, 0, -1], np.int64))
            self.add_node("Reshape", [moved, keep], [x])
        if layout.batch_first:
            self.add_node("Transpose", [x], [outputs[0]], {"perm": [1, 0, 2]})
        for name, parts in zip(outputs[1:], finals):
            if len(parts) == 1:
                self.add_node("Identity", parts, [name])
            else:
                self.add_node("Concat", parts, [name], {"axis": 0})

    # -- other ops ------------------------------------------------------------------------
    def op(self, op: Operation) -> None:
        if isinstance(op, FakeQuantOp):
            self.fake_quant(op)
            return
        if isinstance(op, nf.RecurrentOp):
            self.recurrent(op)
            return
        if isinstance(op, nf.CompareOp):
            self.compare(op)
            return
        try:
            row = row_of(op)
        except KeyError:
            raise OnnxExportError(
                f"onnx export: '{op.name}' has no ONNX op (the exporter writes the nf ops of the "
                "`.ne` nq level and nq.fake_quant)"
            ) from None
        try:
            written = row.written(op)
        except ExportError as e:
            raise OnnxExportError(str(e).replace("nanoengine export", "onnx export")) from None
        attrs: dict[str, Any] = {}
        for key, value in written:
            if value != ():  # an empty list has no ONNX attribute type: the default
                attrs[key] = _attr_value(value)
        inputs = [self.value_name(v) for v in op.operands]
        op_type = row.op_type
        if isinstance(op, nf.LinearOp) and len(nf.tensor_shape(op.input)) != 2:
            self._linear_as_matmul(op, inputs)
            return
        if op_type == "SpaceToDepth" and attrs.get("mode", "DCR") != "DCR":
            raise OnnxExportError(
                "onnx export: nf.space_to_depth in CRD mode (torch's pixel_unshuffle) has no "
                "ONNX SpaceToDepth form (ONNX's is DCR only)"
            )
        if op_type == "SpaceToDepth":
            attrs.pop("mode", None)
        if op_type == "ConvTranspose" and any(
            p >= s for p, s in zip(attrs["output_padding"], attrs["strides"])
        ):
            raise OnnxExportError(
                f"onnx export: nf.conv_transpose with output_padding {attrs['output_padding']} "
                f"not below its strides {attrs['strides']} has no ONNX ConvTranspose form "
                "(onnxruntime rejects it)"
            )
        if op_type in ("Softmax", "LogSoftmax"):
            self._check_softmax(op)
        if op_type in ("LayerNormalization", "GroupNormalization"):
            self._check_norm(op, op_type)
        if op_type == "Gelu" and self.flavor == "nanoengine":
            raise OnnxExportError(
                "onnx export (nanoengine flavour): nf.gelu has no ONNX op at opset 17 (Gelu is "
                "opset 20's); write onnx_flavor='qdq'"
            )
        outputs = self.result_names(op)
        base = outputs[0]
        if op_type == "Swish":  # opset 24's; x * Sigmoid(x) at opsets 17 and 21
            sigmoid = self.fresh(f"{base}_sigmoid")
            self.add_node("Sigmoid", inputs, [sigmoid])
            self.add_node("Mul", [inputs[0], sigmoid], outputs)
            return
        if op_type == "Reshape":
            dims = [-1 if d == DYNAMIC_INDEX else d for d in nf.tensor_shape(op.results[0])]
            inputs.append(self.const(f"{base}_shape", np.asarray(dims, np.int64)))
            if 0 in dims:  # a dim of size 0, not ONNX's "copy the input's dim"
                attrs["allowzero"] = 1
        elif op_type == "Pad":
            inputs.append(self.const(f"{base}_pads", np.asarray(attrs.pop("pads"), np.int64)))
            value = attrs.pop("value", 0.0)
            if attrs.get("mode") == "constant":
                inputs.append(self.const(f"{base}_value", np.asarray(value, np.float32)))
        elif op_type == "Expand" and len(inputs) == 2:  # a shape source (like): see _like_shape
            inputs = [inputs[0], self._like_shape(attrs.pop("shape"), inputs[1], base)]
        elif op_type in ("Gather", "Expand"):  # indices / shape: an int64 input at every opset
            key = "indices" if op_type == "Gather" else "shape"
            inputs.append(self.const(f"{base}_{key}", np.asarray(attrs.pop(key), np.int64)))
        elif op_type == "Split":
            split = attrs.pop("split", None)
            if split:
                inputs.append(self.const(f"{base}_split", np.asarray(split, np.int64)))
        elif op_type == "Clip":
            lo, hi = attrs.pop("min", None), attrs.pop("max", None)
            inputs.append("" if lo is None else self.const(f"{base}_min", np.float32(lo)))
            if hi is not None:
                inputs.append(self.const(f"{base}_max", np.float32(hi)))
        elif op_type in ("Resize", "ResizeLinear"):  # (.ne's row name for mode=linear)
            op_type = "Resize"
            self._resize(op, attrs, inputs, base)
        elif op_type == "PRelu":
            self._prelu_slope(op, inputs, base)
        elif op_type == "UpsampleZero":  # nanoir's row; in ONNX, the one-hot transposed conv
            op_type, attrs = self._upsample_zero(op, attrs, inputs, base)
        elif op_type == "Where":  # its condition is nf's 0/1 values: ONNX's is bool
            inputs[0] = self._cast(inputs[0], _BOOL, f"{base}_cond")
        elif op_type == "Embedding":  # nanoir's row; in ONNX, Gather of the table's rows
            op_type, attrs = "Gather", {"axis": 0}
            inputs = [inputs[1], self._int64_indices(op.operands[0], inputs[0], base)]
        self.add_node(op_type, inputs, outputs, attrs)

    def compare(self, op: nf.CompareOp) -> None:
        """nf.compare holds 1 and 0 in its float type, where ONNX's comparisons give bool and
        And/Or/Xor read bool: a logical predicate's operands are cast to bool (non-zero is
        true, as nf reads them), ``ne`` is ``Not(Equal)``, and the result is cast back."""
        predicate = op.predicate.data
        inputs = [self.value_name(v) for v in op.operands]
        (out,) = self.result_names(op)
        if predicate in LOGICAL:
            inputs = [self._cast(x, _BOOL, f"{out}_{i}") for i, x in enumerate(inputs)]
        op_type = next((t for t, p in COMPARES.items() if p == predicate), "Equal")
        truth = self.fresh(f"{out}_bool")
        self.add_node(op_type, inputs, [truth])
        if predicate == "ne":
            truth = self._cast(truth, None, f"{out}_not")
        self.add_node("Cast", [truth], [out], {"to": _ELEM[op.result.type.get_element_type()]})

    def _cast(self, name: str, to: int | None, base: str) -> str:
        """``name`` cast to the ONNX type ``to`` (None: a bool negated, ``Not``)."""
        out = self.fresh(base)
        if to is None:
            self.add_node("Not", [name], [out])
        else:
            self.add_node("Cast", [name], [out], {"to": to})
        return out

    def _like_shape(self, shape: tuple[int, ...], like: str, base: str) -> str:
        """An expand's shape input with a shape source: each -1 of ``shape`` (a dim grown to
        a dynamic size) is ``Shape(like, start=i, end=i+1)``, the other entries int64
        constants, joined by a Concat (the importer reads this form back to ``like``)."""
        pieces: list[str] = []
        run: list[int] = []
        for i, d in enumerate(shape):
            if d != -1:
                run.append(int(d))
                continue
            if run:
                pieces.append(self.const(f"{base}_shape", np.asarray(run, np.int64)))
                run = []
            piece = self.fresh(f"{base}_dim{i}")
            self.add_node("Shape", [like], [piece], {"start": i, "end": i + 1})
            pieces.append(piece)
        if run:
            pieces.append(self.const(f"{base}_shape", np.asarray(run, np.int64)))
        out = self.fresh(f"{base}_shape")
        self.add_node("Concat", pieces, [out], {"axis": 0})
        return out

    def _int64_indices(self, value: SSAValue, name: str, base: str) -> str:
        """An embedding's indices as Gather reads them: an index input is an int64 graph
        input already (``value_info``); other indices (exact float integers) are Cast."""
        if nf.is_index_input(value) and value in self.func.body.block.args:
            return name
        cast = self.fresh(f"{base}_indices")
        self.add_node("Cast", [name], [cast], {"to": _INT64})
        return cast

    def _check_softmax(self, op: Operation) -> None:
        """Float Softmax/LogSoftmax (opset 13's one-axis semantics, torch's) for a float op;
        quantized at both ends, the op is its integer algorithm, which has no ONNX op here."""
        trait = op.get_trait(IntegerAlgorithm)
        if trait is not None and not isinstance(trait.quantization(op), str):
            raise OnnxExportError(
                f"onnx export: {op.name} between fake-quants is an integer algorithm "
                "(nanoir.runtime.numerics.softmax) that ONNX's float Softmax does not compute "
                "bit for bit; export the float (nf) program, or run the nq program in nanoir"
            )
        if isinstance(op, nf.SoftmaxOp) and op.mask is not None:
            raise OnnxExportError(
                "onnx export: nf.softmax with a mask has no ONNX Softmax form (no mask input)"
            )

    def _check_norm(self, op: Operation, op_type: str) -> None:
        """Float LayerNormalization (opset 17) / GroupNormalization (opset 21's per-channel
        scale and bias) for a float op; quantized at both ends, the op is its integer
        algorithm, which ONNX's float op does not compute bit for bit."""
        trait = op.get_trait(IntegerAlgorithm)
        if trait is not None and not isinstance(trait.quantization(op), str):
            raise OnnxExportError(
                f"onnx export: {op.name} between fake-quants is an integer algorithm "
                f"(nanoir.runtime.numerics.norm) that ONNX's float {op_type} does not compute "
                "bit for bit; export the float (nf) program, or run the nq program in nanoir"
            )
        if op_type == "GroupNormalization" and self.flavor == "nanoengine":
            raise OnnxExportError(
                "onnx export (nanoengine flavour): nf.group_norm has no ONNX op at opset 17 "
                "(GroupNormalization with per-channel scale is opset 21's); write "
                "onnx_flavor='qdq'"
            )

    def _linear_as_matmul(self, op: nf.LinearOp, inputs: list[str]) -> None:
        """nf.linear over the last dim of a value of rank other than 2 (Gemm is 2-D only):
        `MatMul(x, Transpose(weight))`, then `Add` of the bias. QDQ flavour only."""
        rank = len(nf.tensor_shape(op.input))
        if self.flavor == "nanoengine":
            raise OnnxExportError(
                f"onnx export (nanoengine flavour): nf.linear of a rank-{rank} value has no "
                "NanoEngine op (its Gemm takes a 2-D input)"
            )
        (out,) = self.result_names(op)
        weight_t = self.fresh(f"{out}_weight_t")
        self.add_node("Transpose", [inputs[1]], [weight_t], {"perm": [1, 0]})
        product = self.fresh(f"{out}_matmul") if len(inputs) == 3 else out
        self.add_node("MatMul", [inputs[0], weight_t], [product])
        if len(inputs) == 3:
            self.add_node("Add", [product, inputs[2]], [out])

    def _resize(self, op: Operation, attrs: dict[str, Any], inputs: list[str], base: str) -> None:
        sizes = attrs.pop("sizes")
        axes = attrs.pop("axes")
        if self.flavor == "qdq":  # opset 18+: sizes of the spatial axes only
            attrs["axes"] = axes
            inputs += ["", "", self.const(f"{base}_sizes", np.asarray(sizes, np.int64))]
            return
        src = nf.tensor_shape(op.operands[0])
        scales = [1.0, 1.0]
        for a, s in zip(axes, sizes):
            if src[a] == DYNAMIC_INDEX or s % src[a]:
                raise OnnxExportError(
                    f"onnx export (nanoengine flavour): nf.upsample_nearest to {list(sizes)} is "
                    "no integer scaling; opset 17's Resize has no axes (use the qdq flavour)"
                )
            scales.append(float(s // src[a]))
        inputs += ["", self.const(f"{base}_scales", np.asarray(scales, np.float32))]

    def _upsample_zero(
        self, op: Operation, attrs: dict[str, Any], inputs: list[str], base: str
    ) -> tuple[str, dict[str, Any]]:
        """nf.upsample_zero as ONNX has it: a depthwise ConvTranspose whose ``r``-sized
        kernel is 1 at the offsets and 0 elsewhere, stride ``r`` (exact: one product by 1
        per output, the other outputs 0)."""
        src, dst = nf.tensor_shape(op.operands[0]), nf.tensor_shape(op.results[0])
        scales = [t // s for s, t in zip(src[2:], dst[2:])]
        weight = np.zeros((src[1], 1, *scales), np.float32)
        weight[(slice(None), 0, *attrs["offsets"])] = 1.0
        inputs.append(self.const(f"{base}_one_hot", weight))
        return "ConvTranspose", {"group": src[1], "kernel_shape": scales, "strides": scales}

    def _prelu_slope(self, op: Operation, inputs: list[str], base: str) -> None:
        """ONNX PRelu broadcasts the slope from the right: a per-channel `[C]` slope of an
        NCHW input is reshaped to `[C, 1, 1]`."""
        rank = len(nf.tensor_shape(op.operands[0]))
        slope = nf.tensor_shape(op.operands[1])
        if rank > 2 and len(slope) == 1 and slope[0] != 1:
            shaped = self.fresh(f"{base}_slope")
            shape = self.const(f"{base}_slope_shape", np.asarray([slope[0]] + [1] * (rank - 2)))
            self.add_node("Reshape", [inputs[1], shape], [shaped])
            inputs[1] = shaped

    # -- the model ------------------------------------------------------------------------
    def run(self) -> Any:
        block = self.func.body.block
        graph_inputs = []
        for i, arg in enumerate(block.args):
            self.names[arg] = self.fresh(arg.name_hint or ("input" if i == 0 else f"input_{i}"))
            graph_inputs.append(self.value_info(self.names[arg], arg))
        results: list[SSAValue] = []
        for op in block.ops:
            if isinstance(op, ReturnOp):
                results = list(op.arguments)
            elif not isinstance(op, nf.ConstantOp):  # constants: initializers at first use
                self.op(op)
        graph_outputs = []
        used: set[str] = set()
        inputs = set(block.args)
        for i, value in enumerate(results):
            if isinstance(value.owner, nf.ConstantOp):
                raise OnnxExportError(f"onnx export: @main returns a constant as result {i}")
            name = self.value_name(value)
            if name in used or value in inputs:  # an output of its own, through Identity
                out = self.fresh("output" if i == 0 else f"output_{i}")
                self.add_node("Identity", [name], [out])
                name = out
            used.add(name)
            graph_outputs.append(self.value_info(name, value))
        graph = self.helper.make_graph(
            self.nodes, "main", graph_inputs, graph_outputs, self.initializers
        )
        if self.flavor == "qdq":
            opsets = [self.helper.make_opsetid("", QDQ_OPSET)]
        else:
            opsets = [
                self.helper.make_opsetid("", NANOENGINE_OPSET),
                self.helper.make_opsetid(NANOENGINE_DOMAIN, 1),
            ]
        model = self.helper.make_model(graph, opset_imports=opsets, producer_name="nanoir")
        model.ir_version = 10 if self.flavor == "qdq" else 8
        try:
            self.onnx.checker.check_model(model, full_check=True)
        except Exception as e:  # a bug of this writer: say so rather than write a bad file
            raise OnnxExportError(f"onnx export: the written model fails onnx.checker: {e}") from e
        return model


def _attr_value(value: Any) -> Any:
    if isinstance(value, Float):
        return value.value
    if isinstance(value, tuple):
        return [_attr_value(v) for v in value]
    return value


def export_onnx_model(module: ModuleOp, flavor: str = "qdq") -> Any:
    """The `onnx.ModelProto` of an nf/nq module in `flavor` (see the module docstring);
    `OnnxExportError` for what the flavour cannot express. Passes `onnx.checker`."""
    return _Writer(module, flavor).run()


def export_onnx_bytes(module: ModuleOp, flavor: str = "qdq") -> bytes:
    """The serialized ONNX model of an nf/nq module (see `export_onnx_model`)."""
    return bytes(export_onnx_model(module, flavor).SerializeToString())
