"""tilelang: tile-level GPU kernels in Python, compiled through Apache TVM 0.27.

    import tilelang, tilelang.language as T
    kernel = tilelang.compile(my_prim_func, out_idx=[2])   # GPU if visible, else CPU
    c = kernel(a, b)
"""

from __future__ import annotations

__version__ = "0.1.0"

import logging

import tvm  # noqa: F401  (``from tilelang import tvm``: the TVM this tilelang compiles with)
from tvm import DataType  # noqa: F401

# Programs written for the public TileLang annotate with ``tvm.tirx.PrimExpr``; TVM 0.27 calls
# the scalar expression type ``tvm.tirx.Expr``.
if not hasattr(tvm.tirx, "PrimExpr"):
    tvm.tirx.PrimExpr = tvm.tirx.Expr

from . import language  # noqa: F401  (registers the tile operators)
from . import math  # noqa: F401
from . import layout  # noqa: F401
from .autotuner import autotune  # noqa: F401
from .engine import lower  # noqa: F401
from .errors import (  # noqa: F401
    CompileError,
    DSLError,
    DSLTypeError,
    DivisionByZeroError,
    KernelArgumentError,
    KernelArgumentTypeError,
    KernelMismatchError,
    LoweringError,
    OutOfBoundsError,
    ReferenceUnsupportedError,
    TileLangError,
)
from .jit import JITKernel, clear_cache, compile, disable_cache, enable_cache, jit  # noqa: F401
from .jit.library import load  # noqa: F401
from .jit.par_compile import par_compile  # noqa: F401
from .math import cdiv  # noqa: F401
from .transform.pass_config import PassConfigKey  # noqa: F401
from .utils.tensor import TensorSupplyType  # noqa: F401


def set_log_level(level: int | str) -> None:
    """Set the level of tilelang's logger (``"WARNING"``, ``logging.INFO`` ...)."""
    logging.getLogger("tilelang").setLevel(level)
