"""Layouts as text, so that the IR can carry them (buffer and loop annotations, op args).

The text is self-describing and deterministic: a layout's encoding depends only on the layout,
never on the process that made it, so the printed program (and with it the kernel cache key)
differs whenever a layout does.  An index map is written as its final expressions over its
initial indices, each expression a nested JSON list naming the TIR node (``["Add", a, b]``,
``["var", k]`` for the ``k``-th initial index, ``["int", dtype, value]`` ...).
"""

from __future__ import annotations

import json
from typing import Any

import tvm
from tvm import tirx

from .fragment import Factor, Fragment
from .layout import Layout
from .swizzle import SwizzledLayout

_BINARY = {c.__name__: c for c in (
    tirx.Add, tirx.Sub, tirx.Mul, tirx.Div, tirx.Mod, tirx.FloorDiv, tirx.FloorMod, tirx.Min,
    tirx.Max, tirx.EQ, tirx.NE, tirx.LT, tirx.LE, tirx.GT, tirx.GE, tirx.And, tirx.Or,
    tirx.BitwiseAnd, tirx.BitwiseOr, tirx.BitwiseXor, tirx.LShift, tirx.RShift)}
_UNARY = {c.__name__: c for c in (tirx.Not, tirx.BitwiseNot)}


def encode(layout: Layout) -> str:
    if isinstance(layout, Fragment) and layout.dims is not None:
        return json.dumps({
            "kind": "fragment", "shape": layout.shape, "name": getattr(layout, "name", ""),
            "dims": [[[f.dim, f.extent, f.kind, f.stride] for f in fs] for fs in layout.dims],
            "replicas": [[f.dim, f.extent, f.kind, f.stride] for f in layout.replicas],
        })
    if isinstance(layout, SwizzledLayout):
        return json.dumps({"kind": "swizzle", "shape": layout.shape, "dtype": layout.dtype,
                           "panel": layout.panel})
    m = layout.index_map
    indices = list(m.initial_indices)
    return json.dumps({
        "kind": "index_map", "shape": layout.shape,
        "indices": [str(v.ty) for v in indices],
        "map": [expr_to_json(e, indices) for e in m.final_indices],
    })


def decode(text) -> Layout:
    d = json.loads(str(text))
    if d["kind"] == "fragment":
        return Fragment.from_factors(
            d["shape"], [[Factor(*f) for f in fs] for fs in d["dims"]],
            [Factor(*f) for f in d["replicas"]], name=d.get("name", ""))
    if d["kind"] == "swizzle":
        return SwizzledLayout(d["shape"], d["dtype"], d["panel"])
    lay = Layout.__new__(Layout)
    lay.shape = d["shape"]
    indices = [tirx.Var(f"i_{k}", dt) for k, dt in enumerate(d["indices"])]
    lay.index_map = tirx.IndexMap(indices, [expr_from_json(e, indices) for e in d["map"]], None)
    return lay


def expr_to_json(e: Any, indices: list) -> Any:
    """``e`` (an index expression over the variables ``indices``) as nested JSON lists."""
    if isinstance(e, tirx.Var):
        for k, v in enumerate(indices):
            if v.same_as(e):
                return ["var", k]
        raise ValueError(f"layout expression refers to {e}, which is none of its indices "
                         f"{list(indices)}; a layout may depend on its indices and constants only")
    if isinstance(e, int):
        return ["int", "int32", e]
    name = type(e).__name__
    if isinstance(e, tirx.IntImm):
        return ["int", str(e.ty), int(e.value)]
    if isinstance(e, tirx.FloatImm):
        return ["float", str(e.ty), float(e.value)]
    if name in _BINARY and isinstance(e, _BINARY[name]):
        return [name, expr_to_json(e.a, indices), expr_to_json(e.b, indices)]
    if name in _UNARY and isinstance(e, _UNARY[name]):
        return [name, expr_to_json(e.a, indices)]
    if isinstance(e, tirx.Select):
        return ["Select", *(expr_to_json(x, indices)
                            for x in (e.condition, e.true_value, e.false_value))]
    if isinstance(e, tirx.Cast):
        return ["Cast", str(e.ty), expr_to_json(e.value, indices)]
    if isinstance(e, tvm.ir.Call) and isinstance(e.op, tvm.ir.Op):
        return ["Call", str(e.op.name), str(e.ty), *(expr_to_json(a, indices) for a in e.args)]
    raise ValueError(f"layout expression {e} ({name}) has no text form; use arithmetic, "
                     f"bitwise and comparison operators, T.Select, casts and intrinsic calls")


def expr_from_json(j: Any, indices: list) -> Any:
    """The inverse of ``expr_to_json``: the expression over ``indices``."""
    tag, *rest = j
    if tag == "var":
        return indices[rest[0]]
    if tag == "int":
        return tirx.IntImm(rest[0], rest[1])
    if tag == "float":
        return tirx.FloatImm(rest[0], rest[1])
    if tag in _BINARY:
        return _BINARY[tag](*(expr_from_json(x, indices) for x in rest))
    if tag in _UNARY:
        return _UNARY[tag](expr_from_json(rest[0], indices))
    if tag == "Select":
        return tirx.Select(*(expr_from_json(x, indices) for x in rest))
    if tag == "Cast":
        return tirx.Cast(rest[0], expr_from_json(rest[1], indices))
    if tag == "Call":
        return tvm.ir.Call(rest[0], [expr_from_json(x, indices) for x in rest[2:]],
                           ret_ty=rest[1])
    raise ValueError(f"unknown layout expression tag {tag!r}")
