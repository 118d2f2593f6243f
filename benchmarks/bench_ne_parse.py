"""Time the `.ne` text layer on a program carrying ResNet-18-sized float32 weights.

The program has one constant per ResNet-18 parameter and BN statistic (11.7M float32 values,
about 94 MB of hex at scale 1; random data from a fixed seed), per-channel int8 exponents, an
init `Q` node per weight and a runtime chain of Q/Conv/BatchNormalization/Relu/Gemm nodes.

Parsing and printing are dominated by the hex blobs, so the yardsticks are the C routines
that do only that work, run in the same process on the same hex: `bytes.fromhex` for
`parse_nanoengine` (lexing, decoding and the semantic checks included) and `bytes.hex` for
`print_nanoengine`. Targets: parse within 4x of `bytes.fromhex`, print within 2x of
`bytes.hex`, and parse memory growth (tracemalloc peak, in a separate run so it does not
slow the timed ones) under 3x the file size.

    python benchmarks/bench_ne_parse.py [--scale 0.1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import time
import tracemalloc
from collections.abc import Callable

import numpy as np
from nanoir.grammar.ne.parser import parse_nanoengine
from nanoir.grammar.ne.printer import print_nanoengine
from nanoir.grammar.ne.syntax_tree import (
    Comment,
    ConstTensor,
    Float,
    Function,
    InitNode,
    InitTensor,
    Item,
    MemTensor,
    Program,
    RuntimeNode,
    RuntimeTensor,
)

# ResNet-18 convolutions in order: (name, C_out, C_in, k). Each is followed by a BN.
CONVS: list[tuple[str, int, int, int]] = [("conv1", 64, 3, 7)]
for _layer, _width, _stride_in in ((1, 64, 64), (2, 128, 64), (3, 256, 128), (4, 512, 256)):
    for _block in range(2):
        _cin = _stride_in if _block == 0 else _width
        CONVS.append((f"layer{_layer}_{_block}_conv1", _width, _cin, 3))
        CONVS.append((f"layer{_layer}_{_block}_conv2", _width, _width, 3))
        if _block == 0 and _layer > 1:
            CONVS.append((f"layer{_layer}_{_block}_downsample_0", _width, _cin, 1))
FC = ("fc", 1000, 512)


def build_program(scale: float, seed: int = 0) -> Program:
    """The synthetic program; `scale` multiplies every output-channel count (so the data)."""
    rng = np.random.default_rng(seed)

    def floats(*shape: int) -> ConstTensor:
        return np.asarray(rng.standard_normal(shape, dtype=np.float32) * 0.05)  # type: ignore[return-value]

    def width(c: int) -> int:
        return max(1, round(c * scale))

    consts: list[Item] = [Comment(" init const tensor")]
    statics: list[Item] = [Comment(" init static tensor")]
    runtime: list[Item] = [Comment(" runtime tensor")]
    mems: list[Item] = [Comment(" runtime memory")]
    init_nodes: list[Item] = [Comment(" init node")]
    run_nodes: list[Item] = [Comment(" runtime_node")]
    init_calls: list[str] = []
    run_calls: list[str] = []

    def runtime_node(name: str, op: str, attrs, ins: list[str], channels: int) -> str:  # type: ignore[no-untyped-def]
        out = f"{name}_o0"
        runtime.append(RuntimeTensor(out, "Any", "BCMD", (-1, channels, 1, 7)))
        mem = f"{name}_{ins[0]}"
        mems.append(MemTensor(mem, "Any", "BCMD", (-1, channels, 1, 7)))
        run_nodes.append(RuntimeNode(name, op, attrs, tuple(ins), (mem,), (out,)))
        run_calls.append(name)
        return out

    runtime.append(RuntimeTensor("input", "Any", "BCMD", (-1, 3, 1, 224)))
    act = "input"
    for name, cout, cin, k in CONVS + [(FC[0], FC[1], FC[2], 0)]:
        cout = width(cout)
        shape = (cout, cin, k, k) if k else (cout, cin)
        weight = f"{name}_weight"
        consts.append(ConstTensor.from_numpy(weight, floats(*shape), "little_float_32"))
        exponent = f"{name}_weight_exp"
        exp_shape = (cout,) + (1,) * (len(shape) - 1)
        consts.append(ConstTensor.from_numpy(exponent, np.full(exp_shape, 6, dtype=np.int8)))
        qweight = f"Q_{name}_weight"
        statics.append(
            InitTensor(f"{qweight}_o0", "Any", "CCDD"[: len(shape)] if k else "CC", shape)
        )
        init_nodes.append(
            InitNode(qweight, "Q", (("bit_len", 8),), (weight, exponent), (f"{qweight}_o0",))
        )
        init_calls.append(qweight)
        if k:
            pad = k // 2
            conv_attrs = (
                ("dilations", (1, 1)),
                ("group", 1),
                ("kernel_shape", (k, k)),
                ("pads", (pad, pad, pad, pad)),
                ("strides", (1, 1)),
            )
            act = runtime_node(f"Conv_{name}", "Conv", conv_attrs, [act, f"{qweight}_o0"], cout)
            bn = name.replace("conv", "bn").replace("downsample_0", "downsample_1")
            params = [f"{bn}_{p}" for p in ("weight", "bias", "running_mean", "running_var")]
            for param in params:
                consts.append(ConstTensor.from_numpy(param, floats(cout), "little_float_32"))
            bn_attrs = (("epsilon", Float("1e-05")), ("momentum", Float("0.9")))
            act = runtime_node(
                f"BatchNormalization_{bn}", "BatchNormalization", bn_attrs, [act, *params], cout
            )
            act = runtime_node(f"Relu_{bn}", "Relu", (), [act], cout)
        else:
            bias = f"{name}_bias"
            consts.append(ConstTensor.from_numpy(bias, floats(cout), "little_float_32"))
            gemm_attrs = (("alpha", Float("1.0")), ("beta", Float("1.0")), ("transB", 1))
            act = runtime_node("Gemm_fc", "Gemm", gemm_attrs, [act, f"{qweight}_o0", bias], cout)

    funcs: list[Item] = [
        Comment(" call init node"),
        Function("init", tuple(init_calls)),
        Comment(" call runtime node"),
        Function("runtime", tuple(run_calls)),
    ]
    return Program(tuple(consts + statics + runtime + mems + init_nodes + run_nodes + funcs))


def best_seconds(f: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - start)
    return best


def peak_growth(f: Callable[[], object]) -> int:
    """Peak bytes allocated while `f` runs, above what was allocated before it."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        result = f()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    del result
    return peak - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply output channels (and data) by this"
    )
    parser.add_argument(
        "--repeat", type=int, default=3, help="timed runs per measurement (best is kept)"
    )
    args = parser.parse_args()

    program = build_program(args.scale)
    text = print_nanoengine(program)
    consts = [d for d in program.declarations if isinstance(d, ConstTensor)]
    blobs = [d.data for d in consts]
    hexes = [b.hex() for b in blobs]
    floats = sum(len(d.data) // 4 for d in consts if d.dtype == "little_float_32")
    size_mb = len(text) / 1e6
    hex_mb = sum(len(h) for h in hexes) / 1e6

    # Correctness first: the parse must give back the program, and the print the text.
    parsed = parse_nanoengine(text, "resnet18.ne")
    assert parsed == program, "parse(print(program)) != program"
    assert print_nanoengine(parsed) == text, "print(parse(text)) != text"
    del parsed

    t_fromhex = best_seconds(lambda: [bytes.fromhex(h) for h in hexes], args.repeat)
    t_parse = best_seconds(lambda: parse_nanoengine(text, "resnet18.ne"), args.repeat)
    t_hex = best_seconds(lambda: [b.hex() for b in blobs], args.repeat)
    t_print = best_seconds(lambda: print_nanoengine(program), args.repeat)
    mem_parse = peak_growth(lambda: parse_nanoengine(text, "resnet18.ne"))
    mem_print = peak_growth(lambda: print_nanoengine(program))

    # The whole import (text -> checked tree -> xDSL IR) and export (IR -> text), on a real
    # ResNet-18 program: the synthetic one above is only syntactically valid.
    t_import, t_export, mem_import, real_mb, real_fromhex, real_hex = real_resnet18(args.repeat)

    def mbps(seconds: float) -> str:
        return f"{size_mb / seconds:.0f}"

    print(
        f"{len(consts)} constants, {floats / 1e6:.2f}M float32 values, file {size_mb:.1f} MB "
        f"({hex_mb:.1f} MB of hex), {len(program.items)} items; scale {args.scale}, "
        f"best of {args.repeat}; {platform.python_implementation()} {platform.python_version()}, "
        f"{os.cpu_count()} cores"
    )
    print()
    print("| step | time (s) | MB/s of file | vs. C baseline | target | peak memory growth |")
    print("|---|---|---|---|---|---|")
    print(f"| `bytes.fromhex` (all blobs) | {t_fromhex:.3f} | {mbps(t_fromhex)} | 1.00x | | |")
    print(
        f"| `parse_nanoengine` (with checks) | {t_parse:.3f} | {mbps(t_parse)} | {t_parse / t_fromhex:.2f}x "
        f"| < 4x | {mem_parse / 1e6:.0f} MB = {mem_parse / len(text):.2f}x file (target < 3x) |"
    )
    print(f"| `bytes.hex` (all blobs) | {t_hex:.3f} | {mbps(t_hex)} | 1.00x | | |")
    print(
        f"| `print_nanoengine` | {t_print:.3f} | {mbps(t_print)} | {t_print / t_hex:.2f}x "
        f"| < 2x | {mem_print / 1e6:.0f} MB = {mem_print / len(text):.2f}x file |"
    )
    print()
    print(f"ResNet-18 (torch weights, BN folded) exported to .ne: {real_mb:.1f} MB")
    print()
    print("| step | time (s) | vs. same-run baseline | target | peak memory growth |")
    print("|---|---|---|---|---|")
    print(f"| `bytes.fromhex` (all blobs) | {real_fromhex:.3f} | 1.00x | | |")
    print(
        f"| `import_nanoengine` (text to IR) | {t_import:.3f} | {t_import / real_fromhex:.2f}x "
        f"| < 4x | {mem_import / 1e6:.0f} MB = {mem_import / (real_mb * 1e6):.2f}x file "
        "(target < 3x) |"
    )
    print(f"| `bytes.hex` (all blobs) | {real_hex:.3f} | 1.00x | | |")
    print(
        f"| `export_nanoengine` (IR to text) | {t_export:.3f} | {t_export / real_hex:.2f}x "
        "| < 2x | |"
    )


def real_resnet18(repeat: int) -> tuple[float, float, int, float, float, float]:
    """Import and export times of ResNet-18's real program, with same-run hex baselines."""
    import torch
    from nanoir.grammar.ne.exporter import export_nanoengine
    from nanoir.grammar.ne.importer import import_nanoengine
    from nanoir.lowering.fold_bn import FoldBnPass

    from nanoir.context import make_context
    from nanoir.frontend import from_torch
    from nanoir.testing import make_test_model

    module = from_torch(make_test_model("ResNet18"), (torch.randn(2, 3, 32, 32),))
    FoldBnPass().apply(make_context(), module)
    text = export_nanoengine(module)
    imported = import_nanoengine(text, "resnet18.ne")
    assert export_nanoengine(imported) == text, "export(import(text)) != text"
    blobs = [d.data for d in parse_nanoengine(text).declarations if isinstance(d, ConstTensor)]
    hexes = [b.hex() for b in blobs]
    t_fromhex = best_seconds(lambda: [bytes.fromhex(h) for h in hexes], repeat)
    t_hex = best_seconds(lambda: [b.hex() for b in blobs], repeat)
    t_import = best_seconds(lambda: import_nanoengine(text, "resnet18.ne"), repeat)
    t_export = best_seconds(lambda: export_nanoengine(imported), repeat)
    mem = peak_growth(lambda: import_nanoengine(text, "resnet18.ne"))
    return t_import, t_export, mem, len(text) / 1e6, t_fromhex, t_hex


if __name__ == "__main__":
    main()
