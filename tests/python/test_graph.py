"""Building, printing, parsing and verifying graphs from Python."""

import gc

import numpy as np
import pytest
import torch

import kiln
from conftest import expect_error


def relu_graph():
    g = kiln.Graph("g")
    x = g.add_input("x", "f32", [2, 3])
    g.set_outputs([g.add("relu", [x])])
    return g


def test_values_expose_name_dtype_and_shape():
    g = kiln.Graph("g")
    batch = g.add_symbol("B", 1, 8)
    assert (batch.name, batch.min, batch.max) == ("B", 1, 8)
    x = g.add_input("x", "f32", [batch, 3])
    y = g.add_input("y", "i64", ("B", 4))
    assert (x.name, x.dtype, x.shape) == ("x", "f32", ["B", 3])
    assert (y.name, y.dtype, y.shape) == ("y", "i64", ["B", 4])
    assert repr(x) == "Value(x: f32[B, 3])"
    r = g.add("relu", [x], name="act")
    assert (r.name, r.dtype, r.shape) == ("act", "f32", ["B", 3])
    assert g.inputs == [x, y]


def test_dtypes_lists_every_dtype():
    assert kiln.dtypes == ("f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "u8", "bool")
    g = kiln.Graph()
    for name in kiln.dtypes:
        assert g.add_input("in_" + name, name, [1]).dtype == name


def test_add_node_returns_every_output():
    g = kiln.Graph()
    x = g.add_input("x", "f32", [4])
    outs = g.add_node("relu", [x])
    assert [o.shape for o in outs] == [[4]]


def test_text_round_trip_and_verify():
    g = kiln.Graph("round_trip")
    batch = g.add_symbol("B", 1, 8)
    x = g.add_input("x", "f32", [batch, 3])
    w = g.add_constant("w", np.arange(6, dtype=np.float32).reshape(3, 2))
    g.set_outputs([g.add("relu", [g.add("matmul", [x, w])])])
    g.verify()
    text = str(g)
    parsed = kiln.Graph.parse(text)
    parsed.verify()
    assert str(parsed) == text
    assert parsed.name == "round_trip"
    assert [v.name for v in parsed.inputs] == ["x"]
    assert parsed.outputs[0].shape == ["B", 2]


def test_parse_error_has_code():
    err = expect_error("E10010", kiln.Graph.parse, "this is not kiln IR")
    assert str(err).startswith("E10010: ")
    assert err.detail and err.detail in str(err)


def test_unknown_op():
    g = kiln.Graph()
    x = g.add_input("x", "f32", [2])
    err = expect_error("E50001", g.add, "no_such_op", [x])
    assert "no_such_op" in str(err)


def test_error_is_an_exception_with_code_and_detail():
    assert issubclass(kiln.Error, Exception)
    err = expect_error("E10001", kiln.Graph().add_input, "x", "f31", [2])
    assert "f31" in err.detail


def test_shape_entries_must_be_ints_or_declared_symbols():
    g = kiln.Graph("g")
    expect_error("E10001", g.add_input, "x", "f32", ["N", 2])
    expect_error("E10001", g.add_input, "x", "f32", [2.0])
    expect_error("E10001", g.add_input, "x", "f32", [True])
    expect_error("E10001", g.add_input, "x", "f32", [2**70])
    expect_error("E10001", g.add_input, "x", "f32", "B")
    other = kiln.Graph("other").add_symbol("N", 1, 4)
    expect_error("E10001", g.add_input, "x", "f32", [other])
    expect_error("E10001", g.add_symbol, "B", 5, 1)
    assert g.add_input("x", "f32", [np.int64(2), torch.tensor(3)]).shape == [2, 3]


def test_values_of_another_graph_are_rejected():
    g, other = kiln.Graph("g"), kiln.Graph("other")
    x = g.add_input("x", "f32", [2])
    foreign = other.add_input("y", "f32", [2])
    expect_error("E10001", g.add, "add", [x, foreign])
    expect_error("E10001", g.set_outputs, [foreign])


def test_a_value_keeps_its_graph_alive():
    def make():
        g = kiln.Graph("g")
        b = g.add_symbol("B", 1, 4)
        return g.add("relu", [g.add_input("x", "f32", [b, 2])])

    r = make()
    gc.collect()
    assert r.shape == ["B", 2]


def test_attributes_keep_their_python_kind():
    g = kiln.Graph()
    x = g.add_input("x", "f32", [1, 1, 4, 4])
    w = g.add_constant("w", np.ones((1, 1, 1, 1), np.float32))
    # groups is an int attribute: a bool must not pass as an int.
    err = expect_error("E40002", g.add, "conv2d", [x, w], {"groups": True})
    assert "groups" in str(err)
    expect_error("E10001", g.add, "conv2d", [x, w], {"groups": None})
    expect_error("E10001", g.add, "conv2d", [x, w], {"padding": [1, "a"]})
    expect_error("E10001", g.add, "conv2d", [x, w], {"stride": [2**70, 1]})
    expect_error("E10001", g.add, "conv2d", [x, w], {1: 1})
    # Floats in an int-list attribute stay floats, and the schema rejects them.
    expect_error("E40002", g.add, "conv2d", [x, w], {"stride": [1.0, 1]})
    y = g.add("conv2d", [x, w], {"groups": 1, "stride": (1, 1), "padding": [0, 0, 0, 0]})
    assert y.shape == [1, 1, 4, 4]


def test_constants_are_copied_once():
    data = np.ones((2, 2), np.float32)
    g = kiln.Graph()
    x = g.add_input("x", "f32", [2, 2])
    c = g.add_constant("c", data)
    data[:] = 5  # after add_constant: must not reach the graph
    g.set_outputs([g.add("add", [x, c])])
    out = kiln.compile(g)(np.zeros((2, 2), np.float32))
    np.testing.assert_array_equal(out, np.ones((2, 2), np.float32))


def test_constants_from_torch_including_parameters():
    g = kiln.Graph()
    param = torch.nn.Parameter(torch.ones(3))  # requires_grad
    c = g.add_constant("p", param)
    assert (c.dtype, c.shape) == ("f32", [3])
    assert g.add_constant("i", torch.arange(4, dtype=torch.int32)).dtype == "i32"


def test_constant_errors():
    g = kiln.Graph()
    expect_error("E10005", g.add_constant, "t", np.ones((3, 2), np.float32).T)
    expect_error("E10001", g.add_constant, "l", [1.0, 2.0])
    expect_error("E10003", g.add_constant, "c", np.ones(2, np.complex64))
