"""python -m kiln.bench.micro: Kiln's kernels against the machine's limits (docs/benchmarks.md).

    python -m kiln.bench.micro --json micro.json --markdown micro.md

Runs the C++ program kiln_microbench (tools/kiln_microbench.cc: FMA peak, GEMM and convolution
GFLOP/s and share of peak, elementwise GB/s against memcpy, CompiledGraph::run's per-call
overhead), then measures the per-call overhead of torch.compile(backend="kiln") on a one-op
function against eager here, and reports everything with the issues' targets met or missed.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import pathlib
import shlex
import subprocess
import sys
import tempfile
import time

import torch

SECTIONS = ("peak", "gemm", "conv", "elementwise", "overhead")

# Targets from the issues: GEMMs with M >= 128 and ResNet-50's convolutions as shares of the
# FMA peak (issue 3), elementwise as a share of memcpy's bandwidth (issue 3), per-call overhead
# above the kernel's own time (issue 4).
GEMM_TARGET = 0.75
CONV_TARGET = 0.60
ELEMENTWISE_TARGET = 0.70
OVERHEAD_TARGET_US = 10.0


def find_binary(name: str = "kiln_microbench") -> pathlib.Path | None:
    """One of Kiln's C++ programs (kiln_microbench, the kiln CLI) beside the build that made
    kiln._C (a dev build's staged package links there), or in the package's bin/ folder;
    $KILN_MICROBENCH overrides both for kiln_microbench."""
    if name == "kiln_microbench" and os.environ.get("KILN_MICROBENCH"):
        return pathlib.Path(os.environ["KILN_MICROBENCH"])
    from kiln import _C
    module = pathlib.Path(_C.__file__)
    for folder in (module.resolve().parent, module.parent / "bin"):
        if (folder / name).is_file():
            return folder / name
    return None


def _per_call_us(fn, calls: int) -> float:
    """Mean microseconds per call over `calls` calls, the best of 7 such loops."""
    for _ in range(calls // 10 + 1):
        fn()
    means = []
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        means.append((time.perf_counter() - start) / calls * 1e6)
    return min(means)


def _relu_tuple(*args):
    return (torch.relu(args[0]),)


def python_overhead(threads: int, calls: int, inductor: bool = True) -> dict:
    """torch.relu on 16 floats: eager, dynamo's own floor, torch.compile(backend="inductor")
    for comparison, and torch.compile(backend="kiln") broken down into the layers a call
    crosses (the whole compiled call with dynamo's frame and guard wrappers; what the backend
    handed dynamo, the partition's _C.TorchCall when the graph goes to dynamo directly; the
    Kiln partition module; the C++ run through the bindings)."""
    from kiln.backend import Report, kiln_backend

    torch.set_num_threads(threads)
    x = torch.randn(16)
    report = Report()
    returned = []

    def backend(gm, example_inputs):
        returned.append(kiln_backend(gm, example_inputs, options={
            "execution.num_threads": threads}, _report=report))
        return returned[-1]

    def relu(t):
        return torch.relu(t)

    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(relu, backend=backend)
        compiled(x)
        if len(report.partitions) != 1 or report.fallback or len(returned) != 1:
            raise RuntimeError(f"relu did not compile to one Kiln partition:\n{report}")
        module = report.partitions[0].module
        handed = returned[0]
        result = {
            "op": "relu", "elements": 16, "calls": calls,
            "eager_us": _per_call_us(lambda: torch.relu(x), calls),
            "torch_compile_us": _per_call_us(lambda: compiled(x), calls),
            "direct_call": type(handed).__name__ == "TorchCall",
            "backend_callable_us": _per_call_us(lambda: handed(x), calls),
            "partition_module_us": _per_call_us(lambda: module(x), calls),
            "bindings_run_us": _per_call_us(lambda: module.compiled.run([x]), calls),
            "inductor_us": None,
        }
        # Dynamo's own floor: its frame, guard and disable wrappers around a backend that
        # returns a plain Python function doing nothing but the op.
        torch._dynamo.reset()
        compiled = torch.compile(relu, backend=lambda gm, example_inputs: _relu_tuple)
        compiled(x)
        result["dynamo_floor_us"] = _per_call_us(lambda: compiled(x), calls)
        torch._dynamo.reset()
        if inductor:
            compiled = torch.compile(relu, backend="inductor")
            compiled(x)
            result["inductor_us"] = _per_call_us(lambda: compiled(x), calls)
    torch._dynamo.reset()
    return result


def run_microbench(binary: pathlib.Path, args: list[str]) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        path = pathlib.Path(scratch) / "micro.json"
        command = [str(binary), *args, "--json", str(path)]
        run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
        if run.returncode != 0 or not path.is_file():
            raise SystemExit(f"{shlex.join(command)} failed with exit code {run.returncode}")
        return json.loads(path.read_text())


# ---------------------------------------------------------------------------------- report

def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


def _shares_against(target: float, shares: list[tuple[str, float]]) -> tuple[bool, str]:
    """Whether every share meets the target, and the figures: the ones below it first (to a
    tenth of a percent, which whole percents can round up to the target), then the others."""
    below = [(n, s) for n, s in shares if s < target]
    if not below:
        return True, ", ".join(f"{n}: {_pct(s)}" for n, s in shares)
    met = len(shares) - len(below)
    return False, ("below: " + ", ".join(f"{n}: {100 * s:.1f}%" for n, s in below)
                   + f"; {met} of {len(shares)} met")


def _kernel_cells(entry: dict, names: list[str], value: str, share: str | None) -> list[str]:
    by_name = {k["name"]: k for k in entry["kernels"]}
    cells = []
    for name in names:
        k = by_name.get(name)
        if k is None or value not in k:
            cells.append("—" if k is None or "not_run" in k
                         else f"error: {k.get('error', '?')[:40]}")
        else:
            text = f"{k[value]:.1f}"
            if share and share in k:
                text += f" ({_pct(k[share])})"
            cells.append(f"**{text}**" if name == entry["selected"] else text)
    return cells


def _kernel_names(entries: list[dict]) -> list[str]:
    names = []
    for e in entries:
        for k in e["kernels"]:
            if k["name"] not in names:
                names.append(k["name"])
    return names


def _selected(entry: dict) -> dict:
    return next(k for k in entry["kernels"] if k["name"] == entry["selected"])


def targets(results: dict) -> list[tuple[str, bool, str]]:
    """(target, met, the figures) for each of the issues' targets this run measured."""
    out = []
    m = results.get("micro", {})
    gemm = [e for e in m.get("gemm", []) if e["m"] >= 128]
    if gemm and all("share_of_peak" in _selected(e) for e in gemm):
        shares = [(e["name"], _selected(e)["share_of_peak"]) for e in gemm]
        out.append((f"GEMMs with M ≥ 128 at ≥ {_pct(GEMM_TARGET)} of peak (selected kernel)",
                    *_shares_against(GEMM_TARGET, shares)))
    network = m.get("conv", {}).get("network", {})
    if "share_of_peak" in network:
        out.append((f"ResNet-50's convolutions at ≥ {_pct(CONV_TARGET)} of peak on average",
                    network["share_of_peak"] >= CONV_TARGET,
                    f"{network['ms']:.1f} ms, {network['gflops']:.0f} GFLOP/s, "
                    f"{_pct(network['share_of_peak'])}"))
    ops = m.get("elementwise", {}).get("ops", [])
    if ops:
        shares = [(e["name"], _selected(e).get("vs_memcpy", 0.0)) for e in ops]
        out.append((f"elementwise at ≥ {_pct(ELEMENTWISE_TARGET)} of memcpy's bandwidth",
                    *_shares_against(ELEMENTWISE_TARGET, shares)))
    if "overhead" in m:
        o = m["overhead"]
        out.append((f"CompiledGraph::run ≤ {OVERHEAD_TARGET_US:.0f} µs above the kernel",
                    o["overhead_us"] <= OVERHEAD_TARGET_US,
                    f"{o['run_us']:.2f} µs against {o['kernel_us']:.2f} µs"))
        p = results.get("python_overhead")
        if p:
            above = p["torch_compile_us"] - o["kernel_us"]
            out.append((f"torch.compile(backend=\"kiln\") ≤ {OVERHEAD_TARGET_US:.0f} µs above "
                        f"the kernel", above <= OVERHEAD_TARGET_US,
                        f"{p['torch_compile_us']:.1f} µs against {o['kernel_us']:.2f} µs "
                        f"(eager {p['eager_us']:.1f} µs"
                        + (f", dynamo's floor {p['dynamo_floor_us']:.1f} µs"
                           if "dynamo_floor_us" in p else "") + ")"))
    return out


def markdown(results: dict) -> str:
    from kiln.bench.report import isa_cap

    m = results["micro"]
    machine = results["machine"]
    threads = m["threads"]
    lines = [f"# Kiln micro-benchmarks, {results['date']}", "",
             f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, "
             f"{machine['memory_gib']} GiB; ISA {', '.join(machine['isa'])}"
             f"{isa_cap(machine)}; "
             f"kernels on {threads} thread(s). Command: `{results['command']}`", "",
             "Rates and times are from the fastest of each measurement's runs (the medians are "
             "in the JSON)."
             + (" GEMMs and convolutions ran cold: the caches evicted before each timed call, "
                "as a layer's weights are inside a network." if m.get("cold") else ""), ""]
    peak = m.get("peak", {})
    peak_all = peak.get("gflops", {}).get(str(threads))
    if "peak" in m:
        lines += ["## fp32 FMA peak", "", "| ISA | chains | threads | best GFLOP/s | median |",
                  "|---|---:|---:|---:|---:|"]
        lines += [f"| {v['isa']} | {v['chains']} | {v['threads']} | {v['gflops_best']:.1f} | "
                  f"{v['gflops_median']:.1f} |" for v in peak["variants"]]
        lines.append("")
    if "gemm" in m:
        names = _kernel_names(m["gemm"])
        lines += [f"## GEMM (GFLOP/s and share of the {threads}-thread peak"
                  + (f", {peak_all:.0f} GFLOP/s" if peak_all else "") + "; the selected kernel in bold)",
                  "",
                  "| shape | batch | M | N | K | " + " | ".join(names) + " | selected | fastest |",
                  "|---|---:|---:|---:|---:|" + "---:|" * len(names) + "---|---|"]
        for e in m["gemm"]:
            flag = "" if e["selected"] == e["fastest"] else " ⚠"
            lines.append(f"| {e['name']} | {e['batch']} | {e['m']} | {e['n']} | {e['k']} | "
                         + " | ".join(_kernel_cells(e, names, "gflops", "share_of_peak"))
                         + f" | {e['selected']}{flag} | {e['fastest']} |")
        lines += ["", "⚠: the selection rule picks a kernel slower than the fastest one.", ""]
    if "conv" in m:
        conv = m["conv"]
        names = _kernel_names(conv["shapes"])
        lines += [f"## ResNet-50 convolutions, batch 1 (layout {conv['layout']}, bias + ReLU "
                  "epilogue; GFLOP/s and share of peak)", "",
                  "| shape | count | GFLOP | ms | " + " | ".join(names) + " |",
                  "|---|---:|---:|---:|" + "---:|" * len(names)]
        for e in conv["shapes"]:
            ms = _selected(e).get("ms_min")
            lines.append(f"| {e['name']} | {e['count']} | {e['gflop']:.3f} | "
                         f"{'—' if ms is None else f'{ms:.2f}'} | "
                         + " | ".join(_kernel_cells(e, names, "gflops", "share_of_peak")) + " |")
        n = conv["network"]
        lines += ["", f"Whole network ({n['convolutions']} convolutions, weighted by "
                  f"occurrences): {n['gflop']:.2f} GFLOP in {n['ms']:.1f} ms, "
                  f"{n['gflops']:.0f} GFLOP/s, {_pct(n.get('share_of_peak'))} of peak.", ""]
    if "elementwise" in m:
        ew = m["elementwise"]
        names = _kernel_names(ew["ops"])
        lines += [f"## Elementwise ({ew['tensor_mib']:.0f} MiB tensors; last-level cache "
                  f"{ew['last_level_cache_bytes'] / 2**20:.0f} MiB; GB/s read + written and "
                  f"share of memcpy's {ew['memcpy_gbs']:.1f} GB/s)", "",
                  "| op | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
        lines += [f"| {e['name']} | " + " | ".join(_kernel_cells(e, names, "gbs", "vs_memcpy"))
                  + " |" for e in ew["ops"]]
        lines.append("")
    if "overhead" in m:
        o = m["overhead"]
        lines += ["## Per-call overhead of a one-node graph (relu on 16 floats)", "",
                  "| path | µs per call |", "|---|---:|",
                  f"| kernel alone ({o['kernel']}) | {o['kernel_us']:.2f} |",
                  f"| C++ CompiledGraph::run, caller's outputs | {o['run_us']:.2f} |",
                  f"| C++ CompiledGraph::run, Kiln allocates the output | "
                  f"{o['run_allocating_outputs_us']:.2f} |"]
        p = results.get("python_overhead")
        if p:
            handed = ("the partition's TorchCall, handed to dynamo directly"
                      if p.get("direct_call") else "what the backend handed dynamo")
            lines += [f"| Python: the partition's C++ run through the bindings | "
                      f"{p['bindings_run_us']:.2f} |",
                      f"| Python: the Kiln partition module (its TorchCall under "
                      f"nn.Module.__call__) | "
                      f"{p['partition_module_us']:.2f} |"]
            if "backend_callable_us" in p:
                lines.append(f"| Python: {handed} | {p['backend_callable_us']:.2f} |")
            lines += [f"| Python: torch.compile(backend=\"kiln\") call | "
                      f"{p['torch_compile_us']:.2f} |",
                      f"| Python: eager torch.relu | {p['eager_us']:.2f} |"]
            if "dynamo_floor_us" in p:
                lines.append(f"| Python: dynamo's floor (a backend returning a Python function "
                             f"that calls torch.relu) | {p['dynamo_floor_us']:.2f} |")
            if p.get("inductor_us") is not None:
                lines.append(f"| Python: torch.compile(backend=\"inductor\") call | "
                             f"{p['inductor_us']:.2f} |")
        lines.append("")
    checks = targets(results)
    if checks:
        lines += ["## Targets", ""]
        lines += [f"- {'met' if met else '**missed**'}: {what} — {figures}"
                  for what, met, figures in checks]
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------- main

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.bench.micro",
        description="Kiln's kernels against the machine's FMA peak and memcpy bandwidth, and "
                    "the per-call overhead of a one-node graph from C++ and torch.compile.")
    parser.add_argument("--sections", default=",".join(SECTIONS),
                        help=f"comma list of {', '.join(SECTIONS)} (default: all)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads per kernel (default: every CPU)")
    parser.add_argument("--min-seconds", type=float, help="timed seconds per measurement "
                        "(the program's default: 0.3)")
    parser.add_argument("--elementwise-mib", type=int,
                        help="tensor size of the elementwise section (default: twice the "
                             "last-level cache, at least 64)")
    parser.add_argument("--conv-reference", action="store_true",
                        help="also time conv2d's reference kernel (minutes)")
    parser.add_argument("--cold", action="store_true",
                        help="gemm and conv: evict the caches before each timed call, so that "
                             "weights come from memory as inside a network")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny shapes and short runs: checks that everything runs")
    parser.add_argument("--binary", help="the kiln_microbench program (default: found beside "
                        "kiln._C or in the package's bin/, or $KILN_MICROBENCH)")
    parser.add_argument("--json", metavar="PATH", help="write the figures here")
    parser.add_argument("--markdown", metavar="PATH", help="write the report here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    sections = [s for s in args.sections.split(",") if s]
    unknown = [s for s in sections if s not in SECTIONS]
    if unknown or not sections:
        raise SystemExit(f"unknown section(s) {unknown}; choose from {', '.join(SECTIONS)}")
    if args.threads < 1:
        raise SystemExit("--threads must be at least 1")
    binary = pathlib.Path(args.binary) if args.binary else find_binary()
    if binary is None or not binary.is_file():
        raise SystemExit("kiln_microbench not found: build it (make build, or "
                         "scripts/dev-build.sh NAME) and pass --binary PATH")
    program_args = ["--sections", ",".join(sections), "--threads", str(args.threads)]
    if args.min_seconds:
        program_args += ["--min-seconds", str(args.min_seconds)]
    if args.elementwise_mib:
        program_args += ["--elementwise-mib", str(args.elementwise_mib)]
    if args.conv_reference:
        program_args.append("--conv-reference")
    if args.cold:
        program_args.append("--cold")
    if args.smoke:
        program_args.append("--smoke")

    from kiln.bench.report import machine_info
    results = {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "command": shlex.join(["python", "-m", "kiln.bench.micro",
                               *(argv if argv is not None else sys.argv[1:])]),
        "machine": machine_info(),
        "micro": run_microbench(binary, program_args),
    }
    if "overhead" in sections:
        # Inductor's compile takes seconds: left out of the smoke run.
        results["python_overhead"] = python_overhead(args.threads, 200 if args.smoke else 20000,
                                                     inductor=not args.smoke)
    text = markdown(results)
    if args.json:
        pathlib.Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    if args.markdown:
        pathlib.Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(args.markdown).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
