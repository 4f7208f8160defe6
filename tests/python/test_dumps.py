"""Graph dumps (debug.graph_dump) and max-autotune through torch.compile.

Dumps: the FX graph's partitioning between Kiln and PyTorch, and each Kiln partition's graph
after every stage, each node with its module path, engine, layout and kernel.
"""

import json

import pytest
import torch
import torch.nn as nn

import kiln
from conftest import expect_error


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.query(x))


class Encoder(nn.Module):
    """Two blocks around bessel_j0, which stays in PyTorch: two Kiln partitions."""

    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([Block(), Block()])

    def forward(self, x):
        return self.layer[1](torch.special.bessel_j0(self.layer[0](x)))


pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def compile_and_run(model, x, **options):
    with torch.no_grad():
        return torch.compile(model, backend="kiln", options=options)(x)


def test_svg_dumps_of_every_stage_and_the_partitioning(tmp_path):
    model = Encoder().eval()
    x = torch.randn(4, 8)
    got = compile_and_run(model, x, **{"debug.graph_dump.type": "svg",
                                       "debug.graph_dump.path": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(got, model(x))
    svgs = sorted(p.name for p in tmp_path.glob("*.svg"))
    partition = [n for n in svgs if n.endswith("_fx_partition.svg")]
    assert len(partition) == 1, svgs
    text = (tmp_path / partition[0]).read_text()
    assert "<svg" in text and "Kiln graph" in text and "pytorch" in text
    assert "layer.0.query" in text and "aten.special_bessel_j0.default" in text
    inputs = ""
    for i in (0, 1):
        stages = [n for n in svgs if f"_fused_{i}_" in n]
        assert stages[0].endswith("_00_input.svg") and stages[-1].endswith("_plan.svg"), svgs
        assert len(stages) >= 3
        inputs += (tmp_path / stages[0]).read_text()
        plan = (tmp_path / stages[-1]).read_text()
        assert "source: layer." in plan and "engine: " in plan and "kernel: " in plan
    assert "source: layer.0.query" in inputs and "source: layer.1.query" in inputs


def test_txt_dumps_parse_and_carry_sources(tmp_path):
    model = Encoder().eval()
    compile_and_run(model, torch.randn(4, 8), **{"debug.graph_dump.type": "txt",
                                                 "debug.graph_dump.path": str(tmp_path)})
    dumps = sorted(tmp_path.glob("*_fused_*.txt"))
    assert dumps
    for path in dumps:
        kiln.Graph.parse(path.read_text())
    inputs = "".join(p.read_text() for p in dumps if p.name.endswith("_00_input.txt"))
    assert "source=layer.0.query" in inputs and "source=layer.1.query" in inputs
    assert "aten=aten.addmm.default" in inputs
    plan = next(p for p in dumps
                if "_fused_1_" in p.name and p.name.endswith("_plan.txt")).read_text()
    assert "engine=" in plan and "kernel=" in plan and "subgraph=" in plan
    partition = next(tmp_path.glob("*_fx_partition.txt")).read_text()
    assert "aten.special_bessel_j0.default" in partition and "pytorch" in partition


def test_json_partition_dump_names_where_each_node_runs(tmp_path):
    model = Encoder().eval()
    compile_and_run(model, torch.randn(4, 8), **{"debug.graph_dump.type": "json",
                                                 "debug.graph_dump.path": str(tmp_path)})
    rows = json.loads(next(tmp_path.glob("*_fx_partition.json")).read_text())["nodes"]
    placement = {r["target"]: r for r in rows}
    bessel = placement["aten.special_bessel_j0.default"]
    assert bessel["partition"] == "pytorch" and "no converter" in bessel["reason"]
    kiln_partitions = {r["partition"] for r in rows if r["partition"] != "pytorch"}
    assert len(kiln_partitions) == 2
    for name in kiln_partitions:  # each names the graph its stage dumps carry
        assert list(tmp_path.glob(f"{name}_00_input.json"))
        graph = json.loads(next(tmp_path.glob(f"{name}_*_plan.json")).read_text())
        for node in graph["nodes"]:
            assert {"engine", "kernel", "layout"} <= node["annotations"].keys()


def test_no_dump_option_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    compile_and_run(Encoder().eval(), torch.randn(4, 8))
    assert list(tmp_path.iterdir()) == []


def integer_linear():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 48), nn.ReLU(), nn.Linear(48, 32)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randint(-3, 4, p.shape).float())
    return model


def test_max_autotune_gives_the_default_modes_results():
    # Small integers keep every sum exact, so any kernel choice must give the same bits.
    model = integer_linear()
    x = torch.randint(-3, 4, (32, 64)).float()
    with torch.no_grad():
        default = torch.compile(model, backend="kiln")(x)
        torch._dynamo.reset()
        tuned = torch.compile(model, backend="kiln", mode="max-autotune")(x)
        torch._dynamo.reset()
        by_option = torch.compile(model, backend="kiln",
                                  options={"operator_selection.policy": "MAX_AUTOTUNE"})(x)
        assert torch.equal(tuned, default) and torch.equal(by_option, default)
        assert torch.equal(default, model(x))


def test_max_autotune_conflicts_are_E10001():
    cfg = kiln.CompilerConfig()
    cfg.operator_selection.policy = "MAX_AUTOTUNE"
    assert cfg.compile_options()["kernel_policy"] == "autotune"
    cfg.optimization.level = "O0"
    expect_error("E10001", cfg.compile_options)
    reference = kiln.CompilerConfig()
    reference.operator_selection.policy = "REFERENCE"
    with pytest.raises(Exception) as info, torch.no_grad():
        torch.compile(integer_linear(), backend=kiln.get_backend(reference),
                      mode="max-autotune")(torch.ones(2, 64))
    assert "E10001" in str(info.value) and "max-autotune" in str(info.value)


def test_bad_dump_folder_is_E10030(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(Exception) as info:
        compile_and_run(Encoder().eval(), torch.randn(4, 8),
                        **{"debug.graph_dump.type": "txt",
                           "debug.graph_dump.path": str(blocker / "sub")})
    assert "E10030" in str(info.value)


def test_compile_api_dumps(tmp_path):
    g = kiln.Graph("api")
    x = g.add_input("x", "f32", [2, 3])
    g.set_outputs([g.add("relu", [x])])
    kiln.compile(g, dump_type="dot", dump_path=str(tmp_path))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names[0] == "api_00_input.dot" and names[-1].endswith("_plan.dot")
    assert '"n:relu" [label=' in (tmp_path / names[-1]).read_text()
