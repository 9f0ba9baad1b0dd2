"""Layouts as text, so that the IR can carry them (buffer and loop annotations, op args)."""

from __future__ import annotations

import json

from .fragment import Factor, Fragment
from .layout import Layout

_MAPS: list = []


def encode(layout: Layout) -> str:
    if isinstance(layout, Fragment) and layout.dims is not None:
        return json.dumps({
            "kind": "fragment", "shape": layout.shape, "name": getattr(layout, "name", ""),
            "dims": [[[f.dim, f.extent, f.kind, f.stride] for f in fs] for fs in layout.dims],
            "replicas": [[f.dim, f.extent, f.kind, f.stride] for f in layout.replicas],
        })
    if getattr(layout, "swizzled", False):
        return json.dumps({"kind": "swizzle", "shape": layout.shape})
    # An arbitrary index map has no text form in TVM 0.27 (save_json crashes on IndexMap):
    # keep it in this process and let the IR refer to it.
    _MAPS.append(layout.index_map)
    return json.dumps({"kind": "index_map", "shape": layout.shape, "map": len(_MAPS) - 1})


def decode(text) -> Layout:
    d = json.loads(str(text))
    if d["kind"] == "fragment":
        return Fragment.from_factors(
            d["shape"], [[Factor(*f) for f in fs] for fs in d["dims"]],
            [Factor(*f) for f in d["replicas"]], name=d.get("name", ""))
    lay = Layout.__new__(Layout)
    lay.shape = d["shape"]
    lay.swizzled = d["kind"] == "swizzle"
    lay.index_map = None if lay.swizzled else _MAPS[d["map"]]
    return lay
