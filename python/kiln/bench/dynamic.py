"""python -m kiln.bench.dynamic: one dynamic compile against a static compile per shape
(docs/dynamic-shapes.md, docs/benchmarks.md).

    python -m kiln.bench.dynamic --models bert-base,gpt2 --seq 16,64,128,256,512 --batch 1,8 \\
        --markdown dynamic.md --json dynamic.json

For each model and batch: Kiln compiles the model once with dynamic shapes
(torch.compile(dynamic=True)) and serves every --seq from that compile, and compiles it
statically once per sequence length. Per shape it reports the median latency of each, their
ratio dynamic/static and the largest difference from eager; per model and batch, the dynamic
compile's time (its first call) against the sum of the static compiles' (theirs). A dynamic
graph plans each new shape on its first call: that time is reported as "first call" and is not
counted as compile time. Everything runs in one process; per shape the dynamic graph and that
shape's static graph are timed call by call in turn, so that a drift of the machine touches
both alike. A model and batch whose compile or
run fails report the error in their status instead of figures.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import itertools
import json
import os
import statistics
import time

import torch

import kiln
from kiln.bench import report
from kiln.bench.__main__ import _id_list, _int_list
from kiln.bench.models import MODELS, SIZES, LastHiddenState
from kiln.bench.worker import _errors

# The models this benchmark takes: token models, whose sequence length is the dynamic dim.
DYNAMIC_MODELS = [m for m, spec in MODELS.items() if spec.takes_tokens]
DEFAULT_SEQ = {"full": [16, 64, 128, 256, 512], "small": [8, 16, 32, 64]}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.bench.dynamic",
        description="Kiln with one dynamic-shape compile against one static compile per "
                    "shape: latency, ratio and compile time.")
    parser.add_argument("--models", type=_id_list(DYNAMIC_MODELS), default=DYNAMIC_MODELS,
                        help=f"comma list of {', '.join(DYNAMIC_MODELS)} (default: all)")
    parser.add_argument("--seq", type=_int_list, default=None,
                        help="comma list of sequence lengths (default: 16,64,128,256,512 at "
                             "size full, 8,16,32,64 at size small)")
    parser.add_argument("--batch", type=_int_list, default=[1, 8],
                        help="comma list of batch sizes (default: 1,8)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help=f"threads for Kiln and PyTorch (default: {os.cpu_count()})")
    parser.add_argument("--size", choices=SIZES, default="full",
                        help="full: the real models; small: narrow ones for quick runs and tests")
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls (default: 3)")
    parser.add_argument("--iterations", type=int, default=10,
                        help="timed calls per shape, at least 2 (default: 10)")
    parser.add_argument("--json", metavar="PATH", help="write every figure and the machine here")
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown here")
    return parser


def _kiln(threads: int):
    return kiln.get_backend(compiler_config=kiln.CompilerConfig(
        **{"execution__num_threads": threads}))


def _timed_first_call(run, inputs) -> tuple[torch.Tensor, float]:
    start = time.perf_counter()
    output = run(inputs)
    return output, time.perf_counter() - start


_entry_ids = itertools.count()


def _entry(model: torch.nn.Module):
    """A function calling `model` with a code object of its own. Dynamo caches compiled code per
    code object, so each entry keeps its compiled graph while another compiles: the dynamic graph
    and one static graph can be timed side by side without torch._dynamo.reset()."""
    def call(x):
        return model(x)
    call.__code__ = call.__code__.replace(co_name=f"call_{next(_entry_ids)}")
    return call


def _interleaved_medians_ms(runs: list, inputs, warmup: int, iterations: int) -> list[float]:
    """The median latency of each of `runs`, called in turn call by call so that a drift of the
    machine touches them alike."""
    for run in runs:
        for _ in range(warmup):
            run(inputs)
    times = [[] for _ in runs]
    for _ in range(iterations):
        for run, samples in zip(runs, times):
            start = time.perf_counter()
            run(inputs)
            samples.append(time.perf_counter() - start)
    return [statistics.median(samples) * 1e3 for samples in times]


def measure(model_id: str, size: str, batch: int, seqs: list[int], threads: int, warmup: int,
            iterations: int) -> tuple[list[dict], dict]:
    """(one row per sequence length, the compile summary) for one model and batch."""
    torch.manual_seed(0)
    model = LastHiddenState(MODELS[model_id].build(size)).eval()
    vocab = model.model.config.vocab_size
    inputs = {s: torch.randint(0, vocab, (batch, s), generator=torch.Generator().manual_seed(s))
              for s in seqs}
    rows = []
    frames = []

    def count_frames(gm, example_inputs, **kwargs):
        frames.append(gm)
        return backend(gm, example_inputs, **kwargs)
    backend = _kiln(threads)
    with torch.no_grad():
        references = {s: model(x) for s, x in inputs.items()}
        torch._dynamo.reset()
        # dynamic=True rather than mark_dynamic(x, 1): the batch is symbolic too unless it is 1
        # (dynamo specializes 1), and GPT-2's graph under mark_dynamic alone doesn't import yet.
        dynamic = torch.compile(_entry(model), backend=count_frames, dynamic=True)
        for i, s in enumerate(seqs):
            out, first = _timed_first_call(dynamic, inputs[s])
            if i == 0:
                dynamic_compile = first
            rows.append({"model": model_id, "batch": batch, "seq": s,
                         "dynamic_first_call_s": first,
                         "max_abs_err": _errors(out, references[s])[0]})
        dynamo_compiles = len(frames)
        for row in rows:
            x = inputs[row["seq"]]
            static = torch.compile(_entry(model), backend=_kiln(threads), dynamic=False)
            out, row["static_compile_s"] = _timed_first_call(static, x)
            row["max_abs_err"] = max(row["max_abs_err"], _errors(out, references[row["seq"]])[0])
            row["dynamic_ms"], row["static_ms"] = _interleaved_medians_ms(
                [dynamic, static], x, warmup, iterations)
            row["ratio"] = row["dynamic_ms"] / row["static_ms"]
            del static, out
            gc.collect()  # the static graph's weights and plan go before the next one's compile
        torch._dynamo.reset()
    summary = {"model": model_id, "batch": batch, "status": "ok",
               "dynamic_compile_s": dynamic_compile,
               "dynamo_compiles": dynamo_compiles,
               "static_compile_s_sum": sum(r["static_compile_s"] for r in rows)}
    return rows, summary


def markdown(results: dict) -> str:
    machine, settings = results["machine"], results["settings"]
    lines = [
        f"# Kiln dynamic shapes, {results['date']}", "",
        f"Machine: {machine['cpu']}, {machine['logical_cpus']} logical CPUs, "
        f"{settings['threads']} thread(s); models at size {settings['size']}; "
        f"{settings['warmup']} warm-up and {settings['iterations']} timed calls per shape.", "",
        "Dynamic: one torch.compile(dynamic=True) serving every length; static: one compile per shape. First call: the dynamic graph's "
        "first call at that length (planning it), not counted as compile time.", "",
        "| model | batch | seq | static ms | dynamic ms | dynamic/static | static compile s "
        "| dynamic first call s | max abs err |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results["rows"]:
        lines.append(f"| {r['model']} | {r['batch']} | {r['seq']} | {r['static_ms']:.2f} | "
                     f"{r['dynamic_ms']:.2f} | {r['ratio']:.2f} | {r['static_compile_s']:.2f} | "
                     f"{r['dynamic_first_call_s']:.3f} | {r['max_abs_err']:.1e} |")
    lines += ["", "| model | batch | dynamic compile s | dynamo compiles | sum of the static "
              "compiles s | shapes | status |", "|---|---:|---:|---:|---:|---:|---|"]
    for c in results["compiles"]:
        if c["status"] != "ok":
            lines.append(f"| {c['model']} | {c['batch']} | — | — | — | — | "
                         f"{report._cell(c['status'])} |")
            continue
        shapes = sum(r["model"] == c["model"] and r["batch"] == c["batch"]
                     for r in results["rows"])
        lines.append(f"| {c['model']} | {c['batch']} | {c['dynamic_compile_s']:.2f} | "
                     f"{c['dynamo_compiles']} | {c['static_compile_s_sum']:.2f} | {shapes} | ok |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.iterations < 2 or args.warmup < 0:
        parser.error("--iterations must be at least 2 and --warmup at least 0")
    seqs = args.seq or DEFAULT_SEQ[args.size]
    torch.set_num_threads(args.threads)
    results = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": report.machine_info(),
               "settings": {"size": args.size, "threads": args.threads, "warmup": args.warmup,
                            "iterations": args.iterations, "seq": seqs, "batch": args.batch},
               "rows": [], "compiles": []}
    # The first torch.compile of a process pays one-time set-up (dynamo, AOTAutograd imports):
    # a throwaway compile takes it, so that the first measured compile isn't charged for it.
    with torch.no_grad():
        torch.compile(torch.nn.Linear(4, 4), backend=_kiln(args.threads))(torch.randn(2, 4))
    torch._dynamo.reset()
    for model_id in args.models:
        for batch in args.batch:
            try:
                rows, summary = measure(model_id, args.size, batch, seqs, args.threads,
                                        args.warmup, args.iterations)
            except Exception as e:  # noqa: BLE001 — a failure is a result to report
                torch._dynamo.reset()
                # dynamo's wrapper puts the backend's error on the second line: keep both.
                lines = [line for line in str(e).splitlines() if line.strip()][:2]
                rows, summary = [], {"model": model_id, "batch": batch,
                                     "status": f"{type(e).__name__}: {' '.join(lines)}"}
            results["rows"] += rows
            results["compiles"].append(summary)
            print(f"{model_id} batch {batch}: " + (
                f"dynamic compile {summary['dynamic_compile_s']:.2f} s vs "
                f"{summary['static_compile_s_sum']:.2f} s of static compiles"
                if summary["status"] == "ok" else summary["status"].splitlines()[0][:300]),
                flush=True)
    text = markdown(results)
    for path, content in ((args.json, json.dumps(results, indent=2)), (args.markdown, text)):
        if path:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            with open(path, "w") as f:
                f.write(content)
    print()
    print(text, end="")


if __name__ == "__main__":
    main()
