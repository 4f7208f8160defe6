"""The benchmark harness (python -m kiln.bench): one real run at --size small, and its report
from hand-made records. Figures are not checked: speed is the harness's output, not a test."""

import json
import math
import subprocess
import sys

import pytest
import torch

from kiln.bench import report
from kiln.bench.__main__ import _parser, main
from kiln.bench.worker import FIELDS, combine_rounds


def test_small_run_writes_json_markdown_and_plot(tmp_path):
    paths = {kind: tmp_path / "out" / f"results.{kind}" for kind in ("json", "md", "png")}
    run = subprocess.run(
        [sys.executable, "-m", "kiln.bench", "--size", "small", "--models", "resnet50",
         "--backends", "eager,kiln,kiln-offline", "--batch", "2", "--threads", "1",
         "--warmup", "1", "--iterations", "3", "--json", str(paths["json"]), "--markdown", str(paths["md"]),
         "--plot", str(paths["png"])],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr

    results = json.loads(paths["json"].read_text())
    assert results["settings"] == {"size": "small", "warmup": 1, "iterations": 3, "rounds": 1}
    assert results["machine"]["logical_cpus"] >= 1 and results["machine"]["cpu"]
    records = results["records"]
    assert [r["backend"] for r in records] == ["eager", "kiln", "kiln-offline"]
    for r in records:
        assert set(r) == set(FIELDS)
        assert r["status"] == "ok", r["status"]
        assert (r["model"], r["batch"], r["threads"]) == ("resnet50", 2, 1)
        assert r["input_shape"] == [2, 3, 64, 64]
        assert 0 < r["latency_ms_median"] <= r["latency_ms_p90"]
        assert r["latency_ms_round_medians"] == [r["latency_ms_median"]]
        assert r["throughput_per_s"] == pytest.approx(2 / (r["latency_ms_median"] / 1e3))
        assert r["compile_s"] > 0 and r["peak_rss_mb"] > 0
        # Only the offline model has a load step; it is part of its compile_s (export + load).
        # and a deployed memory: the standalone runtime's, without PyTorch's hundreds of MB.
        if r["backend"] == "kiln-offline":
            assert 0 < r["load_s"] < r["compile_s"]
            assert 0 < r["deployed_rss_mb"] < r["peak_rss_mb"]
        else:
            assert r["load_s"] is None and r["deployed_rss_mb"] is None
        assert math.isfinite(r["max_abs_err"]) and math.isfinite(r["max_rel_err"])
        assert {"python", "torch", "transformers", "kiln"} <= set(r["versions"])
    # Eager is compared against itself on the same input: exactly equal.
    assert records[0]["max_abs_err"] == 0 and records[0]["max_rel_err"] == 0

    markdown = paths["md"].read_text()
    assert "## Speed-up over eager: batch 2, 1 thread(s)" in markdown
    assert "| resnet50 | eager | 2 | 1 |" in markdown and "| resnet50 | kiln | 2 | 1 |" in markdown
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_rounds_report_the_median_of_their_medians(tmp_path):
    path = tmp_path / "results.json"
    run = subprocess.run(
        [sys.executable, "-m", "kiln.bench", "--size", "small", "--models", "resnet50",
         "--backends", "eager,kiln", "--batch", "1", "--threads", "1", "--warmup", "1",
         "--iterations", "2", "--rounds", "3", "--json", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.count("[") >= 6  # a progress line per measurement: 2 backends, 3 rounds
    results = json.loads(path.read_text())
    assert results["settings"]["rounds"] == 3
    assert [r["backend"] for r in results["records"]] == ["eager", "kiln"]
    for r in results["records"]:
        assert r["status"] == "ok", r["status"]
        rounds = r["latency_ms_round_medians"]
        assert len(rounds) == 3 and r["latency_ms_median"] == sorted(rounds)[1]
        assert r["throughput_per_s"] == pytest.approx(1 / (r["latency_ms_median"] / 1e3))
    assert "3 rounds, the median of their medians shown" in run.stdout


def test_a_failed_round_fails_the_measurement():
    ok = dict.fromkeys(FIELDS)
    ok.update(batch=1, status="ok", latency_ms_median=2.0, latency_ms_p90=3.0, compile_s=1.0,
              peak_rss_mb=100.0, max_abs_err=1e-6, max_rel_err=1e-7)
    failed = dict(ok, status="RuntimeError: out of memory", latency_ms_median=None)
    assert combine_rounds([ok, failed, ok])["status"] == "RuntimeError: out of memory"
    combined = combine_rounds([ok, dict(ok, latency_ms_median=4.0, peak_rss_mb=120.0), ok])
    assert combined["latency_ms_median"] == 2.0 and combined["peak_rss_mb"] == 120.0
    assert combined["latency_ms_round_medians"] == [2.0, 4.0, 2.0]


def _record(model, backend, median, status="ok"):
    record = dict.fromkeys(FIELDS)
    record.update(model=model, backend=backend, batch=1, threads=2, status=status,
                  latency_ms_median=median if status == "ok" else None)
    return record


def test_report_shows_speedups_and_failures():
    records = [_record("gpt2", "eager", 30.0), _record("gpt2", "kiln", 20.0),
               _record("gpt2", "openvino", None, "BackendUnavailable: no | openvino\nmore"),
               _record("vit-b16", "eager", None, "RuntimeError: broken"),
               _record("vit-b16", "kiln", 10.0)]
    assert report.speedups(records) == {("gpt2", "eager", 1, 2): 1.0,
                                        ("gpt2", "kiln", 1, 2): 1.5}
    results = {"date": "today", "records": records,
               "settings": {"size": "small", "warmup": 1, "iterations": 2},
               "machine": {"cpu": "cpu", "logical_cpus": 2, "physical_cores": 2,
                           "memory_gib": 1.0, "isa": ["avx2"], "torch_cpu_capability": "AVX2",
                           "os": "os", "python": "3", "libraries": {"torch": "2"}}}
    lines = report.markdown(results).splitlines()
    assert "| gpt2 | 1.00x | 1.50x | n/a |" in lines
    # No eager baseline for vit-b16: its kiln time has nothing to be compared with.
    assert "| vit-b16 | n/a | n/a | n/a |" in lines
    # A status keeps to one table row: its first line, with the pipe escaped.
    failed = next(line for line in lines if line.startswith("| gpt2 | openvino |"))
    assert failed.endswith("| BackendUnavailable: no \\| openvino … |")


def test_model_ids_may_name_a_dtype():
    from kiln.bench import models
    assert _parser().parse_args(["--models", "bert-base:bf16,resnet50"]).models == [
        "bert-base:bf16", "resnet50"]
    bert, tokens = models.build("bert-base:bf16", "small", 2)
    assert {p.dtype for p in bert.parameters()} == {torch.bfloat16} and tokens.dtype == torch.int64
    resnet, images = models.build("resnet50:f16", "small", 2)
    assert {p.dtype for p in resnet.parameters()} == {torch.float16}
    assert images.dtype == torch.float16
    # The same weights as the fp32 model, cast.
    fp32, _ = models.build("resnet50", "small", 2)
    assert all(torch.equal(a.to(torch.float16), b)
               for a, b in zip(fp32.parameters(), resnet.parameters()))


@pytest.mark.parametrize("arguments", [["--models", "bert"], ["--models", "bert-base:int8"],
                                       ["--models", "bert-base:"], ["--backends", "eager,tvm"],
                                       ["--batch", "0"], ["--threads", "two"]])
def test_invalid_arguments_are_refused(arguments, capsys):
    with pytest.raises(SystemExit):
        _parser().parse_args(arguments)
    assert "argument" in capsys.readouterr().err


@pytest.mark.parametrize("arguments", [["--iterations", "1"], ["--rounds", "0"],
                                       ["--backends", "kiln", "--plot", "x.png"]])
def test_runs_that_cannot_report_are_refused_before_measuring(arguments, capsys):
    with pytest.raises(SystemExit):
        main(arguments)
    assert "error" in capsys.readouterr().err


def test_stage_times_add_up_to_the_compile(capsys):
    from kiln.bench import stages
    row = stages.measure("bert-base", "small", 1, repeat=1)
    assert row["partitions"] >= 1
    parts = ["import", *stages.STAGES, "plan"]
    assert all(row[p] >= 0 for p in parts) and row["prepare"] > 0 and row["plan"] > 0
    assert sum(row[p] for p in parts) == pytest.approx(row["total"], rel=1e-6)
    assert set(row["nodes"]) == {"input", *stages.STAGES}
    assert 0 < row["nodes"]["fuse"] < row["nodes"]["input"]  # fusion merges nodes
    stages.main(["--size", "small", "--models", "bert-base", "--repeat", "1"])
    table = capsys.readouterr().out
    assert "| bert-base | " in table and "| prepare s |" in table and "| input |" in table
