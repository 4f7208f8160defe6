"""CompilerConfig: Kiln's typed option tree (docs/config.md), after TorchAir's CompilerConfig.

Every option has a type and a default. Setting an unknown option or an invalid value raises
kiln.Error E10001 at once. An option whose feature Kiln doesn't have yet raises E10001 "not
supported yet" when set to anything but its default: no option is ever silently ignored.

    cfg = kiln.CompilerConfig()
    cfg.operator_selection.fallback_to_cpu = False
    torch.compile(model, backend=kiln.get_backend(compiler_config=cfg))
    torch.compile(model, backend="kiln", options={"execution.num_threads": 2})
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from kiln._errors import error


@dataclass(frozen=True)
class _Option:
    default: Any
    check: Callable[[Any], bool]
    expected: str          # what a valid value is, for the error message
    implemented: bool = True
    doc: str = ""


def _choice(*values):
    return lambda v: v in values, " or ".join(repr(v) for v in values)


def _typed(kind, low=None):
    def check(v):
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        return isinstance(v, kind) and not (kind is int and isinstance(v, bool)) and (
            low is None or v >= low)
    name = {bool: "a bool", int: "an int", float: "a float", str: "a string",
            dict: "a dict", list: "a list"}[kind]
    return check, name + (f" >= {low}" if low is not None else "")


def _opt(default, check_and_expected, implemented=True, doc=""):
    check, expected = check_and_expected
    return _Option(default, check, expected, implemented, doc)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_range(where: str, r) -> None:
    if not (isinstance(r, (tuple, list)) and len(r) == 2 and all(_is_int(b) for b in r)):
        raise error("E10001", f"option dynamic_shape.dims_range: {where} is {r!r}; expected a "
                    f"(min, max) pair of ints")
    if r[0] < 0 or r[0] > r[1]:
        raise error("E10001", f"option dynamic_shape.dims_range: {where} is {tuple(r)}; a range "
                    f"needs 0 <= min <= max")


def _check_dims_range(value) -> bool:
    """{Dim name: (min, max)} or {input name or index: {axis: (min, max)}}; a precise E10001
    otherwise."""
    if not isinstance(value, dict):
        return False
    for key, spec in value.items():
        if isinstance(spec, dict):
            if not (isinstance(key, str) or (_is_int(key) and key >= 0)):
                raise error("E10001", f"option dynamic_shape.dims_range: key {key!r} must be an "
                            f"input's name or index (an int >= 0)")
            if not spec:
                raise error("E10001", f"option dynamic_shape.dims_range: input {key!r} gives no "
                            f"axis; write {{{key!r}: {{axis: (min, max)}}}}")
            for axis, r in spec.items():
                if not (_is_int(axis) and axis >= 0):
                    raise error("E10001", f"option dynamic_shape.dims_range: input {key!r} has "
                                f"axis {axis!r}; axes are ints >= 0")
                _check_range(f"input {key!r} axis {axis}", r)
        elif isinstance(key, str):
            _check_range(f"Dim {key!r}", spec)
        else:
            raise error("E10001", f"option dynamic_shape.dims_range: entry {key!r}: {spec!r} is "
                        f"neither {{Dim name: (min, max)}} nor {{input: {{axis: (min, max)}}}}")
    return True


def _check_gears(value) -> bool:
    """A list of gears, each {input name or index: shape}; a precise E10001 otherwise."""
    if not isinstance(value, list):
        return False
    for g, gear in enumerate(value):
        if not isinstance(gear, dict) or not gear:
            raise error("E10001", f"option dynamic_shape.gears: gear {g} is {gear!r}; each gear "
                        f"is a non-empty dict {{input name or index: shape}}")
        for key, shape in gear.items():
            if not (isinstance(key, str) or (_is_int(key) and key >= 0)):
                raise error("E10001", f"option dynamic_shape.gears: gear {g} key {key!r} must be "
                            f"an input's name or index (an int >= 0)")
            if not (isinstance(shape, (list, tuple)) and all(_is_int(d) and d >= 1
                                                              for d in shape)):
                raise error("E10001", f"option dynamic_shape.gears: gear {g} gives input "
                            f"{key!r} the shape {shape!r}; expected a list of ints >= 1")
        if gear in value[:g]:
            raise error("E10001", f"option dynamic_shape.gears: gear {g} repeats gear "
                        f"{value.index(gear)} ({gear!r}); list each gear once")
    return True


_OPTIONS: dict[str, _Option] = {
    "debug.graph_dump.type": _opt(None, _choice(None, "txt", "json", "dot", "png", "svg"), True,
        "write the graph after each stage as txt/json/dot/png/svg (png and svg need Graphviz), "
        "and the FX graph's partitioning between Kiln and PyTorch"),
    "debug.graph_dump.path": _opt("./kiln_dump", _typed(str), True,
        "folder for graph dumps"),
    "debug.precision_check.enable": _opt(False, _typed(bool), True,
        "on every call, compare each Kiln node's output with PyTorch eager's for its FX node "
        "and warn (kiln.PrecisionWarning) naming the first mismatch (see Precision check below)"),
    "debug.precision_check.rtol": _opt(1e-3, _typed(float, 0.0), True,
        "relative tolerance of the precision check"),
    "debug.precision_check.atol": _opt(1e-5, _typed(float, 0.0), True,
        "absolute tolerance of the precision check"),
    "debug.profile": _opt(None, (lambda v: v is None or (isinstance(v, str) and v != ""),
                                 "None or a path"), True,
        "time every node of every run and write a Chrome trace to this path, printing the top "
        "nodes at exit (see Profiling below; the environment variable KILN_PROFILE does the "
        "same)"),
    "optimization.level": _opt("O3", _choice("O0", "O1", "O2", "O3"), True,
                               "O0: reference kernels, no passes; O1: optimized kernels, stage "
                               "prepare; O2: + fuse; O3: every stage (docs/passes.md)"),
    "memory.optimization": _opt(True, _typed(bool), True,
                                "static memory planning (always on; False is not supported)"),
    "memory.reuse_threshold": _opt(0, _typed(int, 0), True,
        "buffers smaller than this many bytes get memory of their own: never shared with "
        "another buffer, never written in place"),
    "memory.optimization_level": _opt("default", _choice("default", "aggressive"), True,
        "default: one execution order (memory-aware at O3) and the smallest arena of every "
        "placement strategy; aggressive: every schedule variant with every strategy"),
    "memory.gemm_weights_in_place": _opt(False, _typed(bool), True,
        "matmuls read constant weights where they lie instead of a copy prepacked for the GEMM "
        "library: no second copy of the weights, GEMMs somewhat slower (see Memory options)"),
    "memory.enable_shared_pool": _opt(False, _typed(bool), True,
        "the Kiln partitions of one compiled FX graph borrow one arena, sized to the largest, "
        "instead of one each (concurrent runs each borrow their own)"),
    "operator_selection.policy": _opt("PERFORMANCE",
                                      _choice("PERFORMANCE", "PRECISION", "REFERENCE",
                                              "MAX_AUTOTUNE"), True,
                                      "PERFORMANCE: the fastest kernel per node by measured "
                                      "rules; MAX_AUTOTUNE (torch.compile mode max-autotune): "
                                      "time each node's kernels on the real shapes when "
                                      "planning and keep the fastest; PRECISION and REFERENCE: "
                                      "the reference kernels (which accumulate in double)"),
    "operator_selection.fallback_to_cpu": _opt(True, _typed(bool), True,
                                               "run ops Kiln can't convert in PyTorch; False "
                                               "makes any such op error E50001"),
    "operator_selection.min_block_size": _opt(1, _typed(int, 1), True,
                                              "partitions with fewer ops stay in PyTorch"),
    "execution.num_threads": _opt(0, _typed(int, 0), True, "threads per kernel; 0 = all cores"),
    "execution.parallel_streams": _opt(1, _typed(int, 1), False,
        "run independent subgraphs concurrently"),
    "execution.enable_overlap": _opt(False, _typed(bool), False,
        "overlap compute and communication"),
    "dynamic_shape.enable": _opt(False, _typed(bool), True,
        "compile with symbolic dims: kiln.export makes every input axis Dim.AUTO; "
        "torch.compile must trace symbolic too (dynamic=True), else E10001"),
    "dynamic_shape.dims_range": _opt({}, (_check_dims_range, "a dict of ranges (docs/"
        "dynamic-shapes.md)"), True,
        "ranges of dynamic dims: {Dim name: (min, max)} (kiln.export) or {input name or "
        "index: {axis: (min, max)}}; E20008 outside them"),
    "dynamic_shape.gears": _opt([], (_check_gears, "a list of gears (docs/dynamic-shapes.md)"),
        True,
        "fixed input shapes, each planned ahead: a list of {input name or index: shape}; "
        "other shapes are E20008 unless pad_to_gear"),
    "dynamic_shape.pad_to_gear": _opt(False, _typed(bool), True,
        "a shape that is no gear is zero-padded up to the smallest gear covering it and the "
        "outputs cut back (only for models whose real outputs ignore padded positions)"),
    "dynamic_shape.out_of_range": _opt("error", _choice("error", "recompile"), True,
        "torch.compile, a shape outside dims_range: error (E20008), or recompile (dynamo "
        "guards the range; a new Kiln graph for a range widened to cover the shape)"),
    "dynamic_shape.plan_cache_capacity": _opt(16, _typed(int, 1), True,
        "plans (kernels and memory plan) kept per Kiln graph for the input shapes last run, "
        "beyond gears; a shape not among them is planned again (about 2 ms for an 8-layer LLM's "
        "decode step): raise it to the sequence lengths an LLM decodes"),
    "cache.enable_disk_cache": _opt(False, _typed(bool), False,
        "keep compiled graphs on disk across processes"),
    "cache.cache_dir": _opt("", _typed(str), False,
        "folder of the disk cache"),
    "amp.enable": _opt(False, _typed(bool), False,
        "automatic mixed precision"),
    "amp.dtype": _opt("bf16", _choice("bf16", "f16"), False,
        "low-precision dtype of mixed precision"),
    "amp.level": _opt("O1", _choice("O1", "O2"), False,
        "mixed-precision level"),
    "distributed.enable": _opt(False, _typed(bool), False,
        "collective communication ops in the graph"),
    "distributed.timeout_s": _opt(1800, _typed(int, 1), False,
        "timeout of collective operations"),
}

# memory.optimization can't be switched off: the runtime always plans memory statically.
_UNSUPPORTED_VALUES = {"memory.optimization": {False}}


def _validate(key: str, value: Any) -> Any:
    option = _OPTIONS[key]
    if not option.check(value):
        raise error("E10001", f"option {key} = {value!r} is invalid; expected {option.expected}")
    if option.expected.startswith("a float"):
        value = float(value)
    unsupported = value in _UNSUPPORTED_VALUES.get(key, ()) or (
        not option.implemented and value != option.default)
    if unsupported:
        raise error("E10001", f"option {key} = {value!r} is not supported yet by Kiln; leave it "
                    f"at its default ({option.default!r}) — see docs/config.md")
    return value


class _Section:
    """One level of the option tree; attributes are options or subsections."""

    def __init__(self, config: "CompilerConfig", prefix: str):
        object.__setattr__(self, "_config", config)
        object.__setattr__(self, "_prefix", prefix)

    def _children(self) -> set[str]:
        depth = self._prefix.count(".") + 1 if self._prefix else 0
        return {k.split(".")[depth] for k in _OPTIONS if k.startswith(self._prefix)}

    def __getattr__(self, name: str):
        key = self._prefix + name
        if key in _OPTIONS:
            return self._config._values[key]
        if any(k.startswith(key + ".") for k in _OPTIONS):
            return _Section(self._config, key + ".")
        raise error("E10001", f"unknown option {key}; options here: "
                    f"{', '.join(sorted(self._children()))}")

    def __setattr__(self, name: str, value: Any) -> None:
        self._config.set(self._prefix + name, value)

    def __dir__(self):
        return sorted(self._children())


class CompilerConfig(_Section):
    def __init__(self, **dotted: Any):
        object.__setattr__(self, "_values", {k: copy.deepcopy(o.default)
                                             for k, o in _OPTIONS.items()})
        super().__init__(self, "")
        for key, value in dotted.items():
            self.set(key.replace("__", "."), value)

    def set(self, key: str, value: Any) -> None:
        if key not in _OPTIONS:
            near = [k for k in _OPTIONS if k.split(".")[-1] == key.split(".")[-1]]
            hint = f" (did you mean {near[0]}?)" if near else ""
            raise error("E10001", f"unknown option {key}{hint}; docs/config.md lists them all")
        self._values[key] = _validate(key, value)

    def get(self, key: str) -> Any:
        if key not in _OPTIONS:
            raise error("E10001", f"unknown option {key}")
        return self._values[key]

    def as_dict(self) -> dict[str, Any]:
        return dict(self._values)

    @classmethod
    def from_options(cls, options: "CompilerConfig | dict[str, Any] | None") -> "CompilerConfig":
        if options is None:
            return cls()
        if isinstance(options, CompilerConfig):
            return options
        if not isinstance(options, dict):
            raise error("E10001", f"options must be a dict of dotted option names or a "
                        f"CompilerConfig, got {type(options).__name__}")
        config = cls()
        for key, value in options.items():
            config.set(key, value)
        return config

    def compile_options(self) -> dict[str, Any]:
        """The keyword arguments of kiln.compile() these options select."""
        level = int(self.get("optimization.level")[1])
        policy = self.get("operator_selection.policy")
        if level == 0 and policy == "MAX_AUTOTUNE":
            raise error("E10001", "optimization.level O0 runs the reference kernels, so "
                        "operator_selection.policy MAX_AUTOTUNE (mode max-autotune) has nothing "
                        "to tune; use O1-O3")
        kernel_policy = ("reference" if level == 0 or policy in ("PRECISION", "REFERENCE")
                         else "autotune" if policy == "MAX_AUTOTUNE" else "best")
        return {"threads": self.get("execution.num_threads"),
                "optimization_level": level,
                "kernel_policy": kernel_policy,
                "dump_type": self.get("debug.graph_dump.type") or "",
                "memory_reuse_threshold": self.get("memory.reuse_threshold"),
                "plan_cache_capacity": self.get("dynamic_shape.plan_cache_capacity"),
                "memory_optimization_level": self.get("memory.optimization_level"),
                "gemm_weights_in_place": self.get("memory.gemm_weights_in_place"),
                "dump_path": self.get("debug.graph_dump.path"),
                "profile_path": self.get("debug.profile") or ""}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != _OPTIONS[k].default}
        return f"CompilerConfig({changed})"


def option_table() -> list[tuple[str, Any, str, bool, str]]:
    """(name, default, valid values, implemented, description) for every option."""
    return [(k, o.default, o.expected, o.implemented, o.doc) for k, o in _OPTIONS.items()]
