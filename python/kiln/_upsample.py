"""F.interpolate as one op under torch.compile.

PyTorch registers Python decompositions of aten.upsample_{nearest,bilinear}2d on the dispatcher
itself (py_impl), which no decomposition table overrides: AOTAutograd would hand Kiln gathers
(_unsafe_index) and arithmetic, whose intermediates take several times the output's memory
(docs/frontend.md). So the backend
points dynamo's F.interpolate calls at `interpolate` below, which sends 4-D nearest and bilinear
resizes to kiln:: ops with aten's .vec schemas: opaque to the trace, converted as the aten ops
that torch.export keeps, and run by aten's kernels wherever PyTorch runs them.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn.functional as F

_lib = torch.library.Library("kiln", "DEF")
_lib.define("upsample_nearest2d(Tensor input, SymInt[]? output_size, float[]? scale_factors) "
            "-> Tensor")
_lib.define("upsample_bilinear2d(Tensor input, SymInt[]? output_size, bool align_corners, "
            "float[]? scale_factors) -> Tensor")


def _nearest(input, output_size, scale_factors):
    return torch.ops.aten.upsample_nearest2d.vec(input, output_size, scale_factors)


def _bilinear(input, output_size, align_corners, scale_factors):
    return torch.ops.aten.upsample_bilinear2d.vec(input, output_size, align_corners,
                                                  scale_factors)


for _name, _fn in (("upsample_nearest2d", _nearest), ("upsample_bilinear2d", _bilinear)):
    _lib.impl(_name, _fn, "CompositeExplicitAutograd")
    torch.library.register_fake(f"kiln::{_name}", _fn, lib=_lib)


def _pair(value) -> list | None:
    """size or scale_factor as two entries, None when F.interpolate would reject its length."""
    pair = list(value) if isinstance(value, (list, tuple)) else [value, value]
    return pair if len(pair) == 2 else None


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """F.interpolate, with 4-D nearest and bilinear resizes as kiln:: ops."""
    pair = _pair(size if scale_factor is None else scale_factor)
    if (mode not in ("nearest", "bilinear") or input.dim() != 4 or antialias
            or recompute_scale_factor or (size is None) == (scale_factor is None)
            or (mode == "nearest" and align_corners is not None) or pair is None):
        # Everything else, and its errors, as PyTorch has them.
        return F.interpolate(input, size, scale_factor, mode, align_corners,
                             recompute_scale_factor, antialias)
    output_size = pair if scale_factor is None else None
    scale_factors = None if scale_factor is None else [float(s) for s in pair]
    if mode == "nearest":
        return torch.ops.kiln.upsample_nearest2d(input, output_size, scale_factors)
    return torch.ops.kiln.upsample_bilinear2d(input, output_size, bool(align_corners),
                                              scale_factors)


def route_interpolate(gm: fx.GraphModule) -> None:
    """Points the F.interpolate calls of a dynamo graph at `interpolate`."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target is F.interpolate:
            node.target = interpolate
            changed = True
    if changed:
        gm.recompile()
