"""Layouts of tiles: ``Layout`` (index -> stored index), ``Fragment`` (index -> thread,
register) and the swizzles that make shared tiles bank-conflict free."""

from .fragment import Fragment, make_gemm_fragment_8x8, make_gemm_fragment_8x8_transposed  # noqa: F401
from .layout import Layout  # noqa: F401
from .swizzle import make_swizzled_layout  # noqa: F401
