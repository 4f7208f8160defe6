"""PyTorch's OpInfo samples through torch.compile(backend="kiln") against eager, for a subset of
the ops Kiln claims (opinfo_sweep.SUBSET, a few samples each); `make test-full` runs them all
(tests/python/opinfo_sweep.py has the verdicts' meaning)."""

import collections
import io

import pytest

import opinfo_sweep  # tests/python is on sys.path under pytest

# OpInfo name → its entries (one per variant, e.g. div's rounding modes).
_CLAIMED = collections.defaultdict(list)
for _op in opinfo_sweep.claimed_ops(opinfo_sweep.converted_ops()):
    _CLAIMED[_op.name].append(_op)


def test_the_subset_is_claimed():
    """Every op of the subset maps to a converter: a renamed converter must not silently shrink
    the sweep."""
    assert [name for name in opinfo_sweep.SUBSET if name not in _CLAIMED] == []


@pytest.mark.parametrize("name", opinfo_sweep.SUBSET)
def test_opinfo_samples_match_eager(name):
    results = opinfo_sweep.sweep(_CLAIMED[name], opinfo_sweep.SUBSET_SAMPLES, out=io.StringIO())
    failures = [f"{op} {sample}: {detail}" for op, r in results.items()
                for sample, detail in r["failures"]]
    assert failures == []
    # Some sample of each op must have run in Kiln, or the op proves nothing here.
    assert sum(r["passed"] for r in results.values()) >= 1, results
