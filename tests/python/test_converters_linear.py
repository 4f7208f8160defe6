"""Matrix-product converters (src/frontend/aten/aten_linear.cc) against PyTorch eager: addmm and
baddbmm with any beta and alpha, mv and dot. fallback_to_cpu=False makes every node convert; the refused
forms stay in PyTorch with their reason in kiln.explain."""

import pytest
import torch

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


G = torch.Generator().manual_seed(11)
M, K, N = torch.randn(5, 7, generator=G), torch.randn(7, 3, generator=G), torch.randn(3, generator=G)
B1, B2 = torch.randn(2, 5, 7, generator=G), torch.randn(2, 7, 3, generator=G)


def compiled_matches_eager(fn, *args):
    expected = fn(*args)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected)  # dtype and shape included


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (-1.25, 1), (1, -3), (0, 0.5)])
@pytest.mark.parametrize("bias_shape", [(5, 3), (3,), (1, 1)])
def test_addmm_with_beta_and_alpha(beta, alpha, bias_shape):
    bias = torch.randn(bias_shape, generator=G)
    compiled_matches_eager(lambda b, m, k: torch.addmm(b, m, k, beta=beta, alpha=alpha), bias, M, K)


@pytest.mark.parametrize("beta, alpha", [(0.5, 2.0), (0, -1)])
def test_baddbmm_with_beta_and_alpha(beta, alpha):
    bias = torch.randn(5, 3, generator=G)
    compiled_matches_eager(lambda b, x, y: torch.baddbmm(b, x, y, beta=beta, alpha=alpha),
                           bias, B1, B2)


def test_beta_zero_ignores_nan_in_input_as_pytorch_does():
    bias = torch.full((5, 3), float("nan"))
    fn = lambda b, m, k: torch.addmm(b, m, k, beta=0)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(bias, M, K)
    assert not got.isnan().any()
    torch.testing.assert_close(got, fn(bias, M, K))


def test_mv():
    compiled_matches_eager(torch.mv, M.t().contiguous(), M[:, 0].contiguous())
    compiled_matches_eager(lambda a, v: a @ v, K, N)  # matmul of a matrix and a vector is mv


def test_dot():
    compiled_matches_eager(torch.dot, N, M[0, :3].contiguous())
    compiled_matches_eager(lambda a, b: a @ b, N, N)  # matmul of two vectors is dot


def test_addmm_with_alpha_zero_stays_in_pytorch():
    # PyTorch's GEMM skips the product for alpha = 0: a NaN in mat1 must not reach the result.
    mat1 = M.clone()
    mat1[0, 0] = float("nan")
    fn = lambda b, m, k: torch.addmm(b, m, k, alpha=0) * 2  # noqa: E731
    bias = torch.randn(5, 3, generator=G)
    report = kiln.explain(fn, bias, mat1, K)
    count, reason = report.fallback["aten.addmm.default"]
    assert count == 1 and "alpha = 0" in reason, str(report)
    torch.testing.assert_close(torch.compile(fn, backend="kiln")(bias, mat1, K), fn(bias, mat1, K))


@pytest.mark.parametrize("op", ["mv", "dot"])
def test_products_of_integers_stay_in_pytorch(op):
    a, v = torch.arange(12).view(3, 4), torch.arange(4)
    if op == "dot":
        a = a[1].contiguous()
    fn = lambda a, v: getattr(torch, op)(a, v) + 1  # noqa: E731
    report = kiln.explain(fn, a, v)
    count, reason = report.fallback[f"aten.{op}.default"]
    assert count == 1 and "matmul" in reason, str(report)
    assert torch.equal(torch.compile(fn, backend="kiln")(a, v), fn(a, v))
