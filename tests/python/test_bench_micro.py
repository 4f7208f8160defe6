"""python -m kiln.bench.micro: one smoke run (tiny shapes) for the JSON and Markdown it writes, and
the targets' verdicts from hand-made figures. Figures are not checked: speed is the benchmark's
output, not a test."""

import json
import subprocess
import sys

from kiln.bench import micro


def test_smoke_run_writes_json_and_markdown(tmp_path):
    paths = {kind: tmp_path / f"micro.{kind}" for kind in ("json", "md")}
    run = subprocess.run(
        [sys.executable, "-m", "kiln.bench.micro", "--smoke", "--threads", "2",
         "--json", str(paths["json"]), "--markdown", str(paths["md"])],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr

    results = json.loads(paths["json"].read_text())
    m = results["micro"]
    assert m["smoke"] and m["threads"] == 2
    assert {v["threads"] for v in m["peak"]["variants"]} == {1, 2}
    for entry in m["gemm"] + m["conv"]["shapes"] + m["elementwise"]["ops"]:
        names = [k["name"] for k in entry["kernels"]]
        assert entry["selected"] in names and entry["fastest"] in names
        assert names[0] == "reference"  # timed first, the others compared with it
        for k in entry["kernels"][1:]:
            assert "error" not in k, k
            if "not_run" in k:  # a kernel that can't take the shape, and says why
                assert k["not_selected_because"] and k["name"] != entry["selected"], k
                continue
            assert k["max_rel_diff_vs_reference"] <= 1e-4, (entry["name"], k)
    assert m["conv"]["network"]["convolutions"] == sum(e["count"] for e in m["conv"]["shapes"])
    assert m["overhead"]["run_us"] > 0 and m["overhead"]["kernel_us"] > 0
    p = results["python_overhead"]
    assert p["torch_compile_us"] > 0 and p["eager_us"] > 0
    assert not m["mismatch_vs_reference"]

    markdown = paths["md"].read_text()
    for heading in ("## fp32 FMA peak", "## GEMM", "## ResNet-50 convolutions", "## Elementwise",
                    "## Per-call overhead", "## Targets"):
        assert heading in markdown


def test_cold_run_says_so(tmp_path):
    paths = {kind: tmp_path / f"cold.{kind}" for kind in ("json", "md")}
    run = subprocess.run(
        [sys.executable, "-m", "kiln.bench.micro", "--smoke", "--cold", "--sections", "gemm",
         "--threads", "2", "--json", str(paths["json"]), "--markdown", str(paths["md"])],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    m = json.loads(paths["json"].read_text())["micro"]
    assert m["cold"] and m["gemm"] and not m["mismatch_vs_reference"]
    assert "ran cold" in paths["md"].read_text()


def _kernel(name, **figures):
    return {"name": name, **figures}


def test_targets_say_met_or_missed():
    results = {
        "micro": {
            "gemm": [
                {"name": "a", "m": 128, "selected": "x", "kernels": [_kernel("x", share_of_peak=0.8)]},
                {"name": "b", "m": 1, "selected": "x", "kernels": [_kernel("x", share_of_peak=0.1)]},
            ],
            "conv": {"network": {"ms": 50.0, "gflops": 150.0, "share_of_peak": 0.55}},
            "elementwise": {"ops": [
                {"name": "relu", "selected": "y", "kernels": [_kernel("y", vs_memcpy=0.9)]}]},
            "overhead": {"run_us": 3.0, "kernel_us": 1.0, "overhead_us": 2.0},
        },
        "python_overhead": {"torch_compile_us": 40.0, "eager_us": 2.0},
    }
    verdicts = {what.split(" ")[0]: met for what, met, _ in micro.targets(results)}
    # M = 1 is not under the GEMM target; the convolutions' 55% misses 60%.
    assert verdicts == {"GEMMs": True, "ResNet-50's": False, "elementwise": True,
                        "CompiledGraph::run": True, "torch.compile(backend=\"kiln\")": False}


def test_a_missed_share_target_names_the_shapes_below_it():
    """74.8% prints as 75% in whole percents: the verdict names it with a decimal."""
    results = {"micro": {"gemm": [
        {"name": name, "m": 128, "selected": "x", "kernels": [_kernel("x", share_of_peak=s)]}
        for name, s in (("up", 0.748), ("down", 0.82))]}}
    [(what, met, figures)] = micro.targets(results)
    assert not met
    assert figures == "below: up: 74.8%; 1 of 2 met"
