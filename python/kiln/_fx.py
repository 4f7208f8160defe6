"""Serializes an ATen-level FX graph for Kiln's C++ converters (docs/frontend.md).

The format is generic: each node's target, its arguments by schema name (defaults filled in),
and the dtype and shape PyTorch computed for each output. Nothing here knows any op: the C++
converters decide what each node becomes.
"""

from __future__ import annotations

import json
import math
import operator
import re

import torch
import torch.fx as fx

_DTYPE_NAMES = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.float64: "f64",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8",
    torch.uint8: "u8", torch.bool: "bool",
}
_INT64_MAX = 2**63 - 1


def dtype_name(dtype: torch.dtype) -> str:
    return _DTYPE_NAMES.get(dtype, str(dtype))


_SYM_TYPES = (torch.SymInt, torch.SymFloat, torch.SymBool)


def _bound(value, unbounded: int) -> int:
    """A symbol's range bound as an int. torch's int_oo reports is_finite True, so infinities
    are recognized by type as well."""
    from torch.utils._sympy.numbers import IntInfinity, NegativeIntInfinity
    if (value is None or isinstance(value, (IntInfinity, NegativeIntInfinity))
            or not value.is_finite):
        return unbounded
    return int(value)


def is_symbolic_scalar(node: fx.Node) -> bool:
    """A node computing a size (a SymInt placeholder, sym_size, s0 * s1): Kiln reads its
    expression where it is used ({"sym": "s0*s1"}) instead of computing it."""
    return isinstance(node.meta.get("val"), _SYM_TYPES)


class _Writer:
    def __init__(self, symbol_ranges: dict[str, tuple[int, int]] | None = None) -> None:
        self.symbols: dict[str, tuple[int, int]] = {}
        self.symbol_ranges = symbol_ranges or {}

    def dim(self, d):
        if isinstance(d, int):
            return d
        expr = d.node.expr
        if expr.is_number:
            return int(expr)
        if expr.is_Symbol:
            bounds = d.node.shape_env.var_to_range.get(expr)
            lower = _bound(bounds.lower if bounds is not None else None, 0)
            upper = _bound(bounds.upper if bounds is not None else None, _INT64_MAX)
            # dynamic_shape.dims_range (already met with dynamo's range) wins.
            self.symbols[str(expr)] = self.symbol_ranges.get(str(expr), (max(lower, 0), upper))
        return str(expr)

    def meta(self, val):
        if isinstance(val, torch.Tensor):
            return {"dtype": dtype_name(val.dtype), "shape": [self.dim(d) for d in val.shape]}
        return None

    def arg(self, a):
        if isinstance(a, fx.Node) and is_symbolic_scalar(a):
            return {"sym": str(a.meta["val"].node.expr)}
        if isinstance(a, fx.Node):
            if a.op == "call_function" and a.target is operator.getitem:
                return {"ref": a.args[0].name, "index": a.args[1]}
            return {"ref": a.name}
        if isinstance(a, (list, tuple)):
            return [self.arg(x) for x in a]
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            if math.isfinite(a):
                return a
            return "nan" if math.isnan(a) else ("inf" if a > 0 else "-inf")
        if isinstance(a, torch.dtype):
            return {"dtype": dtype_name(a)}
        if isinstance(a, torch.device):
            return {"device": str(a)}
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return {"sym": str(a.node.expr)}
        return {"enum": str(a)}


def _schema_args(node: fx.Node, writer: _Writer) -> dict:
    """Arguments by schema name, defaults filled in, for an OpOverload call."""
    args = {}
    schema = node.target._schema
    for i, spec in enumerate(schema.arguments):
        if i < len(node.args):
            value = node.args[i]
        elif spec.name in node.kwargs:
            value = node.kwargs[spec.name]
        elif spec.has_default_value():
            value = spec.default_value
        else:
            continue
        args[spec.name] = writer.arg(value)
    return args


def module_path(node: fx.Node) -> str:
    """The PyTorch module a node came from, e.g. "encoder.layer.3.attention.self.query" ("" for
    code of the root module): the innermost entry of dynamo's nn_module_stack, with the root's
    name (L['self']) dropped and indexing written as attribute paths."""
    stack = node.meta.get("nn_module_stack")
    if not stack:
        return ""
    path = str(list(stack.values())[-1][0])
    path = re.sub(r"^L\['[^']*'\]|^L__self__", "", path)
    path = re.sub(r"\._modules\['([^']*)'\]|\['([^']*)'\]|\[(\d+)\]",
                  lambda m: "." + next(g for g in m.groups() if g is not None), path)
    return path.strip("._")


def target_name(node: fx.Node) -> str:
    if isinstance(node.target, torch._ops.OpOverload):
        return str(node.target)  # "aten.convolution.default"
    return getattr(node.target, "__name__", str(node.target))


# Ops whose result depends on how their input lies in memory, not only on its values.
MEMORY_READERS = frozenset({torch.ops.aten.as_strided.default, torch.ops.aten.as_strided_copy.default,
                            torch.ops.aten.as_strided_scatter.default})


def dense_storage(val) -> bool:
    """True when PyTorch lays the tensor `val` out as Kiln lays out every value: contiguous,
    from offset 0, filling its whole storage."""
    try:
        return bool(isinstance(val, torch.Tensor) and val.is_contiguous()
                    and val.storage_offset() == 0
                    and val.untyped_storage().nbytes() == val.numel() * val.element_size())
    except Exception:  # noqa: BLE001 — a layout that can't be told (symbolic) isn't known dense
        return False


def serialize(gm: fx.GraphModule, constants: set[str], name: str = "fx_graph",
              symbol_ranges: dict[str, tuple[int, int]] | None = None) -> str:
    """The graph as JSON; placeholders named in `constants` are marked as frozen weights;
    `symbol_ranges` replaces the ranges of the symbols it names."""
    writer = _Writer(symbol_ranges)
    placeholders, nodes, outputs = [], [], []
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr"):
            # A get_attr is a tensor the graph module holds (a lifted constant): frozen too.
            if is_symbolic_scalar(node):
                continue  # a size: its uses carry its expression
            value = (getattr(gm, node.target) if node.op == "get_attr"
                     else node.meta.get("val"))
            entry = writer.meta(value)
            if entry is None:
                raise TypeError(f"{node.op} {node.name} is not a tensor")
            frozen = node.op == "get_attr" or node.name in constants
            entry.update(name=node.name, kind="constant" if frozen else "input")
            placeholders.append(entry)
        elif node.op == "call_function":
            if node.target is operator.getitem or is_symbolic_scalar(node):
                continue  # references to tuple elements carry the index instead
            val = node.meta.get("val")
            metas = ([writer.meta(v) for v in val] if isinstance(val, (list, tuple))
                     else [writer.meta(val)])
            args = (_schema_args(node, writer) if isinstance(node.target, torch._ops.OpOverload)
                    else {})
            if node.target in MEMORY_READERS:
                # as_strided reads memory: Kiln's converter needs x laid out as its values are.
                args["input_is_dense"] = dense_storage(node.args[0].meta.get("val"))
            entry = {"name": node.name, "target": target_name(node), "args": args,
                     "outputs": metas, "source": module_path(node)}
            nodes.append(entry)
        elif node.op == "output":
            result = node.args[0]
            for r in (result if isinstance(result, (list, tuple)) else [result]):
                outputs.append(writer.arg(r))
        else:
            raise TypeError(f"FX node {node.name} of kind {node.op} can't be serialized")
    symbols = [{"name": n, "min": lo, "max": hi} for n, (lo, hi) in writer.symbols.items()]
    return json.dumps({"name": name, "symbols": symbols, "placeholders": placeholders,
                       "nodes": nodes, "outputs": outputs})
