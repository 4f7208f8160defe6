"""torch.compile(model, backend="kiln"): capture at the ATen level, partition, compile with Kiln.

Flow (docs/frontend.md): dynamo hands a GraphModule; AOTAutograd traces it to ATen ops (an
inference graph under no_grad); the graph is serialized and Kiln's C++ converters say which
nodes they take; torch's CapabilityBasedPartitioner groups those into acyclic subgraphs; each
subgraph large enough is imported and compiled by Kiln with parameters and buffers frozen as
constants; the rest stays in PyTorch.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import itertools
import operator
import sys
from typing import Any, Callable

import sympy
import torch
import torch.fx as fx
from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

from kiln import _C, _precision, _upsample
from kiln._errors import error
from kiln.config import CompilerConfig
from kiln._dump import partition_snapshot, write_partition_dump
from kiln._fx import (_INT64_MAX, MEMORY_READERS, _bound, dense_storage, is_symbolic_scalar,
                      serialize, target_name)


class _KilnSupport(OperatorSupportBase):
    def __init__(self, verdicts: dict[str, str]):
        self.verdicts = verdicts

    def is_node_supported(self, submodules, node: fx.Node) -> bool:
        if node.op != "call_function":
            return False
        if is_symbolic_scalar(node):
            return True  # sizes are folded into the expressions of their uses
        if node.target is operator.getitem:
            return self.verdicts.get(node.args[0].name) == ""
        return self.verdicts.get(node.name) == ""


# Compiled variants a partition keeps, one per set of frozen tensors it was called with: a
# transformer's layers, each passing its own weights to one FX graph, take one each.
_MAX_VARIANTS = 64


def _held_only_here(tensors: list[torch.Tensor]) -> bool:
    """Whether some tensor of a variant's list is referenced by that list alone (counted here:
    the list, the loop variable and getrefcount's argument)."""
    for t in tensors:
        if sys.getrefcount(t) <= 3:
            return True
    return False


class KilnSubgraph(torch.nn.Module):
    """A partition compiled by Kiln. Frozen weights are checked on every call: a parameter
    changed in place (its version counter moved) or replaced makes the next call re-import the
    subgraph, so no result is ever computed from stale weights. One FX graph can serve several
    modules (dynamo compiles a repeated layer's forward once and passes each instance's
    parameters), so the partition keeps a compiled variant per set of frozen tensors, the
    _MAX_VARIANTS last used. The call itself is a _C.TorchCall: the checks, the crossing of
    tensors and the run are C++ (docs/frontend.md)."""

    def __init__(self, graph_json: str, constant_args: dict[int, str], names: list[str],
                 example_args: list[torch.Tensor], options: dict[str, Any], single_output: bool,
                 size_args: frozenset[int] = frozenset(), output_count: int = 1):
        super().__init__()
        self.graph_json = graph_json
        self.constant_args = constant_args  # argument position → placeholder name
        # Sizes passed as SymInts (dynamic shapes) are not inputs: Kiln reads them off the
        # tensors' shapes.
        self.input_positions = self.tensor_positions(len(names), constant_args, size_args)
        self.options = options
        self.single_output = single_output
        self.output_count = output_count
        self.precision_check = None  # a _precision.PartitionCheck with debug.precision_check
        self._calls: list = []  # the TorchCalls running this partition, reset on a refreeze
        # id of each frozen tensor → (the tensors, their versions, the compiled graph), least
        # recently used first; the entries hold the tensors, so their ids stay theirs.
        self._variants: collections.OrderedDict = collections.OrderedDict()
        self._freeze([example_args[i] for i in constant_args], list(constant_args))
        self._call = self.torch_call(list(range(len(names))), single_output)

    @staticmethod
    def tensor_positions(count: int, constant_args, size_args) -> list[int]:
        """The argument positions that are Kiln inputs."""
        return [i for i in range(count) if i not in constant_args and i not in size_args]

    def _freeze(self, tensors: list[torch.Tensor], positions: list[int]) -> None:
        key = tuple(id(t) for t in tensors)
        variant = self._variants.pop(key, None)
        versions = [t._version for t in tensors]
        if variant is None or variant[1] != versions:
            # Called from inside AOTAutograd's tracing too: real tensors need fake mode off.
            with unset_fake_temporarily():
                constants = {self.constant_args[p]: t.detach().contiguous()
                             for p, t in zip(positions, tensors)}
                graph = _C.import_fx(self.graph_json, constants)
            variant = (list(tensors), versions, _C.compile(graph, **self.options))
            # A variant whose weights only it still holds (a parameter replaced by another, say
            # by load_state_dict(assign=True)) can never be called again: dropped, with its
            # memory. Checked when a variant is compiled, which a replacement causes, not on
            # every switch between layers.
            for stale in [k for k, v in self._variants.items() if _held_only_here(v[0])]:
                del self._variants[stale]
        self._variants[key] = variant
        if len(self._variants) > _MAX_VARIANTS:
            self._variants.popitem(last=False)
        self.compiled = variant[2]
        self.frozen = [(p, t, t._version) for p, t in zip(positions, tensors)]
        for call in self._calls:
            call.reset(self.compiled, list(tensors))

    def _refreeze(self, tensors: list[torch.Tensor]) -> None:
        self._freeze(tensors, [p for p, _, _ in self.frozen])

    def torch_call(self, positions: list[int], single_output: bool):
        """A _C.TorchCall running this partition on a caller's arguments, where `positions[i]`
        is the caller's position of this module's argument i (None for a frozen weight the
        caller doesn't pass): the module's own forward, or dynamo calling the partition
        directly when it is the whole graph."""
        call = _C.TorchCall(self.compiled, [positions[i] for i in self.input_positions],
                            [positions[p] for p, _, _ in self.frozen],
                            [t for _, t, _ in self.frozen], self._refreeze, single_output)
        self._calls.append(call)
        return call

    def forward(self, *args):
        if self.precision_check is None:
            return self._call(*args)
        for position, tensor, version in self.frozen:
            arg = args[position]
            if arg is not tensor or arg._version != version:
                self._refreeze([args[p] for p, _, _ in self.frozen])
                break
        # Kiln reads dense row-major memory: views and channels-last tensors made by PyTorch
        # (around a fallback op, or by the caller) are made contiguous, a copy only for them.
        inputs = [args[i] for i in self.input_positions]
        inputs = [t if t.is_contiguous() else t.contiguous() for t in inputs]
        outputs = self.precision_check.run(self.compiled, inputs, args)
        if not inputs:  # results follow the inputs' framework; with none they are NumPy
            outputs = [torch.from_numpy(o) for o in outputs]
        return outputs[0] if self.single_output else tuple(outputs)


@dataclasses.dataclass
class DynamicSetup:
    """dynamic_shape.* resolved against one FX graph (docs/dynamic-shapes.md): the range of each
    symbol dims_range bounds, and each gear as a binding of the graph's symbols."""
    ranges: dict[str, tuple[int, int]]
    gears: list[dict]  # sympy symbol → size
    pad_to_gear: bool


def _argument_name(source) -> str | None:
    """The name of the call argument a dynamo source reads: the parameter's name (a positional
    argument through a *args wrapper, as transformers' forward has, by the module's forward
    signature), dynamo's source text for a nested one (L['batch']['ids']); None for what the
    call doesn't pass (attributes: parameters, buffers, module floats)."""
    keys = []
    while type(source).__name__ in ("GetItemSource", "DictGetItemSource"):
        keys.append(source.index)
        source = source.base
    if type(source).__name__ != "LocalSource":
        return None
    if not keys:
        return source.local_name
    if len(keys) == 1 and source.local_name == "kwargs" and isinstance(keys[0], str):
        return keys[0]
    if len(keys) == 1 and source.local_name == "args" and isinstance(keys[0], int):
        from torch._dynamo.symbolic_convert import InstructionTranslator
        tx = InstructionTranslator.current_tx()
        module = tx.f_locals.get("self") if tx is not None else None
        if isinstance(module, torch.nn.Module):
            import inspect
            names = [p.name for p in inspect.signature(module.forward).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            if keys[0] < len(names):
                return names[keys[0]]
    text = "L[" + repr(source.local_name) + "]" + "".join(f"[{k!r}]" for k in reversed(keys))
    return text


def _user_inputs(gm: fx.GraphModule, constants: dict) -> list[tuple[str, fx.Node]]:
    """(name, placeholder) of each tensor the call passes, in order."""
    inputs = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        if i in constants or not isinstance(node.meta.get("example_value"), torch.Tensor):
            continue
        name = _argument_name(getattr(node.meta.get("grapharg"), "source", None))
        if name is not None:
            inputs.append((name, node))
    return inputs


def _dynamic_setup(gm: fx.GraphModule, constants: dict, config: CompilerConfig) -> DynamicSetup:
    dims_range = config.get("dynamic_shape.dims_range")
    gears = config.get("dynamic_shape.gears")
    pad = config.get("dynamic_shape.pad_to_gear")
    recompile = config.get("dynamic_shape.out_of_range") == "recompile"
    if pad and not gears:
        raise error("E10001", "dynamic_shape.pad_to_gear pads up to a gear, but "
                    "dynamic_shape.gears is empty; give gears or leave pad_to_gear off")
    inputs = _user_inputs(gm, constants)
    names = ", ".join(f"{k} {n!r}" for k, (n, _) in enumerate(inputs)) or "none"

    def lookup(key, option: str) -> tuple[str, torch.Tensor]:
        found = (inputs[key] if isinstance(key, int) and key < len(inputs) else
                 next((entry for entry in inputs if entry[0] == key), None))
        if found is None:
            raise error("E10001", f"option {option} names input {key!r}, which the compiled "
                        f"function doesn't take; its tensor inputs are: {names}")
        return found[0], found[1].meta["example_value"]

    how = ("make it dynamic with torch.compile(dynamic=True) or torch._dynamo.mark_dynamic; "
           "dynamo keeps sizes 0 and 1 static whatever is asked")
    ranges: dict[str, tuple[int, int]] = {}
    for key, spec in dims_range.items():
        if not isinstance(spec, dict):
            raise error("E10001", f"option dynamic_shape.dims_range: {key!r}: {spec!r} gives a "
                        f"range by torch.export Dim name, which only kiln.export has; under "
                        f"torch.compile give input and axis, e.g. {{'input_ids': {{1: (16, 512)}}}}")
        name, value = lookup(key, "dynamic_shape.dims_range")
        for axis, (low, high) in spec.items():
            where = f"input {name!r} axis {axis}"
            if axis >= value.dim():
                raise error("E10001", f"option dynamic_shape.dims_range: {where}: the input has "
                            f"rank {value.dim()}")
            dim = value.shape[axis]
            if not isinstance(dim, torch.SymInt):
                raise error("E10001", f"option dynamic_shape.dims_range: {where} is static (size "
                            f"{dim}) in the graph dynamo traced, so it has no range; {how}")
            expr = dim.node.expr
            if not expr.is_Symbol:
                raise error("E10001", f"option dynamic_shape.dims_range: {where} is {expr}, an "
                            f"expression of other dims: bound those")
            if recompile:  # the range grows to the size that made dynamo recompile
                low, high = min(low, dim.node.hint), max(high, dim.node.hint)
            bounds = dim.node.shape_env.var_to_range.get(expr)
            low = max(low, _bound(getattr(bounds, "lower", None), 0))
            high = min(high, _bound(getattr(bounds, "upper", None), _INT64_MAX))
            if str(expr) in ranges:  # two entries for one dim (two inputs sharing it)
                low, high = max(low, ranges[str(expr)][0]), min(high, ranges[str(expr)][1])
            if low > high:
                raise error("E10001", f"option dynamic_shape.dims_range: {where} gets the empty "
                            f"range [{low}, {high}] once met with dynamo's range of the dim "
                            f"({bounds}) and other entries for it")
            ranges[str(expr)] = (low, high)
            if recompile:
                # Guards: dynamo recompiles for a size outside the range instead of calling
                # this graph, which would raise E20008.
                bool(dim >= low)
                bool(dim <= high)
    bindings = []
    for g, gear in enumerate(gears):
        binding: dict = {}
        for key, shape in gear.items():
            name, value = lookup(key, f"dynamic_shape.gears (gear {g})")
            if len(shape) != value.dim():
                raise error("E10001", f"option dynamic_shape.gears: gear {g} gives input "
                            f"{name!r} rank {len(shape)} ({list(shape)}), but it has rank "
                            f"{value.dim()}")
            for axis, (dim, size) in enumerate(zip(value.shape, shape)):
                where = f"gear {g} gives input {name!r} axis {axis} size {size}"
                if not isinstance(dim, torch.SymInt):
                    if dim != size:
                        raise error("E10001", f"option dynamic_shape.gears: {where}, but the axis "
                                    f"is static (size {dim}) in the graph dynamo traced; {how}")
                    continue
                expr = dim.node.expr
                if expr.is_Symbol:
                    if binding.get(expr, size) != size:
                        raise error("E10001", f"option dynamic_shape.gears: {where}, but the "
                                    f"gear sets the same dim ({expr}) to {binding[expr]} elsewhere")
                    binding[expr] = size
        for name, node in inputs:
            free = {s for d in node.meta["example_value"].shape if isinstance(d, torch.SymInt)
                    for s in d.node.expr.free_symbols}
            if free - set(binding):
                raise error("E10001", f"option dynamic_shape.gears: gear {g} gives no size to "
                            f"input {name!r}, whose shape {list(node.meta['example_value'].shape)}"
                            f" is dynamic; give every dynamic input's shape")
        bindings.append(binding)
    return DynamicSetup(ranges, bindings, pad)


def _gear_sizes(vals: list, binding: dict, graph: str) -> list[list[int]]:
    """The sizes of a Kiln graph's inputs (their FX values `vals`) at a gear."""
    sizes = []
    for val in vals:
        shape = []
        for d in val.shape:
            if isinstance(d, torch.SymInt):
                d = sympy.sympify(sympy.sympify(d.node.expr).xreplace(binding))
                if not d.is_number:
                    raise error("E10001", f"option dynamic_shape.gears: a gear leaves the size "
                                f"{d} of an input of the Kiln graph {graph} unknown; give every "
                                f"dynamic input's shape")
            shape.append(int(d))
        sizes.append(shape)
    return sizes


def _unsupported_summary(gm: fx.GraphModule, verdicts: dict[str, str]) -> str:
    counts = collections.Counter()
    reasons = {}
    for node in gm.graph.nodes:
        verdict = verdicts.get(node.name)
        if node.op == "call_function" and node.target is not operator.getitem and verdict:
            counts[target_name(node)] += 1
            reasons.setdefault(target_name(node), verdict)
    return "\n".join(f"  {t} x{n}: {reasons[t]}" for t, n in counts.most_common())


@dataclasses.dataclass
class Partition:
    name: str
    ops: collections.Counter
    module: KilnSubgraph | None = None
    input_sizes: list[list[int]] | None = None  # the shapes it was compiled for
    memory: dict | None = None  # CompiledGraph.memory_stats for input_sizes

    def memory_plan(self, format: str = "table") -> str:
        """The partition's memory plan: a table, or an SVG chart of offset over time."""
        return self.module.compiled.memory_plan(self.input_sizes, format)


@dataclasses.dataclass
class Report:
    """What one compilation did: the Kiln partitions and what stayed in PyTorch and why."""
    partitions: list[Partition] = dataclasses.field(default_factory=list)
    fallback: dict[str, tuple[int, str]] = dataclasses.field(default_factory=dict)

    def __str__(self) -> str:
        lines = [f"{len(self.partitions)} Kiln partition(s)"]
        for p in self.partitions:
            ops = ", ".join(f"{t} x{n}" for t, n in p.ops.most_common())
            lines.append(f"  {p.name}: {sum(p.ops.values())} ops ({ops})")
            if p.memory is not None:
                m = p.memory
                lines.append(f"    memory: arena {m['arena_bytes']} bytes for "
                             f"{m['intermediate_bytes']} bytes of intermediates "
                             f"({m['in_place']} in place, schedule {m['schedule']}, "
                             f"placement {m['placement']})")
                if m["prepacked_bytes"]:
                    # The copy beside the model's own weights: what Kiln adds to eager's memory.
                    lines.append(f"    weights reordered for the kernels: {m['prepacked_bytes']} "
                                 f"bytes (memory.gemm_weights_in_place reads GEMM weights as "
                                 f"stored instead)")
                if m["released_constant_bytes"]:
                    lines.append(f"    constants made by the compile (folded weights) released "
                                 f"after prepacking: {m['released_constant_bytes']} bytes")
        lines.append(f"{sum(n for n, _ in self.fallback.values())} op(s) left in PyTorch")
        for target, (n, why) in self.fallback.items():
            lines.append(f"  {target} x{n}: {why}")
        return "\n".join(lines)


def _leave_escaping_sizes_to_pytorch(partition) -> None:
    """A size (SymInt) computed in a partition and read outside it can't be a Kiln output:
    PyTorch computes it, and the partition reads it as an input where it uses it too. A size
    computed from sizes moves alone (the usual case: from the graph's SymInt inputs); one read
    off a tensor of the partition (BEiT's H // 8 of its patch embedding under dynamic=True)
    takes the nodes of the partition reading it along, which would otherwise make a cycle."""
    def from_sizes(node: fx.Node) -> bool:
        return all(a not in partition.nodes or is_symbolic_scalar(a)
                   for a in node.all_input_nodes)
    moved = True
    while moved:
        moved = False
        for node in list(partition.nodes):
            if (node in partition.nodes and is_symbolic_scalar(node)
                    and any(u not in partition.nodes for u in node.users)):
                if from_sizes(node):
                    partition.remove_node(node)
                else:
                    _remove_with_readers(partition, [node])
                moved = True


def _remove_with_readers(partition, nodes: list[fx.Node]) -> None:
    """Removes the nodes from the partition with every node of it that reads them, directly or
    not: what stays then never reads what left, so moving them can't make a cycle."""
    pending = list(nodes)
    while pending:
        node = pending.pop()
        if node in partition.nodes:
            partition.remove_node(node)
            pending.extend(u for u in node.users if u in partition.nodes)


def _sizes_read(node: fx.Node) -> list:
    """The sympy expressions of the symbolic sizes among a node's arguments."""
    exprs = []
    fx.node.map_aggregate((node.args, node.kwargs), lambda a: exprs.append(
        a.meta["val"].node.expr if isinstance(a, fx.Node) and is_symbolic_scalar(a)
        else a.node.expr if isinstance(a, (torch.SymInt, torch.SymFloat)) else None))
    return [e for e in exprs if e is not None]


def _leave_unbound_sizes_to_pytorch(partition) -> None:
    """A Kiln graph binds its symbols from its tensor inputs' dims at run time, so a size
    argument must be one of those dims or read only symbols that are: nodes computing from
    other sizes (BEiT's relative position index under dynamic=True: arange(H // 8) in a
    partition with no tensor input) stay in PyTorch with the nodes reading them, and what is left
    is checked again against the inputs that gives the partition."""
    removed = True
    while removed:
        removed = False
        dims = set()
        for node in partition.nodes:
            for a in node.all_input_nodes:
                val = a.meta.get("val")
                if a not in partition.nodes and isinstance(val, torch.Tensor):
                    dims |= {d.node.expr for d in val.shape if isinstance(d, torch.SymInt)}
        symbols = {d for d in dims if d.is_Symbol}
        unbound = [n for n in partition.nodes if not is_symbolic_scalar(n) and any(
            e not in dims and not e.free_symbols <= symbols for e in _sizes_read(n))]
        _remove_with_readers(partition, unbound)
        removed = bool(unbound)


def _leave_memory_layouts_to_pytorch(gm: fx.GraphModule, verdicts: dict[str, str]) -> None:
    """An op left in PyTorch that reads its input's memory (as_strided) must see the layout eager
    gives that input, and Kiln's outputs are all dense: the nodes making a tensor that isn't
    (views, a channels-last convolution) stay in PyTorch too, back to dense ones."""
    for reader in gm.graph.nodes:
        if (reader.op != "call_function" or reader.target not in MEMORY_READERS
                or verdicts.get(reader.name) == ""):
            continue
        pending = list(reader.all_input_nodes)
        while pending:
            node = pending.pop()
            if node.op != "call_function" or dense_storage(node.meta.get("val")):
                continue
            producer = node.args[0] if node.target is operator.getitem else node
            if verdicts.get(producer.name) == "":
                verdicts[producer.name] = (f"{reader.name} (as_strided), left in PyTorch, reads "
                                           f"the memory of its result as eager lays it out")
            pending.extend(producer.all_input_nodes)


# The largest tensor _fold_constant_factories makes: a constant costs memory for the model's life.
_FOLDED_BYTES_LIMIT = 4 << 20


def _fold_constant_factories(gm: fx.GraphModule, verdicts: dict[str, str]) -> bool:
    """Replaces each node Kiln can't convert that reads no tensor and no symbolic size, or only
    tensors folded here (torch.linspace(0.5, W - 0.5, W) with W static: the sampling grids of
    deformable attention), by the tensor PyTorch computes for it now: the same every call, and
    eager's bits. Kiln then takes it as a constant. Seeded random ops, mutating ops and
    results over _FOLDED_BYTES_LIMIT stay. True if anything was folded."""
    folded: set[fx.Node] = set()
    for node in list(gm.graph.nodes):
        target = node.target
        val = node.meta.get("val")
        if (node.op != "call_function" or verdicts.get(node.name, "") == ""
                or not isinstance(target, torch._ops.OpOverload)
                or torch.Tag.nondeterministic_seeded in target.tags or target._schema.is_mutable
                or any(n not in folded for n in node.all_input_nodes)
                or not isinstance(val, torch.Tensor)
                or any(not isinstance(d, int) for d in val.shape)
                or val.numel() * val.element_size() > _FOLDED_BYTES_LIMIT):
            continue
        def real(a):
            return getattr(gm, a.target) if isinstance(a, fx.Node) else a
        with unset_fake_temporarily():
            value = target(*fx.node.map_aggregate(node.args, real),
                           **fx.node.map_aggregate(node.kwargs, real))
        name = f"_kiln_folded_{node.name}"
        gm.register_buffer(name, value)
        with gm.graph.inserting_before(node):
            constant = gm.graph.get_attr(name)
        constant.meta = dict(node.meta)
        node.replace_all_uses_with(constant)
        gm.graph.erase_node(node)
        folded.add(constant)
    if folded:
        gm.recompile()
    return bool(folded)


def compile_aten_graph(gm: fx.GraphModule, constants: dict[int, torch.Tensor],
                       config: CompilerConfig, report: Report | None = None,
                       dynamic: DynamicSetup | None = None) -> fx.GraphModule:
    """Partitions an ATen graph between Kiln and PyTorch and compiles Kiln's parts.
    `constants` maps placeholder positions to the real tensors frozen there; `dynamic`, the
    dims_range and gears of the FX graph it came from."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    constant_names = {placeholders[i].name for i in constants}
    constant_data = {placeholders[i].name: t for i, t in constants.items()}
    verdicts = _C.fx_node_support(serialize(gm, constant_names))
    if _fold_constant_factories(gm, verdicts):
        verdicts = _C.fx_node_support(serialize(gm, constant_names))
    _leave_memory_layouts_to_pytorch(gm, verdicts)
    while True:
        summary = _unsupported_summary(gm, verdicts)
        if summary and not config.get("operator_selection.fallback_to_cpu"):
            raise error("E50001", "operator_selection.fallback_to_cpu is False, but these ops "
                        "can't run in Kiln:\n" + summary)
        # Fusing rewrites the module it is given: each try works on a copy of the graph.
        attempt = fx.GraphModule(gm, copy.deepcopy(gm.graph))
        try:
            fused, partitions, built = _compile_partitions(
                attempt, verdicts, config, constant_names, constant_data, dynamic,
                describe=report is not None)
            break
        except _C.Error as e:
            # Each node converts alone (fx_node_support) with PyTorch's types for its operands;
            # inside a partition it gets the types Kiln inferred, which can differ (a symbolic
            # dim derived another way). Such a node goes to PyTorch, and the partitions are
            # drawn again.
            node = getattr(e, "fx_node", "")
            if not node or verdicts.get(node) != "":
                raise
            verdicts[node] = f"{e} (converting it inside its partition)"
    if report is not None:
        report.partitions.extend(built)
        in_kiln = {n.name for p in partitions for n in p.nodes}
        for n in fused.graph.nodes:
            if (n.op == "call_function" and n.target is not operator.getitem
                    and n.name not in in_kiln):
                count, why = report.fallback.get(target_name(n), (0, ""))
                reason = verdicts.get(n.name) or f"in a partition under min_block_size"
                report.fallback[target_name(n)] = (count + 1, why or reason)
    fused.recompile()
    return fused


def _compile_partitions(gm: fx.GraphModule, verdicts: dict[str, str], config: CompilerConfig,
                        constant_names: set[str], constant_data: dict[str, torch.Tensor],
                        dynamic: DynamicSetup | None, describe: bool):
    """The graph with each Kiln partition fused into a KilnSubgraph module (fusing rewrites
    `gm`), the partitions, and (with `describe`) their Report entries."""
    min_block_size = config.get("operator_selection.min_block_size")
    partitioner = CapabilityBasedPartitioner(gm, _KilnSupport(verdicts),
                                             allows_single_node_partition=True)
    partitions = partitioner.propose_partitions()
    for p in partitions:
        _leave_unbound_sizes_to_pytorch(p)
        _leave_escaping_sizes_to_pytorch(p)
    # Size computations and getitems don't count: a partition of nothing else (a size feeding
    # an op that stays in PyTorch) has no tensor work for Kiln and stays in PyTorch.
    partitions = [p for p in partitions
                  if sum(n.target is not operator.getitem and not is_symbolic_scalar(n)
                         for n in p.nodes) >= max(min_block_size, 1)]
    # Kiln graphs are named <FX graph>_fused_<i> (the partitioner's i-th module), so the dumps of
    # several compiled FX graphs don't overwrite each other.
    graph_name = f"graph{next(_graph_ids)}"
    dump_type = config.get("debug.graph_dump.type")
    if dump_type is not None:
        snapshot = partition_snapshot(gm, {n.name: f"{graph_name}_fused_{i}"
                                           for i, p in enumerate(partitions) for n in p.nodes},
                                      verdicts)
    fused = partitioner.fuse_partitions(partitions)
    if dump_type is not None:
        write_partition_dump(snapshot, fused, graph_name, dump_type,
                             config.get("debug.graph_dump.path"))
    options = config.compile_options()
    if config.get("memory.enable_shared_pool"):
        # The partitions run one after another: they can borrow one arena, sized to the largest.
        options["memory_pool"] = _C.MemoryPool()
    parent_placeholders = {n.name: n for n in fused.graph.nodes if n.op == "placeholder"}
    built = []
    for node in list(fused.graph.nodes):
        if node.op != "call_module" or not node.target.startswith("fused_"):
            continue
        sub: fx.GraphModule = getattr(fused, node.target)
        sub_placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
        constant_args = {}
        example_args = []
        for i, (arg, ph) in enumerate(zip(node.args, sub_placeholders)):
            data = None
            if isinstance(arg, fx.Node) and arg.op == "get_attr":
                data = getattr(fused, arg.target)
            elif (isinstance(arg, fx.Node) and arg.name in constant_names
                  and parent_placeholders.get(arg.name) is arg):
                data = constant_data[arg.name]
            if data is not None:
                constant_args[i] = ph.name
            example_args.append(data)
        output = next(n for n in sub.graph.nodes if n.op == "output").args[0]
        single = not isinstance(output, (list, tuple))
        kiln_name = f"{graph_name}_{node.target}"
        graph_json = serialize(sub, set(constant_args.values()), name=kiln_name,
                               symbol_ranges=dynamic.ranges if dynamic else None)
        size_args = frozenset(i for i, ph in enumerate(sub_placeholders)
                              if is_symbolic_scalar(ph))
        module_options = options
        if dynamic is not None and dynamic.gears:
            vals = [node.args[i].meta["val"]
                    for i in KilnSubgraph.tensor_positions(len(sub_placeholders), constant_args,
                                                           size_args)]
            module_options = dict(options, pad_to_gear=dynamic.pad_to_gear,
                                  gears=[_gear_sizes(vals, b, kiln_name) for b in dynamic.gears])
        module = KilnSubgraph(graph_json, constant_args, [p.name for p in sub_placeholders],
                              example_args, module_options, single, size_args,
                              1 if single else len(output))
        if config.get("debug.precision_check.enable"):
            module.precision_check = _precision.PartitionCheck(
                sub, kiln_name, config.get("debug.precision_check.rtol"),
                config.get("debug.precision_check.atol"))
        setattr(fused, node.target, module)
        if describe:
            sizes = [[d if isinstance(d, int) else d.node.hint
                      for d in node.args[i].meta["val"].shape]
                     for i in module.input_positions]
            built.append(Partition(node.target, collections.Counter(
                target_name(n) for n in sub.graph.nodes
                if n.op == "call_function" and n.target is not operator.getitem),
                module, sizes, module.compiled.memory_stats(sizes)))
    return fused, partitions, built


def _plain_inference(example_inputs: list) -> bool:
    """True when AOTAutograd's runtime wrapper around the inference graph it is compiling has
    nothing to do but call it: no input mutated, every output a new tensor (none aliasing an
    input or another output), no effect tokens, RNG state, autocast or tensor subclasses, no
    dynamic output dims to mark. Nothing requires grad in an inference graph."""
    from torch._functorch._aot_autograd.schemas import OutputType
    from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    return (meta is not None
            and not any(i.mutates_data or i.mutates_metadata or i.mutates_storage_metadata
                        for i in meta.input_info)
            and meta.num_mutated_inp_runtime_indices == 0
            and all(o.output_type == OutputType.non_alias for o in meta.output_info)
            and meta.num_intermediate_bases == 0
            and not meta.tokens and not meta.is_rng_op_functionalized
            and not meta.dynamic_outputs and meta.grad_enabled_mutation is None
            and not torch._C._is_any_autocast_enabled()
            and not any(is_traceable_wrapper_subclass(t) for t in example_inputs))


def _direct_call(fused: fx.GraphModule, lifted: int) -> Callable | None:
    """When the whole graph is one Kiln partition on the graph's own arguments, its
    _C.TorchCall reading those arguments (outputs as a tuple, as dynamo expects): no FX module
    and no submodule call around it. None otherwise. The first `lifted` placeholders are
    weights AOTAutograd lifted off the graph module, which dynamo's call doesn't pass."""
    placeholders: dict[fx.Node, int] = {}
    call = output = None
    getitems: dict[fx.Node, int] = {}
    for node in fused.graph.nodes:
        if node.op == "placeholder":
            placeholders[node] = len(placeholders)
        elif node.op == "call_module" and call is None:
            call = node
        elif (node.op == "call_function" and node.target is operator.getitem
              and node.args[0] is call):
            getitems[node] = node.args[1]
        elif node.op == "output":
            output = node.args[0]
        else:
            return None
    module = getattr(fused, call.target) if call is not None else None
    if (not isinstance(module, KilnSubgraph) or module.precision_check is not None
            or call.kwargs or not isinstance(output, (list, tuple))
            or not all(isinstance(a, fx.Node) and a in placeholders for a in call.args)):
        return None
    by_index = {k: g for g, k in getitems.items()}
    expected = ([call] if module.single_output else
                [by_index.get(i) for i in range(module.output_count)])
    if list(output) != expected:
        return None
    positions = [placeholders[a] - lifted if placeholders[a] >= lifted else None
                 for a in call.args]
    return module.torch_call(positions, single_output=False)


_MODES = ("default", "reduce-overhead", "max-autotune")
_graph_ids = itertools.count()


def kiln_backend(gm: fx.GraphModule, example_inputs: list, mode: str | None = None,
                 options: CompilerConfig | dict | None = None, _report: Report | None = None):
    """The dynamo backend registered as "kiln"."""
    config = CompilerConfig.from_options(options)
    mode = mode or "default"
    if mode not in _MODES:
        raise error("E10001", f"mode {mode!r} is unknown; use one of {', '.join(_MODES)}")
    if mode == "max-autotune":
        policy = config.get("operator_selection.policy")
        if policy not in ("PERFORMANCE", "MAX_AUTOTUNE"):
            raise error("E10001", f"mode 'max-autotune' picks kernels by timing them, but "
                        f"operator_selection.policy is {policy!r}; drop one of the two")
        config = CompilerConfig.from_options(config.as_dict())  # the caller's stays unchanged
        config.set("operator_selection.policy", "MAX_AUTOTUNE")
    # Parameters and buffers that dynamo passes as graph inputs are frozen into Kiln's graph.
    # AOTAutograd traces with fake tensors: the real ones are taken here, by position. A tensor
    # the call passes stays an input even where dynamo marks it static: EnCodec's padding
    # amounts, new tensors every call, would otherwise re-import their partition on each one.
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    constants = {i: t for i, (t, node) in enumerate(zip(example_inputs, placeholders))
                 if isinstance(t, torch.Tensor)
                 and getattr(t, "_dynamo_static_input_type", None) is not None
                 and _argument_name(getattr(node.meta.get("grapharg"), "source", None)) is None}
    # Those that dynamo keeps on the graph module instead (install_free_tensors) are frozen
    # too: AOTAutograd lifts them, in this order, ahead of the graph's own inputs.
    lifted = [*dict(gm.named_parameters(remove_duplicate=False)).values(),
              *dict(gm.named_buffers(remove_duplicate=False)).values()]
    aten_constants = {**dict(enumerate(lifted)),
                      **{len(lifted) + i: t for i, t in constants.items()}}
    # Dynamo decides which dims are symbolic while tracing, before calling any backend, and
    # torch.compile hands a backend no way to ask first: a graph traced static can't honour
    # dynamic_shape.enable, so it is refused rather than compiled static.
    if (config.get("dynamic_shape.enable")
            and torch._dynamo.config.assume_static_by_default):
        raise error("E10001", "dynamic_shape.enable = True asks for symbolic dims, but dynamo "
                    "traced this graph with static ones (it decides before the backend runs); "
                    "add dynamic=True to torch.compile: torch.compile(model, backend=..., "
                    "dynamic=True)")
    dynamic = _dynamic_setup(gm, constants, config)
    # The kiln:: upsample ops have no backward: graphs that autograd will differentiate keep
    # PyTorch's decomposition.
    if not (torch.is_grad_enabled()
            and any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs)):
        _upsample.route_interpolate(gm)

    def inference_compiler(aten_gm: fx.GraphModule, aten_inputs: list):
        if len(aten_inputs) != len(lifted) + len(example_inputs):
            raise error("E50001", "AOTAutograd changed the graph's inputs (input mutation or "
                        "aliasing); Kiln compiles inference graphs without them")
        return compile_aten_graph(aten_gm, aten_constants, config, _report, dynamic)

    # Where AOTAutograd's runtime wrapper would only call the graph, and the graph is a single
    # Kiln partition, dynamo calls the partition directly: the wrapper and the FX module cost
    # several times the run of a small graph (docs/benchmarks.md). Any mutation, aliasing,
    # autograd or fallback op keeps AOTAutograd's path and its semantics.
    direct = []

    def direct_compiler(aten_gm: fx.GraphModule, aten_inputs: list):
        fused = inference_compiler(aten_gm, aten_inputs)
        call = (_direct_call(fused, len(lifted)) if _plain_inference(example_inputs)
                else None)
        if call is not None:
            direct.append(call)
        return fused

    def backward_compiler(aten_gm: fx.GraphModule, aten_inputs: list):
        # Inputs requiring grad under grad mode: Kiln runs the forward graph, and the backward
        # graph AOTAutograd derived runs in PyTorch (Kiln has no backward converters yet).
        return make_boxed_func(aten_gm.forward)

    compiled = aot_module_simplified(gm, example_inputs, fw_compiler=inference_compiler,
                                     bw_compiler=backward_compiler,
                                     inference_compiler=direct_compiler)
    return direct[0] if direct else compiled


def get_backend(compiler_config: CompilerConfig | None = None) -> Callable:
    """A backend bound to a CompilerConfig: torch.compile(m, backend=kiln.get_backend(cfg))."""
    config = CompilerConfig.from_options(compiler_config)

    def backend(gm, example_inputs, mode=None, options=None):
        if options is not None:
            raise error("E10001", "pass options either in the CompilerConfig of get_backend() "
                        "or in torch.compile(options=...), not both")
        return kiln_backend(gm, example_inputs, mode=mode, options=config)
    return backend


def explain(model: Callable, *inputs, options: CompilerConfig | dict | None = None) -> Report:
    """Compiles `model` on `inputs` and reports the partitions and the ops left in PyTorch with
    the reason for each, in the spirit of torch._dynamo.explain."""
    report = Report()
    torch._dynamo.reset()
    with torch.no_grad():
        compiled = torch.compile(model, backend=functools.partial(
            kiln_backend, options=options, _report=report))
        compiled(*inputs)
    torch._dynamo.reset()
    return report
