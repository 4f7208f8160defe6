"""Offline models: kiln.export writes a .kiln file (docs/file-format.md), kiln.load runs one.

The model is captured whole with torch.export, converted by the same C++ converters as the
torch.compile backend, compiled through the whole pipeline and written with its weights. An
offline model runs without PyTorch (the `kiln` CLI, include/kiln/model.h), so it has no
fallback: an op Kiln can't convert is an error (E50001) listing each such op.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

from kiln import _C
from kiln._errors import error
from kiln.config import CompilerConfig


def export(model, example_inputs: Sequence, path: str | os.PathLike,
           dynamic_shapes=None, config: CompilerConfig | dict | None = None) -> None:
    """Captures `model` on `example_inputs` with torch.export (`dynamic_shapes` as there: dims
    given as torch.export.Dim become symbolic dims with their ranges), compiles it with `config`
    and writes it to `path`."""
    import torch
    from torch.export.graph_signature import InputKind

    from kiln._fx import serialize
    from kiln.backend import _unsupported_summary

    config = CompilerConfig.from_options(config)
    options = config.compile_options()
    with torch.no_grad():
        program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=dynamic_shapes)
        # Decompose what AOTAutograd decomposes (the CompositeImplicitAutograd ops: conv2d →
        # convolution, linear → addmm, ...) and nothing more, so that the graph is the one the
        # torch.compile backend sees and the C++ converters take.
        table = {op: fn for op, fn in torch.export.default_decompositions().items()
                 if torch._C._dispatch_has_kernel_for_dispatch_key(
                     op.name(), "CompositeImplicitAutograd")}
        program = program.run_decompositions(table)
    signature = program.graph_signature
    if signature.buffers_to_mutate or signature.user_inputs_to_mutate:
        raise error("E50001", "the model mutates buffers or inputs in forward (e.g. BatchNorm in "
                    "training mode); an offline model is an inference graph: call model.eval()")
    gm = program.graph_module
    constants = {}
    for spec in signature.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            tensor = (program.state_dict[spec.target] if spec.target in program.state_dict
                      else program.constants[spec.target])
            constants[spec.arg.name] = tensor.detach().contiguous()
        elif spec.kind != InputKind.USER_INPUT:
            raise error("E50001", f"model input {spec.arg.name} is a {spec.kind.name}, which "
                        "an offline model can't hold")

    graph_json = serialize(gm, set(constants), name=type(model).__name__)
    summary = _unsupported_summary(gm, _C.fx_node_support(graph_json))
    if summary:
        raise error("E50001", "an offline model can't fall back to PyTorch, but these ops can't "
                    "run in Kiln:\n" + summary)
    compiled = _C.compile(_C.import_fx(graph_json, constants), **options)
    _C.save_model(compiled, os.fspath(path), torch_version=torch.__version__,
                  properties={"source": f"{type(model).__module__}.{type(model).__qualname__}",
                              "config": repr(config)})


class LoadedModel:
    """A .kiln model ready to run: call it with torch tensors or NumPy arrays (one per input, in
    order); it returns the output for a single-output model, else a tuple. Outputs are torch
    tensors when the first input is one, NumPy arrays otherwise."""

    def __init__(self, path: str | os.PathLike, threads: int = -1, plan_check: str = "warn"):
        self.path = os.fspath(path)
        self.compiled, info = _C.load_model(self.path, threads=threads, plan_check=plan_check)
        self.inputs: list[dict[str, Any]] = info["inputs"]
        self.outputs: list[dict[str, Any]] = info["outputs"]
        self.metadata: dict[str, Any] = info["metadata"]
        self.plan_warning: str = info["plan_warning"]

    def __call__(self, *inputs):
        return self.compiled(*inputs)

    def __repr__(self) -> str:
        names = ", ".join(i["name"] for i in self.inputs)
        return f"LoadedModel({self.path!r}, inputs=[{names}])"


def load(path: str | os.PathLike, threads: int = -1, plan_check: str = "warn") -> LoadedModel:
    """Loads a .kiln file (memory-mapped). `threads`: threads per kernel, -1 for the exporter's
    setting; `plan_check`: "warn", "strict" or "ignore" (include/kiln/model.h, LoadOptions)."""
    return LoadedModel(path, threads=threads, plan_check=plan_check)
