"""F.interpolate through Kiln's upsample ops (src/frontend/aten/aten_upsample.cc,
python/kiln/_upsample.py): under torch.compile as kiln:: ops (AOTAutograd would otherwise trace
them into gathers), through kiln.export as aten's .vec ops. Nearest copies, so Kiln
agrees with eager bit for bit. Bilinear computes the same f32 weights as eager but sums the products
in another order: each result is within (4 + 2)·2⁻²⁴·Σ|x·weight| of the exact sum on those weights
(docs/ops.md), so the two are within twice that of each other. F.grid_sample becomes Kiln's
grid_sample, which computes as eager's kernel does: bit for bit."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

G = torch.Generator().manual_seed(4)
X = torch.randn(2, 3, 9, 11, generator=G) * 3

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
    dict(scale_factor=2, mode="bicubic"),
])
def test_other_resizes_keep_pytorchs_semantics(kwargs):
    def fn(x):
        return F.interpolate(x, **kwargs)

    with torch.no_grad():
        got = torch.compile(fn, backend="kiln")(X)
    torch.testing.assert_close(got, fn(X), rtol=2e-6, atol=2e-6)  # decomposed arithmetic


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("size, align_corners, scale", [
    ((24, 20), False, None), ((8, 5), False, None), ((16, 7), True, None), ((5, 30), False, None),
    ((1, 1), True, None), (None, False, 0.37)])
def test_antialiased_bilinear_in_kiln(dtype, size, align_corners, scale):
    """F.interpolate(mode="bilinear", antialias=True) (SigLIP2's position embeddings): PyTorch's
    weights as constant [out, in] matrices, the width then the height, every node in Kiln:
    within an ULP or two of eager (the GEMM's sums, against PyTorch's tap by tap)."""
    x = torch.randn(2, 3, 16, 12, generator=G, dtype=dtype)
    fn = lambda x: F.interpolate(x, size=size, scale_factor=scale, mode="bilinear",  # noqa: E731
                                 antialias=True, align_corners=align_corners)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x))


def test_large_antialiased_resizes_stay_in_pytorch():
    """Over 32 inputs a filter tap, PyTorch's banded kernel beats the dense matmul."""
    x = torch.randn(1, 3, 512, 512, generator=G)
    report = kiln.explain(lambda x: F.interpolate(x, size=(224, 224), mode="bilinear", antialias=True), x)
    assert "banded kernel" in report.fallback["aten._upsample_bilinear2d_aa.default"][1]


def test_antialiased_bilinear_of_a_dynamic_size_stays_in_pytorch():
    x = torch.randn(1, 2, 10, 10, generator=G)
    torch._dynamo.mark_dynamic(x, 2)
    report = kiln.explain(lambda x: F.interpolate(x, size=(4, 4), mode="bilinear", antialias=True), x)
    assert "static height and width" in report.fallback["aten._upsample_bilinear2d_aa.default"][1]


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


# ------------------------------------------------------------------ F.grid_sample

def sampling_grid(n, oh, ow, dtype, seed=7):
    """Points over and around [-1, 1], with NaN, infinities, a far-away point and the edges."""
    g = torch.rand(n, oh, ow, 2, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    g = g * 2.8 - 1.4
    specials = torch.tensor([float("nan"), float("inf"), -float("inf"), 1e10, -1.0, 1.0, 0.0,
                             -0.0, 0.5], dtype=dtype)
    g.view(-1)[1:2 * len(specials):2] = specials
    return g


def same_bits(got, expected):
    """Equal bits, NaNs included."""
    bits = torch.int64 if expected.dtype == torch.float64 else torch.int32
    return got.shape == expected.shape and torch.equal(got.view(bits), expected.view(bits))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample_matches_eager_bit_for_bit(dtype, mode, padding_mode, align_corners):
    """Kiln computes each step as PyTorch's AVX2/AVX-512 kernel does, FMAs included; 70 points
    a batch item take the 8-wide kernel and its scalar tail (bicubic: the scalar loop, with the
    vector build's contractions)."""
    x = torch.randn(2, 3, 6, 9, generator=torch.Generator().manual_seed(6), dtype=dtype)
    g = sampling_grid(2, 7, 10, dtype)
    fn = lambda x, g: F.grid_sample(x, g, mode=mode, padding_mode=padding_mode,  # noqa: E731
                                    align_corners=align_corners)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x, g)
    assert same_bits(got, fn(x, g))


def test_glm4v_position_embedding_resampling():
    """GLM-4V adapts its learned position grid to each image by bicubic grid sampling with
    border padding: one Kiln partition, eager's bits."""
    table = torch.randn(1, 32, 6, 6, generator=torch.Generator().manual_seed(8))
    norm_w = ((torch.arange(14.0) + 0.5) / 14) * 2 - 1
    norm_h = ((torch.arange(10.0) + 0.5) / 10) * 2 - 1
    grid = torch.stack((norm_w.expand(10, 14).flatten(), norm_h[:, None].expand(10, 14).flatten()), -1)
    grid = grid[None, :, None, :]
    fn = lambda t, g: F.grid_sample(t, g, mode="bicubic", align_corners=False,  # noqa: E731
                                    padding_mode="border").squeeze(0).squeeze(-1).permute(1, 0)
    report = kiln.explain(fn, table, grid)
    assert len(report.partitions) == 1 and not report.fallback, str(report)
    assert same_bits(torch.compile(fn, backend="kiln")(table, grid), fn(table, grid))


def test_sampling_grids_from_linspace_fold_into_constants():
    """Deformable attention's reference points: torch.linspace over static sizes has no Kiln
    op; the backend computes it once with PyTorch and Kiln takes it as a constant."""
    def fn(x):
        h, w = x.shape[-2:]
        ys = torch.linspace(-1, 1, 2 * h, dtype=x.dtype)
        xs = torch.linspace(-1, 1, 2 * w, dtype=x.dtype)
        grid = torch.stack(torch.meshgrid(xs, ys, indexing="xy"), -1)
        return F.grid_sample(x, grid.expand(x.shape[0], -1, -1, -1), align_corners=True)
    x = torch.randn(2, 3, 5, 7)
    report = kiln.explain(fn, x)
    assert len(report.partitions) == 1 and not report.fallback, str(report)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got, fn(x))


def test_random_factories_are_not_folded():
    """A seeded random op must draw anew each call."""
    fn = lambda x: x + torch.rand(3)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln")
    x = torch.zeros(3)
    assert not torch.equal(compiled(x), compiled(x))
