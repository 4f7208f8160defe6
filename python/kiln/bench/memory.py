"""Memory-plan figures for docs/benchmarks.md: for each model, the arena Kiln plans against the
sum of all its intermediate tensors (what a runtime that never reuses memory would allocate).

    python -m kiln.bench.memory --models resnet50,bert-base            # the full models
    python -m kiln.bench.memory --size small --svg build/memory_plans   # + one chart per model

Each model is compiled through torch.compile(backend="kiln") by kiln.explain (one forward pass)
and every Kiln partition's plan is read back with CompiledGraph.memory_stats. Nothing is timed.
"""

from __future__ import annotations

import argparse
import os

import torch

import kiln
from kiln.bench.models import MODELS, SIZES, build


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f}"


def measure(model_id: str, size: str, batch: int, level: str) -> tuple[dict, kiln.backend.Report]:
    model, x = build(model_id, size, batch)
    report = kiln.explain(model, x, options={"memory.optimization_level": level})
    stats = [p.memory for p in report.partitions]
    row = {
        "model": model_id,
        "partitions": len(stats),
        "intermediate": sum(m["intermediate_bytes"] for m in stats),
        "arena": sum(m["arena_bytes"] for m in stats),
        "shared": max((m["arena_bytes"] for m in stats), default=0),
        "lower_bound": sum(m["peak_live_bytes"] for m in stats),
        "in_place": sum(m["in_place"] for m in stats),
        "schedules": sorted({m["schedule"] for m in stats}),
        "placements": sorted({m["placement"] for m in stats}),
    }
    return row, report


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kiln.bench.memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert-base",
                        help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--level", choices=("default", "aggressive"), default="default",
                        help="memory.optimization_level")
    parser.add_argument("--svg", metavar="DIR",
                        help="write the offset-over-time chart of each model's largest partition")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    print(f"size {args.size}, batch {args.batch}, memory.optimization_level {args.level}\n")
    print("| Model | Partitions | Intermediates (MiB) | Arena (MiB) | Arena / intermediates | "
          "Shared pool (MiB) | Lower bound (MiB) | In place | Schedule | Placement |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for model_id in args.models.split(","):
        row, report = measure(model_id, args.size, args.batch, args.level)
        ratio = row["arena"] / row["intermediate"] if row["intermediate"] else 0.0
        print(f"| {model_id} | {row['partitions']} | {_mib(row['intermediate'])} | "
              f"{_mib(row['arena'])} | {ratio:.1%} | {_mib(row['shared'])} | "
              f"{_mib(row['lower_bound'])} | {row['in_place']} | "
              f"{', '.join(row['schedules'])} | {', '.join(row['placements'])} |", flush=True)
        if args.svg and report.partitions:
            os.makedirs(args.svg, exist_ok=True)
            largest = max(report.partitions, key=lambda p: p.memory["arena_bytes"])
            with open(os.path.join(args.svg, f"{model_id}.svg"), "w") as f:
                f.write(largest.memory_plan("svg"))


if __name__ == "__main__":
    main()
