"""Matrix-product converters (src/frontend/aten/aten_linear.cc) against PyTorch eager: addmm,
baddbmm, addmv, addr and addbmm with any beta and alpha, mv, dot and vdot. fallback_to_cpu=False makes every node convert; the refused
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


@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, 2.0), (0, -1)])
def test_addmv_addr_addbmm_with_beta_and_alpha(beta, alpha):
    v5, v3 = torch.randn(5, generator=G), torch.randn(3, generator=G)
    compiled_matches_eager(lambda b, m, v: torch.addmv(b, m, v, beta=beta, alpha=alpha),
                           v5, M, torch.randn(7, generator=G))
    torch._dynamo.reset()
    compiled_matches_eager(lambda b, x, y: torch.addr(b, x, y, beta=beta, alpha=alpha),
                           torch.randn(5, 3, generator=G), v5, v3)
    torch._dynamo.reset()
    compiled_matches_eager(lambda b, x, y: torch.addbmm(b, x, y, beta=beta, alpha=alpha),
                           torch.randn(5, 3, generator=G), B1, B2)


def test_matrix_vector_product_plus_a_vector():
    """m @ v + s adds s element by element: the epilogue fusion once took the [M] vector for a
    bias over columns and added s[0] to every row."""
    s = torch.randn(5, generator=G)
    fn = lambda m, v, s: m @ v + s  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(M, K[:, 0], s)
    torch.testing.assert_close(got, fn(M, K[:, 0], s))


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
    compiled_matches_eager(torch.vdot, N, M[0, :3].contiguous())
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


# ---------------------------------------------------------------- grouped matrix products

def expert_rows(counts, k, dtype=torch.float32):
    """Rows sorted by expert, `counts[e]` of them for expert e, and their offsets."""
    offsets = torch.cumsum(torch.tensor(counts), 0).to(torch.int32)
    rows = torch.randn(int(offsets[-1]) + 2, k, generator=G).to(dtype)  # 2 rows past the last
    return rows, offsets


@pytest.mark.parametrize("counts", [[3, 0, 5, 1], [0, 0, 0, 7], [0, 0, 0, 0]])
def test_transformers_grouped_mm_fallback(counts):
    """transformers' f32 experts under torch.compile: its custom op, zeros past the last group."""
    import transformers.integrations.moe  # noqa: F401 (registers torch.ops.transformers)
    rows, offsets = expert_rows(counts, 6)
    weight = torch.randn(4, 5, 6, generator=G)  # [E, N, K], read transposed as nn.Linear does
    fn = lambda x, w, o: torch.ops.transformers.grouped_mm_fallback(x, w.transpose(-2, -1), o)  # noqa: E731
    compiled_matches_eager(fn, rows, weight, offsets)


def test_aten_grouped_mm():
    """torch._grouped_mm's 2-D by 3-D form, which bf16 experts take (torch.compile takes it in bf16
    only); PyTorch leaves the rows past the last group unspecified, Kiln writes zeros."""
    dtype = torch.bfloat16
    rows, offsets = expert_rows([2, 0, 3], 16, dtype)
    weight = torch.randn(3, 16, 8, generator=G).to(dtype)
    fn = lambda x, w, o: torch._grouped_mm(x, w, offs=o)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(rows, weight, offsets)
    expected = fn(rows, weight, offsets)
    torch.testing.assert_close(got[:5], expected[:5])
    assert (got[5:] == 0).all()


def test_grouped_mm_offsets_past_the_rows_are_a_coded_error():
    import transformers.integrations.moe  # noqa: F401
    rows, _ = expert_rows([2, 2], 4)
    weight = torch.randn(2, 4, 3, generator=G)
    fn = lambda x, w, o: torch.ops.transformers.grouped_mm_fallback(x, w, o)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    compiled(rows, weight, torch.tensor([2, 4], dtype=torch.int32))
    with pytest.raises(kiln.Error) as caught:
        compiled(rows, weight, torch.tensor([2, 9], dtype=torch.int32))
    assert caught.value.code == "E40002" and "more than A's 6 rows" in str(caught.value)


def test_grouped_mm_forms_kiln_does_not_take_stay_in_pytorch():
    x = torch.randn(2, 4, 8, generator=G).bfloat16()
    w = torch.randn(2, 8, 16, generator=G).bfloat16()
    report = kiln.explain(lambda a, b: torch._grouped_mm(a, b), x, w)  # batched: no offsets
    assert "no offs" in report.fallback["aten._grouped_mm.default"][1], str(report)


class Experts(torch.nn.Module):
    """Expert weights as parameters (constants to Kiln, which prepacks them), grouped_mm over
    rows already sorted by expert."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(4, 40, 24, generator=G))  # [E, N, K]

    def forward(self, x, offsets):
        import transformers.integrations.moe  # noqa: F401
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight.transpose(-2, -1), offsets)


@pytest.mark.parametrize("in_place", [False, True])
def test_grouped_mm_on_experts_weights_prepacked_or_in_place(in_place):
    model = Experts().eval()
    options = dict(OPTIONS, **{"memory.gemm_weights_in_place": in_place})
    compiled = torch.compile(model, backend="kiln", options=options, fullgraph=True)
    with torch.no_grad():
        for counts in ([3, 0, 300, 1], [1, 1, 0, 0], [0, 0, 0, 0]):  # 300 rows: calls of 256
            rows, offsets = expert_rows(counts, 24)
            torch.testing.assert_close(compiled(rows, offsets), model(rows, offsets))
    report = kiln.explain(model, rows, offsets, options=options)
    prepacked = report.partitions[0].memory["prepacked_bytes"]
    # oneDNN's blocked layout pads N and K up to its blocks: at least the weights' own bytes.
    assert prepacked == 0 if in_place else prepacked >= 4 * 40 * 24 * 4, str(report)


_CG = torch.Generator().manual_seed(3)
_ROWS = (torch.randn(2, 40, 16, generator=_CG), torch.randn(2, 30, 16, generator=_CG))
_FEW = (torch.randn(7, 5, generator=_CG), torch.randn(9, 5, generator=_CG))


@pytest.mark.parametrize("fn, args", [
    (lambda a, b: torch.cdist(a, b), _ROWS),  # over 25 rows: the matrix-product form
    (lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), _FEW),
    (lambda a, b: torch.cdist(a, b), _FEW),
    (lambda a, b: torch.cdist(a, b, compute_mode="donot_use_mm_for_euclid_dist"), _ROWS),
    (lambda a, b: torch.cdist(a, b[0]), _ROWS),
    (lambda a, b: torch.cdist(a, b, p=1), _FEW),
    (lambda a, b: torch.cdist(a, b, p=float("inf")), _FEW),
    (lambda a, b: torch.cdist(a.round(), b.round(), p=0), _FEW),
    (lambda a, b: torch.cdist(a, b, p=3), _FEW),
], ids=["matmul_form", "matmul_form_asked", "differences", "differences_asked", "broadcast",
        "p1", "p_inf", "p0", "p3"])
def test_cdist_takes_pytorchs_algorithm(fn, args):
    """cdist in the algorithm PyTorch picks for p and the row counts (Mimi's quantizer measures
    its codebook this way): within f32 rounding of eager, exact for p = 0 and inf."""
    expected = fn(*args)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(*args)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.bfloat16])
def test_linalg_cross_is_eagers_bits(dtype):
    """linalg_cross and torch.cross, broadcasting and over a middle dim: eager's bits, its f32
    and f64 kernel's fused multiply-add included; int64 products wrap as eager's."""
    g = torch.Generator().manual_seed(5)
    if dtype.is_floating_point:
        a, b = torch.randn(500, 3, 4, generator=g).to(dtype), torch.randn(1, 3, 4, generator=g)
        b = b.to(dtype)
    else:
        a = torch.randint(-2**40, 2**40, (500, 3, 4), generator=g)
        b = torch.randint(-2**40, 2**40, (1, 3, 4), generator=g)
    for fn in (lambda a, b: torch.linalg.cross(a, b, dim=1),
               lambda a, b: torch.cross(a.transpose(1, 2), b.transpose(1, 2), dim=-1)):
        got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(a, b)
        assert torch.equal(got, fn(a, b))
        torch._dynamo.reset()
