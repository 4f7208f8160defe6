"""f16 and bf16 models through torch.compile(backend="kiln"): the heavy ops (matmul, conv2d, the
norms, softmax, reductions, pooling, attention) compute in f32 and round once, as PyTorch's CPU
kernels do (docs/ops.md, "Low-precision floats"), and no op is left in PyTorch.

Accuracy policy: float64 eager on the same f16/bf16 inputs and weights is the truth. A single
op's result is its f32 result rounded once, so it lies within half a ULP of the low dtype (at
the result) of the f32 result, which itself is within the f32 op's own error of the truth: that
error is measured as 4x eager float32's (plus f32 underflow), far below a bf16 or f16 ULP. A
result rounded twice (a matmul's, then its bias add's) can miss this bound by up to a ULP. Whole
models chain dozens of roundings, so there, as for float32 in test_models.py, Kiln's error must
be within a small factor of eager's own error at the same dtype.
"""

import copy

import pytest
import torch
import torch.nn.functional as F

import kiln
import kiln.bench.models

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

DTYPES = [torch.bfloat16, torch.float16]
NO_FALLBACK = {"operator_selection.fallback_to_cpu": False}  # any op left in PyTorch: E50001


def compile_kiln(model):
    return torch.compile(model, backend="kiln", fullgraph=True, options=NO_FALLBACK)


def half_ulp(values, dtype):
    """Half the ULP of `dtype` at each value (of the larger neighbour's binade at a power of
    two; the smallest subnormal's spacing near zero)."""
    info = torch.finfo(dtype)
    magnitude = values.double().abs().clamp(min=info.smallest_normal)
    return 0.5 * info.eps * torch.exp2(torch.floor(torch.log2(magnitude)))


def check_op(module, *inputs, intermediate=0.0):
    """module (f16 or bf16) through Kiln with no fallback: each element within half a ULP of
    the f32 result plus the f32 computation's own error, plus `intermediate` for a kernel that
    rounds an intermediate to the 2-byte dtype by design (docs/ops.md gives its bound)."""
    dtype = inputs[0].dtype
    with torch.no_grad():
        got = compile_kiln(module)(*inputs)
        truth = copy.deepcopy(module).double()(*(x.double() for x in inputs))
        f32 = copy.deepcopy(module).float()(*(x.float() for x in inputs))
        eager = module(*inputs)
    assert got.dtype == dtype and got.shape == eager.shape
    f32_error = (f32.double() - truth).abs().max().item()
    bound = half_ulp(got, dtype) + 4 * f32_error + intermediate + torch.finfo(torch.float32).tiny
    error = (got.double() - truth).abs()
    worst = (error - bound).max().item()
    assert worst <= 0, f"Kiln exceeds its bound by {worst} (eager: {(eager.double() - truth).abs().max().item()})"


class Apply(torch.nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = torch.nn.ParameterList(params)

    def forward(self, *x):
        return self.fn(*x, *self.params)


def single_ops():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(6, 40, generator=g)
    img = torch.randn(2, 6, 10, 10, generator=g)
    q = torch.randn(2, 4, 12, 16, generator=g)
    return {
        "linear": (lambda: torch.nn.Linear(40, 24), (x,)),
        "linear_3d": (lambda: torch.nn.Linear(40, 24), (x.reshape(2, 3, 40),)),
        "linear_no_bias": (lambda: torch.nn.Linear(40, 24, bias=False), (x,)),
        "bmm": (lambda: Apply(lambda a: torch.bmm(a, a.transpose(1, 2))), (x.reshape(2, 3, 40),)),
        "layer_norm": (lambda: torch.nn.LayerNorm(40), (x * 3 + 1,)),
        "rms_norm": (lambda: torch.nn.RMSNorm(40), (x * 3 + 1,)),
        "softmax": (lambda: torch.nn.Softmax(-1), (x * 4,)),
        "log_softmax": (lambda: torch.nn.LogSoftmax(-1), (x * 4,)),
        "sum": (lambda: Apply(lambda a: a.sum(-1)), (x,)),
        "mean": (lambda: Apply(lambda a: a.mean(0)), (x,)),
        "var": (lambda: Apply(lambda a: a.var(-1)), (x,)),
        "logsumexp": (lambda: Apply(lambda a: a.logsumexp(-1)), (x,)),
        "conv2d": (lambda: torch.nn.Conv2d(6, 8, 3, padding=1), (img,)),
        "batch_norm": (lambda: _batch_norm(6), (img,)),
        "group_norm": (lambda: torch.nn.GroupNorm(3, 6), (img,)),
        "avg_pool": (lambda: torch.nn.AvgPool2d(3, 2), (img,)),
        "adaptive_avg_pool": (lambda: torch.nn.AdaptiveAvgPool2d(1), (img,)),
        "max_pool": (lambda: torch.nn.MaxPool2d(2), (img,)),
        "attention": (lambda: Apply(lambda a: F.scaled_dot_product_attention(a, a * 0.5, a)), (q,)),
    }


def _batch_norm(channels):
    bn = torch.nn.BatchNorm2d(channels).eval()
    g = torch.Generator().manual_seed(4)
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(channels, generator=g))
        bn.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
        bn.weight.copy_(torch.randn(channels, generator=g))
        bn.bias.copy_(torch.randn(channels, generator=g))
    return bn


SINGLE_OPS = single_ops()


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(SINGLE_OPS))
def test_single_op_rounds_once(name, dtype):
    torch.manual_seed(0)
    make, inputs = SINGLE_OPS[name]
    inputs = [x.to(dtype) for x in inputs]
    # bf16 attention's flash_amx and onednn kernels round the softmax weights to bf16 before
    # P·v, as PyTorch's does: at most 2^-8 max|v - y| more, below 2^-7 max|v| (v is the input).
    intermediate = (2.0 ** -7 * inputs[0].double().abs().max().item()
                    if name == "attention" and dtype == torch.bfloat16 else 0.0)
    check_op(make().eval().to(dtype), *inputs, intermediate=intermediate)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "group_norm", "batch_norm"])
def test_norm_with_f32_weights_keeps_the_input_dtype(name, dtype):
    # PyTorch's norms give x's dtype with f32 weights (models kept in f32 fed 2-byte activations).
    torch.manual_seed(0)
    make, inputs = SINGLE_OPS[name]
    check_op(make().eval(), *(x.to(dtype) for x in inputs))


def check_model(model, x, factor):
    """No op left in PyTorch (E50001 otherwise), and Kiln's largest error against float64 within
    `factor` times eager's at the same dtype."""
    with torch.no_grad():
        got = compile_kiln(model)(x)
        eager = model(x)
        truth = copy.deepcopy(model).double()(x if not x.is_floating_point() else x.double())
    assert got.dtype == eager.dtype
    kiln_error = (got.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= factor * eager_error, (kiln_error, eager_error)
    return kiln_error, eager_error


class Head(torch.nn.Module):
    """Linear + GELU + LayerNorm + Softmax."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 96)
        self.norm = torch.nn.LayerNorm(96)

    def forward(self, x):
        return torch.softmax(self.norm(F.gelu(self.linear(x))), -1)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_linear_gelu_layer_norm_softmax(dtype):
    torch.manual_seed(1)
    model = Head().eval().to(dtype)
    x = torch.randn(4, 10, 64).to(dtype)
    report = kiln.explain(model, x)
    assert not report.fallback and len(report.partitions) == 1, str(report)
    check_model(model, x, factor=2)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_conv_net(dtype):
    torch.manual_seed(2)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), _batch_norm(8), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, stride=2), torch.nn.GroupNorm(4, 16),
        torch.nn.SiLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    ).eval().to(dtype)
    check_model(model, torch.randn(2, 3, 16, 16).to(dtype), factor=2)


def native_bf16():
    """Whether this CPU has AVX512-BF16, where Kiln's bf16 convolutions and GEMMs read bf16."""
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512_bf16" in f.read().split()
    except OSError:
        return False


def compile_and_dump(fn, inputs, tmp_path, stage):
    """fn compiled by Kiln with no fallback and run on `inputs`: its result, and the text of the
    graph dump after `stage` ("select"; "plan" names the kernels)."""
    options = dict(NO_FALLBACK, **{"debug.graph_dump.type": "txt",
                                   "debug.graph_dump.path": str(tmp_path / "dump")})
    with torch.no_grad():
        result = torch.compile(fn, backend="kiln", fullgraph=True, options=options)(*inputs)
    [dump] = (tmp_path / "dump").glob(f"*_{stage}.txt")
    return result, dump.read_text()


class Bottleneck(torch.nn.Module):
    """ResNet's: 1x1, 3x3 and 1x1 convolutions with batch norms, the identity added, relu."""

    def __init__(self, channels):
        super().__init__()
        mid = channels // 2
        self.convs = torch.nn.ModuleList([
            torch.nn.Conv2d(channels, mid, 1, bias=False), torch.nn.Conv2d(mid, mid, 3, padding=1),
            torch.nn.Conv2d(mid, channels, 1, bias=False)])
        self.norms = torch.nn.ModuleList(
            [_batch_norm(mid), _batch_norm(mid), _batch_norm(channels)])

    def forward(self, x):
        y = torch.relu(self.norms[0](self.convs[0](x)))
        y = torch.relu(self.norms[1](self.convs[1](y)))
        return torch.relu(self.norms[2](self.convs[2](y)) + x)


class InvertedResidual(torch.nn.Module):
    """MobileNetV2's: 1x1 expansion, depthwise 3x3, 1x1 projection, relu6, the identity added."""

    def __init__(self, channels):
        super().__init__()
        wide = channels * 3
        self.layers = torch.nn.Sequential(
            torch.nn.Conv2d(channels, wide, 1, bias=False), _batch_norm(wide), torch.nn.ReLU6(),
            torch.nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False), _batch_norm(wide),
            torch.nn.ReLU6(), torch.nn.Conv2d(wide, channels, 1, bias=False), _batch_norm(channels))

    def forward(self, x):
        return x + self.layers(x)


# A bf16 CNN block on a CPU with AVX512-BF16 becomes convolutions alone (fold_bf16_casts_into_conv,
# fold_conv_batch_norm's bf16 rule, the epilogue fusions; docs/ops.md): no casts, no batch norm,
# no elementwise op left, each result rounded once in the kernel. Its error against float64 stays
# within twice eager's bf16 error, and the exported model computes the same bits.
@pytest.mark.parametrize("block", [Bottleneck, InvertedResidual], ids=lambda b: b.__name__)
def test_bf16_conv_blocks_become_convolutions(block, tmp_path):
    torch.manual_seed(5)
    model = block(16).eval().to(torch.bfloat16)
    x = torch.randn(2, 16, 12, 12).to(torch.bfloat16)
    compiled, text = compile_and_dump(model, (x,), tmp_path, "select")
    ops = {line.split("= ")[1].split("(")[0] for line in text.splitlines()
           if line.startswith("  %")}
    if native_bf16():
        assert ops <= {"conv2d", "reorder"}, ops
    check_model(model, x, factor=2)
    kiln.export(model, (x,), tmp_path / "block.kiln")
    assert torch.equal(torch.as_tensor(kiln.load(tmp_path / "block.kiln")(x)), compiled)


# bf16 layer and RMS norms between linear layers read and write bf16 themselves
# (fold_bf16_casts_into_widening_kernels, every CPU): no cast is left around them, and each
# result is the f32 one rounded once, as with the casts (tests/cpp/test_ops_normalization.cc).
def test_bf16_norms_read_and_write_bf16(tmp_path):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(32, 48), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 16), torch.nn.RMSNorm(16),
                                torch.nn.Linear(16, 8)).eval().to(torch.bfloat16)
    x = torch.randn(4, 32).to(torch.bfloat16)
    _, text = compile_and_dump(model, (x,), tmp_path, "select")
    norms = [line for line in text.splitlines() if "_norm(" in line]
    assert len(norms) == 2, text
    assert " : bf16[4, 48] = layer_norm(" in norms[0] and " : bf16[4, 16] = rms_norm(" in norms[1], text
    check_model(model, x, factor=2)


# bf16 max and average pooling read and write bf16 too (fold_bf16_casts_into_widening_kernels,
# every CPU): ResNet's stem keeps no cast around its pooling, and with AVX512-BF16 it stays in the
# convolutions' layout; a max pooling alone, on NaNs and infinities, gives eager's bits.
@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
def test_bf16_pooling_reads_and_writes_bf16(pool, tmp_path):
    torch.manual_seed(6)
    pooling = {"max_pool2d": torch.nn.MaxPool2d, "avg_pool2d": torch.nn.AvgPool2d}[pool]
    stem = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 7, stride=2, padding=3, bias=False), _batch_norm(16),
        torch.nn.ReLU(), pooling(3, 2, 1), torch.nn.Conv2d(16, 16, 1)
    ).eval().to(torch.bfloat16)
    x = torch.randn(2, 3, 32, 32).to(torch.bfloat16)
    _, text = compile_and_dump(stem, (x,), tmp_path, "plan")
    [node] = [line for line in text.splitlines() if f"= {pool}(" in line]
    assert " : bf16[2, 16, 8, 8]" in node, text
    if native_bf16():
        assert f"<nhwc> = {pool}(" in node and "kernel=avx2" in node, text
    check_model(stem, x, factor=2)
    if pool == "avg_pool2d":
        return

    pool_alone = torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)
    y = (torch.randn(2, 5, 9, 11) * 100).to(torch.bfloat16)
    y[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    with torch.no_grad():
        got = compile_kiln(pool_alone)(y)
    torch.testing.assert_close(got, pool_alone(y), rtol=0, atol=0, equal_nan=True)


# bf16 adaptive average pooling reads and writes bf16 too: no cast is left around it. Pooling to
# 1x1, ResNet's head, reaches Kiln as a mean (AOTAutograd's decomposition), which does the same.
@pytest.mark.parametrize("size,op", [(3, "adaptive_avg_pool2d"), (1, "mean")])
def test_bf16_adaptive_average_pooling_reads_and_writes_bf16(size, op, tmp_path):
    torch.manual_seed(7)
    head = torch.nn.Sequential(
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(size),
        torch.nn.Flatten(), torch.nn.Linear(16 * size * size, 4)
    ).eval().to(torch.bfloat16)
    x = torch.randn(2, 8, 9, 9).to(torch.bfloat16)
    _, text = compile_and_dump(head, (x,), tmp_path, "plan")
    [node] = [line for line in text.splitlines() if f"= {op}(" in line]
    assert f" : bf16[2, 16, {size}, {size}]" in node, text
    pooled = node.split(" = ")[0].split()[0]
    assert not [line for line in text.splitlines() if f"= to({pooled})" in line], text
    check_model(head, x, factor=2)


# bf16 reductions and softmax read and write bf16 too (fold_bf16_casts_into_widening_kernels,
# every CPU; the vector kernels widen each element as they read it): no cast is left in the
# graph, each result is Kiln's f32 result rounded once (the bits the casts gave), within half a
# ULP of float64's plus f32's own error.
@pytest.mark.parametrize("case", ["sum", "amax", "var", "logsumexp", "log_softmax", "softmax",
                                  "softmax_columns"])
def test_bf16_reductions_read_and_write_bf16(case, tmp_path):
    torch.manual_seed(9)
    op, fn = {"sum": ("sum", lambda x: x.sum(-1)), "amax": ("amax", lambda x: x.amax((1, 2))),
              "var": ("var", lambda x: x.var(1)),
              "logsumexp": ("logsumexp", lambda x: x.logsumexp(-1)),
              "log_softmax": ("log_softmax", lambda x: F.log_softmax(x, 1)),
              "softmax": ("softmax", lambda x: F.softmax(x, -1)),
              "softmax_columns": ("softmax", lambda x: F.softmax(x, 1))}[case]
    x = torch.randn(4, 37, 50).to(torch.bfloat16)
    got, text = compile_and_dump(fn, (x,), tmp_path, "plan")
    [node] = [line for line in text.splitlines() if f"= {op}(" in line]
    assert " : bf16[" in node, text
    assert "= to(" not in text, text
    with torch.no_grad():
        f32 = torch.compile(fn, backend="kiln", fullgraph=True, options=NO_FALLBACK)(x.float())
    assert torch.equal(got, f32.to(torch.bfloat16))
    check_op(Apply(fn), x)


# bf16 attention reads and writes bf16 too (fold_bf16_casts_into_widening_kernels, every CPU),
# with each kind of mask: an additive bf16 mask is widened and added to the f32 scores; also with
# grouped-query attention (6 query heads, 2 of k and v).
@pytest.mark.parametrize("kv_heads", [3, 2], ids=["mha", "gqa"])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "additive"])
def test_bf16_attention_reads_and_writes_bf16(mask, kv_heads, tmp_path):
    torch.manual_seed(8)
    heads = 3 if kv_heads == 3 else 6
    q = torch.randn(2, heads, 37, 16).to(torch.bfloat16)
    k, v = (torch.randn(2, kv_heads, 37, 16).to(torch.bfloat16) for _ in range(2))
    masks = {"bool": torch.rand(37, 37) > 0.2, "additive": torch.randn(37, 37).to(torch.bfloat16)}
    gqa = heads != kv_heads

    def attention(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks.get(mask),
                                              is_causal=mask == "causal", enable_gqa=gqa)

    got, text = compile_and_dump(attention, (q, k, v), tmp_path, "select")
    with torch.no_grad():
        eager = attention(q, k, v)
        truth = F.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), is_causal=mask == "causal",
            attn_mask=masks[mask].double() if mask == "additive" else masks.get(mask),
            enable_gqa=gqa)
    lines = text.splitlines()
    [node] = [line for line in lines if "= scaled_dot_product_attention(" in line]
    assert f" : bf16[2, {heads}, 37, 16]" in node, lines
    assert not any("= to(" in line and "bf16" in line.split("=")[0] for line in lines), lines
    assert got.dtype == torch.bfloat16
    kiln_error = (got.double() - truth).abs().max().item()
    eager_error = (eager.double() - truth).abs().max().item()
    assert kiln_error <= 2 * eager_error, (kiln_error, eager_error)


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
def test_bert_small(dtype, tmp_path):
    model, ids = kiln.bench.models.build("bert-base", "small", 2)
    model = model.to(dtype)
    report = kiln.explain(model, ids)
    assert not report.fallback, str(report)  # its scalar_tensor nodes of 2-byte floats included
    check_model(model, ids, factor=2)
    # The same graph without PyTorch to fall back to.
    kiln.export(model, (ids,), tmp_path / "bert.kiln")
    with torch.no_grad():
        compiled = torch.compile(model, backend="kiln")(ids)
    assert torch.equal(torch.as_tensor(kiln.load(tmp_path / "bert.kiln")(ids)), compiled)


# Upsampling, through Kiln's own graphs (test_converters_upsample.py covers F.interpolate): nearest
# copies 2-byte floats as they are; bilinear computes in f32 and rounds once (docs/ops.md).

UPSAMPLE_MODES = {"nearest": {}, "bilinear": {"align_corners": False},
                  "bilinear_align_corners": {"align_corners": True}}


def kiln_upsample(x, size, mode):
    op = "upsample_nearest2d" if mode == "nearest" else "upsample_bilinear2d"
    attrs = "".join(f", {k} = {str(v).lower()}" for k, v in UPSAMPLE_MODES[mode].items())
    dtype = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}[x.dtype]
    g = kiln.Graph.parse(f"""graph @g {{
  input %x : {dtype}{list(x.shape)}
  %y = {op}(%x) {{output_size = [{size[0]}, {size[1]}]{attrs}}}
  output %y
}}""")
    return torch.as_tensor(kiln.compile(g)(x))


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("mode", sorted(UPSAMPLE_MODES))
@pytest.mark.parametrize("size", [(13, 5), (9, 17), (100, 60)], ids=str)
def test_upsample(dtype, mode, size):
    torch.manual_seed(5)
    x = (torch.randn(2, 3, 6, 7) * 3).to(dtype)
    if mode == "nearest":
        x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    got = kiln_upsample(x, size, mode)
    kwargs = dict(size=size, mode=mode.split("_")[0], **UPSAMPLE_MODES[mode])
    eager = F.interpolate(x, **kwargs)
    assert got.dtype == dtype and got.shape == eager.shape
    if mode == "nearest":  # a copy (eager's kernel for larger outputs may change a NaN's bits)
        assert same_bits(got, eager)
        return
    # Kiln's f32 result rounded once, bit for bit, and so within half a ULP of the f32 result,
    # which is within the f32 op's error of float64: where eager computes bf16 in f32 (outputs
    # with OH + OW <= 128) the two mostly agree; where it rounds along the way (larger outputs)
    # Kiln is the closer.
    assert torch.equal(got.view(torch.int16),
                       kiln_upsample(x.float(), size, mode).to(dtype).view(torch.int16))
    truth = F.interpolate(x.double(), **kwargs)
    f32_error = (F.interpolate(x.float(), **kwargs).double() - truth).abs().max().item()
    bound = half_ulp(got, dtype) + 4 * f32_error + torch.finfo(torch.float32).tiny
    assert ((got.double() - truth).abs() <= bound).all()


# Elementwise chains: fused into one node that rounds each op's f32 result to the 2-byte dtype,
# as eager rounds each op's.

CHAINS = {
    "x*sigmoid(x)+1": lambda x: x * torch.sigmoid(x) + 1,
    "gelu(x)*0.5+x": lambda x: F.gelu(x) * 0.5 + x,
    "relu(x*0.3+1)/(abs(x)+0.5)": lambda x: torch.relu(x * 0.3 + 1) / (x.abs() + 0.5),
}


def same_bits(a, b):
    """Bit for bit, any NaN matching any NaN."""
    nan = a.isnan()
    return torch.equal(nan, b.isnan()) and torch.equal(a.view(torch.int16)[~nan],
                                                       b.view(torch.int16)[~nan])


@pytest.mark.parametrize("dtype", DTYPES, ids=["bf16", "f16"])
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_elementwise_chain_fuses_and_matches_eager_bit_for_bit(name, dtype, tmp_path):
    g = torch.Generator().manual_seed(6)
    x = (torch.randn(3, 1001, generator=g) * 4).to(dtype)
    # No infinities: eager's gelu(inf) is NaN (PyTorch's formula), the unfused Kiln op's inf;
    # and no -0 for gelu, whose AVX2 kernel (unfused too, f32 too) gives +0 for it when its
    # vector holds a value beyond the fast path's range.
    minus_zero = 0.0 if "gelu" in name else -0.0
    x.view(-1)[:5] = torch.tensor([float("nan"), 0.0, minus_zero, 1e-6, -300.0])
    options = {**NO_FALLBACK, "debug.graph_dump.type": "txt",
               "debug.graph_dump.path": str(tmp_path)}
    with torch.no_grad():
        got = torch.compile(CHAINS[name], backend="kiln", fullgraph=True, options=options)(x)
        eager = CHAINS[name](x)
    assert got.dtype == dtype and same_bits(got, eager)
    plan = next(tmp_path.glob("*_plan.txt")).read_text()
    assert plan.count("= fused_elementwise(") == 1, plan
