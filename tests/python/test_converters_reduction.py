"""Reduction converters (src/frontend/aten/aten_reduction.cc) against PyTorch eager: sum and mean
over every dim (the .default overloads), with and without a dtype. fallback_to_cpu=False makes
every node convert; a dtype Kiln lacks stays in PyTorch with its reason in kiln.explain."""

import pytest
import torch

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


G = torch.Generator().manual_seed(4)
INPUTS = {"f32": torch.randn(3, 5, 7, generator=G), "scalar": torch.tensor(2.5),
          "i32": torch.randint(-50, 50, (4, 9), generator=G, dtype=torch.int32)}


@pytest.mark.parametrize("fn, x", [
    (lambda x: x.mean(), "f32"),
    (lambda x: x.mean(), "scalar"),
    (lambda x: x.mean(dtype=torch.float64), "f32"),
    (lambda x: x.mean(dtype=torch.float32), "i32"),
    (lambda x: x.sum(), "i32"),
    (lambda x: x.sum(dtype=torch.float64), "f32"),
    (lambda x: x.sum(dtype=torch.int64), "i32"),
], ids=["mean", "mean_0d", "mean_f64", "mean_of_ints_as_f32", "sum_of_ints", "sum_f64",
        "sum_i64"])
def test_reduction_over_every_dim(fn, x):
    x = INPUTS[x]
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)  # dtype and shape included


@pytest.mark.parametrize("value", [2.5, float("nan"), float("inf")])
def test_softmax_of_a_zero_dim_tensor(value):
    fn = lambda x: torch.softmax(x, 0)  # noqa: E731
    x = torch.tensor(value)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x), equal_nan=True)


def test_mean_in_a_dtype_kiln_lacks_stays_in_pytorch():
    fn = lambda x: x.mean(dtype=torch.complex64) * 2  # noqa: E731
    report = kiln.explain(fn, INPUTS["f32"])
    count, reason = report.fallback["aten.mean.default"]
    assert count == 1 and "complex64" in reason, str(report)
    torch.testing.assert_close(torch.compile(fn, backend="kiln")(INPUTS["f32"]),
                               fn(INPUTS["f32"]))


@pytest.mark.parametrize("fn", [
    lambda x: x.prod(),
    lambda x: x.prod(dim=1, keepdim=True),
    lambda x: (x > 0).any(),
    lambda x: (x > 0).all(dim=2),
    lambda x: (x > -3).all(dim=(0, 2), keepdim=True),
    lambda x: x.max(),
    lambda x: x.min(),
    lambda x: x.max(dim=1),
    lambda x: x.min(dim=-1, keepdim=True),
    lambda x: torch.var_mean(x, dim=1),
    lambda x: torch.std_mean(x, dim=(0, 2), correction=0, keepdim=True),
    lambda x: torch.where(x > 1, float("nan"), x).nansum(dim=-1),
    lambda x: torch.count_nonzero(torch.where(x > 0, x, 0), dim=(0, 1)),
    lambda x: torch.count_nonzero(x > 0.5),
    lambda x: torch.nn.functional.pairwise_distance(x[0], x[1]),
    lambda x: torch.trace(x[0]),
    lambda x: torch.trace((x[1] * 10).int()),
    lambda x: torch.aminmax(x),
    lambda x: torch.aminmax(x, dim=1, keepdim=True),
    lambda x: torch.dist(x[0], x[1]),
    lambda x: torch.dist(x[0], x[1, 0], p=1),
    lambda x: torch.dist(x[0], x[1], p=float("inf")),
    lambda x: torch.dist(x[0], x[1], p=3),
], ids=["prod", "prod_dim", "any", "all_dim", "all_dims", "max", "min", "max_dim", "min_dim",
        "var_mean", "std_mean", "nansum", "count_nonzero_dims", "count_nonzero", "pairwise_distance",
        "trace", "trace_of_ints", "aminmax", "aminmax_dim", "dist", "dist_1", "dist_inf",
        "dist_3"])
def test_reductions_of_the_op_list(fn):
    x = INPUTS["f32"]
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)  # values and indices, dtype and shape included


def test_safe_softmax_gives_zeros_for_rows_of_only_minus_infinity():
    """aten._safe_softmax (PyTorch's attention math emits it): a row that attends nothing is 0,
    where softmax gives NaN."""
    x = torch.randn(4, 6, generator=G)
    x[1] = float("-inf")
    x[2, :3] = float("-inf")
    fn = lambda x: torch.ops.aten._safe_softmax(x, -1)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x))
    assert (got[1] == 0).all()


@pytest.mark.parametrize("fn, x", [
    (lambda x: torch.cumsum(x, 0, dtype=torch.float64), "f32"),
    (lambda x: torch.cumsum(x, 1, dtype=torch.int64), "i32"),
    (lambda x: torch.cumsum(x * 40000000, 1, dtype=torch.int32), "i32"),  # wraps as in PyTorch
    (lambda x: torch.cumsum(x, -1, dtype=torch.float32), "i32"),
], ids=["f32_as_f64", "i32_as_i64", "i32_wrapping", "i32_as_f32"])
def test_cumsum_with_a_dtype(fn, x):
    x = INPUTS[x]
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0)


# The running folds and extremes, bit for bit with eager: PyTorch's CPU kernels carry f32 lines in
# an f64 accumulator and f16 and bf16 ones in an f32 accumulator, as Kiln's do; cummax and cummin move the index to the later of equal values
# and to each later NaN. Rows and columns, f32, f64 and integers, NaN and infinities.
SCAN_INPUT = torch.randn(6, 40, 9, generator=G)
SCAN_INPUT[1, 7, 2] = float("nan")
SCAN_INPUT[2, 3] = float("inf")
SCAN_INPUT[3, :, 4] = SCAN_INPUT[3, :, 4].round()  # ties


# cumprod's floats: factors near 1, so that products neither vanish nor overflow.
NEAR_ONE = 1 + SCAN_INPUT / 8


@pytest.mark.parametrize("fn, x", [
    (lambda x: torch.cumprod(x, 1), NEAR_ONE),
    (lambda x: torch.cumprod(x, -1), NEAR_ONE.double()),
    (lambda x: torch.cumprod(x, 0, dtype=torch.float64), NEAR_ONE),
    (lambda x: torch.cumprod(x, 2), (SCAN_INPUT * 3).int()),
    (lambda x: torch.logcumsumexp(x, 1), SCAN_INPUT),
    (lambda x: torch.logcumsumexp(x * 30, -1), SCAN_INPUT),
    (lambda x: torch.logcumsumexp(x, 0), SCAN_INPUT.double()),
    (lambda x: torch.cummax(x, 1), SCAN_INPUT),
    (lambda x: torch.cummin(x, -1), SCAN_INPUT),
    (lambda x: torch.cummax(x, 0), (SCAN_INPUT * 3).long()),
    (lambda x: torch.cummin(x > 0.3, 2), SCAN_INPUT),
    # f16 and bf16: an f32 accumulator, as PyTorch's (an f64 one differs in the last bit).
    (lambda x: torch.cumsum(x, 1), SCAN_INPUT.bfloat16()),
    (lambda x: torch.cumsum(x, -1), SCAN_INPUT.half()),
    (lambda x: torch.cumprod(x, 1), NEAR_ONE.bfloat16()),
    (lambda x: torch.logcumsumexp(x, 0), SCAN_INPUT.bfloat16()),
    (lambda x: torch.cummax(x, 1), SCAN_INPUT.half()),
], ids=["cumprod_columns", "cumprod_rows_f64", "cumprod_as_f64", "cumprod_i32", "logcumsumexp",
        "logcumsumexp_wide", "logcumsumexp_f64", "cummax", "cummin_rows", "cummax_i64",
        "cummin_bool", "cumsum_bf16", "cumsum_f16", "cumprod_bf16", "logcumsumexp_bf16",
        "cummax_f16"])
def test_scans_are_eagers_bits(fn, x):
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


def test_sort_is_stable_with_nan_above_every_number():
    x = torch.tensor([[3.0, float("nan"), -1.0, 3.0, 0.0, -0.0, 2.0, -1.0]]).repeat(3, 1)
    x[1] = x[1].flip(0)
    for kwargs in ({}, {"descending": True}, {"stable": True}, {"dim": 0, "descending": True}):
        fn = lambda x: torch.sort(x, **kwargs)  # noqa: E731
        values, indices = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
        expected = torch.sort(x, stable=True, **{k: v for k, v in kwargs.items() if k != "stable"})
        assert torch.equal(values.nan_to_num(7), expected.values.nan_to_num(7)), kwargs
        assert torch.equal(indices, expected.indices), kwargs
        torch._dynamo.reset()


# searchsorted and bucketize against eager: both sides, i32 results, a line per row, a sorter,
# operands of two dtypes (compared in their promoted dtype), NaN values and NaN in the line.
EDGES = torch.tensor([-1.0, -0.5, -0.5, 0.0, 0.25, 1.0, float("inf")])
VALUES = torch.cat([torch.randn(3, 30, generator=G), EDGES.repeat(3, 1),
                    torch.tensor([[float("nan")], [float("-inf")], [0.1]])], dim=1)
ROWS = torch.sort(torch.randn(3, 9, generator=G), dim=1).values
SHUFFLE = torch.randperm(9, generator=G).repeat(3, 1)


@pytest.mark.parametrize("fn", [
    lambda v: torch.bucketize(v, EDGES),
    lambda v: torch.bucketize(v, EDGES, right=True, out_int32=True),
    lambda v: torch.searchsorted(EDGES, v, side="right"),
    lambda v: torch.searchsorted(ROWS, v),
    lambda v: torch.searchsorted(ROWS.gather(1, SHUFFLE.argsort(1)), v, sorter=SHUFFLE),
    lambda v: torch.bucketize(v.double(), EDGES),
    lambda v: torch.bucketize((v * 4).int(), EDGES, right=True),
    lambda v: torch.bucketize(v.bfloat16(), EDGES.bfloat16()),
    lambda v: torch.searchsorted(torch.tensor([1.0, 2.0, float("nan"), 4.0]), v),
    # Operands in torch.result_type of theirs: a Python float or a rank-0 f64 tensor searched in
    # an f32 line compares in f32 (0.1 in f64 is below f32's 0.1, so the right side would be 0).
    lambda v: torch.searchsorted(torch.tensor([0.1, 0.2]), 0.1, right=True) + v.shape[0],
    lambda v: torch.searchsorted(torch.tensor([0.1, 0.2]), torch.tensor(0.1).double(),
                                 right=True) + v.shape[0],
    lambda v: torch.searchsorted(torch.tensor([0.1, 0.2]).double(), v.float(), right=True),
    lambda v: torch.bucketize(2, EDGES, right=True) + v.shape[0],
    lambda v: torch.bucketize(1.5, torch.tensor([1, 2, 3])) + v.shape[0],
], ids=["bucketize", "bucketize_right_i32", "side_right", "rows", "sorter", "f64_values",
        "int_values", "bf16", "nan_in_line", "python_float", "rank0_f64", "f64_line",
        "python_int", "python_float_in_ints"])
def test_searchsorted_is_eagers(fn):
    expected = fn(VALUES)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(VALUES)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)  # dtype included


# Bins on edges computed in the input's dtype, values outside and NaN uncounted, the data's own
# range when min == max: bit for bit as torch.histc.
@pytest.mark.parametrize("bins, lo, hi", [(4, 0, 3), (10, -2.5, 2.5), (7, 0, 0), (3, 1, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histc(bins, lo, hi, dtype):
    x = torch.randn(1000, generator=G, dtype=dtype) * 2
    x[::97] = float("nan")
    x[5] = hi
    x[6] = lo
    fn = lambda v: torch.histc(v, bins=bins, min=lo, max=hi)  # noqa: E731
    if lo == hi:
        x = x.nan_to_num(0.5)  # a NaN in the data's range is an error (below)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got, fn(x)), (got, fn(x))


def test_histc_of_the_data_range_with_nan_is_a_coded_error():
    fn = lambda v: torch.histc(v, bins=3)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    x = torch.tensor([1.0, float("nan"), 2.0])
    with pytest.raises(RuntimeError, match="not finite"):
        fn(x)
    with pytest.raises(kiln.Error) as caught:
        compiled(x)
    assert caught.value.code == "E40002" and "not finite" in str(caught.value)


# linalg.vector_norm (torch.norm, torch.linalg.vector_norm, F.normalize): each ord's reduction
# of |x| (0: the count of nonzeros, ±inf: the largest or smallest magnitude, otherwise the sum of
# |x|^ord to the power 1/ord), over some dims or all, kept or not, and with a dtype (a cast of
# x); zeros and negative values included, so that |x| matters and ord < 0 meets 1/0.
@pytest.mark.parametrize("ord", [2, 1, 0, 3, 0.5, -1.5, float("inf"), float("-inf")])
@pytest.mark.parametrize("dim, keepdim", [(None, False), (-1, True), ((0, 2), False)])
def test_vector_norm(ord, dim, keepdim):
    x = INPUTS["f32"].clone()
    x[0, 1] = 0
    fn = lambda x: torch.linalg.vector_norm(x, ord, dim, keepdim)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x))


def test_vector_norm_in_a_dtype_and_normalize():
    x = INPUTS["f32"]
    fns = [lambda x: torch.linalg.vector_norm(x, dim=1, dtype=torch.float64),
           lambda x: torch.nn.functional.normalize(x, dim=-1),
           lambda x: x.norm(p=2, dim=0, keepdim=True)]
    for fn in fns:
        torch._dynamo.reset()
        got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
        torch.testing.assert_close(got, fn(x))


@pytest.mark.parametrize("fn, dim", [
    (lambda x: torch.kthvalue(x, 2, dim=1), 1),
    (lambda x: torch.kthvalue(x, 5, dim=0, keepdim=True), 0),
    (lambda x: torch.median(x, dim=1), 1),
    (lambda x: torch.median(x, dim=0, keepdim=True), 0),
    (lambda x: torch.nanmedian(x, dim=1), 1),
    (lambda x: torch.nanmedian(x, dim=-1, keepdim=True), 1),
], ids=["kthvalue", "kthvalue_keepdim", "median", "median_keepdim", "nanmedian",
        "nanmedian_keepdim"])
def test_order_statistics_with_ties_and_nans(fn, dim):
    """kthvalue, median and nanmedian: eager's values (NaN last in the order, median NaN where a
    slice holds one, nanmedian over the numbers alone, all-NaN slices NaN); among equal elements
    PyTorch promises only that x[index] is the value (its own choice varies), so the indices are
    checked so."""
    x = torch.tensor([[3.0, 1, 2, 1, 2, 5], [float("nan"), 4, 4, 1, float("nan"), 0],
                      [7, 7, 7, 7, 7, 7], [float("nan")] * 6, [0, -1, 2, -3, 4, -5.0]])
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    expected = fn(x)
    torch.testing.assert_close(got.values, expected.values, equal_nan=True, rtol=0, atol=0)
    assert got.indices.dtype == torch.int64 and got.indices.shape == expected.indices.shape
    kept = got.indices if got.indices.dim() == x.dim() else got.indices.unsqueeze(dim)
    torch.testing.assert_close(x.gather(dim, kept), got.values.reshape(kept.shape),
                               equal_nan=True, rtol=0, atol=0)


def test_whole_tensor_medians():
    x = torch.tensor([[3.0, 1, 2], [4, float("nan"), 0]])
    for fn in (torch.median, torch.nanmedian):
        torch._dynamo.reset()
        for t in (x, x[:, [0, 2]], torch.tensor(2.5)):
            got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(t)
            torch.testing.assert_close(got, fn(t), equal_nan=True, rtol=0, atol=0)
