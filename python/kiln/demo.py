"""`make demo`, second part: real models through torch.compile(backend="kiln").

BERT-base (sequence 128) and ResNet-50 (224x224), random-initialized from their transformers
configs, batch 1: compile time, latency against eager in the same process, the largest error
against eager, and whether every op ran in Kiln.

    python -m kiln.demo [--models bert-base,resnet50] [--iterations 10] [--size full|small]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import kiln
from kiln.bench.models import MODELS, build


def _median_ms(fn, inputs, iterations: int) -> float:
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        fn(inputs)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="bert-base,resnet50")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--size", choices=("full", "small"), default="full")
    args = parser.parse_args(argv)
    ok = True
    print(f"{'model':<12} {'compile s':>9} {'eager ms':>9} {'kiln ms':>9} {'speed-up':>8} "
          f"{'max|err|':>9} {'rel err':>9}  ops in PyTorch")
    for model_id in args.models.split(","):
        if model_id not in MODELS:
            print(f"unknown model {model_id}; choose from {', '.join(MODELS)}", file=sys.stderr)
            return 2
        model, inputs = build(model_id, args.size, batch=1)
        torch._dynamo.reset()
        with torch.no_grad():
            report = kiln.explain(model, inputs)
            compiled = torch.compile(model, backend="kiln")
            start = time.perf_counter()
            got = compiled(inputs)
            compile_s = time.perf_counter() - start
            expected = model(inputs)
            eager_ms = _median_ms(model, inputs, args.iterations)
            kiln_ms = _median_ms(compiled, inputs, args.iterations)
        err = (got - expected).abs().max().item()
        rel = err / max(expected.abs().max().item(), 1e-30)
        fallback = sum(n for n, _ in report.fallback.values())
        print(f"{model_id:<12} {compile_s:9.1f} {eager_ms:9.2f} {kiln_ms:9.2f} "
              f"{eager_ms / kiln_ms:7.2f}x {err:9.2e} {rel:9.2e}  {fallback}")
        # fp32 with a different summation order: relative errors of ~1e-6 are expected.
        ok &= rel < 1e-4
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
