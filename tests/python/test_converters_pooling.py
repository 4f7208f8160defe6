"""The pooling converters (src/frontend/aten/aten_pooling.cc) against PyTorch eager:
max_pool2d_with_indices's indices, bit for bit, over the window forms and the float dtypes, with
ties, NaNs and -inf placed to test which element each window takes; 3-d max, average and
adaptive average pooling as two 2-d poolings; 3-d and adaptive max pooling with indices. fallback_to_cpu=False makes every node convert."""

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
    max_unpool2d and are a graph output: the indices must be in the plain layout's numbering."""
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
    assert [p.ops["aten.max_unpool2d.default"] for p in report.partitions] == [1]
    assert not report.fallback, str(report)


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


WITH_INDICES = {  # 3-d max pooling and adaptive max pooling, indices read: the ops of those names
    "max3d_k2": (lambda x: F.max_pool3d(x, 2, return_indices=True), (2, 3, 4, 6, 6)),
    "max3d_all_options": (lambda x: F.max_pool3d(x, (3, 2, 3), stride=(2, 1, 2), padding=(1, 0, 1),
                                                 dilation=(1, 2, 1), ceil_mode=True,
                                                 return_indices=True), (2, 3, 7, 8, 9)),
    "max3d_unbatched": (lambda x: F.max_pool3d(x, 3, stride=2, padding=1, return_indices=True),
                        (3, 5, 6, 7)),
    "adaptive2d_unequal": (lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True),
                           (2, 3, 6, 8)),
    "adaptive2d_unbatched": (lambda x: F.adaptive_max_pool2d(x, (5, 7), return_indices=True),
                             (3, 6, 9)),
    "adaptive2d_upsampling": (lambda x: F.adaptive_max_pool2d(x, (9, 11), return_indices=True),
                              (1, 2, 4, 5)),
    "adaptive2d_values": (lambda x: F.adaptive_max_pool2d(x, (4, 3)), (2, 3, 6, 8)),
    "adaptive3d_unequal": (lambda x: F.adaptive_max_pool3d(x, (2, 3, 4), return_indices=True),
                           (2, 3, 5, 7, 6)),
    "adaptive3d_values": (lambda x: F.adaptive_max_pool3d(x, (3, 2, 2)), (2, 5, 7, 6)),
    "adaptive3d_dividing": (lambda x: F.adaptive_max_pool3d(x, (1, 3, 2)), (2, 3, 4, 6, 6)),
}


@pytest.mark.parametrize("case", WITH_INDICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_max_pool_with_indices_matches_eager_bit_for_bit(case, dtype):
    """Windows of unequal sizes, overlapping, dilated and clipped, with ties, NaNs and -inf: the
    values and the element each window takes are eager's."""
    fn, shape = WITH_INDICES[case]
    x = hard_input(shape, dtype)
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    if not isinstance(expected, tuple):
        expected, got = (expected,), (got,)
    for e, g in zip(expected, got, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape
        assert torch.equal(g.isnan(), e.isnan())
        assert torch.equal(g.nan_to_num(7.0), e.nan_to_num(7.0))


def test_adaptive_max_pool2d_of_a_dynamic_image_size():
    """The adaptive windows follow each call's input size, through one compiled graph."""
    fn = lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, dynamic=True)
    for shape in [(1, 2, 7, 9), (2, 2, 10, 5), (1, 2, 3, 13)]:
        x = hard_input(shape, torch.float32)
        (values, indices), (got_values, got_indices) = fn(x), compiled(x)
        assert torch.equal(got_indices, indices)
        assert torch.equal(got_values.nan_to_num(7.0), values.nan_to_num(7.0))


@pytest.mark.parametrize("size", [1, (2, 4), (3, 2)])
def test_adaptive_max_pool2d_with_dividing_outputs(size):
    """Global max pooling and the like: max_pool2d with kernel = stride = in / out."""
    x = hard_input((2, 3, 6, 8), torch.float32)
    fn = lambda x: F.adaptive_max_pool2d(x, size)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got.nan_to_num(7.0), fn(x).nan_to_num(7.0))
    assert torch.equal(got.isnan(), fn(x).isnan())


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_max_unpool_inverts_max_pool(dims):
    """SegNet's decoder: nn.MaxUnpool{1,2,3}d of a pooling's values and indices (a scatter into
    zeros), with an explicit output size one larger than the pooling's input; bit for bit."""
    pool = getattr(torch.nn, f"MaxPool{dims}d")(2, stride=2, return_indices=True)
    unpool = getattr(torch.nn, f"MaxUnpool{dims}d")(2, stride=2)
    x = torch.randn(2, 3, *([5] * dims), generator=torch.Generator().manual_seed(dims))
    size = [2, 3] + [5] * dims

    def fn(x):
        y, i = pool(x)
        return unpool(y * 2, i, output_size=size)

    got = torch.compile(fn, backend="kiln", options={"operator_selection.fallback_to_cpu": False},
                        fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0)


def test_max_unpool_index_outside_the_output_is_a_coded_error():
    x, i = torch.randn(1, 1, 2, 2), torch.tensor([[[[0, 9], [3, 5]]]])
    fn = lambda x, i: torch.ops.aten.max_unpool2d(x, i, [2, 3])  # noqa: E731
    with pytest.raises(RuntimeError, match="invalid max index"):
        fn(x, i)
    with pytest.raises(Exception, match="E40002.*index 9"):
        torch.compile(fn, backend="kiln")(x, i)
