"""aten.index.Tensor (advanced indexing) and torch.export's metadata guards through Kiln's
converters (src/frontend/aten/aten_index.cc, aten_shape.cc), against eager, bit for bit: indexing
moves elements without arithmetic. fallback_to_cpu=False makes every node convert."""

import pytest
import torch
import torch.nn.functional as F

import kiln

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


X = torch.randn(3, 4, 5, 6, generator=torch.Generator().manual_seed(3))
I = torch.tensor([[2, 0], [-1, 1]])          # negative indices wrap, as in PyTorch
J = torch.tensor([0, 3, -2], dtype=torch.int32)

# PyTorch puts the broadcast index dims at the first indexed dim when the indexed dims are
# adjacent, else in front: each case below lands them in another place.
CASES = {
    "leading": lambda x, i, j: x[i],
    "leading_two": lambda x, i, j: x[i, i[:, :1]],
    "middle": lambda x, i, j: x[:, j],
    "middle_adjacent_pair": lambda x, i, j: x[:, j, j.long()],
    "last": lambda x, i, j: x[..., j],
    "separated": lambda x, i, j: x[i, :, i],
    "separated_broadcast": lambda x, i, j: x[:, j.view(3, 1), :, j.long()],
}


@pytest.mark.parametrize("case", CASES)
def test_advanced_indexing_matches_eager(case):
    fn = CASES[case]
    expected = fn(X, I, J)
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    got = compiled(X, I, J)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_exported_model_with_metadata_asserts_and_indexing(tmp_path):
    # torch.export leaves aten._assert_tensor_metadata guards in the graph (GPT-2's do); they
    # compute nothing and must not keep a model out of an offline file.
    class Gather(torch.nn.Module):
        def forward(self, x, positions):
            return x.to(torch.float32)[:, positions] + 1

    model = Gather()
    x, positions = torch.randn(2, 7, 3), torch.tensor([6, 0, 2])
    path = tmp_path / "gather.kiln"
    kiln.export(model, (x, positions), path)
    assert torch.equal(kiln.load(path)(x, positions), model(x, positions))


# Scatters and index_put: elements move (or add, or multiply), compared bit for bit.
T = torch.randn(5, 6, generator=torch.Generator().manual_seed(5))
IDX = torch.tensor([[0, 4, 2], [1, 0, 3]])
SCATTERS = {
    "scatter_src": lambda t: t.scatter(1, IDX, -t[:2, :3]),
    "scatter_value": lambda t: t.scatter(0, IDX, 2.5),
    "scatter_add": lambda t: t.scatter_add(1, IDX, t[:2, :3]),
    "scatter_reduce_multiply": lambda t: t.scatter(1, IDX, t[:2, :3], reduce="multiply"),
    "index_put": lambda t: t.index_put((torch.tensor([4, -1, 0]),), t[1]),
    "index_put_accumulate": lambda t: t.index_put(
        (torch.tensor([1, 1, 3]), torch.tensor([0, 0, 5])), torch.tensor(1.5), accumulate=True),
    "slice_scatter": lambda t: torch.slice_scatter(t, -t[:, :2], dim=1, start=1, end=5, step=2),
    "slice_scatter_open": lambda t: torch.slice_scatter(t, t[2:], dim=0, start=-3),
    "select_scatter": lambda t: torch.select_scatter(t, -t[:, 0], dim=1, index=-2),
    "setitem": lambda t: _assign(t),
    # StaticCache's index_copy_ at cache_position, along the last dim, and index_add with
    # repeated positions (added in the index's order) and an alpha.
    "index_copy_dim0": lambda t: t.index_copy(0, torch.tensor([3, 0]), -t[:2]),
    "index_copy_last_dim": lambda t: t.index_copy(-1, torch.tensor([5, 1]), t[:, :2] * 2),
    "index_add_repeated": lambda t: t.index_add(1, torch.tensor([2, 2, 0]), t[:, 3:]),
    "index_add_alpha": lambda t: t.index_add(0, torch.tensor([1, 4]), t[2:4], alpha=-0.5),
    # VLMs' image features into the prompt: the k-th true element takes source's k-th.
    "masked_scatter": lambda t: t.masked_scatter(t > 0, -10 * t),
    "masked_scatter_broadcast_rows": lambda t: t.masked_scatter(
        torch.tensor([[True], [False], [True], [False], [True]]), torch.arange(30.0)),
    # Boolean masks over leading dims, values the same at every true element.
    "mask_scalar": lambda t: t.index_put((t > 0,), torch.tensor(2.5)),
    "mask_rows_int_value": lambda t: t.index_put((t[:, 0] > 0,), torch.tensor(3)),
    "mask_rows_row_values": lambda t: t.index_put((t[:, 1] < 0,), -t[0]),
    "mask_rows_one_row": lambda t: t.index_put((t[:, 1] < 0,), t[:1]),
    "mask_accumulate": lambda t: t.index_put((t[:, 2] > 0,), t[3], accumulate=True),
    "mask_setitem": lambda t: _assign_masked(t),
}


def _assign_masked(t):
    u = t.clone()
    u[u < -0.5] = 0.0
    return u


def _assign(t):
    u = t.clone()
    u[1:3, ::2] = 0.0
    u[:, 4] = t[:, 0]
    return u


@pytest.mark.parametrize("case", SCATTERS)
def test_scatters_match_eager(case):
    fn = SCATTERS[case]
    expected = fn(T)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(T)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)
    report = kiln.explain(fn, T, options=OPTIONS)
    assert not report.fallback, str(report)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_scatter_reduce_matches_eager(reduce, include_self, dtype):
    """scatter_reduce (TAPAS's and BLT's segment reductions): duplicates, positions no index
    reaches, a NaN in x and in src (float), the floor division of an integer mean."""
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(4, 6, generator=gen) * 4).to(dtype)
    src = (torch.randn(3, 6, generator=gen) * 4).to(dtype)
    index = torch.tensor([[0, 0, 2, 3, 0, 2], [0, 2, 2, 3, 0, 0], [2, 0, 2, 3, 3, 0]])
    if dtype.is_floating_point:
        x[0, 1], src[1, 4] = float("nan"), float("nan")
    fn = lambda x, s: x.scatter_reduce(0, index, s, reduce, include_self=include_self)  # noqa: E731
    if not dtype.is_floating_point and reduce in ("amax", "amin") and not include_self:
        report = kiln.explain(fn, x, src)
        assert "without include_self" in report.fallback["aten.scatter_reduce.two"][1]
        return
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x, src)
    torch.testing.assert_close(got, fn(x, src), equal_nan=True, rtol=0, atol=0)


S = torch.tensor(2.5)


@pytest.mark.parametrize("fn, x", [
    (lambda s: s.scatter(0, torch.tensor(0), 5.0), S),
    (lambda s: s.scatter(-1, torch.tensor(0), s * 3), S),
    (lambda s: s.scatter_add(0, torch.tensor(0), s), S),
    (lambda s: s.scatter(0, torch.tensor([0]), torch.tensor([7.0])), S),
    (lambda s: s.gather(0, torch.tensor(0)), S),
    (lambda s: s.gather(0, torch.tensor([0, 0])), S),
    (lambda t: t[1].gather(0, torch.tensor(4)), T),
], ids=["scatter_value", "scatter_src", "scatter_add", "scatter_1d_index", "gather",
        "gather_1d_index", "gather_0d_index_of_1d"])
def test_zero_dim_scatter_and_gather(fn, x):
    """PyTorch takes a 0-d operand as one element along dim 0."""
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_mask_index_put_with_a_row_for_each_true_element_stays_in_pytorch():
    """x[mask] = v, v with one row per true element: how many rows the data decides."""
    rows = torch.ones(int((T[:, 0] > 0).sum()), 6)
    fn = lambda t: t.index_put((t[:, 0] > 0,), rows)  # noqa: E731
    report = kiln.explain(fn, T)
    [(target, (_, why))] = report.fallback.items()
    assert target == "aten.index_put.default" and "depends on the data" in why, why
    torch.testing.assert_close(torch.compile(fn, backend="kiln")(T), fn(T))


@pytest.mark.parametrize("fn", [
    lambda t: t.unbind(0)[3] * 2,
    lambda t: sum(t.unbind(-1)),
    lambda t: torch.stack(t.reshape(5, 2, 3).unbind(1), dim=2),
], ids=["unbind_rows", "unbind_last", "unbind_restack"])
def test_unbind_matches_eager(fn):
    expected = fn(T)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(T)
    assert torch.equal(got, expected)


# as_strided reads memory: Kiln converts it where PyTorch's input is dense row-major from
# offset 0 (a reshape, or a gather at constant offsets), and leaves other inputs to PyTorch.
@pytest.mark.parametrize("fn", [
    lambda t: (t * 2).as_strided((3, 2, 1), (2, 1, 7)),              # row-major: a reshape
    lambda t: (t + 1).as_strided((4, 3), (1, 6)),                     # a transpose's view
    lambda t: (t - 1).as_strided((3, 3), (7, 1), 2),                  # overlapping rows, offset
    lambda t: (t.amax(-1, keepdim=True)).as_strided((5, 1), (1, 5)),  # Swin's pooler
], ids=["reshape", "transposed", "overlapping_offset", "size_one_strides"])
def test_as_strided_of_dense_tensors(fn):
    expected = fn(T)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(T)
    assert got.shape == expected.shape
    assert torch.equal(got, expected)


def test_as_strided_of_a_strided_view_stays_in_pytorch():
    fn = lambda t: t.t().as_strided((2, 2), (1, 2)) * 3  # noqa: E731
    report = kiln.explain(fn, T)
    count, reason = report.fallback["aten.as_strided.default"]
    assert count == 1 and "dense row-major" in reason, str(report)
    assert torch.equal(torch.compile(fn, backend="kiln")(T), fn(T))


# nn.EmbeddingBag: bags of rows summed or averaged (recommendation models' sparse features).
BAG_WEIGHT = torch.randn(20, 6, generator=torch.Generator().manual_seed(11))
BAG_INDICES = torch.tensor([3, 7, 7, 0, 19, 4, 4, 4, 11, 2])
BAG_OFFSETS = torch.tensor([0, 3, 3, 8])  # bag 1 is empty


@pytest.mark.parametrize("fn", [
    lambda i, o: F.embedding_bag(i, BAG_WEIGHT, o, mode="sum"),
    lambda i, o: F.embedding_bag(i, BAG_WEIGHT, o, mode="mean"),
    lambda i, o: F.embedding_bag(i, BAG_WEIGHT, o, mode="mean", padding_idx=4),
    lambda i, o: F.embedding_bag(i, BAG_WEIGHT, o, mode="sum", padding_idx=7),
    lambda i, o: F.embedding_bag(i, BAG_WEIGHT, torch.cat([o, torch.tensor([10])]),
                                 mode="mean", include_last_offset=True),
    lambda i, o: F.embedding_bag(i.view(2, 5), BAG_WEIGHT, mode="mean"),
    lambda i, o: torch.nn.EmbeddingBag.from_pretrained(BAG_WEIGHT, mode="sum")(i.int(), o.int()),
], ids=["sum", "mean", "mean_padding_idx", "sum_padding_idx", "include_last_offset", "2d_bags",
        "int32_module"])
def test_embedding_bag_matches_eager_bit_for_bit(fn):
    """Each bag sums its rows in the indices' order, as PyTorch does; an empty bag is 0."""
    expected = fn(BAG_INDICES, BAG_OFFSETS)
    got = torch.compile(fn, backend="kiln", options=OPTIONS)(BAG_INDICES, BAG_OFFSETS)
    assert torch.equal(got, expected)


def test_embedding_bag_per_sample_weights_and_max():
    """Eager's fbgemm kernel fuses the weight into an FMA: one rounding of each term apart.
    max stays in PyTorch."""
    weights = torch.rand(10, generator=torch.Generator().manual_seed(12))
    fn = lambda i, o, s: F.embedding_bag(i, BAG_WEIGHT, o, per_sample_weights=s,  # noqa: E731
                                         mode="sum")
    got = torch.compile(fn, backend="kiln", options=OPTIONS)(BAG_INDICES, BAG_OFFSETS, weights)
    terms = F.embedding_bag(BAG_INDICES, BAG_WEIGHT.abs(), BAG_OFFSETS, mode="sum",
                            per_sample_weights=weights)
    expected = fn(BAG_INDICES, BAG_OFFSETS, weights)
    assert ((got - expected).abs() <= 4 * 2.0**-24 * terms).all()
    report = kiln.explain(lambda i, o: F.embedding_bag(i, BAG_WEIGHT, o, mode="max") * 2,
                          BAG_INDICES, BAG_OFFSETS)
    assert "max mode" in report.fallback["aten._embedding_bag_forward_only.default"][1]


def test_one_hot_checks_its_class_values_in_kiln():
    """F.one_hot's class-value checks (aten._assert_async) run in Kiln's graph, so the whole
    function is one partition, and a value out of range raises PyTorch's message."""
    fn = lambda x: torch.nn.functional.one_hot(x, 5) * 2  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    x = torch.tensor([[0, 3], [4, 1]])
    assert torch.equal(compiled(x), fn(x))
    with pytest.raises(Exception, match="E40002.*Class values must be smaller than num_classes"):
        compiled(torch.tensor([[0, 7], [4, 1]]))
    with pytest.raises(Exception, match="E40002.*Class values must be non-negative"):
        compiled(torch.tensor([[0, -1], [4, 1]]))


_V = torch.randn(4, 5, generator=torch.Generator().manual_seed(12))
_V[0, 0] = float("nan")


@pytest.mark.parametrize("fn", [
    lambda x: torch.take(x, torch.tensor([[0, -1], [7, -20]])),
    lambda x: torch.isin(x, x[1]),
    lambda x: torch.isin((x * 2).round(), torch.tensor([0.0, 1.0, -1.0, float("nan")]),
                         invert=True),
    lambda x: torch.isin(x.round(), 1.0),
    lambda x: torch.isin(2, (x * 2).round().long()),
], ids=["take", "isin", "isin_inverted", "isin_a_number", "number_isin"])
def test_take_and_isin(fn):
    """take reads the flattened tensor (negative indices from the end); isin compares each
    element with every test element (NaN is never in), as PyTorch does for small sets."""
    expected = fn(_V)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(_V)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)
