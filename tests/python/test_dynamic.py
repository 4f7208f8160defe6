"""Dynamic shapes through torch.compile(backend="kiln") (docs/dynamic-shapes.md): one compile
serves every shape in range, with no op left to PyTorch, and matches eager at each shape.
Dynamo's compile counter proves that no later shape recompiles. (The first call may count two
backend calls: AOTAutograd restarts dynamo's analysis once to turn size-derived Python floats
into tensors, TensorifyScalarRestartAnalysis, whatever the backend.)"""

import functools
import json

import pytest
import torch
import transformers as T
from torch._dynamo.testing import CompileCounterWithBackend

import kiln
from kiln.backend import kiln_backend


def kiln_counter():
    """Counts dynamo compiles; every op must run in Kiln (fallback off: E50001 otherwise)."""
    return CompileCounterWithBackend(lambda gm, inputs: kiln_backend(
        gm, inputs, options={"operator_selection.fallback_to_cpu": False}))


def tiny_bert():
    return T.BertModel(T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=128, vocab_size=100)).eval()


def tiny_gpt2(use_cache=True):
    return T.GPT2Model(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                                    bos_token_id=0, eos_token_id=0, use_cache=use_cache)).eval()


def tiny_gpt2_without_cache():
    # Its position ids slice a [batch, s + 1] concat up to s (the benchmark's configuration).
    return tiny_gpt2(use_cache=False)


def ids(batch, seq, seed=0):
    return torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2, tiny_gpt2_without_cache],
                         ids=["bert", "gpt2", "gpt2_without_cache"])
def test_dynamic_true_serves_every_shape_from_one_compile(make):
    torch.manual_seed(0)
    model = make()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for batch, seq in [(2, 16), (3, 24), (2, 57), (5, 8)]:
            x = ids(batch, seq, seed=seq)
            got = compiled(x).last_hidden_state
            want = model(x).last_hidden_state
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if (batch, seq) == (2, 16) else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_mark_dynamic_sequence_length():
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for seq in (12, 31, 64):
            x = ids(2, seq, seed=seq)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(compiled(x).last_hidden_state,
                                       model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if seq == 12 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_automatic_dynamic_recompiles_once():
    """Dynamo compiles static first; a second shape makes it recompile with symbols, and Kiln's
    symbolic graph then serves the rest."""
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for seq in (10, 20, 33, 47):
            x = ids(2, seq, seed=seq)
            torch.testing.assert_close(compiled(x).last_hidden_state,
                                       model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if seq == 20 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_symbolic_conv_net_over_batch_and_resolution():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 4)).eval()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for batch, size in [(2, 16), (3, 20), (4, 32)]:
            x = torch.randn(batch, 3, size, size)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if batch == 2 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def _relative_positions(x):
    """BEiT's shape under dynamic=True: a position table built from a size alone, in a
    partition of its own (bessel_j0 stays in PyTorch, between it and x)."""
    n = x.shape[-1] // 8
    positions = torch.arange(n)
    table = (positions[:, None] - positions[None, :] + n - 1).float()
    return torch.special.bessel_j0(x).sum(-1) + table.sum()


def _pad_then_strided_conv(x, w=torch.randn(4, 3, 3, 3,
                                            generator=torch.Generator().manual_seed(1))):
    """MobileNetV2's "same" padding: folding the pad into the convolution derives the output
    dims another way; the fold must decline, not abort."""
    return torch.nn.functional.conv2d(torch.nn.functional.pad(x, (0, 1, 0, 1)), w, stride=2)


@pytest.mark.parametrize("fn", [_relative_positions, _pad_then_strided_conv])
def test_symbolic_sizes_crossing_partitions(fn):
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="kiln", dynamic=True)
    for size in (32, 48):
        x = torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(size))
        torch.testing.assert_close(compiled(x), fn(x))
    torch._dynamo.reset()


def _masks_of_symbolic_size(x):
    """Attention masks as models build them: ones(B, S), zeros(S), a causal full(S, S)."""
    b, s = x.shape
    causal = torch.full((s, s), float("-inf")).triu(1)
    return x + torch.ones(b, s) * 2 + torch.zeros(s), causal.exp(), x.new_zeros(s + 1)


def test_fills_of_symbolic_size_run_in_kiln():
    torch._dynamo.reset()
    compiled = torch.compile(_masks_of_symbolic_size, backend="kiln", dynamic=True,
                             options={"operator_selection.fallback_to_cpu": False})
    for s in (5, 9):
        x = torch.randn(2, s)
        for got, expected in zip(compiled(x), _masks_of_symbolic_size(x)):
            assert torch.equal(got, expected)
    torch._dynamo.reset()


def test_a_node_failing_inside_its_partition_is_left_to_pytorch(monkeypatch):
    """Each node is checked alone against PyTorch's types; inside its partition Kiln's own
    inferred types can refuse it (BEiT's copy into a table of symbolic size, under
    dynamic=True). The import error names the FX node: it goes to PyTorch with the reason and
    the partitions are drawn again. Simulated here: the partition holding `tanh` fails."""
    import kiln.backend as backend
    build = backend.KilnSubgraph.__init__

    def failing_on_tanh(self, graph_json, *args, **kwargs):
        if '"target": "aten.tanh.default"' in graph_json:
            err = kiln.Error("E50001: Kiln can't convert node 'tanh' (aten.tanh.default): test")
            err.code, err.detail, err.fx_node = "E50001", "test", "tanh"
            raise err
        build(self, graph_json, *args, **kwargs)

    monkeypatch.setattr(backend.KilnSubgraph, "__init__", failing_on_tanh)
    fn = lambda x: torch.relu(torch.tanh(x * 2) + 1) * 3  # noqa: E731
    x = torch.randn(4, 5)
    torch._dynamo.reset()
    report = Report()
    compiled = torch.compile(fn, backend=functools.partial(
        kiln_backend, _report=report, options={"operator_selection.min_block_size": 1}))
    torch.testing.assert_close(compiled(x), fn(x))
    torch._dynamo.reset()
    assert report.fallback["aten.tanh.default"][1].endswith("(converting it inside its partition)")
    assert sum(sum(p.ops.values()) for p in report.partitions) == 4  # mul; add, relu, mul


def test_an_import_error_names_the_fx_node():
    """What the retry above relies on: kiln.Error.fx_node."""
    from kiln import _C
    graph = json.dumps({
        "name": "g", "symbols": [],
        "placeholders": [{"name": "x", "kind": "input", "dtype": "f32", "shape": [2, 3]}],
        "nodes": [{"name": "mm", "target": "aten.mm.default",
                   "args": {"self": {"ref": "x"}, "mat2": {"ref": "x"}},
                   "outputs": [{"dtype": "f32", "shape": [2, 3]}]}],
        "outputs": [{"ref": "mm"}]})
    with pytest.raises(kiln.Error) as caught:
        _C.import_fx(graph, {})
    assert caught.value.code == "E40002" and caught.value.fx_node == "mm"


# ---------------------------------------------------------------- dynamic_shape.* options

import os
import pathlib
import subprocess

import numpy as np

from conftest import expect_error
from kiln.backend import Report


@pytest.mark.parametrize("key,value", [
    ("dynamic_shape.enable", True),
    ("dynamic_shape.dims_range", {"seq": (16, 512)}),
    ("dynamic_shape.dims_range", {"input_ids": {1: (16, 512)}, 0: {0: [1, 8]}}),
    ("dynamic_shape.gears", [{"input_ids": [1, 128]}, {0: (8, 512)}]),
    ("dynamic_shape.pad_to_gear", True),
    ("dynamic_shape.out_of_range", "recompile"),
    ("dynamic_shape.plan_cache_capacity", 2048),
])
def test_valid_dynamic_options_are_kept(key, value):
    cfg = kiln.CompilerConfig()
    cfg.set(key, value)
    assert cfg.get(key) == value


@pytest.mark.parametrize("key,value,words", [
    ("dynamic_shape.enable", 1, "a bool"),
    ("dynamic_shape.dims_range", [("seq", 1, 2)], "a dict"),
    ("dynamic_shape.dims_range", {"seq": (512, 16)}, "0 <= min <= max"),
    ("dynamic_shape.dims_range", {"seq": (-1, 16)}, "0 <= min <= max"),
    ("dynamic_shape.dims_range", {"seq": (1, 2, 3)}, "(min, max) pair of ints"),
    ("dynamic_shape.dims_range", {"seq": (1.0, 2)}, "(min, max) pair of ints"),
    ("dynamic_shape.dims_range", {"input_ids": {-1: (1, 2)}}, "axes are ints >= 0"),
    ("dynamic_shape.dims_range", {"input_ids": {}}, "gives no axis"),
    ("dynamic_shape.dims_range", {3: (1, 2)}, "neither"),
    ("dynamic_shape.dims_range", {(0,): {1: (1, 2)}}, "name or index"),
    ("dynamic_shape.gears", {"input_ids": [1, 8]}, "a list"),
    ("dynamic_shape.gears", [[1, 8]], "non-empty dict"),
    ("dynamic_shape.gears", [{}], "non-empty dict"),
    ("dynamic_shape.gears", [{"x": [0, 8]}], "ints >= 1"),
    ("dynamic_shape.gears", [{"x": 8}], "ints >= 1"),
    ("dynamic_shape.gears", [{"x": [2]}, {"x": [2]}], "list each gear once"),
    ("dynamic_shape.pad_to_gear", "yes", "a bool"),
    ("dynamic_shape.out_of_range", "grow", "'error' or 'recompile'"),
    ("dynamic_shape.plan_cache_capacity", 0, "an int >= 1"),
])
def test_invalid_dynamic_options_are_e10001(key, value, words):
    err = expect_error("E10001", kiln.CompilerConfig().set, key, value)
    assert words in err.detail, err.detail


def kiln_options_counter(report=None, **options):
    """A compile counter over the kiln backend with these dynamic_shape.* options (every op in
    Kiln); `report` collects the Kiln partitions."""
    options = {"operator_selection.fallback_to_cpu": False,
               **{"dynamic_shape." + k: v for k, v in options.items()}}
    return CompileCounterWithBackend(
        lambda gm, inputs: kiln_backend(gm, inputs, options=options, _report=report))


def run_shapes(model, counter, shapes, dynamic=True):
    """Runs each (batch, seq) through one torch.compile, checking eager's result; returns the
    frame count after each call."""
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, dynamic=dynamic, fullgraph=True)
    counts = []
    with torch.no_grad():
        for batch, seq in shapes:
            x = ids(batch, seq, seed=seq + batch)
            torch.testing.assert_close(compiled(x).last_hidden_state,
                                       model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
            counts.append(counter.frame_count)
    return compiled, counts


def test_gears_are_planned_at_compile_and_served_exactly():
    torch.manual_seed(0)
    model = tiny_bert()
    report = Report()
    counter = kiln_options_counter(report, gears=[{"input_ids": [2, 16]},
                                                  {"input_ids": [4, 32]}])
    compiled, counts = run_shapes(model, counter, [(2, 16), (4, 32), (2, 16)])
    assert counts[0] == counts[-1]
    [partition] = report.partitions[-1:]
    plans = partition.module.compiled.cached_plans()
    assert sorted(plans) == [[[2, 16]], [[4, 32]]]
    with torch.no_grad():
        err = expect_error("E20008", compiled, ids(3, 16))
    assert "[2, 16]" in err.detail and "[4, 32]" in err.detail and "pad_to_gear" in err.detail
    torch._dynamo.reset()


def test_plan_cache_capacity_bounds_the_plans_kept():
    torch.manual_seed(0)
    model = tiny_bert()
    for capacity, kept in ((2, 2), (8, 4)):
        report = Report()
        counter = kiln_options_counter(report, plan_cache_capacity=capacity)
        # Batch 1 is a graph of its own (dynamo specializes sizes 0 and 1).
        run_shapes(model, counter, [(2, 16), (3, 16), (4, 16), (5, 16)])
        [partition] = report.partitions[-1:]
        assert len(partition.module.compiled.cached_plans()) == kept
    torch._dynamo.reset()


def test_pad_to_gear_pads_the_batch_and_matches_eager_unpadded():
    """Batch rows don't see each other, so padding the batch is exact on the real rows."""
    torch.manual_seed(0)
    model = tiny_bert()
    report = Report()
    counter = kiln_options_counter(report, gears=[{"input_ids": [4, 16]},
                                                  {"input_ids": [8, 16]}], pad_to_gear=True)
    compiled, counts = run_shapes(model, counter, [(4, 16), (3, 16), (2, 16), (7, 16)])
    assert counts[0] == counts[-1]
    assert sorted(report.partitions[-1].module.compiled.cached_plans()) == [[[4, 16]], [[8, 16]]]
    with torch.no_grad():  # longer than every gear
        expect_error("E20008", compiled, ids(2, 17))
    torch._dynamo.reset()


@pytest.mark.parametrize("options,dynamic,words", [
    ({"gears": [{"input_ids": [4, 16]}]}, False, "is static (size 2)"),
    ({"gears": [{"ids": [2, 16]}]}, True, "doesn't take"),
    ({"gears": [{"input_ids": [2]}]}, True, "rank 1"),
    ({"gears": [{0: [2, 1000]}]}, True, "doesn't fit the graph"),
    ({"pad_to_gear": True}, True, "dynamic_shape.gears is empty"),
])
def test_gear_errors_are_e10001(options, dynamic, words):
    torch.manual_seed(0)
    torch._dynamo.reset()
    compiled = torch.compile(tiny_bert(), backend=kiln_options_counter(**options),
                             dynamic=dynamic, fullgraph=True)
    with torch.no_grad(), pytest.raises(Exception) as info:
        compiled(ids(2, 16))
    assert "E10001" in str(info.value) and words in str(info.value), str(info.value)
    torch._dynamo.reset()


def test_dims_range_narrows_the_range_with_e20008_outside():
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_options_counter(dims_range={"input_ids": {1: (8, 32)}})
    compiled, counts = run_shapes(model, counter, [(2, 16), (2, 8), (3, 32)])
    assert counts[0] == counts[-1]
    with torch.no_grad():
        err = expect_error("E20008", compiled, ids(2, 40))
    assert "40" in err.detail and "[8, 32]" in err.detail
    torch._dynamo.reset()


def test_out_of_range_recompile_makes_a_wider_graph_once():
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_options_counter(dims_range={"input_ids": {1: (8, 32)}},
                                   out_of_range="recompile")
    _, counts = run_shapes(model, counter, [(2, 16), (2, 24), (2, 40), (2, 36), (2, 12)])
    first = counts[0]
    assert counts[1] == first          # in range: served by the first graph
    assert counts[2] == first + 1      # 40 is outside [8, 32]: dynamo's guard recompiled
    assert counts[3:] == [first + 1] * 2  # the wider graph [8, 40] and the first serve the rest
    torch._dynamo.reset()


def test_dims_range_errors_under_torch_compile():
    torch.manual_seed(0)
    model = tiny_bert()
    x = ids(2, 16)
    cases = [({"seq": (8, 32)}, True, "only kiln.export has"),
             ({"input_ids": {1: (8, 32)}}, False, "is static (size 16)"),
             ({"input_ids": {2: (8, 32)}}, True, "has rank 2"),
             ({"mask": {1: (8, 32)}}, True, "doesn't take"),
             ({"input_ids": {1: (8, 16)}, 0: {1: (20, 30)}}, True, "empty range")]
    for dims_range, dynamic, words in cases:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend=kiln_options_counter(dims_range=dims_range),
                                 dynamic=dynamic, fullgraph=True)
        with torch.no_grad(), pytest.raises(Exception) as info:
            compiled(x)
        assert "E10001" in str(info.value) and words in str(info.value), str(info.value)
    torch._dynamo.reset()


def test_enable_under_torch_compile_needs_dynamo_tracing_symbolic():
    """Dynamo decides what is symbolic before any backend runs: with dynamic=True the option
    holds (one compile serves every length); without it, the static graph is refused."""
    torch.manual_seed(0)
    model = tiny_bert()
    _, counts = run_shapes(model, kiln_options_counter(enable=True), [(2, 10), (2, 20), (3, 33)])
    assert counts[0] == counts[-1]
    for compile_options in ({"backend": kiln_options_counter(enable=True)},
                            {"backend": "kiln", "options": {"dynamic_shape.enable": True}}):
        torch._dynamo.reset()
        compiled = torch.compile(model, **compile_options)
        with torch.no_grad(), pytest.raises(Exception) as info:
            compiled(ids(2, 10))
        assert "E10001" in str(info.value) and "dynamic=True" in str(info.value)
    torch._dynamo.reset()


# ---------------------------------------------------------------- kiln.export and the CLI

class RowNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.relu(self.fc(x))


def test_export_dims_range_by_input_axis_and_by_dim_name(tmp_path):
    torch.manual_seed(0)
    model = RowNet().eval()
    x = torch.randn(3, 5, 8)
    by_axis = tmp_path / "axis.kiln"
    kiln.export(model, (x,), by_axis, config={"dynamic_shape.dims_range": {"x": {0: (2, 6), 1: (2, 9)}}})
    by_name = tmp_path / "name.kiln"
    seq = torch.export.Dim("seq")
    kiln.export(model, (x,), by_name, dynamic_shapes={"x": {1: seq}},
                config={"dynamic_shape.dims_range": {"seq": (2, 9)}})
    for path, batches in [(by_axis, (2, 6)), (by_name, (3,))]:
        loaded = kiln.load(path)
        for batch in batches:
            for s in (2, 9):
                xs = torch.randn(batch, s, 8)
                with torch.no_grad():
                    torch.testing.assert_close(loaded(xs), model(xs), rtol=1e-5, atol=1e-5)
        err = expect_error("E20008", loaded, torch.randn(batches[0], 10, 8))
        assert "[2, 9]" in err.detail
    assert kiln.load(by_axis).inputs[0]["sizes"] == [-1, -1, 8]
    assert kiln.load(by_name).inputs[0]["sizes"] == [3, -1, 8]


@pytest.mark.parametrize("dynamic_shapes,config,words", [
    (None, {"dynamic_shape.dims_range": {"x": {2: (2, 9)}}}, "contradicts the model"),
    (None, {"dynamic_shape.dims_range": {"x": {3: (2, 9)}}}, "has rank 3"),
    (None, {"dynamic_shape.dims_range": {"y": {0: (2, 9)}}}, "the model's inputs are x"),
    (None, {"dynamic_shape.dims_range": {"seq": (2, 9)}}, "doesn't use"),
    ("ranged", {"dynamic_shape.dims_range": {"seq": (2, 9)}}, "give it once"),
    (None, {"dynamic_shape.gears": [{"x": [3, 5, 8]}]}, "torch.compile only"),
])
def test_export_dynamic_option_errors(tmp_path, dynamic_shapes, config, words):
    if dynamic_shapes == "ranged":
        dynamic_shapes = {"x": {1: torch.export.Dim("seq", min=2, max=7)}}
    err = expect_error("E10001", kiln.export, RowNet().eval(), (torch.randn(3, 5, 8),),
                       tmp_path / "m.kiln", dynamic_shapes=dynamic_shapes, config=config)
    assert words in err.detail, err.detail


def test_export_enable_makes_every_axis_dynamic(tmp_path):
    torch.manual_seed(0)
    model = RowNet().eval()
    path = tmp_path / "auto.kiln"
    kiln.export(model, (torch.randn(3, 5, 8),), path, config={"dynamic_shape.enable": True})
    loaded = kiln.load(path)
    assert loaded.inputs[0]["sizes"][:2] == [-1, -1]
    xs = torch.randn(4, 11, 8)
    with torch.no_grad():
        torch.testing.assert_close(loaded(xs), model(xs), rtol=1e-5, atol=1e-5)


def test_cli_runs_any_shape_in_range_of_an_exported_model(tmp_path):
    from test_export import cli_path
    torch.manual_seed(0)
    model = RowNet().eval()
    path = tmp_path / "m.kiln"
    kiln.export(model, (torch.randn(3, 5, 8),), path,
                config={"dynamic_shape.dims_range": {"x": {0: (2, 6), 1: (2, 9)}}})
    for batch, seq in [(2, 2), (6, 9), (4, 7)]:
        x = torch.randn(batch, seq, 8)
        np.save(tmp_path / "x.npy", x.numpy())
        out = tmp_path / f"out{batch}"
        run = subprocess.run([cli_path(), "run", str(path), "--input", f"x={tmp_path / 'x.npy'}",
                              "--output-dir", str(out)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr
        [result] = list(out.glob("*.npy"))
        with torch.no_grad():
            np.testing.assert_allclose(np.load(result), model(x).numpy(), rtol=1e-5, atol=1e-5)
    shaped = subprocess.run([cli_path(), "run", str(path), "--shape", "x=5x8x8", "--output-dir",
                             str(tmp_path / "shaped")], capture_output=True, text=True)
    assert shaped.returncode == 0, shaped.stderr
    assert np.load(next((tmp_path / "shaped").glob("*.npy"))).shape == (5, 8, 4)
    bench = subprocess.run([cli_path(), "bench", str(path), "--shape", "x=6x9x8",
                            "--iterations", "2", "--threads", "1"], capture_output=True, text=True)
    assert bench.returncode == 0, bench.stderr
    outside = subprocess.run([cli_path(), "run", str(path), "--shape", "x=7x8x8", "--output-dir",
                              str(tmp_path / "no")], capture_output=True, text=True)
    assert outside.returncode != 0 and "E20008" in outside.stderr


# ---------------------------------------------------------------- python -m kiln.bench.dynamic

def test_dynamic_bench_small_run_writes_markdown_and_json(tmp_path):
    import json
    import sys
    md, js = tmp_path / "d.md", tmp_path / "d.json"
    run = subprocess.run(
        [sys.executable, "-m", "kiln.bench.dynamic", "--size", "small", "--models", "bert-base",
         "--seq", "8,16", "--batch", "1,2", "--threads", "1", "--warmup", "1", "--iterations",
         "2", "--markdown", str(md), "--json", str(js)],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        # The kiln these tests import, also where PYTHONPATH is relative to another folder.
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(
            [str(pathlib.Path(kiln.__file__).parent.parent.absolute())]
            + os.environ.get("PYTHONPATH", "").split(os.pathsep))))
    assert run.returncode == 0, run.stdout + run.stderr
    results = json.loads(js.read_text())
    assert results["settings"]["seq"] == [8, 16] and results["settings"]["batch"] == [1, 2]
    rows = results["rows"]
    assert [(r["model"], r["batch"], r["seq"]) for r in rows] == [
        ("bert-base", 1, 8), ("bert-base", 1, 16), ("bert-base", 2, 8), ("bert-base", 2, 16)]
    for r in rows:
        assert r["static_ms"] > 0 and r["dynamic_ms"] > 0 and r["dynamic_first_call_s"] > 0
        assert r["ratio"] == pytest.approx(r["dynamic_ms"] / r["static_ms"])
        assert r["static_compile_s"] > 0 and r["max_abs_err"] < 1e-3
    for c in results["compiles"]:
        assert c["status"] == "ok", c["status"]
        assert c["dynamic_compile_s"] > 0 and c["dynamo_compiles"] >= 1
        assert c["static_compile_s_sum"] > 0
    text = md.read_text()
    assert "| bert-base | 2 | 16 |" in text and "dynamic/static" in text
    assert "sum of the static compiles" in text and text in run.stdout


def test_scans_and_searchsorted_take_a_dynamic_dim():
    """The running folds, cummax and bucketize over a symbolic dim: one graph for every size,
    eager's bits at each."""
    edges = torch.tensor([-1.0, 0.0, 1.0])

    def fn(x):
        return (torch.cumprod(1 + x / 8, 1), torch.cummax(x, 1)[1], torch.bucketize(x, edges),
                torch.logcumsumexp(x, 0))

    counter = kiln_counter()
    compiled = torch.compile(fn, backend=counter, dynamic=True)
    for n in (5, 9, 17):
        x = torch.randn(3, n, generator=torch.Generator().manual_seed(n))
        for got, expected in zip(compiled(x), fn(x)):
            torch.testing.assert_close(got, expected, rtol=0, atol=0)
    assert counter.frame_count == 1
