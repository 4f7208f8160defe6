"""The torch.compile half of graph dumps (debug.graph_dump, docs/config.md): the ATen FX graph
after partitioning, each node with its module path and where it runs — which Kiln partition, or
PyTorch and why. Kiln's C++ compiler dumps each partition's graph after every stage beside it.
"""

from __future__ import annotations

import json
import operator
import os
import shutil
import subprocess

import torch.fx as fx

from kiln._errors import error
from kiln._fx import module_path, target_name


def partition_snapshot(gm: fx.GraphModule, partition_of: dict[str, str],
                       verdicts: dict[str, str]) -> dict:
    """Where each ATen node runs, and the edges between them; taken before the partitioner
    fuses `gm` in place."""
    rows, edges = [], []
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        if n.target is operator.getitem:
            edges += [(n.args[0].name, user.name) for user in n.users]
            continue
        edges += [(n.name, user.name) for user in n.users if user.target is not operator.getitem]
        partition = partition_of.get(n.name)
        rows.append({"name": n.name, "target": target_name(n), "source": module_path(n),
                     "partition": partition or "pytorch",
                     "reason": "" if partition else
                     (verdicts.get(n.name) or "in a partition under min_block_size")})
    return {"rows": rows, "edges": edges}


def _dot(name: str, snapshot: dict) -> str:
    def q(s: str) -> str:
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

    by_partition: dict[str, list[dict]] = {}
    for r in snapshot["rows"]:
        by_partition.setdefault(r["partition"], []).append(r)
    lines = [f"digraph {q(name)} {{", f"  label={q(name + ': Kiln partitions and PyTorch')};",
             '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=10];']
    for partition, members in by_partition.items():
        in_kiln = partition != "pytorch"
        lines.append(f"  subgraph {q('cluster_' + partition)} {{")
        lines.append(f"    label={q(('Kiln ' if in_kiln else '') + partition)}; style=dashed;")
        for r in members:
            label = f"{r['target']}  @{r['name']}" + (f"\nsource: {r['source']}" if r["source"]
                                                      else "")
            color = "#cfe2f3" if in_kiln else "#f4cccc"
            lines.append(f"    {q(r['name'])} [label={q(label)}, fillcolor=\"{color}\"];")
        lines.append("  }")
    drawn = {r["name"] for r in snapshot["rows"]}
    lines += [f"  {q(a)} -> {q(b)};" for a, b in snapshot["edges"] if a in drawn and b in drawn]
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_partition_dump(snapshot: dict, fused: fx.GraphModule, name: str, dump_type: str,
                         path: str) -> str:
    """Writes <path>/<name>_fx_partition.<type>; returns the file's path."""
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise error("E10030", f"can't create the graph dump folder {path!r}: {e}; set "
                    "debug.graph_dump.path to a writable folder") from None
    rows = snapshot["rows"]
    stem = os.path.join(path, f"{name}_fx_partition")
    if dump_type == "txt":
        width = max([len(r["name"]) for r in rows] + [4])
        lines = [f"# {name}: the ATen FX graph's nodes and where each runs",
                 f"# {'node':<{width}}  placement  target  source  [why it stays in PyTorch]"]
        for r in rows:
            lines.append(f"{r['name']:<{width}}  {r['partition']}  {r['target']}  "
                         f"{r['source'] or '-'}" + (f"  [{r['reason']}]" if r["reason"] else ""))
        lines += ["", "# The partitioned FX graph (fused_* calls run in Kiln):", str(fused.graph)]
        text = "\n".join(lines) + "\n"
    elif dump_type == "json":
        text = json.dumps({"name": name, "nodes": rows}, indent=1) + "\n"
    else:
        text = _dot(name, snapshot)
    target = f"{stem}.{dump_type}"
    source = f"{stem}.dot" if dump_type in ("png", "svg") else target
    try:
        with open(source, "w") as f:
            f.write(text)
    except OSError as e:
        raise error("E10030", f"can't write the graph dump {source!r}: {e}; set "
                    "debug.graph_dump.path to a writable folder") from None
    if dump_type in ("png", "svg"):
        if shutil.which("dot") is None:
            raise error("E10030", f"graph dumps of type {dump_type} are rendered by Graphviz's "
                        "'dot' program, which is not on PATH; install Graphviz (Debian/Ubuntu: "
                        "apt-get install graphviz) or use type txt, json or dot")
        result = subprocess.run(["dot", f"-T{dump_type}", source, "-o", target],
                                capture_output=True, text=True)
        if result.returncode != 0:
            raise error("E10030", f"Graphviz's dot failed to render {source} as {dump_type}: "
                        f"{result.stderr.strip()}")
    return target
