"""What a benchmark run writes besides its JSON: the machine it ran on, a Markdown report and a
chart of the speed-up over eager."""

from __future__ import annotations

import os
import platform

import torch

from kiln.bench.worker import package_version

# The instruction-set extensions that decide which CPU kernels any of the backends can use.
_ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
              "avx512_vnni", "avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16",
              "amx_int8", "asimd", "sve")
_LIBRARIES = ("torch", "transformers", "numpy", "kiln", "openvino", "onnxruntime", "onnx",
              "onnxscript", "matplotlib")


def _cpuinfo() -> tuple[str, int | None, list[str]]:
    """(CPU model name, physical cores, flags) from /proc/cpuinfo; what Linux doesn't say is
    left to platform.processor() and None."""
    model, flags, cores = platform.processor() or platform.machine(), [], set()
    try:
        with open("/proc/cpuinfo") as f:
            physical_id = "0"
            for line in f:
                key, _, value = (part.strip() for part in line.partition(":"))
                if key == "model name":
                    model = value
                elif key in ("flags", "Features"):
                    flags = value.split()
                elif key == "physical id":
                    physical_id = value
                elif key == "core id":
                    cores.add((physical_id, value))
    except OSError:
        pass
    return model, len(cores) or None, flags


def _memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def machine_info() -> dict:
    model, cores, flags = _cpuinfo()
    return {
        "cpu": model,
        "logical_cpus": os.cpu_count(),
        "physical_cores": cores,
        "isa": [f for f in _ISA_FLAGS if f in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        # Caps Kiln's own kernels (docs/config.md); None: uncapped.
        "kiln_max_cpu_isa": os.environ.get("KILN_MAX_CPU_ISA") or None,
        "memory_gib": _memory_gib(),
        "os": platform.platform(),
        "python": platform.python_version(),
        "libraries": {name: package_version(name) for name in _LIBRARIES},
    }


def isa_cap(machine: dict) -> str:
    """" (Kiln's kernels capped by KILN_MAX_CPU_ISA=...)" when it was set, else ""."""
    cap = machine.get("kiln_max_cpu_isa")
    return f" (Kiln's kernels capped by KILN_MAX_CPU_ISA={cap})" if cap else ""


def speedups(records: list[dict]) -> dict[tuple, float]:
    """(model, backend, batch, threads) → eager's median latency over the backend's, for every
    successful record whose eager counterpart succeeded too."""
    eager = {(r["model"], r["batch"], r["threads"]): r["latency_ms_median"] for r in records
             if r["backend"] == "eager" and r["status"] == "ok"}
    return {(r["model"], r["backend"], r["batch"], r["threads"]):
            eager[(r["model"], r["batch"], r["threads"])] / r["latency_ms_median"]
            for r in records
            if r["status"] == "ok" and (r["model"], r["batch"], r["threads"]) in eager}


def _settings(records: list[dict]) -> list[tuple[int, int]]:
    return sorted({(r["batch"], r["threads"]) for r in records})


def _ordered(values) -> list:
    return list(dict.fromkeys(values))


def _number(value, spec: str) -> str:
    return "—" if value is None else format(value, spec)


def _cell(text: str, limit: int = 120) -> str:
    """One Markdown table cell: the first line, shortened, pipes escaped."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) > limit or "\n" in text.strip():
        first = first[:limit].rstrip() + " …"
    return first.replace("|", "\\|")


def markdown(results: dict) -> str:
    """The report: machine, one speed-up table per (batch, threads) and every measurement."""
    records, machine = results["records"], results["machine"]
    ratio = speedups(records)
    models = _ordered(r["model"] for r in records)
    backends = _ordered(r["backend"] for r in records)
    settings = results["settings"]
    lines = [
        f"# Kiln benchmark, {results['date']}",
        "",
        f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs "
        f"({machine['physical_cores']} physical cores), {machine['memory_gib']} GiB; "
        f"ISA: {' '.join(machine['isa'])}{isa_cap(machine)}; "
        f"PyTorch kernels: {machine['torch_cpu_capability']}; "
        f"{machine['os']}, Python {machine['python']}.",
        "",
        "Libraries: " + ", ".join(f"{k} {v}" for k, v in machine["libraries"].items()) + ".",
        "",
        f"Models at size {settings['size']}; {settings['warmup']} warm-up and "
        f"{settings['iterations']} timed iterations per measurement, each in its own process"
        + (f"; {settings['rounds']} rounds, the median of their medians shown."
           if settings.get("rounds", 1) > 1 else "."),
    ]
    for batch, threads in _settings(records):
        lines += ["", f"## Speed-up over eager: batch {batch}, {threads} thread(s)", "",
                  "| model | " + " | ".join(backends) + " |",
                  "|---|" + "---:|" * len(backends)]
        for model in models:
            cells = [f"{ratio[(model, b, batch, threads)]:.2f}x"
                     if (model, b, batch, threads) in ratio else "n/a" for b in backends]
            lines.append(f"| {model} | " + " | ".join(cells) + " |")
    lines += ["", "## All measurements", "",
              "| model | backend | batch | threads | median ms | p90 ms | per s | vs eager | "
              "compile s | load s | peak RSS MB | deployed RSS MB | max abs err | max rel err | status |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        speedup = ratio.get((r["model"], r["backend"], r["batch"], r["threads"]))
        lines.append("| " + " | ".join([
            r["model"], r["backend"], str(r["batch"]), str(r["threads"]),
            _number(r["latency_ms_median"], ".2f"), _number(r["latency_ms_p90"], ".2f"),
            _number(r["throughput_per_s"], ".1f"),
            f"{speedup:.2f}x" if speedup is not None else "n/a",
            _number(r["compile_s"], ".1f"), _number(r["load_s"], ".2f"),
            _number(r["peak_rss_mb"], ".0f"), _number(r.get("deployed_rss_mb"), ".0f"),
            _number(r["max_abs_err"], ".1e"), _number(r["max_rel_err"], ".1e"),
            _cell(r["status"])]) + " |")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str) -> None:
    """A PNG, one panel per (batch, threads): for each model a bar per backend from 1 to its
    speed-up over eager, on a log scale so that 2x and 0.5x look alike; a measurement that failed
    (or has no eager baseline) is marked n/a at 1."""
    import matplotlib
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    records = results["records"]
    ratio = speedups(records)
    models = _ordered(r["model"] for r in records)
    backends = [b for b in _ordered(r["backend"] for r in records) if b != "eager"]
    settings = _settings(records)
    figure, axes = plt.subplots(len(settings), 1, squeeze=False,
                                figsize=(max(6.0, 2.0 + 0.4 * len(models) * len(backends)),
                                         3.8 * len(settings)))
    width = 0.8 / max(1, len(backends))
    for axis, (batch, threads) in zip(axes[:, 0], settings):
        for i, backend in enumerate(backends):
            positions = [m + (i - (len(backends) - 1) / 2) * width for m in range(len(models))]
            heights = [ratio.get((model, backend, batch, threads)) for model in models]
            bars = axis.bar(positions, [h - 1 if h else 0 for h in heights], width, bottom=1,
                            label=backend)
            for bar, height in zip(bars, heights):
                label = ("n/a" if not height else f"{height:.2f}" if height < 100
                         else f"{height:.0f}")
                axis.annotate(label,
                              (bar.get_x() + bar.get_width() / 2, height or 1),
                              ha="center", va="top" if height and height < 1 else "bottom",
                              fontsize=7, xytext=(0, -2 if height and height < 1 else 2),
                              textcoords="offset points")
        shown = [h for h in ratio.values() if h] + [1.0]
        axis.set_yscale("log")
        axis.set_ylim(min(shown) / 1.6, max(shown) * 1.6)  # room for the labels
        axis.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}x"))
        axis.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
        axis.set_xticks(range(len(models)), models)
        axis.set_ylabel("speed-up over eager")
        axis.set_title(f"batch {batch}, {threads} thread(s)")
        axis.legend(fontsize=8, ncols=min(4, max(1, len(backends))))
    machine = results["machine"]
    figure.suptitle(f"Kiln benchmark {results['date']}: {machine['cpu']}, "
                    f"{machine['logical_cpus']} CPUs, size {results['settings']['size']}",
                    fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
