"""Element types: the names the language accepts and their torch / numpy counterparts."""

from __future__ import annotations

from typing import Any

import torch

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
}

# Short names users write and the canonical name they mean.
_ALIASES = {
    "float": "float32",
    "half": "float16",
    "fp16": "float16",
    "bf16": "bfloat16",
    "fp32": "float32",
    "double": "float64",
    "int": "int32",
    "e4m3_float8": "float8_e4m3",
    "e5m2_float8": "float8_e5m2",
}

KNOWN_DTYPES = tuple(_TORCH)


def canonical_dtype(dtype: Any, where: str = "dtype") -> str:
    """Return the canonical name of ``dtype`` (a string, ``T.float16``-style constructor, a
    ``tvm.DataType`` or a torch dtype), or raise :class:`DSLError` naming ``where``."""
    name = _name_of(dtype)
    name = _ALIASES.get(name, name)
    if name not in _TORCH:
        raise DSLError(
            f"{where}: unknown dtype {dtype!r}; expected one of {', '.join(KNOWN_DTYPES)}"
        )
    return name


def _name_of(dtype: Any) -> str:
    if isinstance(dtype, str):
        return dtype
    if isinstance(dtype, torch.dtype):
        for name, tdt in _TORCH.items():
            if tdt is dtype:
                return name
        return str(dtype)
    inner = getattr(dtype, "_dtype_str", None)  # T.float16 is a DtypeConstructor
    if isinstance(inner, str):
        return inner
    return str(dtype)


def torch_dtype(dtype: str) -> torch.dtype:
    """The torch dtype that holds elements of ``dtype``."""
    tdt = _TORCH.get(_ALIASES.get(dtype, dtype))
    if tdt is None:
        raise DSLError(f"dtype {dtype!r} has no torch equivalent in this torch build")
    return tdt


def is_float(dtype: str) -> bool:
    return dtype.startswith(("float", "bfloat"))


def is_low_precision_float(dtype: str) -> bool:
    return dtype in ("float16", "bfloat16") or dtype.startswith("float8")
