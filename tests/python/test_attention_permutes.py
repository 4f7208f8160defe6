"""fold_permute_into_attention through torch.compile: GPT-2's and ViT's head permutes (q, k and v
to [B, H, S, E] before attention, the output back to [B, S, H, E] after it) become flags of the
attention node, which the txt graph dumps after stage fuse show; results are bit for bit those
of the same compile with the pass disabled, and within the accuracy policy of test_models.py
(float64 eager is the truth; Kiln's float32 error stays within a small factor of eager's own).
"""

import copy
import pathlib

import pytest
import torch

from kiln import _C
from kiln.bench import models

HEAD_PERMUTE = "dims = [0, 2, 1, 3]"
LAYERS = 2  # of both models' "small" size


def compile_and_run(monkeypatch, model, x, dump_path, disabled_passes=()):
    """Runs `model` through torch.compile(backend="kiln") with txt dumps in `dump_path` and the
    passes `disabled_passes` off; returns the output and the dumps after stage fuse."""
    real = _C.compile

    def compile_without(graph, **options):
        options["disabled_passes"] = [*options.get("disabled_passes", []), *disabled_passes]
        return real(graph, **options)

    monkeypatch.setattr(_C, "compile", compile_without)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="kiln", options={
        "debug.graph_dump.type": "txt", "debug.graph_dump.path": str(dump_path),
        "operator_selection.fallback_to_cpu": False})
    with torch.no_grad():
        got = compiled(x)
    torch._dynamo.reset()
    monkeypatch.setattr(_C, "compile", real)
    dumps = "".join(p.read_text() for p in sorted(pathlib.Path(dump_path).glob("*_fuse.txt")))
    return got, dumps


def count_head_permutes(dumps):
    return sum(1 for line in dumps.splitlines() if "= permute(" in line and HEAD_PERMUTE in line)


# In bf16, attention reads and writes bf16 (fold_bf16_casts_into_widening_kernels) with the
# permutes folded all the same.
@pytest.mark.parametrize("model_id", ["gpt2", "vit-b16", "gpt2:bf16", "vit-b16:bf16"])
def test_head_permutes_fold_into_attention(monkeypatch, tmp_path, model_id):
    model, x = models.build(model_id, "small", 2)
    folded, dumps = compile_and_run(monkeypatch, model, x, tmp_path / "folded")
    unfolded, unfolded_dumps = compile_and_run(monkeypatch, model, x, tmp_path / "unfolded",
                                               ["fold_permute_into_attention"])

    # Without the pass: three permutes in and one out of each layer's attention; with it, none.
    assert unfolded_dumps.count("= scaled_dot_product_attention(") == LAYERS, unfolded_dumps
    assert count_head_permutes(unfolded_dumps) == 4 * LAYERS, unfolded_dumps
    assert dumps.count("= scaled_dot_product_attention(") == LAYERS, dumps
    assert count_head_permutes(dumps) == 0, dumps
    for flag in ("q", "k", "v", "out"):
        assert dumps.count(f"{flag}_heads_second_last = true") == LAYERS, dumps
    if model_id.endswith(":bf16"):
        attention = [line for line in dumps.splitlines() if "= scaled_dot_product_attention(" in line]
        assert all(" : bf16[" in line for line in attention), dumps

    # Only addressing changed: the same bits.
    assert torch.equal(folded, unfolded)
    with torch.no_grad():
        eager = model(x)
        truth = copy.deepcopy(model).double()(x if x.dtype == torch.long else x.double())
    kiln_error = (folded.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= 4 * eager_error + 1e-5, (kiln_error, eager_error)
