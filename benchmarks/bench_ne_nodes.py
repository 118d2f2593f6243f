"""Time `.ne` import of node-heavy programs: many small nodes, little data.

Two programs of `--nodes` nodes each (default 200k), written from text templates in the
layout nanoir's exporter uses (sections of constants, init tensors, runtime tensors, caches,
init nodes, runtime nodes, then the two call lists):

- nq level: an input `Q`, then residual blocks of 7 nodes: an init `Q` of the block's 1x1
  conv weight, and runtime `Conv`, `Q`, `Relu`, `Q`, `Add` (the block's input), `Q`;
- hw level: an input `Q`, then blocks of 6 nodes: an init `Unpack` of the weight, and
  runtime `Conv`, `Requant`, `Relu`, `Add` (the block's input), `Requant`.

For each level the same run times Lark alone (the grammar's LALR parser building the tree,
no checks), `parse_nanoengine` (tree and semantic checks) and `import_nanoengine` (text to
verified IR), and prints nodes/s. The target (issue 15): a 200k-node file imports in
at most 40 s, that is at least 5k nodes/s.

    python benchmarks/bench_ne_nodes.py [--nodes 200000] [--levels nq,hw] [--repeat 1]
        [--profile nq|hw] [--no-lark]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import platform
import pstats
import time
import warnings
from collections.abc import Callable

C = 4  # channels
D = 8  # width

_W_HEX = "0000803e" * (C * C)  # 0.25 as float32, a C x C x 1 x 1 weight


def _runtime(name: str, dtype: str = "Any") -> str:
    return f"let {name}: Tensor<{dtype}> = {{shape:BCMD=[-1, {C}, 1, {D}]}};"


def _mem(name: str, dtype: str = "Any") -> str:
    return f"let {name}: mem Tensor = {{type={dtype}, shape:BCMD=[-1, {C}, 1, {D}]}};"


def _node(
    name: str, op: str, attrs: str, ins: list[str], mems: list[str] | None, outs: list[str]
) -> str:
    lines = [
        f"let {name}: {'init Node' if mems is None else 'Node'} = {{",
        f"    op_type={op},",
        f"    attr=[{attrs}],",
        f"    in_s=[{', '.join(ins)}],",
    ]
    if mems is not None:
        lines.append(f"    mem_s=[{', '.join(mems)}],")
    lines.append(f"    out_s=[{', '.join(outs)}]")
    lines.append("};")
    return "\n".join(lines)


class _Text:
    """The sections of a program being written."""

    def __init__(self) -> None:
        self.consts: list[str] = ["// init const tensor"]
        self.statics: list[str] = ["", "// init static tensor"]
        self.runtime: list[str] = ["", "// runtime tensor"]
        self.mems: list[str] = ["", "// runtime memory"]
        self.init_nodes: list[str] = ["", "// init node"]
        self.run_nodes: list[str] = ["", "// runtime_node"]
        self.init_calls: list[str] = []
        self.run_calls: list[str] = []
        self.nodes = 0

    def node(
        self,
        name: str,
        op: str,
        attrs: str,
        ins: list[str],
        out: str,
        dtype: str = "Any",
        mem_dtypes: list[str] | None = None,
        init: bool = False,
    ) -> str:
        self.nodes += 1
        if init:
            self.init_nodes.append(_node(name, op, attrs, ins, None, [out]))
            self.init_calls.append(name)
            return out
        self.runtime.append(_runtime(out, dtype))
        mems = []
        for i, src in enumerate(ins):
            if mem_dtypes is not None and i < len(mem_dtypes):
                mem = f"{name}_{src}"
                self.mems.append(_mem(mem, mem_dtypes[i]))
                mems.append(mem)
        self.run_nodes.append(_node(name, op, attrs, ins, mems, [out]))
        self.run_calls.append(name)
        return out

    def text(self) -> str:
        funcs = ["", "// call init node", "func init(){"]
        funcs += [f"    {c}.do();" for c in self.init_calls]
        funcs += ["}", "", "// call runtime node", "func runtime(){"]
        funcs += [f"    {c}.do();" for c in self.run_calls]
        funcs.append("}")
        parts = self.consts + self.statics + self.runtime + self.mems + self.init_nodes
        return "\n".join(parts + self.run_nodes + funcs) + "\n"


_CONV_ATTRS = "dilations=[1, 1], group=1, kernel_shape=[1, 1], pads=[0, 0, 0, 0], strides=[1, 1]"


def nq_program(nodes: int) -> tuple[str, int]:
    """An nq-level program of about `nodes` nodes (7 per block); its text and node count."""
    t = _Text()
    n = 0

    def exp_const() -> str:
        nonlocal n
        n += 1
        name = f"Constant_n{n}_o0"
        t.consts.append(f"let {name}: Tensor<int8_t> = {{shape=[1], data=0x05}} ;")
        return name

    t.runtime.append(_runtime("input"))
    act = t.node("Q_in", "Q", "bit_len=8", ["input", exp_const()], "Q_in_o0", mem_dtypes=["Any"])
    for k in range((max(nodes, 8) - 1) // 7):
        w = f"block{k}_weight"
        t.consts.append(
            f"let {w}: Tensor<little_float_32> = {{shape=[{C}, {C}, 1, 1], data=0x{_W_HEX}}} ;"
        )
        qw = f"Q_w{k}_o0"
        t.statics.append(f"let {qw}: Tensor<Any>  = {{shape:CCDD=[{C}, {C}, 1, 1]}};")
        t.node(f"Q_w{k}", "Q", "bit_len=8", [w, exp_const()], qw, init=True)
        a = ["Any"]
        x = t.node(f"Conv_n{k}", "Conv", _CONV_ATTRS, [act, qw], f"Conv_n{k}_o0", mem_dtypes=a)
        x = t.node(f"Q_a{k}", "Q", "bit_len=8", [x, exp_const()], f"Q_a{k}_o0", mem_dtypes=a)
        x = t.node(f"Relu_n{k}", "Relu", "", [x], f"Relu_n{k}_o0", mem_dtypes=a)
        x = t.node(f"Q_b{k}", "Q", "bit_len=8", [x, exp_const()], f"Q_b{k}_o0", mem_dtypes=a)
        x = t.node(f"Add_n{k}", "Add", "", [x, act], f"Add_n{k}_o0", mem_dtypes=a * 2)
        act = t.node(f"Q_c{k}", "Q", "bit_len=8", [x, exp_const()], f"Q_c{k}_o0", mem_dtypes=a)
    return t.text(), t.nodes


def hw_program(nodes: int) -> tuple[str, int]:
    """A hw-level program of about `nodes` nodes (6 per block); its text and node count."""
    t = _Text()
    t.consts.append("let Constant_n1_o0: Tensor<int8_t> = {shape=[1], data=0x07} ;")
    t.runtime.append(_runtime("input"))
    act = t.node(
        "Q_n1", "Q", "bit_len=8, exp=7", ["input", "Constant_n1_o0"], "Q_n1_o0", "int8_t", ["Any"]
    )
    w_hex = "01" * (C * C)
    for k in range((max(nodes, 7) - 1) // 6):
        w = f"block{k}_w"
        t.consts.append(f"let {w}: Tensor<int8_t> = {{shape=[{C}, {C}, 1, 1], data=0x{w_hex}}} ;")
        uw = f"Unpack_n{k}_o0"
        t.statics.append(f"let {uw}: Tensor<int8_t>  = {{shape:CCDD=[{C}, {C}, 1, 1]}};")
        t.node(f"Unpack_n{k}", "Unpack", "bit_len=8, exp=3", [w], uw, init=True)
        i8 = ["int8_t"]
        conv = _CONV_ATTRS.replace("group", "exp=10, group")
        x = t.node(f"Conv_n{k}", "Conv", conv, [act, uw], f"Conv_n{k}_o0", "int32_t", i8)
        x = t.node(
            f"Requant_a{k}",
            "Requant",
            "bit_len=8, exp=7, rounding=trunc, shift=[3]",
            [x],
            f"Requant_a{k}_o0",
            "int8_t",
            ["int32_t"],
        )
        x = t.node(f"Relu_n{k}", "Relu", "exp=7", [x], f"Relu_n{k}_o0", "int8_t", i8)
        x = t.node(f"Add_n{k}", "Add", "exp=7", [x, act], f"Add_n{k}_o0", "int16_t", i8 * 2)
        act = t.node(
            f"Requant_b{k}",
            "Requant",
            "bit_len=8, exp=7, rounding=trunc, shift=[0]",
            [x],
            f"Requant_b{k}_o0",
            "int8_t",
            ["int16_t"],
        )
    return t.text(), t.nodes


def seconds(f: Callable[[], object], repeat: int) -> tuple[float, float]:
    """Best wall-clock and CPU seconds of `repeat` runs (CPU time is steadier on a shared
    machine)."""
    best, best_cpu = float("inf"), float("inf")
    for _ in range(repeat):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = f()
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
        del result
    return best, best_cpu


def lark_alone(text: str) -> object:
    """The grammar's parser on its own: Lark LALR building the tree (no checks), as
    `parse_nanoengine` ran it before the fast path."""
    from nanoir.grammar.ne import parser as ne_parser

    with ne_parser.gc_paused():
        return ne_parser._parse_items(text, {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200_000, help="nodes per program")
    parser.add_argument("--levels", default="nq,hw", help="comma-separated: nq, hw")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs (best is kept)")
    parser.add_argument("--no-lark", action="store_true", help="do not time Lark alone")
    parser.add_argument("--profile", choices=("nq", "hw"), help="profile this level's import")
    args = parser.parse_args()

    from nanoir.grammar.ne.importer import import_nanoengine
    from nanoir.grammar.ne.parser import parse_nanoengine

    print(
        f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores, "
        f"load average {os.getloadavg()[0]:.1f} at the start; best of {args.repeat}"
    )
    print()
    print("| level | nodes | MB | step | s | CPU s | nodes/s | vs Lark alone |")
    print("|---|---:|---:|---|---:|---:|---:|---:|")
    for level in args.levels.split(","):
        text, count = (nq_program if level == "nq" else hw_program)(args.nodes)
        mb = len(text) / 1e6
        if args.profile == level:
            profile = cProfile.Profile()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                profile.runcall(import_nanoengine, text, f"{level}.ne")
            pstats.Stats(profile).sort_stats("cumulative").print_stats(45)
            pstats.Stats(profile).sort_stats("tottime").print_stats(35)
            continue
        rows = [
            ("Lark alone (no checks)", None if args.no_lark else lambda: lark_alone(text)),
            ("`parse_nanoengine`", lambda: parse_nanoengine(text, f"{level}.ne")),
            ("`import_nanoengine`", lambda: import_nanoengine(text, f"{level}.ne")),
        ]
        t_lark = None
        for step, run in rows:
            if run is None:
                continue
            t, cpu = seconds(run, args.repeat)
            if t_lark is None and step.startswith("Lark"):
                t_lark = t
            ratio = f"{t_lark / t:.1f}x" if t_lark else ""
            print(
                f"| {level} | {count} | {mb:.1f} | {step} | {t:.2f} | {cpu:.2f} | {count / t:,.0f} "
                f"| {ratio} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
