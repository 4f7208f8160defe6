"""Kiln: a graph compiler and runtime for PyTorch models on the CPU.

Build a graph, compile it, run it::

    import numpy as np
    import kiln

    g = kiln.Graph("mlp")
    batch = g.add_symbol("B", 1, 64)            # a dynamic dimension
    x = g.add_input("x", "f32", [batch, 16])
    w = g.add_constant("w", np.ones((16, 8), np.float32))
    y = g.add("relu", [g.add("matmul", [x, w])])
    g.set_outputs([y])

    model = kiln.compile(g)
    out = model(np.ones((4, 16), np.float32))   # a (4, 8) array

Arrays cross without copies (DLPack): inputs are NumPy arrays or torch tensors in CPU memory,
read in place; outputs are Kiln's own buffers, returned as torch tensors when the first input is
a torch tensor and as NumPy arrays otherwise. Calling a compiled graph returns its output for a
single-output graph and a tuple of outputs otherwise; ``run()`` always returns a list.

Errors are ``kiln.Error`` with ``.code`` ("E50001", ...) and ``.detail``; docs/errors.md lists
every code.
"""

from kiln._C import CompiledGraph, Error, Graph, Symbol, Value, compile, dtypes
from kiln.config import CompilerConfig


def get_backend(compiler_config=None):
    """torch.compile(model, backend=kiln.get_backend(compiler_config=cfg))."""
    from kiln.backend import get_backend as _get_backend  # imports torch only when used
    return _get_backend(compiler_config)


def export(model, example_inputs, path, dynamic_shapes=None, config=None):
    """Writes `model` as an offline .kiln model (torch.export capture; docs/file-format.md)."""
    from kiln.offline import export as _export  # imports torch only when used
    return _export(model, example_inputs, path, dynamic_shapes=dynamic_shapes, config=config)


def load(path, threads=-1, plan_check="warn"):
    """Loads a .kiln model; the result is called with torch tensors or NumPy arrays."""
    from kiln.offline import load as _load
    return _load(path, threads=threads, plan_check=plan_check)


def explain(model, *inputs, options=None):
    """Which parts of `model` Kiln compiles, and which ops stay in PyTorch and why."""
    from kiln.backend import explain as _explain
    return _explain(model, *inputs, options=options)


__all__ = ["CompiledGraph", "CompilerConfig", "Error", "Graph", "Symbol", "Value", "compile",
           "dtypes", "explain", "export", "get_backend", "load"]
