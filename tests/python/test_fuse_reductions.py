"""fuse_elementwise_chains' reductions through torch.compile(backend="kiln"): a module of
trailing reductions of elementwise chains (a sum of squares, a mean squared difference, amax of
|x|, a keepdim sum of sigmoid), a leading one (x minus its row mean) and a column sum that must
stay a plain reduction, compiled at O3 (fused) and at O0 (reference path) and compared with
eager.
"""

import torch
from torch import nn

import kiln
from kiln import _C


class ChainReductions(nn.Module):
    def forward(self, x, y):
        d = x - y
        return ((x * x).sum(-1),
                (d * d).mean(),
                x.abs().amax(dim=(1, 2), keepdim=True),
                torch.sigmoid(x).sum(-1, keepdim=True),
                x - x.mean(-1, keepdim=True),
                torch.exp(x).sum(0))  # over dim 0: not the trailing dims, stays unfused


def compile_at(level, monkeypatch, plans, sizes):
    """The module compiled at `level`; each graph Kiln compiles leaves its plan in `plans`."""
    real = _C.compile

    def recording(graph, **options):
        compiled = real(graph, **options)
        plans.append(compiled.describe_plan(sizes))
        return compiled

    monkeypatch.setattr(_C, "compile", recording)
    cfg = kiln.CompilerConfig()
    cfg.optimization.level = level
    cfg.operator_selection.fallback_to_cpu = False
    return torch.compile(ChainReductions(), backend=kiln.get_backend(cfg), fullgraph=True)


def test_chain_reductions_o3_against_o0_and_eager(monkeypatch):
    torch.manual_seed(0)
    x, y = torch.randn(6, 5, 300), torch.randn(5, 300)
    with torch.no_grad():
        eager = ChainReductions()(x, y)
    results = {}
    for level in ("O0", "O3"):
        torch._dynamo.reset()
        plans = []
        with torch.no_grad():
            results[level] = compile_at(level, monkeypatch, plans, [list(x.shape),
                                                                    list(y.shape)])(x, y)
        torch._dynamo.reset()
        plan = "\n".join(plans)
        if level == "O3":
            # The four trailing reductions and the leading one are fused; the column sum's exp
            # and sum are not.
            assert plan.count("fused_elementwise") == 5, plan
            assert "exp" in plan and "sum" in plan
        else:
            assert "fused_elementwise" not in plan, plan
    for o0, o3, want in zip(results["O0"], results["O3"], eager):
        assert o3.shape == want.shape and o0.shape == want.shape
        # O0 sums in double, O3 in f32 along a pairwise tree (docs/ops.md): within f32 rounding
        # of a sum of 300 to 9000 terms.
        torch.testing.assert_close(o3, o0, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(o3, want, rtol=1e-5, atol=1e-5)
