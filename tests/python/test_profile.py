"""The per-node profiler: debug.profile, KILN_PROFILE, kiln.write_profile, `kiln bench --profile`.

Only the contents are checked (every node, shapes, counts), never timings."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kiln
from kiln import _C

from test_backend import WithUnsupportedOp
from test_export import cli_path


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def mlp_graph():
    g = kiln.Graph("mlp")
    x = g.add_input("x", "f32", [4, 16])
    w = g.add_constant("w", np.random.default_rng(0).standard_normal((16, 8), np.float32))
    b = g.add_constant("b", np.ones(8, np.float32))
    y = g.add("relu", [g.add("add", [g.add("matmul", [x, w], name="mm"), b], name="bias")],
              name="act")
    g.set_outputs([y])
    return g


def node_events(trace):
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e.get("cat") != "run"]


def test_profile_path_writes_every_node_and_the_table(tmp_path):
    path = str(tmp_path / "mlp.json")
    # O1: no fusion, so the graph's three nodes run as they are.
    compiled = kiln.compile(mlp_graph(), optimization_level=1, profile_path=path)
    x = np.ones((4, 16), np.float32)
    for _ in range(2):
        compiled(x)
    table = kiln.write_profile(path)
    trace = json.loads(open(path).read())
    events = node_events(trace)
    assert sorted({e["name"] for e in events}) == ["act", "bias", "mm"]
    assert len(events) == 6  # three nodes, two runs
    mm = next(e for e in events if e["name"] == "mm")
    assert mm["args"]["op"] == "matmul" and mm["args"]["shapes"] == "[4, 16]x[16, 8] -> [4, 8]"
    assert "GFLOP/s" in mm["args"]
    assert all("GB/s" in e["args"] for e in events if e["name"] != "mm")
    assert {s["node"]: s["calls"] for s in trace["kilnNodeStats"]} == {"mm": 2, "bias": 2, "act": 2}
    assert "2 run(s)" in table and "mm (matmul)" in table


def test_debug_profile_one_file_with_a_track_per_partition(tmp_path):
    path = str(tmp_path / "model.json")
    model = WithUnsupportedOp().eval()  # two Kiln partitions around bessel_j0
    compiled = torch.compile(model, backend="kiln", options={"debug.profile": path})
    with torch.no_grad():
        compiled(torch.randn(4, 8))
    kiln.write_profile(path)
    trace = json.loads(open(path).read())
    tracks = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["name"] == "thread_name"}
    assert len(tracks) == 2 and all("_fused_" in name for name in tracks.values()), tracks
    assert {e["tid"] for e in node_events(trace)} == set(tracks)


def test_kiln_profile_environment_variable_writes_at_exit(tmp_path):
    path = tmp_path / "env.json"
    script = ("import numpy as np, sys; sys.path[:0] = {!r}; import test_profile, kiln;"
              "kiln.compile(test_profile.mlp_graph(), optimization_level=1)"
              "(np.ones((4, 16), np.float32))").format([os.path.dirname(__file__)])
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env=dict(os.environ, KILN_PROFILE=str(path)), timeout=300)
    assert run.returncode == 0, run.stderr
    assert "Kiln profile" in run.stderr and "mm (matmul)" in run.stderr, run.stderr
    names = {e["name"] for e in node_events(json.loads(path.read_text()))}
    assert names == {"mm", "bias", "act"}


def test_bench_profile_flag(tmp_path):
    model_path = str(tmp_path / "mlp.kiln")
    _C.save_model(kiln.compile(mlp_graph(), optimization_level=1), model_path)
    trace_path = tmp_path / "bench.json"
    run = subprocess.run([cli_path(), "bench", model_path, "--iterations", "3", "--warmup", "1",
                          "--profile", str(trace_path)], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "mm (matmul)" in run.stdout and "3 run(s)" in run.stdout, run.stdout
    stats = json.loads(trace_path.read_text())["kilnNodeStats"]
    assert {s["node"]: s["calls"] for s in stats} == {"mm": 3, "bias": 3, "act": 3}


def test_profile_option_checks():
    with pytest.raises(kiln.Error) as info:
        kiln.CompilerConfig().set("debug.profile", "")
    assert info.value.code == "E10001"
    with pytest.raises(kiln.Error) as info:
        kiln.compile(mlp_graph(), profile_path="/nonexistent_kiln_dir/p.json")
    assert info.value.code == "E10030"
