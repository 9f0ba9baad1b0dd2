"""``AutotuneResult``: what a tuning run returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .failures import Failure


@dataclass
class AutotuneResult:
    """The fastest working configuration: ``config`` (the keyword arguments), ``latency``
    (milliseconds per call), ``kernel`` (the compiled ``JITKernel``), ``failures`` (every
    skipped configuration with its reason) and ``from_cache`` (True when the best configuration
    was read from the on-disk tuning cache instead of tuned; then only it was compiled)."""

    config: dict
    latency: float
    kernel: Any
    failures: list[Failure] = field(default_factory=list)
    from_cache: bool = False
    cache_path: str | None = None


__all__ = ["AutotuneResult"]
