"""Kiln's benchmark harness: `python -m kiln.bench` (docs/benchmarks.md).

Measures transformers models (models.py) on PyTorch eager, Inductor, OpenVINO, ONNX Runtime and
Kiln (backends.py), each measurement in a process of its own (worker.py), and writes JSON, a
Markdown report and a speed-up chart (report.py).
"""
