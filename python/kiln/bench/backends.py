"""The backends a model is measured on: PyTorch eager, its peers, and Kiln.

Each backend turns (model, example input, threads, scratch folder) into a function from the input
to the output tensor. Compilation may happen in that step or lazily in the first call (all
torch.compile backends); the worker times both together. Every backend is told the same thread
count. A backend whose package is missing raises BackendUnavailable, which the record reports
as its status.
"""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import time
from dataclasses import dataclass
from typing import Callable

import torch

Run = Callable[[torch.Tensor], torch.Tensor]


class BackendUnavailable(RuntimeError):
    pass


def _require(module: str, package: str):
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BackendUnavailable(f"{module} can't be imported ({e}); "
                                 f"`pip install {package}` to measure it") from e


def _eager(model, example, threads, scratch) -> Run:
    return model


def _inductor(model, example, threads, scratch) -> Run:
    return torch.compile(model, backend="inductor")


def _inductor_freezing(model, example, threads, scratch) -> Run:
    from torch._inductor import config
    # Read when the first call compiles; the worker process measures nothing else afterwards.
    config.freezing = True
    return torch.compile(model, backend="inductor")


def _aot_eager(model, example, threads, scratch) -> Run:
    # Dynamo's and AOTAutograd's capture with no compiler after them: the part of every
    # torch.compile backend's compile time (Kiln's and Inductor's alike) that no backend controls.
    return torch.compile(model, backend="aot_eager")


def _openvino(model, example, threads, scratch) -> Run:
    ov = _require("openvino", "openvino")
    # OpenVINO runs in bf16 by default on CPUs that have it; the comparison is fp32.
    config = {"INFERENCE_NUM_THREADS": str(threads), "INFERENCE_PRECISION_HINT": "f32"}
    # Its own converter first, its deployment path (its torch.compile backend fails dynamo's
    # guard building under torch 2.13 on ViT and ResNet: "sources must not be empty for
    # symbol"); the torch.compile backend for models the converter can't take (GPT-2).
    try:
        converted = ov.convert_model(model, example_input=example)
    except ov.frontend.OpConversionFailure:
        importlib.import_module("openvino.torch")  # registers the "openvino" backend
        return torch.compile(model, backend="openvino", options={"config": config})
    compiled = ov.Core().compile_model(converted, "CPU", config)
    return lambda inputs: torch.from_numpy(compiled(inputs.numpy())[0])


def _onnxruntime(model, example, threads, scratch) -> Run:
    ort = _require("onnxruntime", "onnxruntime")
    path = os.path.join(scratch, "model.onnx")
    torch.onnx.export(model, (example,), path, input_names=["inputs"],
                      output_names=["last_hidden_state"])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda inputs: torch.from_numpy(session.run(None, {"inputs": inputs.numpy()})[0])


def _kiln(level: str, **extra):
    def prepare(model, example, threads, scratch) -> Run:
        options = {"optimization.level": level, "execution.num_threads": threads, **extra}
        return torch.compile(model, backend="kiln", options=options)
    return prepare


class OfflineRun:
    """A model exported to a .kiln file and loaded back (kiln.export, kiln.load). `load_s` is what
    a deployment waits for: kiln.load (memory-mapped) through the end of the first call.
    `deployed_rss_mb` is what it holds: the peak resident memory of the standalone runtime (the
    kiln CLI, no Python or PyTorch) loading the file and running it; the worker's own peak
    includes the PyTorch model and the export."""

    def __init__(self, path: str, threads: int, example: torch.Tensor):
        import kiln
        start = time.perf_counter()
        self.model = kiln.load(path, threads=threads)
        self.model(example)
        self.load_s = time.perf_counter() - start
        self.path, self.threads = path, threads

    @property
    def deployed_rss_mb(self) -> float:
        # Measured when asked, after the timed calls: the CLI's run is no part of compile_s.
        return _standalone_peak_rss_mb(self.path, self.threads)

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs)


def _standalone_peak_rss_mb(path: str, threads: int) -> float:
    from kiln.bench.micro import find_binary
    cli = find_binary("kiln")
    if cli is None:
        raise BackendUnavailable("the kiln CLI is not beside kiln._C nor in the package's bin/")
    bench = subprocess.run([str(cli), "bench", path, "--threads", str(threads), "--warmup", "1",
                            "--iterations", "3"], capture_output=True, text=True, timeout=600)
    # The CLI's own figure: getrusage would give this process's peak (exec keeps it).
    peak = re.search(r"peak resident ([\d.]+) MB", bench.stdout)
    if bench.returncode != 0 or peak is None:
        raise RuntimeError(f"kiln bench {path} failed: {bench.stderr.strip() or bench.stdout}")
    return float(peak.group(1))


def _kiln_offline(model, example, threads, scratch) -> Run:
    import kiln
    path = os.path.join(scratch, "model.kiln")
    kiln.export(model, (example,), path, config={"execution.num_threads": threads})
    return OfflineRun(path, threads, example)


@dataclass(frozen=True)
class Backend:
    prepare: Callable[[torch.nn.Module, torch.Tensor, int, str], Run]
    packages: tuple[str, ...] = ()   # distributions whose versions the record lists


BACKENDS: dict[str, Backend] = {
    "eager": Backend(_eager),
    "inductor": Backend(_inductor),
    "inductor-freezing": Backend(_inductor_freezing),
    "aot-eager": Backend(_aot_eager),
    "openvino": Backend(_openvino, ("openvino",)),
    "onnxruntime": Backend(_onnxruntime, ("onnxruntime", "onnx", "onnxscript")),
    "kiln": Backend(_kiln("O3")),
    "kiln-O0": Backend(_kiln("O0")),
    # No prepacked copy of the GEMM weights: the memory setting.
    "kiln-weights-in-place": Backend(_kiln("O3", **{"memory.gemm_weights_in_place": True})),
    "kiln-offline": Backend(_kiln_offline),
}
