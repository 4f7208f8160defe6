"""optimization.level O0 (no passes, reference kernels), O1 (stage prepare) and O3 (every stage)
give the same results: a small conv net, a transformer block and tiny Hugging Face models, each
compiled at every level and held to the accuracy policy of test_backend.py (float64 eager is the
truth; Kiln's float32 error stays within a small factor of eager float32's own).
"""

import copy

import pytest
import torch
from torch import nn

import kiln
from kiln import _C

LEVELS = ("O0", "O1", "O3")
STAGES_AT = {"O0": set(), "O1": {"prepare"},
             "O3": {"prepare", "fuse", "format", "partition", "select", "schedule"}}


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class TransformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


@pytest.fixture
def compiled_levels(monkeypatch):
    """Records the optimization_level and the pass records of every graph the backend compiles."""
    seen = []
    real = _C.compile

    def recording(graph, **options):
        compiled = real(graph, **options)
        seen.append((options.get("optimization_level"), compiled.pass_records()))
        return compiled

    monkeypatch.setattr(_C, "compile", recording)
    return seen


def run_level(model, level, *inputs):
    torch._dynamo.reset()
    cfg = kiln.CompilerConfig()
    cfg.optimization.level = level
    cfg.operator_selection.fallback_to_cpu = False
    compiled = torch.compile(model, backend=kiln.get_backend(cfg), fullgraph=True)
    with torch.no_grad():
        out = compiled(*inputs)
    torch._dynamo.reset()
    return out


def check_levels(model, inputs, output, compiled_levels):
    with torch.no_grad():
        eager = output(model(*inputs))
        truth = output(copy.deepcopy(model).double()(
            *(x if x.dtype == torch.long else x.double() for x in inputs)))
    eager_error = (eager.double() - truth).abs().max().item()
    for level in LEVELS:
        compiled_levels.clear()
        got = output(run_level(model, level, *inputs))
        error = (got.double() - truth).abs().max().item()
        assert error <= 4 * eager_error + 1e-5, (level, error, eager_error)
        # The level reached the C++ pipeline: no pass at O0, only stage prepare at O1.
        assert compiled_levels and all(lvl == int(level[1]) for lvl, _ in compiled_levels)
        for _, records in compiled_levels:
            stages = {r["stage"] for r in records}
            assert stages == set() if level == "O0" else "prepare" in stages
            assert stages <= STAGES_AT[level], (level, stages)


def test_conv_net_levels(compiled_levels):
    torch.manual_seed(0)
    model = ConvNet().eval()
    with torch.no_grad():  # non-trivial batch-norm statistics
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 2.0)
    check_levels(model, (torch.randn(2, 3, 16, 16),), lambda y: y, compiled_levels)


def test_transformer_block_levels(compiled_levels):
    torch.manual_seed(0)
    check_levels(TransformerBlock().eval(), (torch.randn(2, 8, 32),), lambda y: y,
                 compiled_levels)


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit", "resnet", "mobilenetv2"])
def test_hf_model_levels(name, compiled_levels):
    from test_models import MODELS  # tiny random-initialized configs, nothing downloaded
    torch.manual_seed(0)
    make, x = MODELS[name]
    check_levels(make().eval(), (x,), lambda y: y.last_hidden_state, compiled_levels)


def test_pass_records_and_levels_in_python():
    g = kiln.Graph.parse("""
graph @g {
  input %x : f32[2, 3]
  const %one : f32[] = [1.0]
  %a = mul(%x, %one)
  %b = relu(%a)
  %c = relu(%a)
  %d = add(%b, %c)
  output %d
}""")
    o0 = kiln.compile(g, optimization_level=0, verify=True)
    assert o0.pass_records() == []
    o1 = kiln.compile(g, optimization_level=1, verify=True)
    records = o1.pass_records()
    assert records[0]["nodes_before"] == 4 and records[-1]["nodes_after"] == 2
    assert {"pass", "stage", "round", "changed", "nodes_before", "nodes_after",
            "seconds"} <= set(records[0])
    assert o1.pipeline_warnings() == []
    x = torch.randn(2, 3)
    assert torch.equal(torch.as_tensor(o0(x)), torch.as_tensor(o1(x)))
    with pytest.raises(kiln.Error) as info:
        kiln.compile(g, optimization_level=5)
    assert info.value.code == "E10001"
