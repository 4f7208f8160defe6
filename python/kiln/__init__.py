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

Errors are ``kiln.Error`` with ``.code`` ("E50001", ...) and ``.detail`` (and ``.fx_node``, the
FX node an import failed on, or ""); docs/errors.md lists every code.
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


def check_precision(model, *inputs, options=None):
    """Runs `model` once through Kiln with debug.precision_check on and returns what it found:
    a PrecisionResult whose `mismatch` is the first node differing from eager (or None)."""
    from kiln._precision import check_precision as _check  # imports torch only when used
    return _check(model, *inputs, options=options)


def write_profile(path=None, top=15):
    """Writes the profiles (debug.profile, KILN_PROFILE) of the graphs alive now, or only the one
    at `path`, and returns the top `top` nodes by time of each as a text table."""
    from kiln._C import write_profiles
    return "".join(r["summary"] for r in write_profiles(path or "", top))


def __getattr__(name):
    if name == "PrecisionWarning":  # defined with torch, imported only when asked for
        from kiln._precision import PrecisionWarning
        return PrecisionWarning
    raise AttributeError(f"module 'kiln' has no attribute {name!r}")


__all__ = ["CompiledGraph", "CompilerConfig", "Error", "Graph", "Symbol", "Value",
           "check_precision", "compile", "dtypes", "explain", "export", "get_backend", "load",
           "write_profile"]
