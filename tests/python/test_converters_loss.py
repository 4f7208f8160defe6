"""The loss converters (src/frontend/aten/aten_loss.cc) against PyTorch eager: each loss with
every reduction, its weights and options, through torch.compile(backend="kiln") with every node
converted. Without a reduction, the losses are elementwise and must match eager exactly; the
reductions sum in a different order (f64), so those compare at assert_close's f32 tolerance.
Bad input (a target outside the classes, a probability outside [0, 1]) fails with E40002 as it
fails in eager."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

G = torch.Generator().manual_seed(11)
REDUCTIONS = ["none", "mean", "sum"]


def compiled(fn):
    return torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)


def check(fn, *args, reduction="mean"):
    expected = fn(*args)
    got = compiled(fn)(*args)
    if reduction == "none":
        torch.testing.assert_close(got, expected, rtol=0, atol=0)
    else:
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_regression_losses(reduction):
    x, y = torch.randn(4, 7, generator=G) * 2, torch.randn(4, 7, generator=G) * 2
    for fn in (lambda x, y: F.mse_loss(x, y, reduction=reduction),
               lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction),
               lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.5),
               lambda x, y: F.smooth_l1_loss(x, y, reduction=reduction, beta=0.0),
               lambda x, y: F.huber_loss(x, y, reduction=reduction),
               lambda x, y: F.huber_loss(x, y, reduction=reduction, delta=2.5),
               lambda x, y: F.l1_loss(x, y, reduction=reduction)):
        torch._dynamo.reset()
        check(fn, x, y, reduction=reduction)


def test_soft_margin_loss():
    """log1p(exp(-x·t)) through Kiln's vectorized exp and log1p: within 4·2⁻²⁴ of the same
    function in float64 of the same f32 product (eager's Sleef functions differ by an ULP or
    two); the reductions at assert_close's tolerance."""
    x, t = torch.randn(50000, generator=G) * 4, torch.randn(50000, generator=G).sign()
    got = compiled(lambda x, t: F.soft_margin_loss(x, t, reduction="none"))(x, t)
    exact = torch.log1p(torch.exp((-x * t).double()))
    assert ((got.double() - exact).abs() <= 4 * 2.0**-24 * exact).all()
    for reduction in ("mean", "sum"):
        torch._dynamo.reset()
        fn = lambda x, t: F.soft_margin_loss(x, t, reduction=reduction)  # noqa: E731
        torch.testing.assert_close(compiled(fn)(x, t), fn(x, t))


def test_mse_loss_broadcasts_the_target():
    x, y = torch.randn(3, 5, generator=G), torch.randn(5, generator=G)
    check(lambda x, y: F.mse_loss(x, y.expand(3, 5), reduction="none"), x, y, reduction="none")


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy(reduction, weighted):
    """Two non-negative terms, each a product with Kiln's vectorized log or log1p (eager calls
    libm's): without a reduction within 5·2⁻²⁴ of float64 on the same f32 inputs."""
    x = torch.rand(5, 6, generator=G)
    x[0, :2] = torch.tensor([0.0, 1.0])  # log(0) clamps at -100, as in eager
    t = torch.rand(5, 6, generator=G)
    w = torch.rand(6, generator=G) if weighted else None
    fn = lambda x, t, w: F.binary_cross_entropy(x, t, weight=w, reduction=reduction)  # noqa: E731
    got = compiled(lambda x, t: fn(x, t, w))(x, t)
    if reduction != "none":
        torch.testing.assert_close(got, fn(x, t, w))
        return
    exact = fn(x.double(), t.double(), None if w is None else w.double())
    assert ((got.double() - exact).abs() <= 5 * 2.0**-24 * exact.abs()).all()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weights", ["none", "weight", "pos_weight", "both"])
def test_binary_cross_entropy_with_logits(reduction, weights):
    x = torch.randn(5, 6, generator=G) * 30  # logits far out in both tails
    t = torch.rand(5, 6, generator=G)
    w = torch.rand(5, 6, generator=G) if weights in ("weight", "both") else None
    p = torch.rand(6, generator=G) * 3 if weights in ("pos_weight", "both") else None
    fn = lambda x, t: F.binary_cross_entropy_with_logits(  # noqa: E731
        x, t, weight=w, pos_weight=p, reduction=reduction)
    # log_sigmoid's log1p(exp(-|x|)) goes through Kiln's exp and log1p, a few ULP from eager's.
    torch.testing.assert_close(compiled(fn)(x, t), fn(x, t))


def test_binary_cross_entropy_rejects_probabilities_outside_0_1():
    x, t = torch.tensor([0.2, 1.5, 0.3]), torch.tensor([0.0, 1.0, 1.0])
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(x, t)
    with pytest.raises(Exception, match=r"E40002.*all elements of input should be between 0 and 1"):
        compiled(lambda x, t: F.binary_cross_entropy(x, t))(x, t)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [-100, 2])
def test_cross_entropy(reduction, weighted, ignore_index):
    """Hugging Face's heads: cross_entropy of [N, C] logits (log_softmax, then nll_loss_forward),
    some targets ignored."""
    x = torch.randn(8, 5, generator=G)
    t = torch.tensor([0, 4, -100, 2, 2, 1, 3, -100]) if ignore_index == -100 else \
        torch.tensor([0, 4, 1, 2, 2, 1, 3, 0])
    w = torch.rand(5, generator=G) + 0.5 if weighted else None
    fn = lambda x, t: F.cross_entropy(x, t, weight=w, reduction=reduction,  # noqa: E731
                                      ignore_index=ignore_index)
    torch.testing.assert_close(compiled(fn)(x, t), fn(x, t))


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_cross_entropy_over_pixels_and_one_sample(reduction):
    """Segmentation's [N, C, H, W] logits (nll_loss2d_forward), and one unbatched sample."""
    x, t = torch.randn(2, 4, 3, 5, generator=G), torch.randint(0, 4, (2, 3, 5), generator=G)
    t[0, 0, :2] = -100
    w = torch.rand(4, generator=G) + 0.5
    fn = lambda x, t: F.cross_entropy(x, t, weight=w, reduction=reduction)  # noqa: E731
    torch.testing.assert_close(compiled(fn)(x, t), fn(x, t))
    torch._dynamo.reset()
    one = lambda x, t: F.nll_loss(x.log_softmax(0), t, reduction=reduction)  # noqa: E731
    x1, t1 = torch.randn(6, generator=G), torch.tensor(3)
    torch.testing.assert_close(compiled(one)(x1, t1), one(x1, t1))


def test_cross_entropy_with_every_target_ignored_is_nan():
    x, t = torch.randn(3, 4, generator=G), torch.full((3,), -100)
    got = compiled(lambda x, t: F.cross_entropy(x, t))(x, t)
    assert torch.isnan(got) and torch.isnan(F.cross_entropy(x, t))


def test_cross_entropy_rejects_a_target_outside_the_classes():
    x, t = torch.randn(3, 4, generator=G), torch.tensor([0, 4, 1])
    with pytest.raises(Exception, match="E40002"):
        compiled(lambda x, t: F.cross_entropy(x, t))(x, t)


def test_language_model_loss_in_kiln():
    """A causal LM's loss (GPT-2 with labels), every node in Kiln, over two lengths from one
    compile (the length marked dynamic): the shifted logits' cross_entropy as transformers
    computes it."""
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    fn = lambda ids: model(input_ids=ids, labels=ids, use_cache=False).loss  # noqa: E731
    c = torch.compile(fn, backend="kiln", options=OPTIONS)
    with torch.no_grad():
        for length in (12, 9):
            ids = torch.randint(0, 100, (2, length), generator=G)
            torch._dynamo.mark_dynamic(ids, 1)
            torch.testing.assert_close(c(ids), fn(ids))
