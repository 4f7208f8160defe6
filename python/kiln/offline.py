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


def _has_range(dim) -> bool:
    """Whether a torch.export.Dim was given a range (Dim("seq") has min 0 and max int_oo)."""
    return dim.min != 0 or isinstance(dim.max, int)


def _dynamic_shapes(model, example_inputs: Sequence, dynamic_shapes, config: CompilerConfig):
    """dynamic_shapes with dynamic_shape.dims_range and dynamic_shape.enable applied
    (docs/dynamic-shapes.md): ranges for Dims that have none, new Dims where dims_range names an
    input axis that dynamic_shapes leaves out, Dim.AUTO on every other axis with enable."""
    import inspect

    from torch.export import Dim

    for key in ("dynamic_shape.gears", "dynamic_shape.pad_to_gear",
                "dynamic_shape.out_of_range"):
        if config.get(key) != CompilerConfig().get(key):
            raise error("E10001", f"option {key} applies to torch.compile only: a .kiln model "
                        f"plans each shape in its ranges when first run, and has no gears")
    dims_range = config.get("dynamic_shape.dims_range")
    enable = config.get("dynamic_shape.enable")
    if not dims_range and not enable:
        return dynamic_shapes
    names = list(inspect.signature(model.forward).parameters)[:len(example_inputs)]
    if dynamic_shapes is None:
        given = [None] * len(names)
    elif isinstance(dynamic_shapes, dict):
        given = [dynamic_shapes.get(n) for n in names]
    elif isinstance(dynamic_shapes, (list, tuple)):
        given = list(dynamic_shapes) + [None] * (len(names) - len(dynamic_shapes))
    else:
        raise error("E10001", "dynamic_shape.dims_range and dynamic_shape.enable need "
                    "dynamic_shapes as a dict by argument name or a list per input")
    specs = []
    for name, spec in zip(names, given):
        if isinstance(spec, (list, tuple)):
            spec = {axis: d for axis, d in enumerate(spec) if d is not None}
        elif spec is not None and not isinstance(spec, dict):
            raise error("E10001", f"dynamic_shapes[{name!r}] is {spec!r}: with "
                        f"dynamic_shape.dims_range or enable, give each input's dims as a dict "
                        f"{{axis: Dim}} or a list")
        specs.append(dict(spec or {}))

    def ranged(dim, low: int, high: int, where: str):
        if _has_range(dim) and (dim.min, dim.max) != (low, high):
            raise error("E10001", f"option dynamic_shape.dims_range gives {where} the range "
                        f"({low}, {high}), but dynamic_shapes gives it ({dim.min}, {dim.max}); "
                        f"give it once")
        return Dim(dim.__name__, min=low, max=high)

    all_dims = {d.__name__ for spec in specs for d in spec.values() if isinstance(d, Dim)}
    renamed: dict[str, Dim] = {}
    for key, r in dims_range.items():
        if isinstance(r, dict):
            continue
        if key not in all_dims:
            raise error("E10001", f"option dynamic_shape.dims_range names Dim {key!r}, which "
                        f"dynamic_shapes doesn't use (its Dims: "
                        f"{', '.join(sorted(all_dims)) or 'none'})")
        renamed[key] = ranged(next(d for spec in specs for d in spec.values()
                                   if isinstance(d, Dim) and d.__name__ == key),
                              r[0], r[1], f"Dim {key!r}")
    for spec in specs:
        for axis, d in spec.items():
            if isinstance(d, Dim) and d.__name__ in renamed:
                spec[axis] = renamed[d.__name__]
    for key, axes in dims_range.items():
        if not isinstance(axes, dict):
            continue
        if isinstance(key, int):
            if key >= len(names):
                raise error("E10001", f"option dynamic_shape.dims_range names input {key}, but "
                            f"the model takes {len(names)} input(s)")
            key = names[key]
        if key not in names:
            raise error("E10001", f"option dynamic_shape.dims_range names input {key!r}; the "
                        f"model's inputs are {', '.join(names)}")
        i = names.index(key)
        for axis, (low, high) in axes.items():
            where = f"input {key!r} axis {axis}"
            if axis >= example_inputs[i].dim():
                raise error("E10001", f"option dynamic_shape.dims_range: {where}: the input has "
                            f"rank {example_inputs[i].dim()}")
            d = specs[i].get(axis)
            if isinstance(d, Dim):
                specs[i][axis] = ranged(d, low, high, where)
            elif d is None or d == Dim.AUTO:
                specs[i][axis] = Dim(f"{key}_{axis}", min=low, max=high)
            else:
                raise error("E10001", f"option dynamic_shape.dims_range gives {where} a range, "
                            f"but dynamic_shapes makes it {d!r}")
    if enable:
        for spec, x in zip(specs, example_inputs):
            for axis in range(x.dim()):
                spec.setdefault(axis, Dim.AUTO)
    return {name: spec or None for name, spec in zip(names, specs)}


def export(model, example_inputs: Sequence, path: str | os.PathLike,
           dynamic_shapes=None, config: CompilerConfig | dict | None = None) -> None:
    """Captures `model` on `example_inputs` with torch.export (`dynamic_shapes` as there: dims
    given as torch.export.Dim become symbolic dims with their ranges; config's
    dynamic_shape.dims_range and enable add to them), compiles it with `config` and writes it to
    `path`."""
    import torch
    from torch.export.graph_signature import InputKind

    from kiln._fx import serialize
    from kiln.backend import _unsupported_summary

    config = CompilerConfig.from_options(config)
    # Debugging options act on runs; an export only compiles and writes the file.
    if config.get("debug.precision_check.enable"):
        raise error("E10001", "option debug.precision_check applies to torch.compile only: an "
                    "exported model runs without PyTorch to compare with; check the model with "
                    "kiln.check_precision before exporting")
    if config.get("debug.profile") is not None:
        raise error("E10001", "option debug.profile profiles runs, and kiln.export runs nothing; "
                    "profile the loaded model with the environment variable KILN_PROFILE=path "
                    "(or kiln bench MODEL.kiln --profile path)")
    options = config.compile_options()
    dynamic_shapes = _dynamic_shapes(model, example_inputs, dynamic_shapes, config)
    with torch.no_grad():
        try:
            program = torch.export.export(model, tuple(example_inputs),
                                          dynamic_shapes=dynamic_shapes)
        except torch._dynamo.exc.UserError as e:
            if not config.get("dynamic_shape.dims_range"):
                raise
            # A range the model can't take: a dim it needs static, or sizes it rejects.
            raise error("E10001", f"option dynamic_shape.dims_range contradicts the model: "
                        f"{e}") from e
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
    # The file holds the folded weights the kernels prepack: the graph must keep them.
    compiled = _C.compile(_C.import_fx(graph_json, constants), **options,
                          release_prepacked_constants=False)
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
