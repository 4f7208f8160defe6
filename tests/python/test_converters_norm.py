"""Norm converters (src/frontend/aten/aten_norm.cc) against PyTorch eager: the mean and rstd
outputs of native_layer_norm and native_group_norm, computed only where the graph reads them,
and a bias without a weight. fallback_to_cpu=False makes every node convert."""

import pytest
import torch

OPTIONS = {"operator_selection.fallback_to_cpu": False}

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _compiled_matches_eager(fn, *args):
    expected = fn(*args)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(*args)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layer_norm_statistics(dtype):
    gen = torch.Generator().manual_seed(6)
    x = (torch.randn(3, 4, 5, 6, generator=gen) * 3 + 1).to(dtype)
    w, b = torch.randn(5, 6, generator=gen).to(dtype), torch.randn(5, 6, generator=gen).to(dtype)
    _compiled_matches_eager(lambda x, w, b: torch.ops.aten.native_layer_norm(x, [5, 6], w, b, 1e-5),
                            x, w, b)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_statistics(dtype):
    gen = torch.Generator().manual_seed(7)
    x = (torch.randn(2, 6, 4, 3, generator=gen) * 2 - 1).to(dtype)
    w, b = torch.randn(6, generator=gen).to(dtype), torch.randn(6, generator=gen).to(dtype)
    _compiled_matches_eager(
        lambda x, w, b: torch.ops.aten.native_group_norm(x, w, b, 2, 6, 12, 3, 1e-5), x, w, b)


def test_only_the_read_statistic_is_computed():
    """rstd alone read: the graph still matches, and nothing needs mean."""
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(8))
    fn = lambda x: torch.ops.aten.native_layer_norm(x, [8], None, None, 1e-5)[2] * 2  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize("norm", ["layer", "group"])
def test_a_bias_without_a_weight(norm):
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, 3, generator=gen)
    b = torch.randn(4 if norm == "group" else 3, generator=gen)
    fn = ((lambda x, b: (torch.nn.functional.layer_norm(x, [3], None, b),)) if norm == "layer"
          else (lambda x, b: (torch.nn.functional.group_norm(x, 2, None, b),)))
    _compiled_matches_eager(fn, x, b)


@pytest.mark.parametrize("make", [
    lambda: torch.nn.InstanceNorm2d(6, affine=True),
    lambda: torch.nn.InstanceNorm2d(6),
    lambda: torch.nn.BatchNorm2d(6, track_running_stats=False),
], ids=["instance_affine", "instance", "batch_no_running_stats"])
def test_norms_on_the_batch_statistics_run_in_kiln(make):
    """InstanceNorm (batch norm of x as [1, N·C, H, W]: group norm a channel a group) and
    BatchNorm without running statistics (mean, var and the arithmetic over N, H, W), in eval
    mode, between convolutions: one Kiln graph, eager's results."""
    torch.manual_seed(10)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 6, 3), make(), torch.nn.ReLU(),
                                torch.nn.Conv2d(6, 4, 1)).eval()
    x = torch.randn(2, 3, 9, 9)
    with torch.no_grad():
        got = torch.compile(model, backend="kiln", options=OPTIONS, fullgraph=True)(x)
        torch.testing.assert_close(got, model(x))


def test_batch_norm_in_training_mode_updates_the_running_statistics():
    """A BatchNorm called in train(): the batch's statistics normalize, and the running mean and
    variance move by momentum towards them (the variance unbiased), as in eager."""
    torch.manual_seed(11)
    x = torch.randn(4, 5, 6, 7) * 2 + 1
    eager, compiled = torch.nn.BatchNorm2d(5).train(), torch.nn.BatchNorm2d(5).train()
    with torch.no_grad():
        expected = eager(x)
        got = torch.compile(compiled, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(compiled.running_mean, eager.running_mean)
    torch.testing.assert_close(compiled.running_var, eager.running_var)
    assert compiled.num_batches_tracked.item() == eager.num_batches_tracked.item() == 1
