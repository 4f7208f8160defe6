"""python -m kiln.bench.stages: Kiln's own compile time per stage (docs/benchmarks.md).

    python -m kiln.bench.stages --models resnet50,bert-base          # the full models
    python -m kiln.bench.stages --size small --repeat 1              # a smoke run

Each model goes through torch.compile(backend="kiln") once (kiln.explain); then each Kiln
partition's FX graph is compiled again, --repeat times, timing what Kiln itself does: importing
the FX graph into Kiln's IR, each pipeline stage (the sum of its passes' times from
CompiledGraph.pass_records) and the plan (kernel creation with weight prepacking, schedule and
memory plan: the rest of the compile), and the node count after each stage. Dynamo's and
AOTAutograd's capture, which every torch.compile backend pays, is not in these figures. Medians
over the repeats are reported.
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import time

import torch

import kiln
from kiln import _C
from kiln.bench.models import MODELS, SIZES, build

STAGES = ("prepare", "fuse", "format", "partition", "select", "schedule")


def time_partition(module) -> dict:
    """Seconds of each step of compiling one partition (import, the stages, plan, total) and
    its node counts after each stage."""
    constants = {module.constant_args[p]: t.detach().contiguous() for p, t, _ in module.frozen}
    start = time.perf_counter()
    graph = _C.import_fx(module.graph_json, constants)
    imported = time.perf_counter()
    compiled = _C.compile(graph, **module.options)
    done = time.perf_counter()
    seconds = collections.Counter()
    records = compiled.pass_records()
    # Nodes after each stage: its last pass's count, or the previous stage's when it ran none
    # (None throughout at O0, which runs no pass).
    nodes = {"input": records[0]["nodes_before"] if records else None}
    for record in records:
        seconds[record["stage"]] += record["seconds"]
    previous = nodes["input"]
    for stage in STAGES:
        counts = [r["nodes_after"] for r in records if r["stage"] == stage]
        previous = nodes[stage] = counts[-1] if counts else previous
    row = {"import": imported - start, **{s: seconds[s] for s in STAGES}}
    row["plan"] = max(0.0, (done - imported) - sum(seconds.values()))
    row["total"] = done - start
    row["nodes"] = nodes
    return row


def measure(model_id: str, size: str, batch: int, repeat: int) -> dict:
    model, x = build(model_id, size, batch)
    with torch.no_grad():
        report = kiln.explain(model, x)
    runs, nodes = [], {}
    for _ in range(repeat):
        rows = [time_partition(p.module) for p in report.partitions]
        runs.append({k: sum(r[k] for r in rows) for k in rows[0] if k != "nodes"})
    for r in rows:  # summed over the partitions
        for k, n in r["nodes"].items():
            total = nodes.get(k, 0)
            nodes[k] = None if n is None or total is None else total + n
    return {"model": model_id, "partitions": len(report.partitions), "nodes": nodes,
            **{k: statistics.median(r[k] for r in runs) for k in runs[0]}}


def markdown(results: list[dict]) -> str:
    columns = ["import", *STAGES, "plan", "total"]
    lines = ["| model | partitions | " + " | ".join(f"{c} s" for c in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for r in results:
        lines.append(f"| {r['model']} | {r['partitions']} | "
                     + " | ".join(f"{r[c]:.3f}" for c in columns) + " |")
    lines += ["", "Nodes in Kiln's graphs after each stage:", "",
              "| model | input | " + " | ".join(STAGES) + " |",
              "|---|---:|" + "---:|" * len(STAGES)]
    for r in results:
        lines.append(f"| {r['model']} | " + " | ".join(
            "—" if r["nodes"][k] is None else str(r["nodes"][k]) for k in ("input", *STAGES))
                     + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kiln.bench.stages", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet50,bert-base",
                        help=f"comma list of {', '.join(MODELS)}")
    parser.add_argument("--size", choices=SIZES, default="full")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="compiles per partition (median)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    models = args.models.split(",")
    unknown = [m for m in models if m not in MODELS]
    if unknown or args.repeat < 1:
        parser.error(f"unknown model(s) {unknown}" if unknown else "--repeat must be at least 1")
    torch.set_num_threads(args.threads)
    print(f"size {args.size}, batch {args.batch}, {args.threads} thread(s), median of "
          f"{args.repeat}\n")
    print(markdown([measure(m, args.size, args.batch, args.repeat) for m in models]), end="")


if __name__ == "__main__":
    main()
