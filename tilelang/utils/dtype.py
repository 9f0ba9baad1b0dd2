"""Element types: the names the language accepts, the dtype objects (``T.float16``) and their
torch / numpy counterparts."""

from __future__ import annotations

import math
from typing import Any

import torch
import tvm
from tvm import tirx

from ..errors import DSLError

# Canonical dtype name -> torch dtype (None where torch has no such type).
_TORCH: dict[str, Any] = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": getattr(torch, "uint16", None),
    "uint32": getattr(torch, "uint32", None),
    "uint64": getattr(torch, "uint64", None),
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "float8_e4m3": getattr(torch, "float8_e4m3fn", None),
    "float8_e4m3fn": getattr(torch, "float8_e4m3fn", None),
    "float8_e5m2": getattr(torch, "float8_e5m2", None),
    "float8_e4m3fnuz": getattr(torch, "float8_e4m3fnuz", None),
    "float8_e5m2fnuz": getattr(torch, "float8_e5m2fnuz", None),
    "float8_e8m0fnu": getattr(torch, "float8_e8m0fnu", None),
    "handle": torch.int64,  # a tensor of pointers holds their 64-bit addresses
}

# Short names users write and the canonical name they mean.  ``tfloat32`` data is stored as
# float32 (TF32 is a tensor-core compute mode, not a storage type).
_ALIASES = {
    "float": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "tfloat32": "float32",
    "double": "float64",
    "int": "int32",
    "uint": "uint32",
    # CUDA's (and torch's) e4m3 is the finite "fn" format; the public TileLang's float8_e4m3
    # is that type too (its tensors are torch.float8_e4m3fn)
    "float8_e4m3": "float8_e4m3fn",
    "e4m3_float8": "float8_e4m3fn",
    "e5m2_float8": "float8_e5m2",
    "ptr": "handle",
}

_PYTHON = {bool: "bool", int: "int32", float: "float32"}

KNOWN_DTYPES = tuple(n for n, t in _TORCH.items() if t is not None)


class dtype(tvm.DataType):  # noqa: N801  (the public name is ``T.dtype``)
    """An element type such as ``T.float16``.  It *is* the string ``"float16"`` (a ``str``
    subclass, so ``T.float16 == "float16"`` and ``getattr(torch, T.float16)`` work) and TVM's
    ``DataType`` (``.bits``, ``.lanes``); ``T.float16(x)`` converts ``x`` (a Python number
    becomes a constant, an expression a cast, no argument a new scalar variable), and
    ``.as_torch()`` is the torch dtype that holds its elements.

    ``T.dtype(x)`` accepts a name, a torch dtype, a Python type or another dtype object."""

    # TVMScript keeps ``dtype = T.float16`` in a kernel body a Python value (not an IR
    # variable) for "meta class" objects; it records a name in the instance's __dict__.
    _is_meta_class = True

    def __new__(cls, value: Any) -> "dtype":
        if isinstance(value, cls):
            return value
        return super().__new__(cls, _resolve(value, "T.dtype"))

    def __call__(self, expr: Any = None, *args: Any, **kwargs: Any) -> Any:
        if isinstance(expr, (int, float)) and not isinstance(expr, bool) and not args \
                and not kwargs and str(self).startswith(("int", "uint")):
            low, high = int_range(str(self))  # a float converts toward zero, as in C
            if not (math.isfinite(expr) and low <= int(expr) <= high):
                raise DSLError(f"T.{self}({expr!r}): outside {self}'s range {low}..{high}")
            return tirx.const(int(expr), str(self))  # TVMScript's UInt64(2**64 - 1) fails
        ctor = _tvm_constructor(str(self))
        if ctor is not None:
            return ctor(expr, *args, **kwargs)
        if expr is None:
            return tirx.Var("v", str(self))
        if isinstance(expr, str):
            expr = float(expr)
        if isinstance(expr, (bool, int, float)):
            return tirx.const(expr, str(self))
        return tirx.Cast(str(self), expr)

    def __getitem__(self, key: Any) -> Any:
        """``T.float32[4]``: a per-thread vector annotation, as in TVMScript (slices still
        slice the name)."""
        if isinstance(key, slice):
            return str.__getitem__(self, key)
        from tvm.tirx.script.builder.ir import LocalVectorAnnotation

        return LocalVectorAnnotation(str(self), key if isinstance(key, tuple) else (key,))

    def as_torch(self) -> torch.dtype:
        """The torch dtype of a tensor holding elements of this type."""
        return torch_dtype(self)

    def __reduce__(self):
        return (dtype, (str(self),))

    def __repr__(self) -> str:
        return f"T.{self}" if str(self).isidentifier() else f"T.dtype({str(self)!r})"


_CTOR_CACHE: dict[str, Any] = {}


def _tvm_constructor(name: str):
    """TVMScript's own constructor for ``name`` (``T.float16(...)``), if it has one."""
    try:
        return _CTOR_CACHE[name]
    except KeyError:
        pass
    from tvm.script import tirx as _T

    ctor = _T.boolean if name == "bool" else None
    obj = getattr(_T, name, None)
    if ctor is None and obj is not None and type(obj).__name__ == "DtypeConstructor":
        ctor = obj
    _CTOR_CACHE[name] = ctor
    return ctor


def _resolve(value: Any, where: str) -> str:
    """The canonical name of ``value`` or a :class:`DSLError` naming ``where``."""
    name = _name_of(value)
    name = _ALIASES.get(name, name)
    if name not in _TORCH and not _is_tvm_type(name):
        raise DSLError(f"{where}: unknown dtype {value!r}; expected one of "
                       f"{', '.join(KNOWN_DTYPES)} (or another TVM type such as int4, "
                       f"float4_e2m1fn, float16x2)")
    return name


_STANDARD_BITS = {0: (1, 2, 4, 8, 16, 32, 64), 1: (1, 2, 4, 8, 16, 32, 64), 2: (16, 32, 64)}


def _is_tvm_type(name: str) -> bool:
    """Whether ``name`` is an element type TVM can generate code for: it parses, and a plain
    int/uint/float has a standard width (no ``float17``)."""
    try:
        parsed = tvm.DataType(name)
    except Exception:  # TVM does not know the name
        return False
    if parsed.is_handle or parsed.bits == 0:
        return False
    widths = _STANDARD_BITS.get(parsed.type_code)
    return widths is None or parsed.bits in widths


def canonical_dtype(value: Any, where: str = "dtype") -> dtype:
    """``value`` (a name, a dtype object, ``T.float16``-style constructor, a ``tvm.DataType``,
    a torch dtype or a Python type) as a :class:`dtype`, or raise :class:`DSLError` naming
    ``where``."""
    if isinstance(value, dtype):
        return value
    return tvm.DataType.__new__(dtype, _resolve(value, where))


def _name_of(value: Any) -> str:
    if isinstance(value, str):
        return str(value)
    if isinstance(value, torch.dtype):
        for name, tdt in _TORCH.items():
            if tdt is value and name != "handle":
                return name
        return str(value).replace("torch.", "")
    if isinstance(value, type) and value in _PYTHON:
        return _PYTHON[value]
    inner = getattr(value, "_dtype_str", None)  # TVMScript's T.float16 is a DtypeConstructor
    if isinstance(inner, str):
        return inner
    if getattr(value, "__name__", None) == "boolean":  # TVMScript's T.bool
        return "bool"
    if isinstance(value, tvm.ir.PrimType):
        return str(value.dtype)
    return str(value)


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype that holds elements of ``name``; for a sub-byte type (``int4``,
    ``float4_e2m1fn``, ...) the byte that packs several of them (``torch.uint8``)."""
    key = str(name)
    tdt = _TORCH.get(_ALIASES.get(key, key))
    if tdt is None and elements_per_byte(key) > 1:
        return torch.uint8
    if tdt is None:
        raise DSLError(f"dtype {key!r} has no torch equivalent in this torch build")
    return tdt


def elements_per_byte(name: str) -> int:
    """How many elements of ``name`` one byte packs: 2 for a 4-bit type, 4 for a 2-bit one,
    8 for a 1-bit integer (not ``bool``, which takes a byte); 1 for every other type."""
    key = _ALIASES.get(str(name), str(name))
    if key in _TORCH:
        return 1
    try:
        parsed = tvm.DataType(key)
    except Exception:  # not a type TVM knows: not packed
        return 1
    if parsed.lanes == 1 and parsed.bits in (1, 2, 4) and not parsed.is_handle:
        return 8 // parsed.bits
    return 1


def packed_torch_dtypes(name: str) -> tuple:
    """The torch dtypes a tensor holding packed ``name`` elements may have: bytes (``uint8``,
    ``int8``), and for ``float4_e2m1fn`` torch's own pair type ``float4_e2m1fn_x2``."""
    out = (torch.uint8, torch.int8)
    pair = getattr(torch, "float4_e2m1fn_x2", None)
    if str(name) == "float4_e2m1fn" and pair is not None:
        out += (pair,)
    return out


def is_float(name: str) -> bool:
    return name.startswith(("float", "bfloat"))


# +infinity of the floats whose constants CUDA codegen cannot print (it writes
# __float2bfloat16_rn(inff), which does not compile): their bits, the sign bit apart
_INF_BITS = {"float16": (0x7C00, 0x8000, "uint16"), "bfloat16": (0x7F80, 0x8000, "uint16"),
             "float8_e5m2": (0x7C, 0x80, "uint8")}


def infinity(name: str, negative: bool = False) -> tvm.ir.Expr:
    """+inf (or -inf) of the float type ``name``, as a constant every backend prints; a float
    type without an infinity (``float8_e4m3fn``: its top code is NaN) raises ``DSLError``."""
    name = str(name)
    if not is_float(name):
        raise DSLError(f"T.infinity: {name} is not a float type")
    if name in _INF_BITS:
        bits, sign, storage = _INF_BITS[name]
        return tirx.reinterpret(name, tirx.const(bits | (sign if negative else 0), storage))
    if tvm.DataType(name).bits < 16:
        raise DSLError(f"T.infinity: {name} has no infinity (use T.max_value({name!r}))")
    return tirx.const(float("-inf") if negative else float("inf"), name)


def int_range(name: str) -> tuple[int, int]:
    """The smallest and largest values of integer type ``name`` (``int8``: -128, 127)."""
    bits = tvm.DataType(name).bits
    if name.startswith("uint"):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


def is_narrow_float(name: str) -> bool:
    """Whether ``name`` (a scalar or vector dtype) is a float narrower than 16 bits (float8,
    float6, float4), a type CUDA has neither arithmetic nor wide vectors of."""
    t = tvm.DataType(str(name))
    return t.is_float and t.bits < 16
