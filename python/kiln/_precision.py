"""debug.precision_check: find the first node where Kiln and PyTorch eager disagree.

With the option on, every call of a Kiln partition runs Kiln's plan with an observer that copies
each output of every node computing an FX node's output (the importer annotates those nodes with
the FX node's name; a fused node keeps the name of its last op, so it is compared with that op's
output), runs the partition's ATen FX graph in eager node by node on the same arguments, and
compares the two in Kiln's execution order with torch.isclose's rule
|kiln - eager| <= atol + rtol * |eager| (NaNs equal). The first node outside it is reported as a
`PrecisionWarning` whose `report` is a `Mismatch`; `kiln.check_precision` returns the result
instead (docs/config.md, Precision check).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import re
import warnings
from typing import Any, Callable

import torch
import torch.fx as fx


@dataclasses.dataclass
class Mismatch:
    """The first node whose Kiln output differs from eager's beyond the tolerances."""
    graph: str            # the Kiln graph (partition)
    fx_node: str          # the FX node compared (a fused node's last op)
    aten: str             # its ATen op
    node: str             # the Kiln node
    op: str               # its Kiln op
    kernel: str
    module: str           # PyTorch module path ("" for the root module's code)
    location: str         # the last frame of the FX node's stack trace: file:line in function
    output: int           # which output of the node
    input_shapes: str
    shape: tuple
    dtype: str
    mismatched: int       # elements outside the tolerances
    numel: int
    max_abs_err: float
    max_rel_err: float
    kiln_stats: dict      # min, max, mean
    eager_stats: dict
    rtol: float
    atol: float

    def __str__(self) -> str:
        def stats(s):
            return f"min {s['min']:.6g}, max {s['max']:.6g}, mean {s['mean']:.6g}"
        return (
            f"Kiln precision check: first mismatch in {self.graph} at FX node '{self.fx_node}' "
            f"({self.aten}{', module ' + self.module if self.module else ''})\n"
            f"  Kiln node '{self.node}' ({self.op}, kernel {self.kernel}), inputs "
            f"{self.input_shapes or '-'}, output {self.output}: {self.dtype}{list(self.shape)}\n"
            f"  {self.mismatched} of {self.numel} elements beyond atol {self.atol:g} + rtol "
            f"{self.rtol:g}*|eager|: max abs error {self.max_abs_err:.6g}, max rel error "
            f"{self.max_rel_err:.6g}\n"
            f"  kiln:  {stats(self.kiln_stats)}\n"
            f"  eager: {stats(self.eager_stats)}\n"
            f"  source: {self.location or 'unknown (the FX node has no stack trace)'}")


@dataclasses.dataclass
class PrecisionResult:
    """What a check compared: node outputs compared, the ones skipped by reason, and the first
    mismatch (None when every compared output was within the tolerances)."""
    graphs: list[str]
    compared: int = 0
    skipped: dict[str, int] = dataclasses.field(default_factory=dict)
    mismatch: Mismatch | None = None

    def __str__(self) -> str:
        skipped = ", ".join(f"{n} {why}" for why, n in self.skipped.items())
        head = (f"Kiln precision check of {', '.join(self.graphs)}: {self.compared} node "
                f"output(s) compared" + (f", skipped: {skipped}" if skipped else ""))
        return head + ("\n" + str(self.mismatch) if self.mismatch else "; all within tolerance")


class PrecisionWarning(UserWarning):
    """A Kiln node's output differs from eager's: `report` is the Mismatch."""

    def __init__(self, report: Mismatch):
        super().__init__(str(report))
        self.report = report


# The latest partition checks of this process, latest last.
results: collections.deque[PrecisionResult] = collections.deque(maxlen=100)
_sinks: list[list[PrecisionResult]] = []  # kiln.check_precision's collectors


def _last_user_frame(stack_trace: str | None) -> str:
    """file:line in function: code, of the last frame outside torch (the model's own line)."""
    if not stack_trace:
        return ""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)\n\s*(.*)', stack_trace)
    user = [f for f in frames if "/torch/" not in f[0]] or frames
    if not user:
        return ""
    file, line, function, code = user[-1]
    return f"{file}:{line} in {function}: {code.strip()}"


def _stats(t: torch.Tensor) -> dict:
    if t.numel() == 0:
        return {"min": float("nan"), "max": float("nan"), "mean": float("nan")}
    return {"min": t.min().item(), "max": t.max().item(), "mean": t.mean().item()}


class _Recorder(fx.Interpreter):
    """Runs the FX graph in eager, keeping every node's value."""

    def __init__(self, gm: fx.GraphModule):
        super().__init__(gm)
        self.values: dict[str, Any] = {}

    def run_node(self, n: fx.Node) -> Any:
        value = super().run_node(n)
        self.values[n.name] = value
        return value


class PartitionCheck:
    """The check of one Kiln partition (KilnSubgraph.precision_check)."""

    def __init__(self, reference: fx.GraphModule, graph: str, rtol: float, atol: float):
        self.reference = reference  # the partition's ATen FX graph, run in eager
        self.nodes = {n.name: n for n in reference.graph.nodes}
        self.graph = graph
        self.rtol = rtol
        self.atol = atol

    def run(self, compiled, inputs: list, args: tuple) -> list:
        """Runs `compiled` on `inputs` with the check (`args`: the partition's arguments, as the
        FX graph takes them); returns Kiln's outputs."""
        outputs, captures, blocked = compiled.run_capture(inputs)
        recorder = _Recorder(self.reference)
        with torch.no_grad():
            recorder.run(*args)
        result = self.compare(captures, recorder.values)
        if blocked:
            result.skipped["in a blocked layout"] = blocked
        results.append(result)
        for sink in _sinks:
            sink.append(result)
        if result.mismatch is not None:
            warnings.warn(PrecisionWarning(result.mismatch), stacklevel=2)
        return outputs

    def compare(self, captures: list[dict], eager: dict[str, Any]) -> PrecisionResult:
        result = PrecisionResult([self.graph])
        skipped = collections.Counter()
        for c in captures:  # in Kiln's execution order
            # "name": the node's output k is the FX node's output k; "name#d": output k + d.
            name, _, offset = c["fx"].partition("#")
            c["fx"] = name
            value = eager.get(name)
            if isinstance(value, (tuple, list)):
                index = c["output"] + int(offset or 0)
                value = value[index] if index < len(value) else None
            if not isinstance(value, torch.Tensor):
                skipped["without a tensor in eager"] += 1
                continue
            kiln = torch.as_tensor(c["value"])
            expected = value.detach()
            if tuple(kiln.shape) != tuple(expected.shape):
                skipped["of another shape than eager's"] += 1
                continue
            result.compared += 1
            mismatch = self._mismatch(c, kiln, expected)
            if mismatch is not None:
                result.mismatch = mismatch
                break
        result.skipped.update(skipped)
        return result

    def _mismatch(self, c: dict, kiln: torch.Tensor, expected: torch.Tensor) -> Mismatch | None:
        k = kiln.to(torch.float64)
        e = expected.to(torch.float64)
        if kiln.is_floating_point() or expected.is_floating_point():
            close = torch.isclose(k, e, rtol=self.rtol, atol=self.atol, equal_nan=True)
        else:
            close = kiln.to(expected.dtype) == expected
        bad = int((~close).sum())
        if bad == 0:
            return None
        diff = (k - e).abs()
        # NaN differences: none where both agree (NaN and NaN, inf and inf), inf where they don't.
        diff = torch.where(torch.isnan(diff), torch.where(close, 0.0, float("inf")), diff)
        rel = torch.where(e != 0, diff / e.abs(), torch.where(diff == 0, 0.0, float("inf")))
        node = self.nodes.get(c["fx"])
        return Mismatch(
            graph=self.graph, fx_node=c["fx"], aten=c["aten"], node=c["node"], op=c["op"],
            kernel=c["kernel"], module=c["source"],
            location=_last_user_frame(node.meta.get("stack_trace") if node is not None else None),
            output=c["output"], input_shapes=c["input_shapes"], shape=tuple(kiln.shape),
            dtype=str(kiln.dtype).replace("torch.", ""), mismatched=bad, numel=kiln.numel(),
            max_abs_err=diff.max().item(), max_rel_err=rel.max().item(),
            kiln_stats=_stats(k), eager_stats=_stats(e), rtol=self.rtol, atol=self.atol)


def check_precision(model: Callable, *inputs, options=None) -> PrecisionResult:
    """Compiles `model` with debug.precision_check on, calls it once on `inputs`, and returns
    what the check found (every partition; `mismatch` is the first in call order) instead of
    warning."""
    from kiln.backend import kiln_backend
    from kiln.config import CompilerConfig

    config = CompilerConfig.from_options(options)
    config = CompilerConfig.from_options(config.as_dict())  # the caller's stays unchanged
    config.set("debug.precision_check.enable", True)
    checked: list[PrecisionResult] = []
    _sinks.append(checked)
    torch._dynamo.reset()
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", PrecisionWarning)  # returned instead
            torch.compile(model, backend=functools.partial(kiln_backend, options=config))(*inputs)
    finally:
        _sinks.remove(checked)
        torch._dynamo.reset()
    merged = PrecisionResult([])
    for r in checked:
        merged.graphs += [g for g in r.graphs if g not in merged.graphs]
        merged.compared += r.compared
        for why, n in r.skipped.items():
            merged.skipped[why] = merged.skipped.get(why, 0) + n
        if merged.mismatch is None:
            merged.mismatch = r.mismatch
    return merged
