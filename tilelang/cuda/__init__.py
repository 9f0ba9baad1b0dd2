"""CUDA-specific helpers under the public TileLang's names (``tilelang.cuda.intrinsics``)."""

from . import intrinsics  # noqa: F401
