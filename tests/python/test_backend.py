"""torch.compile(model, backend="kiln"): capture, partitioning, frozen weights, options.

Accuracy policy for whole models: the float64 eager result is the truth; Kiln's float32 error
against it must be within a small factor of eager float32's own error (both sum in a different
order, neither is exact), so a wrong kernel or converter can't pass.
"""

import copy
import gc

import pytest
import torch
import torch.nn as nn

import kiln
from kiln.backend import Report


def assert_as_accurate_as_eager(model, compiled, *inputs):
    with torch.no_grad():
        got = compiled(*inputs)
        eager = model(*inputs)
        truth = copy.deepcopy(model).double()(*(x.double() for x in inputs))
    kiln_error = (got.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= 4 * eager_error + 1e-6, (kiln_error, eager_error)


class ConvMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.lin = nn.Linear(8 * 6 * 6, 16)
        self.ln = nn.LayerNorm(16)

    def forward(self, x):
        y = torch.relu(self.conv(x)).flatten(1)
        return self.ln(nn.functional.gelu(self.lin(y))).softmax(-1)


class WithUnsupportedOp(nn.Module):
    """bessel_j0 has no Kiln converter: it splits the graph in two partitions."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x):
        return self.b(torch.special.bessel_j0(torch.relu(self.a(x)))) * 2


def find_kiln_error(exc):
    while exc is not None:
        if isinstance(exc, kiln.Error):
            return exc
        exc = getattr(exc, "inner_exception", None) or exc.__cause__
    return None


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def test_backend_is_registered_by_name():
    model = ConvMlp().eval()
    x = torch.randn(2, 3, 6, 6)
    compiled = torch.compile(model, backend="kiln")
    assert_as_accurate_as_eager(model, compiled, x)
    with torch.no_grad():
        assert isinstance(compiled(x), torch.Tensor)


def test_whole_model_in_one_partition():
    report = kiln.explain(ConvMlp().eval(), torch.randn(2, 3, 6, 6))
    assert len(report.partitions) == 1, str(report)
    assert report.fallback == {}, str(report)
    ops = report.partitions[0].ops
    assert ops["aten.convolution.default"] == 1 and ops["aten.native_layer_norm.default"] == 1


def test_unsupported_op_stays_in_pytorch():
    model = WithUnsupportedOp().eval()
    x = torch.randn(4, 8)
    report = kiln.explain(model, x)
    assert len(report.partitions) == 2, str(report)
    count, reason = report.fallback["aten.special_bessel_j0.default"]
    assert count == 1 and "no converter" in reason
    assert "aten.special_bessel_j0.default x1" in str(report)
    assert_as_accurate_as_eager(model, torch.compile(model, backend="kiln"), x)


class ConstantsOnlyPartition(nn.Module):
    """A Kiln partition with no runtime input (a ramp from arange) feeding an op left in
    PyTorch: the partition must still hand PyTorch tensors back."""

    def forward(self, x):
        ramp = torch.arange(8, dtype=torch.float32) * 2
        return x * torch.special.bessel_j0(ramp)


def test_partition_without_inputs_returns_tensors():
    model = ConstantsOnlyPartition().eval()
    x = torch.randn(4, 8)
    report = kiln.explain(model, x)
    assert len(report.partitions) == 2, str(report)
    compiled = torch.compile(model, backend="kiln")
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x))


def test_fallback_disabled_is_E50001_listing_ops():
    model = WithUnsupportedOp().eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"operator_selection.fallback_to_cpu": False})
    with pytest.raises(Exception) as info, torch.no_grad():
        compiled(torch.randn(4, 8))
    err = find_kiln_error(info.value)
    assert err is not None and err.code == "E50001", repr(info.value)
    assert "aten.special_bessel_j0.default x1" in err.detail


def test_min_block_size_keeps_small_partitions_in_pytorch():
    model = WithUnsupportedOp().eval()
    x = torch.randn(4, 8)
    # Partitions: [addmm, relu] before bessel_j0 and [addmm, mul] after it (t of the weight included).
    report = kiln.explain(model, x, options={"operator_selection.min_block_size": 100})
    assert report.partitions == []
    assert report.fallback["aten.addmm.default"][0] == 2


def test_weights_changed_in_place_are_seen():
    model = ConvMlp().eval()
    x = torch.randn(2, 3, 6, 6)
    compiled = torch.compile(model, backend="kiln")
    assert_as_accurate_as_eager(model, compiled, x)
    with torch.no_grad():
        model.lin.weight.mul_(-3)
        model.conv.bias.add_(1)
    assert_as_accurate_as_eager(model, compiled, x)


class BrokenLayer(nn.Module):
    """A layer whose forward dynamo compiles as a frame of its own (the graph break), once for
    every instance: each call passes that instance's weights to the one FX graph."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        torch._dynamo.graph_break()
        return torch.relu(self.lin(x)) * 2


def test_layers_sharing_a_graph_keep_a_compiled_variant_each(monkeypatch):
    layers = nn.Sequential(*[BrokenLayer() for _ in range(4)]).eval()
    compiled = torch.compile(layers, backend="kiln")
    x = torch.randn(3, 8)
    compiles = []
    real_compile = kiln.backend._C.compile
    monkeypatch.setattr(kiln.backend._C, "compile",
                        lambda *a, **k: compiles.append(1) or real_compile(*a, **k))
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(compiled(x), layers(x))
        # One compile per layer's weights on the first pass, none after.
        assert len(compiles) == 4
        layers[2].lin.weight.mul_(-1)  # that variant alone is compiled again
        torch.testing.assert_close(compiled(x), layers(x))
        assert len(compiles) == 5
        # A weight replaced by another leaves its old variant unreachable: it is dropped.
        layers[1].lin.weight = nn.Parameter(torch.randn(8, 8))
        torch.testing.assert_close(compiled(x), layers(x))
        assert len(compiles) == 6
    # The partition serving the layers: one variant per layer's current weights, none for the
    # replaced one.
    weights = {id(layer.lin.weight) for layer in layers}
    serving = [o for o in gc.get_objects() if type(o) is kiln.backend.KilnSubgraph
               and any(id(t) in weights for v in o._variants.values() for t in v[0])]
    assert len(serving) == 1 and len(serving[0]._variants) == 4


def test_tensors_the_call_passes_are_never_frozen():
    """dynamo may mark an argument static (EnCodec's padding amounts, computed anew each call):
    it stays a Kiln input, so new values need no re-import."""
    def fn(x, scale):
        return torch.relu(x * scale + 1)
    compiled = torch.compile(fn, backend="kiln")
    x = torch.randn(4, 5)
    with torch.no_grad():
        for value in (2.0, -3.0, 0.5):
            scale = torch.tensor(value)
            torch._dynamo.mark_static_address(scale, guard=False)
            torch.testing.assert_close(compiled(x, scale), fn(x, scale))
            report = kiln.explain(fn, x, scale)
            assert [p.module.constant_args for p in report.partitions] == [{}], str(report)


def test_get_backend_with_config_and_levels():
    model = ConvMlp().eval()
    x = torch.randn(2, 3, 6, 6)
    for level in ("O0", "O3"):
        torch._dynamo.reset()
        cfg = kiln.CompilerConfig()
        cfg.optimization.level = level
        cfg.execution.num_threads = 1
        assert_as_accurate_as_eager(model, torch.compile(model, backend=kiln.get_backend(cfg)), x)


@pytest.mark.parametrize("options, fragment", [
    ({"no.such.option": 1}, "unknown option"),
    ({"optimization.level": "O9"}, "is invalid"),
    ({"execution.num_threads": -1}, "is invalid"),
    ({"operator_selection.fallback_to_cpu": "yes"}, "is invalid"),
    ({"amp.enable": True}, "not supported yet"),
    ({"memory.optimization": False}, "not supported yet"),
    ({"distributed.enable": True}, "not supported yet"),
])
def test_config_rejects_bad_options_at_once(options, fragment):
    with pytest.raises(kiln.Error) as info:
        kiln.CompilerConfig.from_options(options)
    assert info.value.code == "E10001" and fragment in info.value.detail


def test_config_attribute_access():
    cfg = kiln.CompilerConfig()
    assert cfg.operator_selection.policy == "PERFORMANCE"
    cfg.operator_selection.policy = "REFERENCE"
    assert cfg.compile_options()["kernel_policy"] == "reference"
    with pytest.raises(kiln.Error):
        cfg.operator_selection.polcy = "PERFORMANCE"
    with pytest.raises(kiln.Error):
        _ = cfg.nonexistent


def test_modes():
    model = ConvMlp().eval()
    x = torch.randn(2, 3, 6, 6)
    assert_as_accurate_as_eager(model, torch.compile(model, backend="kiln",
                                                     mode="reduce-overhead"), x)
    torch._dynamo.reset()
    assert_as_accurate_as_eager(model, torch.compile(model, backend="kiln",
                                                     mode="max-autotune"), x)


def test_config_doc_lists_every_option():
    from pathlib import Path
    from kiln.config import option_table
    doc = (Path(__file__).parents[2] / "docs" / "config.md").read_text()
    for name, *_ in option_table():
        assert f"`{name}`" in doc, f"docs/config.md misses {name}"
