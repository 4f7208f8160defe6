"""The pooling converters (src/frontend/aten/aten_pooling.cc) against PyTorch eager:
max_pool2d_with_indices's indices, bit for bit, over the window forms and the float dtypes, with
ties, NaNs and -inf placed to test which element each window takes; 3-d max, average and
adaptive average pooling as two 2-d poolings. fallback_to_cpu=False makes every node convert."""

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


# 3-d pooling (video CNNs: C3D, I3D, X3D) as a 2-d pooling over (H, W) and one over (D, 1).
POOL3D = {  # kwargs of F.max_pool3d and F.avg_pool3d
    "k2": {"kernel_size": 2},
    "k3_s2_p1": {"kernel_size": 3, "stride": 2, "padding": 1},
    "temporal_1x3x3": {"kernel_size": (1, 3, 3), "stride": (1, 2, 2), "padding": (0, 1, 1)},
    "ceil_mode": {"kernel_size": (2, 3, 2), "stride": (2, 2, 1), "padding": (1, 0, 1),
                  "ceil_mode": True},
}


@pytest.mark.parametrize("window", POOL3D)
def test_max_pool3d_matches_eager_bit_for_bit(window):
    x = hard_input((2, 3, 5, 7, 6), torch.float32)
    fn = lambda x: F.max_pool3d(x, **POOL3D[window])  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got.nan_to_num(7.0), fn(x).nan_to_num(7.0))
    assert torch.equal(got.isnan(), fn(x).isnan())


def test_max_pool3d_dilated_with_a_dynamic_batch():
    fn = lambda x: F.max_pool3d(x, 2, dilation=(2, 1, 2))  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    for n in (2, 3):
        x = torch.randn(n, 2, 6, 5, 7, generator=torch.Generator().manual_seed(n))
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(compiled(x), fn(x))


@pytest.mark.parametrize("window", POOL3D)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool3d_divides_by_pytorchs_counts(window, count_include_pad):
    """Two passes, each a mean: the same divisor as PyTorch's, two roundings instead of one."""
    x = torch.randn(2, 3, 5, 7, 6, generator=torch.Generator().manual_seed(9))
    fn = lambda x: F.avg_pool3d(x, **POOL3D[window],  # noqa: E731
                                count_include_pad=count_include_pad)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    truth = fn(x.double())
    window_size = torch.tensor(POOL3D[window]["kernel_size"]).prod().item()
    bound = (window_size + 4) * 2.0**-24 * F.avg_pool3d(
        x.double().abs(), **POOL3D[window], count_include_pad=count_include_pad)
    assert ((got.double() - truth).abs() <= bound).all()


@pytest.mark.parametrize("size", [1, (2, 3, 3), (4, 1, 2)])
def test_adaptive_avg_pool3d(size):
    x = torch.randn(2, 3, 5, 7, 6, generator=torch.Generator().manual_seed(10))
    fn = lambda x: F.adaptive_avg_pool3d(x, size)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x))


def test_max_pool3d_indices_stay_in_pytorch():
    x = torch.randn(1, 2, 4, 4, 4)
    report = kiln.explain(lambda t: F.max_pool3d(t, 2, return_indices=True)[1] * 2, x)
    assert "indices" in report.fallback["aten.max_pool3d_with_indices.default"][1], str(report)


@pytest.mark.parametrize("size", [1, (2, 4), (3, 2)])
def test_adaptive_max_pool2d_with_dividing_outputs(size):
    """Global max pooling and the like: max_pool2d with kernel = stride = in / out."""
    x = hard_input((2, 3, 6, 8), torch.float32)
    fn = lambda x: F.adaptive_max_pool2d(x, size)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got.nan_to_num(7.0), fn(x).nan_to_num(7.0))
    assert torch.equal(got.isnan(), fn(x).isnan())


def test_adaptive_max_pool2d_of_unequal_windows_stays_in_pytorch():
    x = torch.randn(1, 2, 6, 8)
    report = kiln.explain(lambda t: F.adaptive_max_pool2d(t, (4, 3)) * 2, x)
    assert "windows differ" in report.fallback["aten.adaptive_max_pool2d.default"][1]
