"""kiln.export / kiln.load and the `kiln` CLI on exported models (docs/file-format.md)."""

import os
import pathlib
import re
import resource
import subprocess

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import kiln
from conftest import expect_error


def cli_path() -> str:
    """The `kiln` program: $KILN_CLI (a developer build), else the one in the package."""
    path = os.environ.get("KILN_CLI") or str(pathlib.Path(kiln.__file__).parent / "bin" / "kiln")
    assert os.access(path, os.X_OK), f"the kiln CLI is not at {path}; set KILN_CLI"
    return path


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        x = F.relu(self.bn(self.conv1(x)))
        x = F.relu(self.conv2(x))
        return self.fc(x.mean(dim=(2, 3)))


class TransformerBlock(nn.Module):
    def __init__(self, dim=32, heads=4):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp1 = nn.Linear(dim, 2 * dim)
        self.mlp2 = nn.Linear(2 * dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp2(F.gelu(self.mlp1(self.norm2(x))))


def compiled_reference(model, inputs):
    """The torch.compile(backend="kiln") result on the same inputs."""
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="kiln")(*inputs)
    torch._dynamo.reset()
    return out


def seeded(model):
    torch.manual_seed(0)
    m = model()
    for p in m.buffers():  # BatchNorm statistics other than 0/1
        if p.dtype == torch.float32:
            p.copy_(torch.rand_like(p) + 0.5)
    return m.eval()


@pytest.mark.parametrize("make,shape", [(ConvNet, (2, 3, 16, 16)), (TransformerBlock, (2, 7, 32))],
                         ids=["convnet", "transformer"])
def test_export_load_and_cli_match_torch_compile(tmp_path, make, shape):
    model = seeded(make)
    x = torch.randn(*shape)
    path = tmp_path / "model.kiln"
    kiln.export(model, (x,), path)

    loaded = kiln.load(path)
    assert [i["name"] for i in loaded.inputs] == ["x"]
    assert loaded.inputs[0]["sizes"] == list(shape)
    assert loaded.metadata["torch_version"] == torch.__version__
    assert loaded.plan_warning == ""
    expected = compiled_reference(model, (x,))
    got = loaded(x)
    assert torch.equal(got, expected)
    assert np.array_equal(loaded(x.numpy()), expected.numpy())  # NumPy in, NumPy out

    np.save(tmp_path / "x.npy", x.numpy())
    out_dir = tmp_path / "out"
    run = subprocess.run([cli_path(), "run", str(path), "--input", f"x={tmp_path / 'x.npy'}",
                          "--output-dir", str(out_dir)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    [output] = loaded.outputs
    assert np.array_equal(np.load(out_dir / f"{output['name']}.npy"), expected.numpy())


def test_dynamic_batch_exports_a_symbolic_dim(tmp_path):
    model = seeded(ConvNet)
    batch = torch.export.Dim("batch", min=1, max=16)
    path = tmp_path / "dyn.kiln"
    kiln.export(model, (torch.randn(2, 3, 16, 16),), path, dynamic_shapes={"x": {0: batch}})
    loaded = kiln.load(path)
    assert loaded.inputs[0]["sizes"][0] == -1
    for n in (2, 5, 16):  # torch.export specializes sizes 0 and 1: the range starts at 2
        x = torch.randn(n, 3, 16, 16)
        assert torch.equal(loaded(x), compiled_reference(model, (x,)))
    expect_error("E20008", loaded, torch.randn(17, 3, 16, 16))


def test_cli_info_bench_and_random_run(tmp_path):
    path = tmp_path / "model.kiln"
    kiln.export(seeded(ConvNet), (torch.randn(1, 3, 16, 16),), path)
    info = subprocess.run([cli_path(), "info", str(path)], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    assert "x : f32[1, 3, 16, 16]" in info.stdout and "arena" in info.stdout
    assert f"torch {torch.__version__}" in info.stdout
    bench = subprocess.run([cli_path(), "bench", str(path), "--iterations", "3", "--threads", "1"],
                           capture_output=True, text=True)
    assert bench.returncode == 0, bench.stderr
    assert "p99" in bench.stdout and "runs/s" in bench.stdout
    # Its own peak, not the high-water mark of the (larger) pytest process that started it.
    peak_mb = float(re.search(r"peak resident ([\d.]+) MB", bench.stdout).group(1))
    parent_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert 0 < peak_mb < parent_mb
    run = subprocess.run([cli_path(), "run", str(path), "--output-dir", str(tmp_path / "o")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    [out] = list((tmp_path / "o").glob("*.npy"))
    assert np.load(out).shape == (1, 10)
    for command in ("info", "run", "bench", "dump"):
        helped = subprocess.run([cli_path(), command, "--help"], capture_output=True, text=True)
        assert helped.returncode == 0 and f"kiln {command}" in helped.stdout


def test_corrupted_or_truncated_file_is_e10020(tmp_path):
    path = tmp_path / "model.kiln"
    kiln.export(seeded(ConvNet), (torch.randn(1, 3, 16, 16),), path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "corrupted.kiln"
    bad.write_bytes(bytes(data))
    err = expect_error("E10020", kiln.load, bad)
    assert "checksum" in err.detail
    bad.write_bytes(path.read_bytes()[:100])
    expect_error("E10020", kiln.load, bad)
    cli = subprocess.run([cli_path(), "info", str(bad)], capture_output=True, text=True)
    assert cli.returncode == 1 and "E10020" in cli.stderr


def test_op_without_converter_is_e50001_listing_it(tmp_path):
    class Unsupported(nn.Module):
        def forward(self, x):
            return torch.fft.fft(x).real

    err = expect_error("E50001", kiln.export, Unsupported(), (torch.randn(8),), tmp_path / "u.kiln")
    assert "fft" in err.detail
    assert not (tmp_path / "u.kiln").exists()
