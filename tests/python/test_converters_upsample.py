"""F.interpolate through Kiln's upsample ops (src/frontend/aten/aten_upsample.cc,
python/kiln/_upsample.py): under torch.compile as kiln:: ops (AOTAutograd would otherwise trace
them into gathers), through kiln.export as aten's .vec ops. Nearest copies, so Kiln
agrees with eager bit for bit. Bilinear computes the same f32 weights as eager but sums the products
in another order: each result is within (4 + 2)·2⁻²⁴·Σ|x·weight| of the exact sum on those weights
(docs/ops.md), so the two are within twice that of each other."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

X = torch.randn(2, 3, 9, 11, generator=torch.Generator().manual_seed(4)) * 3

RESIZES = {
    "nearest_scale_2": dict(scale_factor=2, mode="nearest"),
    "nearest_scale_pair": dict(scale_factor=(1.5, 0.7), mode="nearest"),
    "nearest_size": dict(size=(20, 5), mode="nearest"),
    "bilinear_scale_2": dict(scale_factor=2, mode="bilinear"),
    "bilinear_scale_fraction": dict(scale_factor=(1.3, 0.6), mode="bilinear"),
    "bilinear_size_align_corners": dict(size=(17, 23), mode="bilinear", align_corners=True),
    "bilinear_size_int": dict(size=16, mode="bilinear", align_corners=False),
    "bilinear_down_align_corners": dict(scale_factor=0.5, mode="bilinear", align_corners=True),
}


def assert_upsampled(got, fn, mode, x=X):
    expected = fn(x)
    assert got.shape == expected.shape
    if mode == "nearest":
        assert torch.equal(got, expected)
    else:
        assert ((got - expected).abs() <= 12 * 2.0**-24 * fn(x.abs())).all()


def kiln_ops(fn, *inputs) -> list[str]:
    """The ops of Kiln's partitions, from kiln.explain's report."""
    return [line for line in str(kiln.explain(fn, *inputs, options=OPTIONS)).splitlines()
            if "fused_" in line]


@pytest.mark.parametrize("resize", RESIZES)
def test_interpolate_compiles_to_one_upsample_op(resize):
    def fn(x):
        return F.interpolate(x, **RESIZES[resize])

    mode = RESIZES[resize]["mode"]
    with torch.no_grad():
        assert_upsampled(torch.compile(fn, backend="kiln", options=OPTIONS)(X), fn, mode)
        ops = kiln_ops(fn, X)
    op = f"upsample_{mode}2d"
    assert ops == [f"  fused_0: 1 ops (kiln.{op}.default x1)"], ops


def test_upsample_modules_inside_a_network():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Upsample(scale_factor=2, mode="bilinear"),
                                torch.nn.Conv2d(8, 4, 3, padding=1),
                                torch.nn.UpsamplingNearest2d(size=(40, 44))).eval()
    with torch.no_grad():
        expected = model(X)
        got = torch.compile(model, backend="kiln", options=OPTIONS)(X)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)  # the convolutions' order
    assert got.shape == (2, 4, 40, 44)


# Resizes the kiln:: ops don't take go to F.interpolate as they are: AOTAutograd's decomposition
# (gathers and arithmetic, which Kiln converts too) or PyTorch's own kernels.
@pytest.mark.parametrize("kwargs", [
    dict(scale_factor=1.5, mode="bilinear", recompute_scale_factor=True),
    dict(size=(7, 8), mode="bilinear", antialias=True),
    dict(scale_factor=2, mode="bicubic"),
])
def test_other_resizes_keep_pytorchs_semantics(kwargs):
    def fn(x):
        return F.interpolate(x, **kwargs)

    with torch.no_grad():
        got = torch.compile(fn, backend="kiln")(X)
    torch.testing.assert_close(got, fn(X), rtol=2e-6, atol=2e-6)  # decomposed arithmetic


def test_interpolate_errors_are_pytorchs():
    def fn(x):
        return F.interpolate(x, scale_factor=2, mode="nearest", align_corners=True)

    with pytest.raises(Exception, match="align_corners option can only be set"):
        torch.compile(fn, backend="kiln")(X)


def test_training_graphs_keep_the_differentiable_decomposition():
    x = X.clone().requires_grad_()

    def fn(x):
        return F.interpolate(x, scale_factor=2, mode="bilinear").square().sum()

    torch.compile(fn, backend="kiln")(x).backward()
    expected = X.clone().requires_grad_()
    fn(expected).backward()
    torch.testing.assert_close(x.grad, expected.grad)


def test_symbolic_sizes_scale_with_the_input():
    def fn(x):
        return F.interpolate(x, scale_factor=2, mode="nearest")

    with torch.no_grad():
        compiled = torch.compile(fn, backend="kiln", options=OPTIONS, dynamic=True)
        for h in (5, 9, 12):
            x = torch.randn(1, 2, h, 7)
            assert torch.equal(compiled(x), fn(x))


class Resize(torch.nn.Module):
    def __init__(self, kwargs):
        super().__init__()
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(x, **self.kwargs)


@pytest.mark.parametrize("resize", ["nearest_scale_pair", "nearest_size",
                                    "bilinear_scale_fraction", "bilinear_size_align_corners"])
def test_exported_model_upsamples_with_aten_vec_ops(tmp_path, resize):
    path = tmp_path / "resize.kiln"
    model = Resize(RESIZES[resize])
    kiln.export(model, (X,), path)
    assert_upsampled(torch.as_tensor(kiln.load(path)(X)), model, RESIZES[resize]["mode"])
