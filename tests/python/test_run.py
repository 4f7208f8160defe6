"""Compiling and running graphs from Python with NumPy arrays and torch tensors."""

import sys
import threading
import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from conftest import assert_within_dot_product_bound, expect_error


def add_relu_graph(shape=(2, 3)):
    """relu(a + b), a second output a + b."""
    g = kiln.Graph("add_relu")
    a = g.add_input("a", "f32", list(shape))
    b = g.add_input("b", "f32", list(shape))
    s = g.add("add", [a, b])
    g.set_outputs([g.add("relu", [s]), s])
    return g


def single_add(shape=(2, 3)):
    g = kiln.Graph("single_add")
    g.set_outputs([g.add("add", [g.add_input("a", "f32", list(shape)),
                                 g.add_input("b", "f32", list(shape))])])
    return kiln.compile(g)


# ---------------------------------------------------------------- results against PyTorch


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_add_relu_matches_torch_exactly(framework, rng):
    model = kiln.compile(add_relu_graph((3, 17)))
    a = rng.standard_normal((3, 17), dtype=np.float32)
    b = rng.standard_normal((3, 17), dtype=np.float32)
    args = (a, b) if framework == "numpy" else (torch.from_numpy(a), torch.from_numpy(b))
    relu_out, sum_out = model(*args)
    expected_sum = torch.from_numpy(a) + torch.from_numpy(b)
    out_type = np.ndarray if framework == "numpy" else torch.Tensor
    assert isinstance(relu_out, out_type) and isinstance(sum_out, out_type)
    assert torch.equal(torch.as_tensor(sum_out), expected_sum)
    assert torch.equal(torch.as_tensor(relu_out), torch.relu(expected_sum))


def test_matmul_matches_torch(rng):
    m, k, n = 7, 65, 17
    g = kiln.Graph("mm")
    w = rng.standard_normal((k, n), dtype=np.float32)
    x = g.add_input("x", "f32", [m, k])
    g.set_outputs([g.add("matmul", [x, g.add_constant("w", w)])])
    xs = torch.from_numpy(rng.standard_normal((m, k), dtype=np.float32))
    out = kiln.compile(g)(xs)
    ws = torch.from_numpy(w)
    assert_within_dot_product_bound(out, xs.double() @ ws.double(),
                                    xs.double().abs() @ ws.double().abs(), k)


@pytest.mark.parametrize("policy", ["best", "reference"])
def test_conv2d_matches_torch(policy, rng):
    n, cin, cout, hw, kh = 2, 8, 16, 13, 3
    x = torch.from_numpy(rng.standard_normal((n, cin, hw, hw), dtype=np.float32))
    w = torch.from_numpy(rng.standard_normal((cout, cin, kh, kh), dtype=np.float32))
    bias = torch.from_numpy(rng.standard_normal(cout, dtype=np.float32))
    g = kiln.Graph("conv")
    xv = g.add_input("x", "f32", list(x.shape))
    y = g.add("conv2d", [xv, g.add_constant("w", w), g.add_constant("b", bias)],
              {"stride": [2, 2], "padding": [1, 1, 1, 1]})
    g.set_outputs([g.add("relu", [y])])
    out = kiln.compile(g, kernel_policy=policy)(x)
    assert isinstance(out, torch.Tensor)
    exact = F.relu(F.conv2d(x.double(), w.double(), bias.double(), stride=2, padding=1))
    magnitude = F.conv2d(x.double().abs(), w.double().abs(), bias.double().abs(), stride=2,
                         padding=1)
    # relu never increases an error, so the conv bound holds for relu(conv) too.
    assert_within_dot_product_bound(out, exact, magnitude, cin * kh * kh + 1)


@pytest.mark.parametrize("framework", ["numpy", "torch"])
@pytest.mark.parametrize("shape", [(), (0, 3)])
def test_scalar_and_empty_tensors(framework, shape):
    g = kiln.Graph("small")
    g.set_outputs([g.add("relu", [g.add_input("x", "f32", list(shape))])])
    x = np.full(shape, -2.0, np.float32)
    out = kiln.compile(g)(x if framework == "numpy" else torch.from_numpy(x))
    assert tuple(out.shape) == shape
    assert (np.asarray(out) == 0).all()


def test_read_only_inputs_are_read():
    model = single_add()
    a = np.frombuffer(np.ones(6, np.float32).tobytes(), np.float32).reshape(2, 3)
    assert not a.flags.writeable
    np.testing.assert_array_equal(model(a, a), np.full((2, 3), 2, np.float32))


def test_requires_grad_inputs_are_read(rng):
    model = single_add()
    a = torch.ones(2, 3, requires_grad=True)
    out = model(a, torch.ones(2, 3))
    assert torch.equal(out, torch.full((2, 3), 2.0))


# ---------------------------------------------------------------- zero-copy outputs


def test_outputs_are_kiln_buffers_not_copies():
    model = single_add()
    a, b = np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)
    first = model(a, b)
    second = model(a, b)
    # A view of Kiln's tensor: NumPy doesn't own the data, and nothing else points at it.
    assert not first.flags.owndata and first.flags.writeable and first.flags.c_contiguous
    assert first.ctypes.data % 64 == 0  # Kiln's output alignment
    assert first.ctypes.data != second.ctypes.data
    second[:] = 7
    np.testing.assert_array_equal(first, np.full((2, 3), 2, np.float32))
    del second, model
    np.testing.assert_array_equal(first, np.full((2, 3), 2, np.float32))


def test_torch_outputs_outlive_the_compiled_graph():
    model = single_add()
    outs = [model(torch.ones(2, 3), torch.ones(2, 3)) for _ in range(2)]
    assert outs[0].data_ptr() != outs[1].data_ptr()
    del model
    for o in outs:
        assert torch.equal(o, torch.full((2, 3), 2.0))


@pytest.mark.parametrize("framework", ["numpy", "torch"])
def test_run_into_caller_buffers(framework):
    model = kiln.compile(add_relu_graph())
    new = np.zeros if framework == "numpy" else torch.zeros
    lib = np if framework == "numpy" else torch
    a, b = lib.ones((2, 3), dtype=lib.float32), -3 * lib.ones((2, 3), dtype=lib.float32)
    outs = [new((2, 3), dtype=lib.float32), new((2, 3), dtype=lib.float32)]
    assert model.run([a, b], outs) is None
    assert (outs[0] == 0).all() and (outs[1] == -2).all()


def test_run_returns_a_list():
    model = single_add()
    outs = model.run((np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)))
    assert isinstance(outs, list) and len(outs) == 1


def test_caller_buffer_errors():
    model = single_add()
    ins = [np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)]
    expect_error("E10004", model.run, ins, [np.zeros((3, 2), np.float32)])
    expect_error("E10003", model.run, ins, [np.zeros((2, 3), np.float64)])
    expect_error("E10002", model.run, ins, [])
    read_only = np.zeros((2, 3), np.float32)
    read_only.flags.writeable = False
    expect_error("E10005", model.run, ins, [read_only])
    expect_error("E10005", model.run, ins, [ins[0]])  # overlaps an input


# ---------------------------------------------------------------- bad inputs


def test_input_errors():
    model = single_add()
    a = np.ones((2, 3), np.float32)
    expect_error("E10002", model, a)
    expect_error("E10002", model, a, a, a)
    expect_error("E10003", model, a, a.astype(np.float64))
    expect_error("E10003", model, a, torch.ones(2, 3, dtype=torch.complex64))
    expect_error("E10004", model, a, np.ones((3, 2), np.float32))
    expect_error("E10004", model, a, np.ones((2, 3, 1), np.float32))
    expect_error("E10005", model, a, np.ones((3, 2), np.float32).T)
    expect_error("E10005", model, a, torch.ones(3, 2).t())
    misaligned = np.zeros(4 * 6 + 1, np.uint8)[1:].view(np.float32).reshape(2, 3)
    expect_error("E10005", model, a, misaligned)
    expect_error("E10001", model, a, [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    expect_error("E10001", model.run, a)  # a bare array instead of a list


def test_compile_option_errors():
    g = add_relu_graph()
    expect_error("E10001", kiln.compile, g, kernel_policy="fastest")
    expect_error("E10001", kiln.compile, g, threads=-1)
    expect_error("E10001", kiln.compile, g, plan_cache_capacity=0)


# ---------------------------------------------------------------- dynamic shapes


def test_symbolic_batch():
    g = kiln.Graph("dyn")
    batch = g.add_symbol("B", 1, 8)
    x = g.add_input("x", "f32", [batch, 3])
    g.set_outputs([g.add("relu", [x])])
    model = kiln.compile(g, plan_cache_capacity=2)
    for b in (1, 5, 8, 1):
        x = np.linspace(-1, 1, b * 3, dtype=np.float32).reshape(b, 3)
        np.testing.assert_array_equal(model(x), np.maximum(x, 0))
    assert model.output_sizes([[5, 3]]) == [[5, 3]]
    assert "relu" in model.describe_plan([(5, 3)])
    err = expect_error("E20008", model, np.ones((9, 3), np.float32))
    assert "B" in err.detail
    expect_error("E20008", model.output_sizes, [[0, 3]])


# ---------------------------------------------------------------- threads


def test_concurrent_runs_from_python_threads(rng):
    n, c, hw = 1, 16, 20
    w = rng.standard_normal((c, c, 3, 3), dtype=np.float32)
    g = kiln.Graph("threads")
    x = g.add_input("x", "f32", [n, c, hw, hw])
    y = g.add("conv2d", [x, g.add_constant("w", w)], {"padding": [1, 1, 1, 1]})
    g.set_outputs([g.add("relu", [g.add("add", [y, x])])])
    model = kiln.compile(g)
    inputs = [rng.standard_normal((n, c, hw, hw), dtype=np.float32) for _ in range(4)]
    serial = [model(i) for i in inputs]

    results = [[] for _ in inputs]
    start = threading.Barrier(len(inputs))

    def work(t):
        start.wait()
        for _ in range(10):
            results[t].append(model(inputs[t]))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t, outs in enumerate(results):
        assert len(outs) == 10
        for o in outs:
            np.testing.assert_array_equal(o, serial[t])


def test_run_releases_the_gil():
    # With a switch interval far longer than the test, a thread keeps the GIL until it releases
    # it itself. The worker loops on run() until told to stop (or for 10 s): the main thread can
    # only get to tell it while it is inside run(), and only if run() lets go of the GIL.
    model = single_add()
    a = np.ones((2, 3), np.float32)
    stop = threading.Event()
    finished = []

    def work():
        deadline = time.monotonic() + 10
        while not stop.is_set() and time.monotonic() < deadline:
            model(a, a)
        finished.append(True)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000)
    try:
        worker = threading.Thread(target=work)
        worker.start()
        finished_before_main_ran = bool(finished)
        stop.set()
        worker.join()
    finally:
        sys.setswitchinterval(interval)
    assert not finished_before_main_ran
