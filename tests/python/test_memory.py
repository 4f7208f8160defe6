"""Memory options end to end: CompilerConfig → kiln.compile → the plan's figures, the shared
pool across the partitions of a torch.compile'd model, and kiln.explain's memory report."""

import numpy as np
import pytest
import torch

import kiln
from conftest import expect_error
from test_backend import WithUnsupportedOp

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


# Passes off: fusion would turn the chain into one kernel with no intermediates.
NO_PASSES = {"disabled_passes": kiln._C.pass_names()}


def chain():
    g = kiln.Graph("chain")
    x = g.add_input("x", "f32", [1024])
    v = g.add("relu", [x])
    for op in ("sigmoid", "tanh", "neg"):
        v = g.add(op, [v])
    g.set_outputs([v])
    return g


def test_memory_options_reach_compile():
    cfg = kiln.CompilerConfig()
    cfg.memory.reuse_threshold = 4096
    cfg.memory.optimization_level = "aggressive"
    cfg.memory.enable_shared_pool = True
    options = cfg.compile_options()
    assert options["memory_reuse_threshold"] == 4096
    assert options["memory_optimization_level"] == "aggressive"
    expect_error("E10001", cfg.set, "memory.optimization_level", "max")
    expect_error("E10001", cfg.set, "memory.reuse_threshold", -1)


def test_in_place_and_reuse_threshold():
    x = np.random.default_rng(0).standard_normal(1024).astype(np.float32)
    planned = kiln.compile(chain(), **NO_PASSES)
    stats = planned.memory_stats([[1024]])
    # relu can't overwrite the input x; sigmoid and tanh run in place: one 4 KiB buffer.
    assert stats["in_place"] == 2 and stats["arena_bytes"] == 4096, stats
    assert stats["intermediate_bytes"] == 3 * 4096
    unshared = kiln.compile(chain(), memory_reuse_threshold=1 << 20, **NO_PASSES)
    apart = unshared.memory_stats([[1024]])
    assert apart["in_place"] == 0 and apart["arena_bytes"] == 3 * 4096, apart
    np.testing.assert_array_equal(planned(x), unshared(x))
    aggressive = kiln.compile(chain(), memory_optimization_level="aggressive", **NO_PASSES)
    assert aggressive.memory_stats([[1024]])["arena_bytes"] <= stats["arena_bytes"]
    expect_error("E10001", kiln.compile, chain(), memory_optimization_level="max")


def test_memory_plan_table_and_chart():
    planned = kiln.compile(chain(), **NO_PASSES)
    table = planned.memory_plan([[1024]])
    assert "producer" in table and "(in place)" in table, table
    svg = planned.memory_plan([[1024]], "svg")
    assert svg.startswith("<svg") and svg.count("<title>") == 1, svg
    expect_error("E10001", planned.memory_plan, [[1024]], "png")


def test_pool_is_sized_to_the_largest_graph():
    pool = kiln._C.MemoryPool()
    small = kiln.compile(chain(), memory_pool=pool, **NO_PASSES)
    g = kiln.Graph("wide")
    x = g.add_input("x", "f32", [4096])
    g.set_outputs([g.add("neg", [g.add("exp", [g.add("relu", [x])])])])
    wide = kiln.compile(g, memory_pool=pool, **NO_PASSES)
    sizes = [small.memory_stats([[1024]])["arena_bytes"], wide.memory_stats([[4096]])["arena_bytes"]]
    assert pool.arena_bytes == max(sizes)
    a = np.ones(1024, np.float32)
    b = np.ones(4096, np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(small(a), kiln.compile(chain(), **NO_PASSES)(a))
        wide(b)
    assert pool.arenas == 1


def test_shared_pool_across_partitions():
    torch.manual_seed(0)
    model = WithUnsupportedOp().eval()
    x = torch.randn(4, 8)
    report = kiln.explain(model, x, options={"memory.enable_shared_pool": True})
    assert len(report.partitions) == 2, str(report)
    pools = {id(p.module.options["memory_pool"]) for p in report.partitions}
    assert len(pools) == 1
    pool = report.partitions[0].module.options["memory_pool"]
    assert pool.arena_bytes == max(p.memory["arena_bytes"] for p in report.partitions)
    assert "memory: arena" in str(report)
    assert "<svg" in report.partitions[0].memory_plan("svg")
    with torch.no_grad():
        shared = torch.compile(model, backend="kiln",
                               options={"memory.enable_shared_pool": True})(x)
        torch._dynamo.reset()
        own = torch.compile(model, backend="kiln")(x)
    assert torch.equal(shared, own)


@pytest.mark.parametrize("in_place", [False, True])
def test_gemm_weights_in_place(tmp_path, in_place):
    # An exported model: the option travels in the file, and the loader plans by it.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(96, 80), torch.nn.GELU(), torch.nn.Linear(80, 8))
    x = torch.randn(4, 96)
    path = tmp_path / "mlp.kiln"
    kiln.export(model.eval(), (x,), path, config={"memory.gemm_weights_in_place": in_place})
    loaded = kiln.load(path)
    prepacked = loaded.compiled.memory_stats([[4, 96]])["prepacked_bytes"]
    weight_bytes = (96 * 80 + 80 * 8) * 4
    assert prepacked == 0 if in_place else prepacked >= weight_bytes, prepacked
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), model(x), rtol=1e-5, atol=1e-5)


def test_report_names_the_reordered_weights_and_the_option_that_drops_them():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 96), torch.nn.ReLU()).eval()
    x = torch.randn(4, 64)  # below 16 rows: oneDNN's GEMM on every CPU, which prepacks
    prepacked = kiln.explain(model, x)
    weight_bytes = model[0].weight.numel() * 4
    assert prepacked.partitions[0].memory["prepacked_bytes"] >= weight_bytes, str(prepacked)
    assert "memory.gemm_weights_in_place" in str(prepacked)
    in_place = kiln.explain(model, x, options={"memory.gemm_weights_in_place": True})
    assert in_place.partitions[0].memory["prepacked_bytes"] == 0
    assert "reordered for the kernels" not in str(in_place)


def test_folded_batch_norm_weights_are_released_but_exported(tmp_path):
    # torch.compile's static graph drops the weights folded from the batch norm once oneDNN
    # prepacked them; kiln.export of the same model still writes them.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1, bias=False),
                                torch.nn.BatchNorm2d(16), torch.nn.ReLU()).eval()
    with torch.no_grad():
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 8, 10, 10)
    report = kiln.explain(model, x)
    folded_bytes = model[0].weight.numel() * 4
    assert report.partitions[0].memory["released_constant_bytes"] == folded_bytes, str(report)
    assert "released after prepacking" in str(report)
    with torch.no_grad():
        expected = model(x)
        torch.testing.assert_close(torch.compile(model, backend="kiln")(x), expected,
                                   rtol=1e-4, atol=1e-4)
        path = tmp_path / "conv_bn.kiln"
        kiln.export(model, (x,), path)
        torch.testing.assert_close(kiln.load(path)(x), expected, rtol=1e-4, atol=1e-4)
