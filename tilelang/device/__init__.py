"""Device-level operations of the CUDA path: typed ops with declared effects (``effects``), the
sm80-class ops themselves (``sm80``) and the thread groups they run on (``thread_group``).

Passes reason about device code only through :func:`effects.effect_of`; no pass matches an
instruction's name or the text it prints as.
"""

from .effects import Access, Effect, Mechanism, Memory, Proxy, Sync, effect_of, is_device_op
from .thread_group import ThreadGroup

__all__ = ["Access", "Effect", "Mechanism", "Memory", "Proxy", "Sync", "ThreadGroup",
           "effect_of", "is_device_op"]
