"""``CUDA(target)`` / ``CDNA(target)``: a GPU architecture as the public ``tilelang.carver.arch``
names it: the TVM target and what it says about the hardware."""

from __future__ import annotations

from typing import Any



class _Arch:
    platform = ""

    def __init__(self, target: Any = None):
        from ..engine.target import resolve

        self.target = resolve(target or self.platform)  # as tilelang.compile reads targets
        self.arch = str(self.target.attrs.get("arch", ""))

    @property
    def compute_capability(self) -> str:
        """``"90a"`` for ``sm_90a`` (empty when the target names no architecture)."""
        return self.arch[3:] if self.arch.startswith("sm_") else self.arch

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.target})"


class CUDA(_Arch):
    """An NVIDIA GPU target."""

    platform = "cuda"


class CDNA(_Arch):
    """An AMD CDNA target (described only: this tilelang has no HIP backend)."""

    platform = "hip"

    def __init__(self, target: Any = None):
        self.target, self.arch = target, str(target or "hip")
