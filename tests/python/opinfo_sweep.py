"""PyTorch's OpInfo database through torch.compile(backend="kiln") against eager.

    python tests/python/opinfo_sweep.py                  # every op Kiln claims (make test-full)
    python tests/python/opinfo_sweep.py --subset         # the ops tests/python/test_opinfo.py runs
    python tests/python/opinfo_sweep.py --ops add,mm -v  # some ops, every sample's verdict

The ops Kiln claims are the OpInfos (torch.testing._internal.common_methods_invocations.op_db)
named for an ATen op that has a converter (kiln._C.converter_targets()), directly or as
nn.functional.<op>, plus the functional forms in ALIASES whose ATen graph is named for one. Each float32 sample of each runs once in
eager and once through torch.compile(backend="kiln") (dynamo reset before each, so no sample
meets another's cache) and gets one verdict:
  passed     Kiln ran every ATen op of the sample and the outputs match eager (dtype, shape and
             values within torch.testing.assert_close's float32 tolerances, NaN matching NaN),
             or, where they don't, float64 eager arbitrates as in test_models.py: Kiln's error
             against it is at most 4 times eager float32's own (rounding in another order, e.g.
             a dot product with cancellation, is not a bug; a wrong value is);
  fell back  some ATen op stayed in PyTorch (no converter, or arguments its converter can't take),
             or no ATen op reached Kiln at all: the sample proves nothing about Kiln;
  failed     an error, or outputs that differ from eager: a bug, listed with the sample.
Exits 1 when any sample failed.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import re
import sys
import time
import traceback

import torch
import torch.utils._pytree as pytree

# The functional forms whose ATen graph is named for another op than theirs (OpInfo name →
# the ATen op, without overload, that Kiln's converter list must hold for the OpInfo to count).
ALIASES = {
    "nn.functional.linear": "addmm",
    "nn.functional.conv1d": "convolution",
    "nn.functional.conv2d": "convolution",
    "nn.functional.conv_transpose2d": "convolution",
    "nn.functional.conv_transpose1d": "convolution",
    "nn.functional.conv_transpose3d": "convolution",
    "nn.functional.cross_entropy": "nll_loss_forward",
    "nn.functional.nll_loss": "nll_loss_forward",
    "unsafe_chunk": "unsafe_split",
    "zero_": "zero",
    "nn.functional.max_unpool1d": "max_unpool2d",
    "nn.functional.conv3d": "convolution",
    "nn.functional.glu": "glu",
    "nn.functional.grid_sample": "grid_sampler_2d",
    "nn.functional.prelu": "_prelu_kernel",
    "nn.functional.logsigmoid": "log_sigmoid_forward",
    "nn.functional.max_pool3d": "max_pool3d_with_indices",
    "nn.functional.adaptive_avg_pool3d": "_adaptive_avg_pool3d",
    "nn.functional.embedding_bag": "_embedding_bag_forward_only",
    "nn.functional.layer_norm": "native_layer_norm",
    "nn.functional.group_norm": "native_group_norm",
    "nn.functional.batch_norm": "_native_batch_norm_legit_no_training",
    "nn.functional.instance_norm": "_native_batch_norm_legit",
    "nn.functional.max_pool2d": "max_pool2d_with_indices",
    "nn.functional.max_pool1d": "max_pool2d_with_indices",
    "nn.functional.adaptive_max_pool1d": "adaptive_max_pool2d",
    "nn.functional.adaptive_avg_pool2d": "_adaptive_avg_pool2d",
    "nn.functional.scaled_dot_product_attention": "_scaled_dot_product_flash_attention_for_cpu",
    "nn.functional.pad": "constant_pad_nd",
    "softmax": "_softmax",
    "log_softmax": "_log_softmax",
    "nn.functional.softmax": "_softmax",
    "nn.functional.log_softmax": "_log_softmax",
    "matmul": "mm",
    "__radd__": "add",
    "__rsub__": "rsub",
    "__rmul__": "mul",
    "__rdiv__": "div",
    "__rpow__": "pow",
    "true_divide": "div",
    "float_power": "pow",
    "norm": "linalg_vector_norm",
    "nn.functional.normalize": "linalg_vector_norm",
    "cdist": "_cdist_forward",
}

# OpInfos whose op seeds the RNG first (wrapper_set_seed), which dynamo can't trace, so nothing
# would reach Kiln: the op itself, run_sample seeding before each run instead (Kiln refuses
# dropout, which stays in PyTorch and draws the same mask in both runs).
UNSEEDED = {
    "nn.functional.scaled_dot_product_attention": torch.nn.functional.scaled_dot_product_attention,
}

# Ops whose result's values PyTorch leaves unspecified (uninitialized memory): only dtype and
# shape are compared.
UNSPECIFIED_VALUES = frozenset({"empty", "new_empty", "empty_like", "empty_strided",
                                "new_empty_strided", "empty_permuted"})

# The subset `make test` runs (tests/python/test_opinfo.py): every converter family, a few
# samples each.
SUBSET = (
    "add", "sub", "mul", "div", "pow", "maximum", "where", "clamp", "abs", "neg", "exp", "log",
    "sqrt", "rsqrt", "sigmoid", "tanh", "nn.functional.relu", "nn.functional.gelu",
    "nn.functional.silu", "nn.functional.hardtanh", "sum", "mean", "amax", "softmax",
    "log_softmax", "mm", "bmm", "addmm", "mv", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.conv1d", "nn.functional.conv_transpose2d", "nn.functional.layer_norm",
    "nn.functional.max_pool2d", "permute", "transpose", "reshape", "cat", "stack", "split",
    "squeeze", "index_select", "gather", "flip", "roll", "masked_fill", "scatter", "scatter_add",
    "index_put", "slice_scatter", "select_scatter", "prod", "any", "all", "max", "zeros", "ones",
    "full_like", "zeros_like", "fill", "as_strided", "unbind", "sort",
    "nn.functional.scaled_dot_product_attention", "nn.functional.pad", "linalg.vector_norm",
    "nn.functional.normalize", "nn.functional.conv3d", "nn.functional.glu",
    "nn.functional.grid_sample", "unfold", "masked_scatter", "index_copy", "index_add",
    "nn.functional.pixel_shuffle", "nn.functional.pixel_unshuffle",
    "nn.functional.channel_shuffle", "nn.functional.prelu", "var_mean", "nansum",
    "count_nonzero", "atan2", "logaddexp", "lerp", "addcmul", "nn.functional.logsigmoid",
    "nn.functional.adaptive_avg_pool3d", "cumprod", "logcumsumexp", "cummax", "cummin",
    "searchsorted", "bucketize", "rot90", "diagonal", "diag_embed", "take", "isin", "fmax",
    "xlogy", "aminmax", "trace",
)
SUBSET_SAMPLES = 4


def _base(target: str) -> str:
    """"aten.add.Tensor" → "add"."""
    parts = target.split(".")
    return parts[1] if len(parts) > 1 else target


def converted_ops() -> set[str]:
    from kiln import _C
    return {_base(t) for t in _C.converter_targets()}


def _full_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def claimed_ops(converters: set[str]) -> list:
    """The OpInfos that Kiln's converter list claims, in op_db's order."""
    from torch.testing._internal.common_methods_invocations import op_db

    def claimed(op) -> bool:
        if not op.supports_dtype(torch.float32, "cpu"):
            return False
        names = {op.name, op.aten_name, op.name.removeprefix("nn.functional.")}
        return bool(names & converters) or ALIASES.get(op.name) in converters
    return [op for op in op_db if claimed(op)]


def _sample_function(op, sample):
    """The sample as (function of its tensors, the tensors): tensors become graph inputs, the
    rest of the arguments stay constants of the function."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]

    def fn(*tensors):
        filled = list(leaves)
        for position, tensor in zip(positions, tensors):
            filled[position] = tensor
        input, args, kwargs = pytree.tree_unflatten(filled, spec)
        return UNSEEDED.get(op.name, op.op)(input, *args, **kwargs)
    return fn, [leaves[i] for i in positions]


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    # dynamo wraps a backend's error: Kiln's own line, with its code, is the one to show.
    coded = [line for line in lines if re.search(r"\bE\d{5}\b", line)]
    return f"{type(error).__name__}: {(coded or lines or [''])[0]}"[:300]


def run_sample(op, sample) -> tuple[str, str]:
    """(verdict, detail) for one sample: "passed", "fell back" or "failed"."""
    from kiln.backend import Report, kiln_backend

    fn, tensors = _sample_function(op, sample)
    try:
        with torch.no_grad():
            torch.manual_seed(0)  # the same random draws (dropout) in both runs
            expected = fn(*tensors)
    except Exception as e:  # the sample is invalid for eager too: nothing to compare
        return "fell back", f"eager raised {_first_line(e)}"
    report = Report()
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            compiled = torch.compile(fn, backend=functools.partial(kiln_backend, _report=report),
                                     dynamic=False)
            torch.manual_seed(0)
            actual = compiled(*tensors)
    except Exception as e:
        return "failed", _first_line(e)
    finally:
        torch._dynamo.reset()
    if op.name in UNSPECIFIED_VALUES:
        same = [(a.dtype, a.shape) == (e.dtype, e.shape)
                for a, e in zip(pytree.tree_leaves(actual), pytree.tree_leaves(expected))]
        if not all(same):
            return "failed", "dtype or shape differs from eager's"
    else:
        try:
            torch.testing.assert_close(actual, expected, equal_nan=True)
        except (AssertionError, TypeError, ValueError) as e:
            if not _float64_arbitrates(fn, tensors, actual, expected):
                return "failed", "mismatch: " + " ".join(str(e).split())[:300]
    if report.fallback:
        return "fell back", "; ".join(f"{t} x{n}: {why}"
                                      for t, (n, why) in report.fallback.items())[:300]
    if not report.partitions:
        return "fell back", "no ATen op reached Kiln"
    return "passed", ""


def _float64_arbitrates(fn, tensors, actual, expected) -> bool:
    """True when every output of Kiln has eager's dtype, shape and NaNs and is within 4 times
    eager float32's largest error of the sample run in float64 (tests/python/test_models.py's
    accuracy policy)."""
    try:
        with torch.no_grad():
            truth = fn(*[t.double() if t.is_floating_point() else t for t in tensors])
    except Exception:  # noqa: BLE001 — no float64 form: eager's verdict stands
        return False
    outputs = [pytree.tree_leaves(x) for x in (actual, expected, truth)]
    if len({len(o) for o in outputs}) != 1:
        return False
    for a, e, t in zip(*outputs):
        if not all(isinstance(x, torch.Tensor) for x in (a, e, t)) or not e.is_floating_point():
            return False
        if a.dtype != e.dtype or a.shape != e.shape or not torch.equal(a.isnan(), e.isnan()):
            return False
        finite = e.isfinite()
        if not torch.equal(a[~finite], e[~finite]):
            return False
        if not finite.any():
            continue
        kiln_error = (a[finite].double() - t[finite]).abs().max().item()
        eager_error = (e[finite].double() - t[finite]).abs().max().item()
        if kiln_error > 4 * eager_error:
            return False
    return True


class _Shown(str):
    __repr__ = str.__str__  # printed bare inside the tuples and lists of a sample


def _describe(sample) -> str:
    def show(x):
        if isinstance(x, torch.Tensor):
            return _Shown(f"{str(x.dtype).removeprefix('torch.')}{list(x.shape)}"
                          + ("" if x.is_contiguous() else "(strided)"))
        return x
    parts = [pytree.tree_map(show, sample.input)] + [pytree.tree_map(show, a) for a in sample.args]
    parts += [f"{k}={pytree.tree_map(show, v)}" for k, v in sample.kwargs.items()]
    text = ", ".join(str(p) for p in parts)
    return f"{sample.name + ': ' if sample.name else ''}({text})"


def sweep(ops, max_samples: int | None = None, verbose: bool = False, out=sys.stdout) -> dict:
    """Runs the samples of `ops`; returns {op name: {"passed", "fell back", "failed": count,
    "failures": [(sample, detail)], "fallbacks": {detail: count}}}."""
    results = {}
    for op in ops:
        name = _full_name(op)
        counts = collections.Counter()
        failures, fallbacks = [], collections.Counter()
        torch.manual_seed(0)
        samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
        for i, sample in enumerate(samples):
            if max_samples is not None and i >= max_samples:
                break
            try:
                verdict, detail = run_sample(op, sample)
            except Exception:  # a bug of this script's, not of Kiln: show it whole
                verdict, detail = "failed", "sweep error: " + traceback.format_exc(limit=3)
            counts[verdict] += 1
            if verdict == "failed":
                failures.append((_describe(sample), detail))
            elif verdict == "fell back":
                fallbacks[detail] += 1
            if verbose:
                print(f"  {name} {_describe(sample)}: {verdict} {detail}", file=out)
        results[name] = {"passed": counts["passed"], "fell back": counts["fell back"],
                         "failed": counts["failed"], "failures": failures,
                         "fallbacks": dict(fallbacks)}
        print(f"{name:48} passed {counts['passed']:3}  fell back {counts['fell back']:3}  "
              f"failed {counts['failed']:3}", file=out, flush=True)
    return results


def totals(results: dict) -> dict:
    t = {k: sum(r[k] for r in results.values()) for k in ("passed", "fell back", "failed")}
    t["ops"] = len(results)
    t["ops all passed"] = sum(1 for r in results.values()
                              if r["passed"] and not r["failed"] and not r["fell back"])
    t["ops with failures"] = sum(1 for r in results.values() if r["failed"])
    return t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma list of OpInfo names (name or name.variant)")
    parser.add_argument("--subset", action="store_true",
                        help=f"the subset of make test, {SUBSET_SAMPLES} samples per op")
    parser.add_argument("--max-samples", type=int, help="samples per op (default: all)")
    parser.add_argument("--json", metavar="PATH", help="write every verdict here")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every sample")
    args = parser.parse_args(argv)

    started = time.perf_counter()
    ops = claimed_ops(converted_ops())
    if args.subset or args.ops:
        wanted = set(SUBSET if args.subset else args.ops.split(","))
        ops = [op for op in ops if op.name in wanted or _full_name(op) in wanted]
        missing = wanted - {op.name for op in ops} - {_full_name(op) for op in ops}
        if missing:
            parser.error(f"not among the ops Kiln claims: {', '.join(sorted(missing))}")
    max_samples = args.max_samples or (SUBSET_SAMPLES if args.subset else None)
    results = sweep(ops, max_samples, args.verbose)
    t = totals(results)
    print(f"\n{t['ops']} ops, {t['passed'] + t['fell back'] + t['failed']} float32 samples: "
          f"passed {t['passed']}, fell back {t['fell back']}, failed {t['failed']} "
          f"({t['ops all passed']} ops passed every sample, {t['ops with failures']} ops with "
          f"failures; {time.perf_counter() - started:.0f} s)")
    for name, r in results.items():
        for sample, detail in r["failures"]:
            print(f"FAILED {name} {sample}: {detail}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"totals": t, "ops": results}, f, indent=1)
    return 1 if t["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
