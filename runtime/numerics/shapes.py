"""Shape inference shared by the nf and nh dialects (and checked against the runtime).

Pure functions over Python ints. A dynamic dimension is xDSL's ``DYNAMIC_INDEX`` (-2**63,
printed ``?``); every function propagates it instead of computing with it. Padding follows
ONNX: ``pads`` lists all begins, then all ends (``[top, left, bottom, right]`` in 2-D).

>>> conv_output_size(32, kernel=3, stride=2, pad_begin=1, pad_end=1, dilation=1)
16
>>> pool_output_size(5, kernel=2, stride=2, pad_begin=0, pad_end=0, dilation=1, ceil_mode=True)
3
>>> broadcast_shapes((DYNAMIC_INDEX, 16, 1, 1), (16, 8, 8)) == (DYNAMIC_INDEX, 16, 8, 8)
True
"""

from __future__ import annotations

from collections.abc import Sequence

from nanoir.errors import Error

DYNAMIC_INDEX = -(2**63)
"""A dynamic dim: the value of xDSL's ``DYNAMIC_INDEX`` (the numerics layer imports no xDSL IR;
a test checks the two agree)."""

__all__ = [
    "DYNAMIC_INDEX",
    "ShapeError",
    "broadcast_shapes",
    "conv_output_size",
    "pool_output_size",
    "same_or_dynamic",
    "shape_str",
]


class ShapeError(ValueError, Error):
    """Raised when shapes cannot be combined; verifiers turn it into a VerifyException."""


def shape_str(shape: Sequence[int]) -> str:
    """Render a shape the way MLIR does (``?x16x8x8``)."""
    return "x".join("?" if d == DYNAMIC_INDEX else str(d) for d in shape) or "scalar"


def same_or_dynamic(a: int, b: int) -> bool:
    """True when two dims can be the same at run time."""
    return a == DYNAMIC_INDEX or b == DYNAMIC_INDEX or a == b


def conv_output_size(
    size: int, *, kernel: int, stride: int, pad_begin: int, pad_end: int, dilation: int
) -> int:
    """Output length of a convolution window along one dim (PyTorch/ONNX floor rule)."""
    if size == DYNAMIC_INDEX:
        return DYNAMIC_INDEX
    span = dilation * (kernel - 1) + 1
    out = (size + pad_begin + pad_end - span) // stride + 1
    if out <= 0:
        raise ShapeError(
            f"window of span {span} does not fit input length {size} with pads "
            f"({pad_begin}, {pad_end})"
        )
    return out


def pool_output_size(
    size: int,
    *,
    kernel: int,
    stride: int,
    pad_begin: int,
    pad_end: int,
    dilation: int = 1,
    ceil_mode: bool = False,
) -> int:
    """Output length of a pooling window along one dim, PyTorch's ``ceil_mode`` rule included.

    With ``ceil_mode`` the division rounds up, but a last window that would start inside the
    right padding is dropped (PyTorch ``pooling_output_shape``).
    """
    if size == DYNAMIC_INDEX:
        return DYNAMIC_INDEX
    if not ceil_mode:
        return conv_output_size(
            size,
            kernel=kernel,
            stride=stride,
            pad_begin=pad_begin,
            pad_end=pad_end,
            dilation=dilation,
        )
    span = dilation * (kernel - 1) + 1
    numer = size + pad_begin + pad_end - span
    out = (numer + stride - 1) // stride + 1
    if (out - 1) * stride >= size + pad_begin:
        out -= 1
    if out <= 0:
        raise ShapeError(f"window of span {span} does not fit input length {size}")
    return out


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of static-or-dynamic shapes; a dynamic dim meets 1 or itself."""
    rank = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for axis in range(rank):
        dims = [s[len(s) - rank + axis] for s in shapes if len(s) - rank + axis >= 0]
        static = {d for d in dims if d not in (1, DYNAMIC_INDEX)}
        if len(static) > 1:
            raise ShapeError(
                "shapes " + ", ".join(shape_str(s) for s in shapes) + " do not broadcast"
            )
        if static:
            out.append(static.pop())
        elif DYNAMIC_INDEX in dims:
            out.append(DYNAMIC_INDEX)
        else:
            out.append(1)
    return tuple(out)


def _spatial(name: str, values: Sequence[int] | None, n: int, default: int) -> tuple[int, ...]:
    if values is None:
        return (default,) * n
    if len(values) != n:
        raise ShapeError(f"{name} has {len(values)} entries, expected {n} (one per spatial dim)")
    return tuple(values)


def window_params(
    n: int,
    kernel: Sequence[int],
    strides: Sequence[int] | None,
    pads: Sequence[int] | None,
    dilations: Sequence[int] | None,
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """Check and default the window attributes of a conv/pool over ``n`` spatial dims."""
    kernel_t = _spatial("kernel", kernel, n, 1)
    strides_t = _spatial("strides", strides, n, 1)
    dil_t = _spatial("dilations", dilations, n, 1)
    if pads is None:
        pads_t = (0,) * (2 * n)
    elif len(pads) != 2 * n:
        raise ShapeError(f"pads has {len(pads)} entries, expected {2 * n} (begins, then ends)")
    else:
        pads_t = tuple(pads)
    if any(k <= 0 for k in kernel_t):
        raise ShapeError(f"kernel sizes must be positive, got {list(kernel_t)}")
    if any(s <= 0 for s in strides_t):
        raise ShapeError(f"strides must be positive, got {list(strides_t)}")
    if any(d <= 0 for d in dil_t):
        raise ShapeError(f"dilations must be positive, got {list(dil_t)}")
    if any(p < 0 for p in pads_t):
        raise ShapeError(f"pads must be non-negative, got {list(pads_t)}")
    return kernel_t, strides_t, pads_t, dil_t


def infer_conv_shape(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    groups: int = 1,
) -> tuple[int, ...]:
    """Result shape of an N-d grouped convolution: input ``[N, C, *S]``, weight ``[O, C/g, *K]``."""
    rank = len(input_shape)
    if rank < 3 or rank > 5:
        raise ShapeError(
            f"input must be [N, C, spatial...] with 1 to 3 spatial dims, got rank {rank}"
        )
    if len(weight_shape) != rank:
        raise ShapeError(f"weight rank {len(weight_shape)} does not match input rank {rank}")
    n = rank - 2
    kernel, strides_t, pads_t, dil = window_params(n, weight_shape[2:], strides, pads, dilations)
    if groups <= 0:
        raise ShapeError(f"groups must be positive, got {groups}")
    out_c, w_c = weight_shape[0], weight_shape[1]
    in_c = input_shape[1]
    if out_c % groups:
        raise ShapeError(f"output channels {out_c} are not divisible by groups {groups}")
    if in_c != DYNAMIC_INDEX and in_c != w_c * groups:
        raise ShapeError(
            f"input has {in_c} channels but weight expects {w_c} per group x {groups} groups "
            f"= {w_c * groups}"
        )
    spatial = tuple(
        conv_output_size(
            input_shape[2 + i],
            kernel=kernel[i],
            stride=strides_t[i],
            pad_begin=pads_t[i],
            pad_end=pads_t[n + i],
            dilation=dil[i],
        )
        for i in range(n)
    )
    return (input_shape[0], out_c, *spatial)


def conv_transpose_output_size(
    size: int,
    *,
    kernel: int,
    stride: int,
    pad_begin: int,
    pad_end: int,
    dilation: int,
    output_padding: int = 0,
) -> int:
    """Output length of a transposed convolution along one dim (PyTorch ``ConvTranspose``,
    ONNX ``ConvTranspose`` without ``output_shape``):
    ``(L - 1) * s - pad_begin - pad_end + d * (k - 1) + output_padding + 1``."""
    if size == DYNAMIC_INDEX:
        return DYNAMIC_INDEX
    if output_padding < 0 or output_padding >= max(stride, dilation):
        raise ShapeError(
            f"output_padding {output_padding} must be >= 0 and smaller than the stride "
            f"{stride} or the dilation {dilation}"
        )
    out = (size - 1) * stride - pad_begin - pad_end + dilation * (kernel - 1) + output_padding + 1
    if out <= 0:
        raise ShapeError(
            f"transposed window of length {size} with pads ({pad_begin}, {pad_end}) leaves no output"
        )
    return out


def infer_conv_transpose_shape(
    input_shape: Sequence[int],
    weight_shape: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    output_padding: Sequence[int] | None = None,
    groups: int = 1,
) -> tuple[int, ...]:
    """Result shape of an N-d grouped transposed convolution: input ``[N, C, *S]``, weight
    ``[C, O/g, *K]`` (PyTorch's ConvTranspose layout: input channels first)."""
    rank = len(input_shape)
    if rank < 3 or rank > 5:
        raise ShapeError(
            f"input must be [N, C, spatial...] with 1 to 3 spatial dims, got rank {rank}"
        )
    if len(weight_shape) != rank:
        raise ShapeError(f"weight rank {len(weight_shape)} does not match input rank {rank}")
    n = rank - 2
    kernel, strides_t, pads_t, dil = window_params(n, weight_shape[2:], strides, pads, dilations)
    outpad = _spatial("output_padding", output_padding, n, 0)
    if groups <= 0:
        raise ShapeError(f"groups must be positive, got {groups}")
    w_in, w_out = weight_shape[0], weight_shape[1]
    if w_in % groups:
        raise ShapeError(f"weight input channels {w_in} are not divisible by groups {groups}")
    in_c = input_shape[1]
    if in_c != DYNAMIC_INDEX and in_c != w_in:
        raise ShapeError(f"input has {in_c} channels but the weight expects {w_in}")
    spatial = tuple(
        conv_transpose_output_size(
            input_shape[2 + i],
            kernel=kernel[i],
            stride=strides_t[i],
            pad_begin=pads_t[i],
            pad_end=pads_t[n + i],
            dilation=dil[i],
            output_padding=outpad[i],
        )
        for i in range(n)
    )
    return (input_shape[0], w_out * groups, *spatial)


def infer_depth_to_space_shape(input_shape: Sequence[int], block: int) -> tuple[int, ...]:
    """``[N, C * r**n, *S] -> [N, C, *(S * r)]`` (PixelShuffle, ONNX DepthToSpace)."""
    rank = len(input_shape)
    if rank < 3 or block <= 0:
        raise ShapeError(
            f"depth_to_space needs [N, C, spatial...] and a positive block, got "
            f"rank {rank}, block {block}"
        )
    c, factor = input_shape[1], block ** (rank - 2)
    if c != DYNAMIC_INDEX and c % factor:
        raise ShapeError(f"channels {c} are not divisible by block**{rank - 2} = {factor}")
    return (
        input_shape[0],
        DYNAMIC_INDEX if c == DYNAMIC_INDEX else c // factor,
        *(DYNAMIC_INDEX if d == DYNAMIC_INDEX else d * block for d in input_shape[2:]),
    )


def infer_space_to_depth_shape(input_shape: Sequence[int], block: int) -> tuple[int, ...]:
    """``[N, C, *(S * r)] -> [N, C * r**n, *S]`` (PixelUnshuffle, ONNX SpaceToDepth)."""
    rank = len(input_shape)
    if rank < 3 or block <= 0:
        raise ShapeError(
            f"space_to_depth needs [N, C, spatial...] and a positive block, got "
            f"rank {rank}, block {block}"
        )
    if any(d != DYNAMIC_INDEX and d % block for d in input_shape[2:]):
        raise ShapeError(
            f"spatial sizes {shape_str(input_shape[2:])} are not divisible by the block {block}"
        )
    c = input_shape[1]
    return (
        input_shape[0],
        DYNAMIC_INDEX if c == DYNAMIC_INDEX else c * block ** (rank - 2),
        *(DYNAMIC_INDEX if d == DYNAMIC_INDEX else d // block for d in input_shape[2:]),
    )


def infer_pool_shape(
    input_shape: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    ceil_mode: bool = False,
) -> tuple[int, ...]:
    """Result shape of an N-d max/avg pool over ``[N, C, *S]``."""
    rank = len(input_shape)
    if rank < 3 or rank > 5:
        raise ShapeError(
            f"input must be [N, C, spatial...] with 1 to 3 spatial dims, got rank {rank}"
        )
    n = rank - 2
    kernel_t, strides_t, pads_t, dil = window_params(n, kernel, strides, pads, dilations)
    for i in range(n):
        if 2 * max(pads_t[i], pads_t[n + i]) > kernel_t[i]:
            raise ShapeError(
                f"pads {list(pads_t)} exceed half the kernel {list(kernel_t)} (PyTorch's limit)"
            )
    spatial = tuple(
        pool_output_size(
            input_shape[2 + i],
            kernel=kernel_t[i],
            stride=strides_t[i],
            pad_begin=pads_t[i],
            pad_end=pads_t[n + i],
            dilation=dil[i],
            ceil_mode=ceil_mode,
        )
        for i in range(n)
    )
    return (input_shape[0], input_shape[1], *spatial)


def infer_linear_shape(input_shape: Sequence[int], weight_shape: Sequence[int]) -> tuple[int, ...]:
    """``y = x @ w.T``: input ``[..., I]``, weight ``[O, I]`` give ``[..., O]``."""
    if len(input_shape) < 1 or len(weight_shape) != 2:
        raise ShapeError(
            f"linear needs input [..., I] and weight [O, I], got {shape_str(input_shape)} and "
            f"{shape_str(weight_shape)}"
        )
    if not same_or_dynamic(input_shape[-1], weight_shape[1]):
        raise ShapeError(
            f"input features {input_shape[-1]} do not match weight [O, I] = "
            f"{shape_str(weight_shape)}"
        )
    return (*input_shape[:-1], weight_shape[0])


def infer_matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """``torch.matmul`` shapes: 1-D operands are promoted and the promoted dim dropped."""
    if not a or not b:
        raise ShapeError("matmul operands must have rank >= 1")
    a2 = (1, *a) if len(a) == 1 else tuple(a)
    b2 = (*b, 1) if len(b) == 1 else tuple(b)
    if not same_or_dynamic(a2[-1], b2[-2]):
        raise ShapeError(f"matmul inner dims differ: {shape_str(a)} @ {shape_str(b)}")
    batch = broadcast_shapes(a2[:-2], b2[:-2])
    out = (*batch, a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def infer_concat_shape(shapes: Sequence[Sequence[int]], axis: int) -> tuple[int, ...]:
    """Concatenation along ``axis``; the other dims must agree."""
    if not shapes:
        raise ShapeError("concat needs at least one input")
    rank = len(shapes[0])
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} is out of range for rank {rank}")
    axis %= rank
    out = list(shapes[0])
    for s in shapes[1:]:
        if len(s) != rank:
            raise ShapeError(
                f"inputs have different ranks: {shape_str(shapes[0])} and {shape_str(s)}"
            )
        for i in range(rank):
            if i == axis:
                continue
            if not same_or_dynamic(out[i], s[i]):
                raise ShapeError(
                    f"inputs differ outside axis {axis}: {shape_str(shapes[0])} and {shape_str(s)}"
                )
            if out[i] == DYNAMIC_INDEX:
                out[i] = s[i]
    total = 0
    for s in shapes:
        if s[axis] == DYNAMIC_INDEX:
            total = DYNAMIC_INDEX
            break
        total += s[axis]
    out[axis] = total
    return tuple(out)


def shapes_compatible(expected: Sequence[int], actual: Sequence[int]) -> bool:
    """True when ``actual`` may be the shape ``expected`` (equal rank, dims equal or dynamic)."""
    return len(expected) == len(actual) and all(
        same_or_dynamic(e, a) for e, a in zip(expected, actual)
    )
