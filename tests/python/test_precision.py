"""debug.precision_check and kiln.check_precision: Kiln's node outputs against eager's, node by
node, reporting the first mismatch in execution order."""

import pytest
import torch
import torch.nn as nn

import kiln
from kiln import _precision


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)
        self.conv = nn.Conv2d(2, 4, 3, padding=1)

    def forward(self, x, img):
        h = torch.relu(x) * 2
        h = nn.functional.gelu(self.fc1(h))  # fused into fc1's matmul as its epilogue
        c = torch.relu(self.conv(img)).mean()
        return self.fc2(h).softmax(-1) + c


def inputs():
    torch.manual_seed(0)
    return torch.randn(4, 16), torch.randn(1, 2, 6, 6)


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture
def wrong_gelu(monkeypatch):
    """The test-only hook: the eager side computes gelu 0.01 off, as a wrong kernel would."""
    call_function = _precision._Recorder.call_function

    def perturbed(self, target, args, kwargs):
        value = call_function(self, target, args, kwargs)
        return value + 0.01 if target is torch.ops.aten.gelu.default else value
    monkeypatch.setattr(_precision._Recorder, "call_function", perturbed)


def test_matching_model_has_no_report():
    model = Net().eval()
    result = kiln.check_precision(model, *inputs())
    assert result.mismatch is None, str(result)
    # The nodes computing FX outputs were compared: mul, the fused gelu, conv, mean, softmax...
    assert result.compared >= 5, str(result)
    assert "all within tolerance" in str(result)


def test_reports_the_first_wrong_node_with_its_origin(wrong_gelu):
    model = Net().eval()
    result = kiln.check_precision(model, *inputs())
    m = result.mismatch
    assert m is not None, str(result)
    # The fused matmul+gelu node maps to the FX node of its last op, gelu.
    assert m.fx_node == "gelu" and m.aten == "aten.gelu.default", str(m)
    assert m.op == "matmul" and m.kernel, str(m)
    assert m.shape == (4, 32) and m.dtype == "float32"
    assert m.mismatched == m.numel == 128
    assert abs(m.max_abs_err - 0.01) < 1e-3
    assert abs((m.eager_stats["mean"] - m.kiln_stats["mean"]) - 0.01) < 1e-3
    assert "test_precision.py" in m.location and "gelu(self.fc1(h))" in m.location, m.location
    assert "first mismatch" in str(m) and "gelu" in str(m)


def test_option_warns_on_every_mismatching_call(wrong_gelu):
    model = Net().eval()
    compiled = torch.compile(model, backend="kiln",
                             options={"debug.precision_check.enable": True,
                                      "debug.precision_check.atol": 1e-4})
    with torch.no_grad(), pytest.warns(kiln.PrecisionWarning) as caught:
        got = compiled(*inputs())
    report = caught[0].message.report
    assert report.fx_node == "gelu" and report.atol == 1e-4
    # The check doesn't change the result.
    with torch.no_grad():
        torch.testing.assert_close(got, model(*inputs()), rtol=1e-4, atol=1e-5)


def test_loose_tolerance_accepts_the_difference(wrong_gelu):
    result = kiln.check_precision(Net().eval(), *inputs(),
                                  options={"debug.precision_check.atol": 0.1})
    assert result.mismatch is None, str(result)


@pytest.mark.parametrize("option, value", [("debug.precision_check.enable", True),
                                           ("debug.profile", "p.json")])
def test_export_refuses_run_time_debug_options(tmp_path, option, value):
    with pytest.raises(kiln.Error) as info:
        kiln.export(Net().eval(), inputs(), tmp_path / "net.kiln", config={option: value})
    assert info.value.code == "E10001" and option.removesuffix(".enable") in str(info.value)
