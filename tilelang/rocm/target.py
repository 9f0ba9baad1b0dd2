"""Whether a ROCm (HIP) GPU is usable by tilelang."""

from __future__ import annotations


def check_hip_availability() -> bool:
    """Whether tilelang can compile for and run on a HIP device: never, as it has no HIP
    backend (programs then take CUDA's warp of 32 threads)."""
    return False
