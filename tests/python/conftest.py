"""Shared helpers of the Python tests.

Tolerance policy: elementwise ops (add, relu) must match PyTorch exactly. Ops that sum K products
(matmul, conv2d) are compared with a float64 PyTorch eager result and must lie within the
standard forward error bound of a float32 dot product, gamma_K * sum|a_i * b_i| with
gamma_K = K * u / (1 - K * u) and u = 2**-24: any summation order meets it, a wrong result
doesn't.
"""

import numpy as np
import pytest
import torch

import kiln

F32_UNIT_ROUNDOFF = 2.0**-24


@pytest.fixture
def fresh_dynamo():
    """Dynamo's caches emptied around a test, so that each test compiles what it calls (modules
    take it with pytestmark = pytest.mark.usefixtures("fresh_dynamo"))."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def assert_within_dot_product_bound(result, exact, magnitude, k):
    """result: Kiln's float32 output; exact: the float64 reference; magnitude: the same
    computation on |inputs| in float64 (sum |a_i * b_i| per element); k: terms per sum."""
    result = torch.as_tensor(np.asarray(result) if not torch.is_tensor(result) else result)
    assert result.dtype == torch.float32
    assert result.shape == exact.shape
    gamma = k * F32_UNIT_ROUNDOFF / (1 - k * F32_UNIT_ROUNDOFF)
    # The inputs of the sums are float32, so the final rounding to float32 adds one more u.
    bound = gamma * magnitude + F32_UNIT_ROUNDOFF * exact.abs()
    error = (result.double() - exact).abs()
    worst = (error - bound).max().item()
    assert worst <= 0, f"error exceeds the float32 dot-product bound by {worst}"


def expect_error(code, fn, *args, **kwargs):
    """Calls fn and checks it raises kiln.Error with `code`; returns the error."""
    with pytest.raises(kiln.Error) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, str(info.value)
    return info.value


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
