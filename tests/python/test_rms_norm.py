"""RMSNorm through the frontend. AOTAutograd decomposes aten::rms_norm (torch.nn.RMSNorm,
F.rms_norm) into pow, mean, add, rsqrt and mul, as it traces hand-written LLaMA- and T5-style
norms; fuse_decomposed_rms_norm makes one rms_norm node of each again, which the txt graph dumps
after stage fuse show. torch.export programs that are not decomposed keep aten::rms_norm whole,
and its converter takes it.

Accuracy policy (as in test_models.py): float64 eager is the truth, and Kiln's float32 error
must be within a small factor of eager float32's own error.
"""

import copy
import pathlib

import pytest
import torch
import transformers as T

from kiln import _C
from kiln._fx import serialize


def fuse_dumps(path):
    """The txt dumps of every Kiln graph after stage fuse."""
    return "".join(p.read_text() for p in sorted(pathlib.Path(path).glob("*_fuse.txt")))


def check_against_eager(model, x, got):
    with torch.no_grad():
        eager = model(x)
        truth = copy.deepcopy(model).double()(x.double())
    kiln_error = (got.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= 4 * eager_error + 1e-6, (kiln_error, eager_error)


def compile_with_dumps(model, x, tmp_path, **options):
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln", options={
        "debug.graph_dump.type": "txt", "debug.graph_dump.path": str(tmp_path), **options})
    with torch.no_grad():
        got = compiled(x)
    torch._dynamo.reset()
    return got, fuse_dumps(tmp_path)


@pytest.mark.parametrize("eps", [None, 1e-5])
@pytest.mark.parametrize("affine", [True, False])
def test_torch_rms_norm_is_one_node_and_matches_eager(tmp_path, eps, affine):
    torch.manual_seed(0)
    model = torch.nn.RMSNorm(33, eps=eps, elementwise_affine=affine).eval()
    if affine:
        with torch.no_grad():
            model.weight.uniform_(-2, 2)
    x = torch.randn(2, 7, 33)
    got, dumps = compile_with_dumps(model, x, tmp_path,
                                    **{"operator_selection.fallback_to_cpu": False})
    assert dumps.count("= rms_norm(") == 1, dumps
    assert "rsqrt(" not in dumps, dumps
    check_against_eager(model, x, got)


def test_non_contiguous_input(tmp_path):
    torch.manual_seed(1)
    model = torch.nn.RMSNorm(17).eval()
    x = torch.randn(17, 5).t()  # [5, 17], strided
    assert not x.is_contiguous()
    got, dumps = compile_with_dumps(model, x, tmp_path)
    assert dumps.count("= rms_norm(") == 1, dumps
    check_against_eager(model, x, got)


class LlamaStyleRMSNorm(torch.nn.Module):
    """transformers' LlamaRMSNorm, written out."""

    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.rand(hidden_size) + 0.5)
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class DivSqrtRMSNorm(torch.nn.Module):
    def forward(self, x):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-5)


@pytest.mark.parametrize("module", [LlamaStyleRMSNorm(48), DivSqrtRMSNorm()],
                         ids=["llama", "div_sqrt"])
def test_hand_written_norms_are_recognized(tmp_path, module):
    torch.manual_seed(2)
    x = torch.randn(3, 5, 48)
    got, dumps = compile_with_dumps(module.eval(), x, tmp_path,
                                    **{"operator_selection.fallback_to_cpu": False})
    assert dumps.count("= rms_norm(") == 1, dumps
    check_against_eager(module, x, got)


def test_small_llama_model(tmp_path):
    """A random-initialized two-layer LLaMA (nothing downloaded): every RMSNorm (two per layer
    and the final one) recognized, and the hidden states as eager's."""
    torch.manual_seed(3)
    config = T.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                           max_position_embeddings=64, use_cache=False)
    model = T.LlamaModel(config).eval()
    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(4))

    class LastHiddenState(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids):
            return self.m(ids).last_hidden_state

    wrapped = LastHiddenState(model).eval()
    torch._dynamo.reset()
    compiled = torch.compile(wrapped, backend="kiln", options={
        "debug.graph_dump.type": "txt", "debug.graph_dump.path": str(tmp_path)})
    with torch.no_grad():
        got = compiled(ids)
        eager = wrapped(ids)
        truth = copy.deepcopy(wrapped).double()(ids)
    torch._dynamo.reset()
    assert fuse_dumps(tmp_path).count("= rms_norm(") == 2 * 2 + 1
    kiln_error = (got.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= 4 * eager_error + 1e-5, (kiln_error, eager_error)


def run_exported(model, x):
    """torch.export's program, not decomposed (aten.rms_norm stays), imported and compiled."""
    program = torch.export.export(model, (x,))
    gm = program.graph_module
    assert any(n.target is torch.ops.aten.rms_norm.default for n in gm.graph.nodes)
    constants = {spec.arg.name: program.state_dict[spec.target].detach().contiguous()
                 for spec in program.graph_signature.input_specs
                 if spec.target in program.state_dict}
    graph = _C.import_fx(serialize(gm, set(constants), name="rms"), constants)
    assert "rms_norm(" in str(graph)
    return _C.compile(graph).run([x])[0]


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_aten_rms_norm_converter(eps):
    torch.manual_seed(5)
    model = torch.nn.RMSNorm(24, eps=eps).eval()
    with torch.no_grad():
        model.weight.uniform_(-2, 2)
    x = torch.randn(4, 24)
    check_against_eager(model, x, run_exported(model, x))


def test_aten_rms_norm_converter_bf16():
    """In bf16, PyTorch normalizes in f32 (with f32's eps for None) and rounds to bf16 once;
    Kiln does the same with explicit casts, so the two differ at most where the f32 results
    straddle a bf16 rounding boundary: one bf16 ulp."""
    torch.manual_seed(6)
    model = torch.nn.RMSNorm(24).to(torch.bfloat16).eval()
    x = torch.randn(4, 24, dtype=torch.bfloat16)
    got = run_exported(model, x)
    with torch.no_grad():
        eager = model(x)
    assert got.dtype == torch.bfloat16
    ulp = torch.finfo(torch.bfloat16).eps * eager.float().abs().clamp(min=2**-126)
    assert ((got.float() - eager.float()).abs() <= ulp).all()
