"""python -m kiln.bench.fused_reduction: fused_elementwise's reduction stage against the graph
before it (docs/benchmarks.md).

    python -m kiln.bench.fused_reduction [--rows 4096] [--cols 1024] [--threads 1] [--repeat 30]

Each case is a textual graph in two forms, both compiled at O3: "unfused" is what stage fuse
made before the reduction stage existed (the chain as its own op or fused_elementwise, writing
its whole result, then the reduction reading it back), "fused" is the pass's output. Both run
the same inputs in one process, interleaved; the table gives the median of `repeat` timed runs
of each and the ratio. The first four are trailing reductions (the reduction stage), the last
two leading ones (row reductions: the row reduced, then the chain over it while it is in cache).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import kiln

# name -> (graph body, its inputs, the unfused form where it differs from the body as written:
# a chain of several ops was one fused_elementwise before). %r is the result.
CASES = {
    "sum(x*x, -1)": (
        "%s = mul(%x, %x)\n  %r = sum(%s) {dim = [-1]}", ["x"], None),
    "mean((a-b)*(a-b)), all dims": (
        "%d = sub(%x, %y)\n  %q = mul(%d, %d)\n  %r = mean(%q)", ["x", "y"],
        '%q = fused_elementwise(%x, %y) {args = [0, 1, 2, 2], ops = ["sub", "mul"]}\n'
        "  %r = mean(%q)"),
    "amax(abs(x), -1)": (
        "%a = abs(%x)\n  %r = amax(%a) {dim = [-1]}", ["x"], None),
    "sum(sigmoid(x), -1, keepdim)": (
        "%a = sigmoid(%x)\n  %r = sum(%a) {dim = [-1], keepdim = true}", ["x"], None),
    "x - mean(x, -1, keepdim)": (
        "%m = mean(%x) {dim = [-1], keepdim = true}\n  %r = sub(%x, %m)", ["x"], None),
    "exp(x - amax(x, -1, keepdim)) * y": (
        "%m = amax(%x) {dim = [-1], keepdim = true}\n  %d = sub(%x, %m)\n  %e = exp(%d)\n"
        "  %r = mul(%e, %y)", ["x", "y"],
        "%m = amax(%x) {dim = [-1], keepdim = true}\n"
        '  %r = fused_elementwise(%x, %m, %y) {args = [0, 1, 3, -1, 4, 2], '
        'ops = ["sub", "exp", "mul"]}'),
}


def graph(body: str, names: list[str], rows: int, cols: int) -> kiln.Graph:
    inputs = "".join(f"  input %{n} : f32[{rows}, {cols}]\n" for n in names)
    return kiln.Graph.parse(f"graph @g {{\n{inputs}  {body}\n  output %r\n}}")


def median_seconds(compiled, arrays, repeat: int) -> float:
    compiled(*arrays)  # plan and warm up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        compiled(*arrays)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def pair(a, b, arrays, repeat):
    """Medians of a and b, measured interleaved so that load changes hit both alike."""
    ta, tb = [], []
    for _ in range(3):
        ta.append(median_seconds(a, arrays, repeat))
        tb.append(median_seconds(b, arrays, repeat))
    return min(ta), min(tb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    y = rng.standard_normal((args.rows, args.cols), dtype=np.float32)
    mib = x.nbytes / 2**20
    print(f"f32[{args.rows}, {args.cols}] ({mib:.0f} MiB per input), threads {args.threads}, "
          f"median of {args.repeat} runs, best of 3 interleaved rounds\n")
    print("| graph | unfused ms | fused ms | speed-up |")
    print("|---|---:|---:|---:|")
    for name, (body, names, before) in CASES.items():
        unfused = kiln.compile(graph(before or body, names, args.rows, args.cols),
                               threads=args.threads, disabled_passes=["fuse_elementwise_chains"])
        fused = kiln.compile(graph(body, names, args.rows, args.cols), threads=args.threads)
        arrays = [x, y][:len(names)]
        a, b = pair(unfused, fused, arrays, args.repeat)
        print(f"| {name} | {a * 1e3:.2f} | {b * 1e3:.2f} | {a / b:.2f}x |")


if __name__ == "__main__":
    main()
