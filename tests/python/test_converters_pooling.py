"""max_pool2d_with_indices's converter (src/frontend/aten/aten_pooling.cc) against PyTorch
eager: the indices, bit for bit, over the window forms and the float dtypes, with ties, NaNs and
-inf placed to test which element each window takes. fallback_to_cpu=False makes every node
convert."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


WINDOWS = {  # kwargs of F.max_pool2d
    "k2": {"kernel_size": 2},
    "k3_s2_p1": {"kernel_size": 3, "stride": 2, "padding": 1},
    "dilated": {"kernel_size": 3, "stride": 1, "padding": 1, "dilation": 2},
    "ceil_mode": {"kernel_size": (2, 3), "stride": (1, 2), "padding": (1, 0), "ceil_mode": True},
}


def hard_input(shape, dtype):
    """Random values with ties (0.5), NaNs and -inf sprinkled in."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(7)).to(dtype)
    flat = x.view(-1)
    flat[2::4] = 0.5
    flat[1::7] = float("-inf")
    flat[::5] = float("nan")
    return x


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_max_pool2d_indices_match_eager(window, dtype):
    def fn(x):
        return F.max_pool2d(x, return_indices=True, **WINDOWS[window])
    for shape in [(2, 3, 7, 9), (3, 6, 5)]:  # batched and [C, H, W]
        x = hard_input(shape, dtype)
        values, indices = fn(x)
        got_values, got_indices = torch.compile(fn, backend="kiln", options=OPTIONS,
                                                fullgraph=True)(x)
        assert torch.equal(got_indices, indices)
        torch.testing.assert_close(got_values, values, rtol=0, atol=0, equal_nan=True)


def test_indices_after_a_convolution_and_into_max_unpool():
    """A pooling in a convolution chain (channels-inner layouts around it) whose indices feed
    max_unpool2d, left in PyTorch: the indices must be in the plain layout's numbering."""
    conv = torch.nn.Conv2d(3, 8, 3, padding=1).eval()

    def fn(x):
        y, indices = F.max_pool2d(torch.relu(conv(x)), 2, return_indices=True)
        return F.max_unpool2d(y, indices, 2), indices

    x = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected, expected_indices = fn(x)
        got, got_indices = torch.compile(fn, backend="kiln")(x)
    assert torch.equal(got_indices, expected_indices)
    torch.testing.assert_close(got, expected)
    report = kiln.explain(fn, x)
    assert [p.ops["aten.max_pool2d_with_indices.default"] for p in report.partitions] == [1]
    assert list(report.fallback) == ["aten.max_unpool2d.default"]
