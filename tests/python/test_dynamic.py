"""Dynamic shapes through torch.compile(backend="kiln") (docs/dynamic-shapes.md): one compile
serves every shape in range, with no op left to PyTorch, and matches eager at each shape.
Dynamo's compile counter proves that no later shape recompiles. (The first call may count two
backend calls: AOTAutograd restarts dynamo's analysis once to turn size-derived Python floats
into tensors, TensorifyScalarRestartAnalysis, whatever the backend.)"""

import pytest
import torch
import transformers as T
from torch._dynamo.testing import CompileCounterWithBackend

import kiln
from kiln.backend import kiln_backend


def kiln_counter():
    """Counts dynamo compiles; every op must run in Kiln (fallback off: E50001 otherwise)."""
    return CompileCounterWithBackend(lambda gm, inputs: kiln_backend(
        gm, inputs, options={"operator_selection.fallback_to_cpu": False}))


def tiny_bert():
    return T.BertModel(T.BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                    intermediate_size=128, vocab_size=100)).eval()


def tiny_gpt2():
    return T.GPT2Model(T.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                                    bos_token_id=0, eos_token_id=0)).eval()


def ids(batch, seq, seed=0):
    return torch.randint(0, 100, (batch, seq), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("make", [tiny_bert, tiny_gpt2], ids=["bert", "gpt2"])
def test_dynamic_true_serves_every_shape_from_one_compile(make):
    torch.manual_seed(0)
    model = make()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for batch, seq in [(2, 16), (3, 24), (2, 57), (5, 8)]:
            x = ids(batch, seq, seed=seq)
            got = compiled(x).last_hidden_state
            want = model(x).last_hidden_state
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if (batch, seq) == (2, 16) else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_mark_dynamic_sequence_length():
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for seq in (12, 31, 64):
            x = ids(2, seq, seed=seq)
            torch._dynamo.mark_dynamic(x, 1)
            torch.testing.assert_close(compiled(x).last_hidden_state,
                                       model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if seq == 12 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_automatic_dynamic_recompiles_once():
    """Dynamo compiles static first; a second shape makes it recompile with symbols, and Kiln's
    symbolic graph then serves the rest."""
    torch.manual_seed(0)
    model = tiny_bert()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for seq in (10, 20, 33, 47):
            x = ids(2, seq, seed=seq)
            torch.testing.assert_close(compiled(x).last_hidden_state,
                                       model(x).last_hidden_state, rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if seq == 20 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()


def test_symbolic_conv_net_over_batch_and_resolution():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, 4)).eval()
    counter = kiln_counter()
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=counter, dynamic=True, fullgraph=True)
    compiles = None
    with torch.no_grad():
        for batch, size in [(2, 16), (3, 20), (4, 32)]:
            x = torch.randn(batch, 3, size, size)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
            compiles = counter.frame_count if batch == 2 else compiles
    assert counter.frame_count == compiles
    torch._dynamo.reset()
