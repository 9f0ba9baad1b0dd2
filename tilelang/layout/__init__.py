"""Layouts of tiles: ``Layout`` (index -> stored index), ``Fragment`` (index -> thread,
register) and the swizzles that make shared tiles bank-conflict free."""

from .fragment import Fragment  # noqa: F401
from .layout import Layout  # noqa: F401
from .swizzle import make_swizzled_layout  # noqa: F401
