"""The compiler driver: target resolution, the pass pipeline, ``lower``."""

from . import cuda  # noqa: F401  (installs the CUDA source and compile hooks)
from . import pipeline  # noqa: F401  (registers the "tilelang" TIR pipeline)
from .lower import lower  # noqa: F401
from .target import resolve as resolve_target  # noqa: F401
