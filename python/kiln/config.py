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


_OPTIONS: dict[str, _Option] = {
    "debug.graph_dump.type": _opt(None, _choice(None, "txt", "json", "dot", "png", "svg"), True,
        "write the graph after each stage as txt/json/dot/png/svg (png and svg need Graphviz), "
        "and the FX graph's partitioning between Kiln and PyTorch"),
    "debug.graph_dump.path": _opt("./kiln_dump", _typed(str), True,
        "folder for graph dumps"),
    "debug.precision_check.enable": _opt(False, _typed(bool), False,
        "run node by node beside eager and report the first mismatch"),
    "debug.precision_check.rtol": _opt(1e-3, _typed(float, 0.0), False,
        "relative tolerance of the precision check"),
    "debug.precision_check.atol": _opt(1e-5, _typed(float, 0.0), False,
        "absolute tolerance of the precision check"),
    "debug.profile": _opt(None, (lambda v: v is None or isinstance(v, str), "None or a path"), False,
        "write a Chrome-trace profile to this path"),
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
    "dynamic_shape.enable": _opt(False, _typed(bool), False,
        "compile with symbolic dims"),
    "dynamic_shape.dims_range": _opt({}, _typed(dict), False,
        "ranges of dynamic dims, by name or input and axis"),
    "dynamic_shape.gears": _opt([], _typed(list), False,
        "fixed shapes, each planned ahead"),
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
                "memory_optimization_level": self.get("memory.optimization_level"),
                "dump_path": self.get("debug.graph_dump.path")}

    def __repr__(self) -> str:
        changed = {k: v for k, v in self._values.items() if v != _OPTIONS[k].default}
        return f"CompilerConfig({changed})"


def option_table() -> list[tuple[str, Any, str, bool, str]]:
    """(name, default, valid values, implemented, description) for every option."""
    return [(k, o.default, o.expected, o.implemented, o.doc) for k, o in _OPTIONS.items()]
