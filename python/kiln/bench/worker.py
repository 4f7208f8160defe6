"""One measurement, in a process of its own: one model on one backend at one batch and thread
count. The parent (kiln.bench.__main__) starts it with OMP_NUM_THREADS and the Inductor cache
switches already in the environment, since both are read when torch is imported.

The eager output is computed first on the same input; then the backend is cold-compiled (dynamo
reset, no caches) and timed to its first output, checked against eager, warmed up and timed.
A backend that fails leaves its exception text in the record's status: it never fails the run.
"""

from __future__ import annotations

import importlib.metadata
import platform
import resource
import statistics
import time
import traceback

import torch

from kiln.bench import backends, models

FIELDS = ("model", "backend", "batch", "threads", "size", "input_shape", "warmup", "iterations",
          "latency_ms_median", "latency_ms_p90", "throughput_per_s", "compile_s", "load_s",
          "peak_rss_mb", "deployed_rss_mb", "max_abs_err", "max_rel_err", "status", "versions",
          "latency_ms_round_medians")


class WrongOutput(RuntimeError):
    pass


def package_version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def empty_record(spec: dict) -> dict:
    """The record of `spec` with nothing measured yet."""
    record = dict.fromkeys(FIELDS)
    record.update({k: spec[k] for k in ("model", "backend", "batch", "threads", "size", "warmup",
                                        "iterations")})
    packages = ("torch", "transformers", "kiln") + backends.BACKENDS[spec["backend"]].packages
    record["versions"] = {"python": platform.python_version(),
                          **{p: package_version(p) for p in packages}}
    return record


def _errors(output, reference) -> tuple[float, float]:
    """(largest absolute error, that divided by the largest |eager| value), in float64."""
    if not isinstance(output, torch.Tensor):
        raise WrongOutput(f"the backend returned {type(output).__name__}, not a tensor")
    if output.shape != reference.shape or output.dtype != reference.dtype:
        raise WrongOutput(f"output {output.dtype} {list(output.shape)} differs from eager's "
                          f"{reference.dtype} {list(reference.shape)}")
    difference = (output.double() - reference.double()).abs()
    if not difference.isfinite().all():
        raise WrongOutput(f"{int((~difference.isfinite()).sum())} output values differ from "
                          f"eager's by inf or NaN")
    max_abs = difference.max().item()
    return max_abs, max_abs / max(reference.abs().max().item(), 1e-30)


def _measure(spec: dict, scratch: str, record: dict) -> None:
    backend = backends.BACKENDS[spec["backend"]]
    torch.set_num_threads(spec["threads"])
    model, inputs = models.build(spec["model"], spec["size"], spec["batch"])
    record["input_shape"] = list(inputs.shape)
    with torch.no_grad():
        reference = model(inputs)
        torch._dynamo.reset()
        start = time.perf_counter()
        run = backend.prepare(model, inputs, spec["threads"], scratch)
        output = run(inputs)
        record["compile_s"] = time.perf_counter() - start
        record["load_s"] = getattr(run, "load_s", None)  # offline models only
        record["max_abs_err"], record["max_rel_err"] = _errors(output, reference)
        for _ in range(spec["warmup"]):
            run(inputs)
        latencies = []
        for _ in range(spec["iterations"]):
            start = time.perf_counter()
            run(inputs)
            latencies.append(time.perf_counter() - start)
        record["deployed_rss_mb"] = getattr(run, "deployed_rss_mb", None)  # offline models only
    median = statistics.median(latencies)
    record["latency_ms_median"] = median * 1e3
    record["latency_ms_round_medians"] = [median * 1e3]
    # The 9th of 10 cut points, interpolated between the closest ranks (numpy's default).
    record["latency_ms_p90"] = statistics.quantiles(latencies, n=10, method="inclusive")[8] * 1e3
    record["throughput_per_s"] = spec["batch"] / median


def combine_rounds(rounds: list[dict]) -> dict:
    """One record of the same measurement made in several processes (`--rounds`): the median
    of their medians, p90s and compile times, the largest memory and errors; a failure of any
    round is the record's status."""
    failed = [r for r in rounds if r["status"] != "ok"]
    if failed:
        return failed[0]
    record = dict(rounds[0])

    def median_of(key):
        values = [r[key] for r in rounds if r[key] is not None]
        return statistics.median(values) if values else None

    def largest(key):
        values = [r[key] for r in rounds if r[key] is not None]
        return max(values) if values else None

    record["latency_ms_round_medians"] = [r["latency_ms_median"] for r in rounds]
    for key in ("latency_ms_median", "latency_ms_p90", "compile_s", "load_s"):
        record[key] = median_of(key)
    for key in ("peak_rss_mb", "deployed_rss_mb", "max_abs_err", "max_rel_err"):
        record[key] = largest(key)
    record["throughput_per_s"] = record["batch"] / (record["latency_ms_median"] / 1e3)
    return record


def measure(spec: dict, scratch: str) -> dict:
    """The record of one measurement; `scratch` is an empty folder the backend may write to."""
    record = empty_record(spec)
    try:
        _measure(spec, scratch, record)
        record["status"] = "ok"
    except Exception as e:  # noqa: BLE001 — any failure of a backend is a result to report
        where = traceback.extract_tb(e.__traceback__)[-1]
        message = str(e).strip() or f"(no message) at {where.filename}:{where.lineno}"
        record["status"] = f"{type(e).__name__}: {message}"
    # ru_maxrss is in KiB on Linux.
    record["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return record
