"""Read an ONNX model (NanoEngine-PyTorch's export, standard QDQ, or a float model as exporters
write it) into nf + nq.

Needs the ``onnx`` extra (`pip install nanoir[onnx]`), imported on first use.

    bytes --onnx (protobuf)--> ModelProto --this package--> builtin.module { func.func @main }

The ops are built by the very rows the `.ne` nq level uses (`ne.nq.NQ_OPS`): each ONNX
node becomes a `NodeSpec` (op type, attributes as `.ne` attribute values, inputs) and
`ne.nq.convert_known` builds and verifies the op, so an ONNX node and a `.ne` node of the
same op type mean the same. What ONNX says differently is translated before that, in the
package's parts:

- ``reader.py``: the walk over the graph, the checks, graph inputs (``input_shapes``: static
  sizes for dynamic dims, as onnxruntime's and TensorRT's tools take them; a declared dim -1,
  as Paddle writes a dynamic one, is dynamic);
- ``qdq.py``: ``t2e.qmodel::Q`` (NanoEngine-PyTorch's quantizer) and standard
  ``QuantizeLinear -> DequantizeLinear`` pairs, as ``nq.fake_quant``;
- ``grammar/onnx/fold.py``: every node whose inputs are all constants is evaluated at import
  (ONNX's reference implementation, bounded before it runs, relative to the file's size);
- ``grammar/onnx/symbolic.py``: ``Shape`` of a tensor with a dynamic batch, moved to a Reshape
  or Expand that keeps the batch in place; any other use of a dynamic dim is refused naming it;
- ``forms.py``: each op at its own opset (Softmax's 2-D flattening before 13, attributes that
  became inputs: Pad, Split, Clip, Squeeze, Unsqueeze, Slice, the reductions; Dropout,
  Identity, Cast, N-ary Sum/Max/Min/Mean, InstanceNormalization, GroupNormalization-18);
- ``compute.py``: Gemm with any transposes and scales, Pow by a constant, ReduceMean and
  ReduceSum over any axes;
- ``resize.py``: Resize and Upsample in every mode ONNX defines;
- ``patterns.py``: the LayerNorm older exporters write out (ReduceMean, Sub, Pow, ReduceMean,
  Add, Sqrt, Div, Mul, Add) as one ``nf.layer_norm``; ``Mul(x, Sigmoid(x))`` is ``nf.silu``;
- ``grammar/onnx/recurrent.py``: LSTM, GRU and RNN as ``nf.recurrent``.

Opsets below 7 are upgraded with ``onnx.version_converter`` first, with a warning. An
int64/int32 graph input read only as the indices of ``Gather`` on axis 0 is a float input of
token ids, and each such Gather of a constant 2-D table is ``nf.embedding``.

Initializers and `Constant` outputs used as float tensors become `nf.constant` named after
them; integer ones are read statically (exponents, shapes, pads). Graph inputs keep their
symbolic dims dynamic (`tensor<?x3x8x8xf32>` for a batch `N`). Node names are recorded as
`ne.node` (and nodes computed from constants only as `ne.init`, exponent constants as
`ne.exp_name`), so a `.ne` export names things as the file did.

Every problem is one `OnnxImportError` (a `nanoir.errors.FileFormatError`) naming the file and
the node: bad protobuf, missing initializers or values, an op nanoir does not map (or an
attribute value it cannot express, named), a `Q` with the wrong arity or `bit_len`, a QDQ pair
with a non-power-of-two scale or a non-zero zero point; a tensor defined twice, an opset newer
than ONNX's, what `onnx.checker` and strict type inference refuse (declared shapes aside:
value_info shapes are not used, graph outputs are compared with what the reader computes);
tensors stored as external data when the model was read without a folder (stdin, bytes: never
looked for in the working directory); a fold too large for the file (checked before
computing); a dynamic dim used where it cannot stay dynamic (with the way to give static input
shapes).
"""

from __future__ import annotations

import os
from typing import Any

from nanoir.grammar.onnx.importer.qdq import NANOENGINE_DOMAIN
from nanoir.grammar.onnx.importer.reader import InputShapes, Reader
from nanoir.grammar.onnx.importer.state import OnnxImportError, OnnxImportWarning
from xdsl.dialects.builtin import ModuleOp

__all__ = [
    "NANOENGINE_DOMAIN",
    "InputShapes",
    "OnnxImportError",
    "OnnxImportWarning",
    "import_onnx_bytes",
    "import_onnx_model",
    "load_onnx",
]


def _onnx(filename: str) -> Any:
    try:
        import onnx  # lazy: an optional dependency (the `onnx` extra), loaded on first read
    except ImportError:
        raise OnnxImportError(
            f"{filename}: reading ONNX needs the onnx package: pip install nanoir[onnx]"
        ) from None
    return onnx


def load_onnx(path: str | os.PathLike[str], input_shapes: InputShapes | None = None) -> ModuleOp:
    """Read and import an ONNX file (external data next to it is read too)."""
    filename = os.fspath(path)
    with open(filename, "rb") as f:
        raw = f.read()
    return import_onnx_bytes(
        raw, filename, os.path.dirname(os.path.abspath(filename)), input_shapes
    )


def import_onnx_bytes(
    raw: bytes,
    filename: str = "<bytes>",
    base_dir: str | None = None,
    input_shapes: InputShapes | None = None,
) -> ModuleOp:
    """The nf/nq IR of ONNX file contents; `OnnxImportError` for anything it cannot read.

    `base_dir` is where tensors stored as external data are looked for; with None (stdin,
    bytes) a model with external data is refused, never resolved against the working
    directory. `input_shapes` gives graph inputs static sizes where they are declared
    dynamic (None or -1 leaves a dim dynamic)."""
    onnx = _onnx(filename)
    try:
        model = onnx.load_model_from_string(raw)
    except Exception as e:  # protobuf's DecodeError, or anything it raises on garbage
        raise OnnxImportError(
            f"{filename}: not a readable ONNX model ({type(e).__name__}: {e})"
        ) from None
    if base_dir is not None:
        try:
            onnx.external_data_helper.load_external_data_for_model(model, base_dir)
        except Exception as e:
            raise OnnxImportError(
                f"{filename}: cannot read the model's external data ({type(e).__name__}: {e})"
            ) from None
    return import_onnx_model(model, filename, input_shapes, len(raw))


def import_onnx_model(
    model: Any,
    filename: str = "<model>",
    input_shapes: InputShapes | None = None,
    file_bytes: int | None = None,
) -> ModuleOp:
    """The nf/nq IR of an `onnx.ModelProto`; `OnnxImportError` for anything it cannot read.
    `file_bytes` (default: the model's serialized size) sets the fold budget."""
    onnx = _onnx(filename)
    size = model.ByteSize() if file_bytes is None else file_bytes
    reader = Reader(onnx, model, filename, size, input_shapes)
    try:
        return reader.run()
    except OnnxImportError:
        raise
    except Exception as e:  # never a traceback for a bad file: say where it happened
        if type(e).__name__ == "ArgumentError":
            raise
        where = f"node {reader.current}: " if reader.current else ""
        raise OnnxImportError(
            f"{filename}: {where}cannot be read ({type(e).__name__}: {e})"
        ) from None
