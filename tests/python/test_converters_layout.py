"""Layout and creation converters (src/frontend/aten/aten_layout.cc, aten_shape.cc) against
PyTorch eager: to(memory_format=...) as a copy of the same values (Kiln's tensors are dense
row-major), arange with a start and a step, Tensor.unfold's windows. fallback_to_cpu=False makes
every node convert; the refused forms stay in PyTorch with their reason in kiln.explain."""

import functools

import pytest
import torch

import kiln
from kiln.backend import Report, kiln_backend

OPTIONS = {"operator_selection.fallback_to_cpu": False}


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


X = torch.randn(2, 3, 4, 5, generator=torch.Generator().manual_seed(2))


@pytest.mark.parametrize("fn", [
    lambda x: x.to(memory_format=torch.channels_last) * 2,
    lambda x: x.to(memory_format=torch.channels_last),
    lambda x: x.to(torch.float64, memory_format=torch.channels_last) + 1,
    lambda x: x.contiguous(memory_format=torch.channels_last).sum(1),
], ids=["then_mul", "alone", "with_dtype", "contiguous_then_sum"])
def test_memory_format_is_a_copy_of_the_values(fn):
    expected = fn(X)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(X)
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert torch.equal(got, expected)


@pytest.mark.parametrize("start, end, step, dtype", [
    (3, 11, None, None), (-2, 5, None, torch.float32), (1.5, 4, None, None),
    (10, -3, -3, None), (0.25, 2, 0.5, torch.float64), (2, 7, 2, torch.int32),
])
def test_arange_with_start_and_step(start, end, step, dtype):
    def fn(x):
        ramp = (torch.arange(start, end, dtype=dtype) if step is None
                else torch.arange(start, end, step, dtype=dtype))
        return ramp, x + 1
    expected = fn(X)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(X)
    assert got[0].dtype == expected[0].dtype
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


def test_cast_to_a_dtype_kiln_lacks_stays_in_pytorch():
    fn = lambda x: x.to(torch.complex64, memory_format=torch.channels_last) * 2  # noqa: E731
    report = kiln.explain(fn, X)
    count, reason = report.fallback["aten._to_copy.default"]
    assert count == 1 and "complex64" in reason, str(report)
    assert torch.equal(torch.compile(fn, backend="kiln")(X), fn(X))


def compiled_dynamic_matches_eager(fn, x) -> Report:
    """fn compiled with dynamic=True equals eager on x (a pair of outputs); kiln.explain compiles
    with static shapes, so the backend's report is taken from the backend directly."""
    report = Report()
    backend = functools.partial(kiln_backend, options={"dynamic_shape.enable": True},
                                _report=report)
    got, expected = torch.compile(fn, backend=backend, dynamic=True)(x), fn(x)
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
    return report


def test_arange_with_a_symbolic_start_stays_in_pytorch():
    fn = lambda x: (x * 2, torch.arange(x.shape[0], 20))  # noqa: E731
    report = compiled_dynamic_matches_eager(fn, torch.randn(6))
    count, reason = report.fallback["aten.arange.start"]
    assert count == 1 and "'start'" in reason, str(report)


def test_transpose_of_a_0d_tensor_is_itself():
    # src/frontend/aten/aten_shape.cc: PyTorch takes dims 0 and -1 on a 0-d tensor.
    x = torch.tensor(3.5)
    fn = lambda x: x.transpose(0, -1) * 2  # noqa: E731
    assert torch.equal(torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x), fn(x))


def test_a_size_computation_alone_is_no_partition():
    # 2 * s0 feeds only an arange that stays in PyTorch: nothing for Kiln, so no Kiln graph.
    fn = lambda x: (x * 2, torch.arange(x.shape[0] * 2, 40))  # noqa: E731
    report = compiled_dynamic_matches_eager(fn, torch.randn(6))
    assert len(report.partitions) == 1, str(report)


@pytest.mark.parametrize("pad", [(1, 2), (1, 2, 0, 1), (-1, 1, -2, 1), (2, 0, 1, 1, 1, 1)],
                         ids=["1d", "2d", "cropping", "3d"])
def test_circular_padding(pad):
    """F.pad(mode="circular") reaches Kiln as new_empty written by slice_scatters: new_empty
    becomes zeros (its contents are unspecified, and every element is overwritten)."""
    x = torch.randn(2, 3, 4, 5, 6, generator=torch.Generator().manual_seed(3))[
        (0,) * (3 - len(pad) // 2)]
    fn = lambda x: torch.nn.functional.pad(x, pad, mode="circular")  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got, fn(x))


@pytest.mark.parametrize("mode", ["replicate", "reflect"])
@pytest.mark.parametrize("pad", [(-1, 1, -2, 1), (2, -1, 0, -3), (-2, -1, -1, -1)])
def test_negative_padding_crops(mode, pad):
    """Negative reflect and replicate amounts crop (a slice), then the positive ones pad."""
    x = torch.randn(2, 3, 6, 7, generator=torch.Generator().manual_seed(4))
    fn = lambda x: torch.nn.functional.pad(x, pad, mode=mode)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert torch.equal(got, fn(x))


def test_padding_that_crops_a_dim_away_stays_in_pytorch():
    """Replicate padding of a dim cropped to nothing (PyTorch clamps into the input instead) is
    refused with its reason, and the result is still PyTorch's."""
    x = torch.randn(2, 3, 4, 4, generator=torch.Generator().manual_seed(5))
    fn = lambda x: torch.nn.functional.pad(x, (-4, 5, 0, 0), mode="replicate")  # noqa: E731
    report = kiln.explain(fn, x)
    count, reason = report.fallback["aten.replication_pad2d.default"]
    assert count == 1 and "non-empty" in reason, str(report)
    assert torch.equal(torch.compile(fn, backend="kiln")(x), fn(x))


@pytest.mark.parametrize("args", [(3, 2, 1), (1, 2, 2), (-1, 5, 5), (0, 1, 3), (2, 4, 1)],
                         ids=["overlapping", "strided", "last_dim_patches", "dim0", "whole_dim"])
def test_tensor_unfold_windows_bit_for_bit(args):
    """Tensor.unfold (PatchTST's patches): a gather at constant positions, copied exactly."""
    fn = lambda x: x.unfold(*args) * 1  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(X)
    assert torch.equal(got, fn(X))


def test_tensor_unfold_with_a_dynamic_batch_and_along_a_dynamic_dim():
    fn = lambda x: x.unfold(2, 2, 1).sum(-1)  # noqa: E731
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    for n in (2, 5):
        x = torch.randn(n, 3, 4, 5)
        torch._dynamo.mark_dynamic(x, 0)
        torch.testing.assert_close(compiled(x), fn(x))
    x = torch.randn(2, 3, 6, 5)
    torch._dynamo.mark_dynamic(x, 2)
    report = kiln.explain(lambda t: t.unfold(2, 2, 1).exp(), x)
    assert "dynamic dim" in report.fallback["aten.unfold.default"][1], str(report)


@pytest.mark.parametrize("fn", [
    lambda x: torch.nn.functional.pixel_shuffle(x, 2),
    lambda x: torch.nn.functional.pixel_unshuffle(torch.nn.functional.pixel_shuffle(x, 2), 2),
    lambda x: torch.nn.functional.pixel_unshuffle(x.repeat(1, 1, 2, 2), 2),
    lambda x: torch.nn.functional.channel_shuffle(x.repeat(1, 2, 1, 1), 4),
], ids=["pixel_shuffle", "unshuffle_of_shuffle", "pixel_unshuffle", "channel_shuffle"])
def test_shuffles_bit_for_bit_with_a_dynamic_batch(fn):
    """Super-resolution's sub-pixel convolutions and ShuffleNet's channel mixing: reshapes and
    a permute."""
    compiled = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)
    for n in (2, 3):
        x = torch.randn(n, 4, 3, 5, generator=torch.Generator().manual_seed(n))
        torch._dynamo.mark_dynamic(x, 0)
        assert torch.equal(compiled(x), fn(x))


_G = torch.Generator().manual_seed(11)
_M = torch.randn(4, 5, generator=_G)
_M[0, 0], _M[1, 1], _M[2, 2] = float("nan"), -0.0, float("inf")
_T = torch.randn(2, 3, 4, generator=_G)


# Composites of flips, permutes, pads and constant gathers: eager's values exactly.
@pytest.mark.parametrize("fn, x", [
    (lambda x: torch.rot90(x, 1, (0, 1)), _M),
    (lambda x: torch.rot90(x, -1, (1, 2)), _T),
    (lambda x: torch.rot90(x, 2, (0, 2)), _T),
    (lambda x: torch.rot90(x, 4, (0, 1)) * 2, _M),
    (lambda x: torch.diag(x), _M),
    (lambda x: torch.diag(x, -2), _M),
    (lambda x: torch.diag(x, 7), _M),
    (lambda x: torch.diag(x[0], 1), _M),
    (lambda x: torch.diagonal(x, 1, 2, 0) * 2, _T),
    (lambda x: torch.diag_embed(x), _M),
    (lambda x: torch.diag_embed(x, -1, 0, 2), _T),
    (lambda x: torch.diag_embed(x[:, :0], 2), _M),  # no diagonal: zeros of [4, 2, 2]
    (lambda x: torch.block_diag(x[:2], x[0], torch.tensor(3.0), x[:3, :2].int()), _M),
    (lambda x: torch.narrow_copy(x, 1, 1, 3), _M),
], ids=["rot90", "rot90_back", "rot90_twice", "rot90_whole_turn", "diag", "diag_below",
        "diag_empty", "diag_of_a_row", "diagonal_3d", "diag_embed", "diag_embed_dims", "diag_embed_empty",
        "block_diag", "narrow_copy"])
def test_diagonal_and_rotation_composites(fn, x):
    expected = fn(x)
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, expected, rtol=0, atol=0, equal_nan=True)


A = torch.ops.aten


@pytest.mark.parametrize("fn", [
    lambda x: A.view_copy(x, [4, 3, 2]),
    lambda x: A.permute_copy(x, [2, 0, 1]),
    lambda x: A.transpose_copy(x, 0, 2),
    lambda x: A.t_copy(x[0]),
    lambda x: A.squeeze_copy(x[:, :1]),
    lambda x: A.squeeze_copy.dim(x[:, :1], 1),
    lambda x: A.squeeze_copy.dims(x[:1, :1], [0, 1]),
    lambda x: A.unsqueeze_copy(x, 1),
    lambda x: A.expand_copy(x[:, :1], [2, 3, 4]),
    lambda x: A.alias_copy(x) + 1,
    lambda x: A.detach_copy(x),
    lambda x: A.unbind_copy(x, 1)[2],
    lambda x: A.split_copy(x, 2, 2)[1],
    lambda x: A.split_with_sizes_copy(x, [1, 3], 2)[1],
    lambda x: A.unfold_copy(x, 2, 2, 1),
    lambda x: A.as_strided_copy(x, [3, 2], [4, 1], 1),
    lambda x: A.slice_copy(x, 2, 1, 4, 2),
    lambda x: A.select_copy(x, 1, -1),
    lambda x: A.narrow_copy(x, 2, 1, 2),
    lambda x: A.diagonal_copy(x, 0, 1, 2),
    lambda x: A.unsafe_split(x, 3, 2)[1],
    lambda x: A.unsafe_split_with_sizes(x, [2, 1], 1)[0],
    lambda x: torch.unsafe_chunk(x, 2, 2)[1],
], ids=["view", "permute", "transpose", "t", "squeeze", "squeeze_dim", "squeeze_dims",
        "unsqueeze", "expand", "alias", "detach", "unbind", "split", "split_with_sizes", "unfold",
        "as_strided", "slice", "select", "narrow", "diagonal", "unsafe_split",
        "unsafe_split_with_sizes", "unsafe_chunk"])
def test_twins(fn):
    """Functionalized and exported graphs hold aten.*_copy where eager graphs hold views, and
    unsafe_split is split without autograd's checks; each converts as its original
    (src/frontend/aten/aten_twins.cc), every node in Kiln."""
    x = _T
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0)


def test_functional_zero_and_strided_empties():
    """x.zero_() as functionalization leaves it (aten.zero), and new_empty_strided, whose
    contents PyTorch leaves unspecified (Kiln's are zeros); only the shape and dtype are compared
    for the empties."""
    x = _T
    fn = lambda x: torch.ops.aten.zero(x) + x  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    torch.testing.assert_close(got, fn(x), rtol=0, atol=0)
    torch._dynamo.reset()
    fn = lambda x: x.new_empty_strided((3, 2), (1, 3), dtype=torch.float64)  # noqa: E731
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(x)
    assert got.shape == (3, 2) and got.dtype == torch.float64


@pytest.mark.parametrize("fn", [
    lambda x: torch.diagonal_scatter(x, torch.ones(2, 3), 1, 1, 2),
    lambda x: torch.as_strided_scatter(x, torch.zeros(3, 2), (3, 2), (4, 1), 1),
    lambda x: torch.as_strided_scatter(x, torch.arange(4.0).reshape(2, 2), (2, 2), (1, 2)),
], ids=["diagonal_scatter", "as_strided_scatter_rows", "as_strided_scatter_columns"])
def test_scatters_through_views(fn):
    """diagonal_scatter and as_strided_scatter (functionalization's writes through a view): a
    scatter into x flattened at the view's constant positions, bit for bit."""
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(_T)
    torch.testing.assert_close(got, fn(_T), rtol=0, atol=0)


def test_in_place_write_through_a_diagonal_view():
    def fn(x):
        y = x * 2
        y.diagonal(0, 1, 2).fill_(-1.0)
        return y + 1
    got = torch.compile(fn, backend="kiln", options=OPTIONS, fullgraph=True)(_T)
    torch.testing.assert_close(got, fn(_T), rtol=0, atol=0)
