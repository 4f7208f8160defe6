"""aten.convolution's converter (src/frontend/aten/aten_conv.cc) against PyTorch eager: conv1d,
conv2d, conv3d, conv_transpose1d, conv_transpose2d and conv_transpose3d with their argument forms
(stride, padding, output_padding, dilation, groups, bias or none). fallback_to_cpu=False makes
every node convert."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


G = torch.Generator().manual_seed(5)


def compiled_matches_eager(fn, *args):
    expected = fn(*args)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected)  # dtype and shape included


CONV1D = {  # kwargs of F.conv1d on x[2, 4, 11] and w[6, 4 / groups, 3]
    "plain": {},
    "stride_padding": {"stride": 2, "padding": 1},
    "dilation_groups": {"dilation": 2, "groups": 2, "padding": 2},
    "depthwise": {"groups": 4},
    "same": {"padding": "same", "dilation": 2},
}


@pytest.mark.parametrize("case", CONV1D)
@pytest.mark.parametrize("bias", [True, False])
def test_conv1d(case, bias):
    kwargs = CONV1D[case]
    groups = kwargs.get("groups", 1)
    out = 8 if groups == 4 else 6
    x, w = torch.randn(2, 4, 11, generator=G), torch.randn(out, 4 // groups, 3, generator=G)
    b = torch.randn(out, generator=G) if bias else None
    compiled_matches_eager(lambda x, w, b: F.conv1d(x, w, b, **kwargs), x, w, b)


def test_conv1d_unbatched():
    x, w = torch.randn(3, 9, generator=G), torch.randn(5, 3, 2, generator=G)
    compiled_matches_eager(lambda x, w: F.conv1d(x, w, stride=2), x, w)


# kwargs of F.conv_transpose2d on x[2, 4, 5, 6] and w[4, 6 / groups, 3, 2], and of
# F.conv_transpose3d on x[2, 4, 3, 5, 4] and w[4, 6 / groups, 3, 2, 3].
CONV_TRANSPOSE = {
    2: {"plain": {},
        "stride_padding": {"stride": 2, "padding": 1},
        "output_padding": {"stride": (2, 3), "output_padding": (1, 2)},
        "dilation_groups": {"dilation": (2, 1), "groups": 2, "padding": (1, 0)},
        "output_padding_below_dilation": {"dilation": 3, "output_padding": 1}},
    3: {"plain": {},
        "stride_padding": {"stride": 2, "padding": 1},
        "output_padding": {"stride": (2, 1, 3), "output_padding": (1, 0, 2)},
        "dilation_groups": {"dilation": (2, 1, 1), "groups": 2, "padding": (1, 0, 1)},
        "output_padding_below_dilation": {"dilation": 3, "output_padding": 1}},
}
CONV_TRANSPOSE_SIZES = {2: ((2, 4, 5, 6), (3, 2)), 3: ((2, 4, 3, 5, 4), (3, 2, 3))}


@pytest.mark.parametrize("spatial,case", [(d, c) for d in CONV_TRANSPOSE for c in CONV_TRANSPOSE[d]])
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose(spatial, case, bias):
    kwargs = CONV_TRANSPOSE[spatial][case]
    groups = kwargs.get("groups", 1)
    x_size, kernel = CONV_TRANSPOSE_SIZES[spatial]
    x, w = torch.randn(*x_size, generator=G), torch.randn(4, 6 // groups, *kernel, generator=G)
    b = torch.randn(6, generator=G) if bias else None
    fn = F.conv_transpose2d if spatial == 2 else F.conv_transpose3d
    compiled_matches_eager(lambda x, w, b: fn(x, w, b, **kwargs), x, w, b)


@pytest.mark.parametrize("kwargs", [{}, {"stride": 3, "padding": 1, "output_padding": 2},
                                    {"dilation": 2, "groups": 2}])
def test_conv_transpose1d(kwargs):
    groups = kwargs.get("groups", 1)
    x, w = torch.randn(2, 4, 7, generator=G), torch.randn(4, 6 // groups, 3, generator=G)
    b = torch.randn(6, generator=G)
    compiled_matches_eager(lambda x, w, b: F.conv_transpose1d(x, w, b, **kwargs), x, w, b)


def test_one_window_entry_for_every_spatial_dim():
    """aten.convolution takes `padding=[0]` (F.conv2d(padding="valid"), EfficientNet's strided
    stem) or `stride=[2]` for every spatial dim."""
    x, w = torch.randn(2, 3, 9, 9, generator=G), torch.randn(4, 3, 3, 3, generator=G)
    conv = torch.ops.aten.convolution.default
    compiled_matches_eager(lambda x, w: conv(x, w, None, [2], [0], [1], False, [0], 1), x, w)
    compiled_matches_eager(lambda x, w: conv(x, w, None, [1], [1], [2], False, [0], 1), x, w)
    compiled_matches_eager(lambda x, w: F.conv2d(x, w, stride=2, padding="valid"), x, w)
    wt = torch.randn(3, 4, 3, 3, generator=G)
    compiled_matches_eager(lambda x, w: conv(x, w, None, [2], [1], [1], True, [1], 1), x, wt)


UNFOLD = {  # kwargs of F.unfold
    "k3": {"kernel_size": 3},
    "every_argument": {"kernel_size": (2, 3), "dilation": (2, 1), "padding": (1, 2),
                       "stride": (2, 3)},
    "column": {"kernel_size": (9, 1), "padding": (4, 0)},  # ConvBERT's span convolution
}


@pytest.mark.parametrize("case", UNFOLD)
@pytest.mark.parametrize("shape", [(2, 3, 7, 9), (3, 9, 5)], ids=["batched", "unbatched"])
def test_unfold_matches_eager_bit_for_bit(case, shape):
    x = torch.randn(shape, generator=G)
    fn = lambda x: F.unfold(x, **UNFOLD[case])  # noqa: E731
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_unfold_with_a_dynamic_batch():
    fn = lambda x: F.unfold(x, kernel_size=2, padding=1) * 2  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    for n in (2, 5):
        x = torch.randn(n, 3, 6, 6, generator=G)
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(compiled(x), fn(x))


def test_unfold_of_dynamic_planes_stays_in_pytorch():
    """The gather's positions are constants of H and W."""
    x = torch.randn(2, 3, 6, 6, generator=G)
    torch._dynamo.mark_dynamic(x, 2)
    report = kiln.explain(lambda x: F.unfold(x, kernel_size=2) * 2, x)
    assert "dynamic channels, height or width" in report.fallback["aten.im2col.default"][1]


FOLD = {  # (cols shape, output_size, kwargs of F.fold)
    "k2": ((2, 3 * 4, 20), (5, 6), {"kernel_size": 2}),
    "overlapping_3x3": ((1, 8 * 9, 64), (10, 10), {"kernel_size": 3}),
    "every_argument": ((2, 3 * 6, 16), (7, 9), {"kernel_size": (2, 3), "dilation": (2, 1),
                                                 "padding": (1, 2), "stride": (2, 3)}),
    "patches": ((1, 4 * 4, 16), (8, 8), {"kernel_size": 2, "stride": 2}),  # MobileViTV2's
    "unbatched": ((3 * 4, 20), (5, 6), {"kernel_size": 2}),
}


@pytest.mark.parametrize("case", FOLD)
def test_fold_matches_eager_bit_for_bit(case):
    """col2im sums overlapping windows in PyTorch's order: kernel offset first."""
    shape, output_size, kwargs = FOLD[case]
    x = torch.randn(shape, generator=G)
    fn = lambda x: F.fold(x, output_size, **kwargs)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got, fn(x))


def test_fold_with_a_dynamic_batch_stays_in_pytorch():
    x = torch.randn(2, 3 * 4, 20, generator=G)
    torch._dynamo.mark_dynamic(x, 0)
    report = kiln.explain(lambda t: F.fold(t, (5, 6), kernel_size=2).exp(), x)
    assert "dynamic sizes" in report.fallback["aten.col2im.default"][1], str(report)


CONV3D = {  # kwargs of F.conv3d on x[2, 4, 5, 9, 8] and w[6, 4 / groups, 3, 3, 2]
    "plain": {},
    "tubelets": {"stride": (1, 3, 2)},
    "padding_dilation": {"padding": (1, 2, 0), "dilation": (2, 1, 3)},
    "groups": {"groups": 2, "padding": 1},
    "depthwise": {"groups": 4, "padding": "same"},
}


@pytest.mark.parametrize("case", CONV3D)
@pytest.mark.parametrize("bias", [True, False])
def test_conv3d(case, bias):
    kwargs = CONV3D[case]
    groups = kwargs.get("groups", 1)
    out = 8 if groups == 4 else 6
    x = torch.randn(2, 4, 5, 9, 8, generator=G)
    w = torch.randn(out, 4 // groups, 3, 3, 2, generator=G)
    b = torch.randn(out, generator=G) if bias else None
    compiled_matches_eager(lambda x, w, b: F.conv3d(x, w, b, **kwargs), x, w, b)


def test_conv3d_module_with_a_dynamic_frame_count():
    """A video model's patch embedding (nn.Conv3d with kernel = stride), its weights prepacked,
    over clips of 4 and 8 frames from one compile."""
    conv = torch.nn.Conv3d(3, 16, kernel_size=(2, 8, 8), stride=(2, 8, 8)).eval()
    fn = lambda x: conv(x).flatten(2).transpose(1, 2)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, dynamic=True)
    with torch.no_grad():
        for frames in (4, 8):
            x = torch.randn(1, 3, frames, 32, 32, generator=G)
            torch.testing.assert_close(compiled(x), fn(x))


def test_conv_transpose3d_module_with_a_dynamic_depth():
    """A 3-D U-Net's up-step (nn.ConvTranspose3d, kernel 2, stride 2, its weights prepacked) then
    a ReLU, over volumes of 4 and 6 slices from one compile, in Kiln throughout."""
    up = torch.nn.ConvTranspose3d(8, 4, kernel_size=2, stride=2).eval()
    fn = lambda x: up(x).relu()  # noqa: E731
    x = torch.randn(1, 8, 4, 6, 6, generator=G)
    report = kiln.explain(fn, x)
    assert not report.fallback, str(report)
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, dynamic=True)
    with torch.no_grad():
        for depth in (4, 6):
            x = torch.randn(1, 8, depth, 6, 6, generator=G)
            torch.testing.assert_close(compiled(x), fn(x))
