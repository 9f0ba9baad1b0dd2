"""Tile operators: one module each (registration, checks, lowerings)."""

from . import annotate, atomic, copy, fill, gemm, im2col, reduce, scan, transpose  # noqa: F401  (registers the ops)
from . import reducer  # noqa: F401,E402  (registers T.finalize_reducer)
from .base import TILE_OPS, LowerContext, TileOp, decode  # noqa: F401
