"""python -m kiln.bench: models measured on backends, one process each (docs/benchmarks.md).

    python -m kiln.bench --models resnet50,bert-base --backends eager,inductor,kiln \\
        --batch 1,8 --threads 2,1 --json r.json --markdown r.md --plot r.png

The options above are the stable interface; the rest tune a run. The same module, run with the
hidden --worker option, is the process that makes one measurement (kiln.bench.worker).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile

from kiln.bench import report, worker
from kiln.bench.backends import BACKENDS
from kiln.bench.models import DTYPES, MODELS, SIZES, is_model_id

_LOG_TAIL_CHARS = 2000


def _id_list(choices, accepts=None, hint=""):
    accepts = accepts or choices.__contains__

    def parse(text: str) -> list[str]:
        ids = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [i for i in ids if not accepts(i)]
        if unknown or not ids:
            raise argparse.ArgumentTypeError(
                f"unknown id(s) {', '.join(unknown) or '(none given)'}; choose from "
                f"{', '.join(choices)}{hint}")
        return ids
    return parse


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of positive integers")
    return values


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.bench",
        description="Latency, throughput, compile time, peak memory and error against eager of "
                    "transformers models on Kiln and its peers, each measurement in its own "
                    "process.")
    dtypes = " or ".join(f":{d}" for d in DTYPES)
    parser.add_argument("--models", default=list(MODELS),
                        type=_id_list(MODELS, is_model_id, f" (each may end in {dtypes})"),
                        help=f"comma list of {', '.join(MODELS)} (default: all), each fp32 or "
                             f"with {dtypes} for the model in that dtype")
    parser.add_argument("--backends", type=_id_list(BACKENDS), default=list(BACKENDS),
                        help=f"comma list of {', '.join(BACKENDS)} (default: all)")
    parser.add_argument("--batch", type=_int_list, default=[1], help="comma list (default: 1)")
    parser.add_argument("--threads", type=_int_list, default=[os.cpu_count() or 1],
                        help="comma list of thread counts, each given to every backend "
                             f"(default: {os.cpu_count()}, all CPUs)")
    parser.add_argument("--json", metavar="PATH", help="write every record and the machine here")
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown here")
    parser.add_argument("--plot", metavar="PATH.png",
                        help="write a chart of the speed-up over eager here (needs eager)")
    parser.add_argument("--size", choices=SIZES, default="full",
                        help="full: the real models; small: narrow ones for quick runs and tests")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls (default: 5)")
    parser.add_argument("--iterations", type=int, default=20,
                        help="timed calls, at least 2 (default: 20)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="measure everything this many times, a round after another, each "
                             "measurement in a new process, and report the median of the "
                             "rounds' medians: a machine shared with others drifts by several "
                             "percent within minutes (default: 1)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one measurement may take before it is stopped "
                             "(default: 1800)")
    parser.add_argument("--worker", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--scratch", metavar="DIR", help=argparse.SUPPRESS)
    return parser


def _worker_failure(code: int | None, timeout: float, log_path: str) -> str:
    """Why a worker left no record, with the end of what it printed."""
    if code is None:
        reason = f"worker stopped after the {timeout:g} s timeout"
    elif code == -signal.SIGKILL:
        reason = "worker killed by SIGKILL (out of memory?)"
    elif code < 0:
        reason = f"worker killed by {signal.Signals(-code).name}"
    else:
        reason = f"worker exited with code {code} without a record"
    with open(log_path, errors="replace") as log:
        tail = log.read()[-_LOG_TAIL_CHARS:].strip()
    return f"{reason}; its output ends: {tail}" if tail else reason


def _measure_in_worker(spec: dict, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="kiln-bench-") as scratch:
        # Read at torch's import, so set before the worker starts; a fresh Inductor cache folder
        # makes even its compiled-code cache cold.
        env = dict(os.environ, OMP_NUM_THREADS=str(spec["threads"]),
                   MKL_NUM_THREADS=str(spec["threads"]), TORCHINDUCTOR_FX_GRAPH_CACHE="0",
                   TORCHINDUCTOR_AUTOGRAD_CACHE="0",
                   TORCHINDUCTOR_CACHE_DIR=os.path.join(scratch, "inductor"))
        log_path = os.path.join(scratch, "log.txt")
        with open(log_path, "wb") as log:
            # A session of its own, so that a timeout stops the compiler processes it started.
            child = subprocess.Popen(
                [sys.executable, "-m", "kiln.bench", "--worker", json.dumps(spec),
                 "--scratch", scratch], stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True)
            try:
                code = child.wait(timeout)
            except subprocess.TimeoutExpired:
                code = None
            finally:  # a timeout, or the parent interrupted: the worker must not outlive it
                if child.poll() is None:
                    os.killpg(child.pid, signal.SIGKILL)
                    child.wait()
        record_path = os.path.join(scratch, "record.json")
        if code == 0 and os.path.exists(record_path):
            with open(record_path) as f:
                return json.load(f)
        record = worker.empty_record(spec)
        record["status"] = _worker_failure(code, timeout, log_path)
        return record


def _run_worker(spec_json: str, scratch: str) -> None:
    backend_scratch = os.path.join(scratch, "backend")
    os.makedirs(backend_scratch)
    record = worker.measure(json.loads(spec_json), backend_scratch)
    with open(os.path.join(scratch, "record.json"), "w") as f:
        json.dump(record, f)


def _progress(index: int, total: int, record: dict) -> str:
    where = (f"[{index}/{total}] {record['model']} on {record['backend']}, batch "
             f"{record['batch']}, {record['threads']} thread(s): ")
    if record["status"] != "ok":
        return where + record["status"].strip().splitlines()[0][:200]
    return where + (f"{record['latency_ms_median']:.2f} ms median, compile "
                    f"{record['compile_s']:.1f} s, max abs err {record['max_abs_err']:.1e}")


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.worker:
        _run_worker(args.worker, args.scratch)
        return
    if args.iterations < 2 or args.warmup < 0 or args.rounds < 1:
        parser.error("--iterations must be at least 2, --warmup at least 0 and --rounds at "
                     "least 1")
    if args.plot and "eager" not in args.backends:
        parser.error("--plot shows the speed-up over eager: add eager to --backends")

    for path in filter(None, (args.json, args.markdown, args.plot)):
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    settings = {"size": args.size, "warmup": args.warmup, "iterations": args.iterations,
                "rounds": args.rounds}
    results = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
               "machine": report.machine_info(), "settings": settings, "records": []}
    specs = [dict(model=m, backend=b, batch=n, threads=t, size=args.size, warmup=args.warmup,
                  iterations=args.iterations)
             for m in args.models for n in args.batch for t in args.threads for b in args.backends]
    plan = specs * args.rounds
    for index, spec in enumerate(plan, 1):
        record = _measure_in_worker(spec, args.timeout)
        results["records"].append(record)
        print(_progress(index, len(plan), record), flush=True)
        if args.json:  # rewritten after each measurement: an interrupted run keeps what it has
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)
    if args.rounds > 1:
        results["records"] = [worker.combine_rounds(results["records"][i::len(specs)])
                              for i in range(len(specs))]
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=2)

    text = report.markdown(results)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    if args.plot:
        report.plot(results, args.plot)
    print()
    print(text, end="")


if __name__ == "__main__":
    main()
