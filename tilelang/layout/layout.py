"""``Layout``: a map from the logical index of a tile to the index where it is stored."""

from __future__ import annotations

from typing import Callable, Sequence

from tvm import tirx


class Layout:
    """``Layout(shape, fn)``: element ``idx`` of a tile of ``shape`` is stored at ``fn(*idx)``."""

    swizzled = False

    def __init__(self, shape: Sequence[int], forward_fn: Callable):
        self.shape = [int(s) for s in shape]
        self.index_map = tirx.IndexMap.from_func(
            lambda *i: _as_list(forward_fn(*i)), ndim=len(self.shape), index_dtype="int32")

    def map(self, *idx) -> list:
        """The stored index of logical index ``idx``."""
        return list(self.index_map.map_indices(list(idx)))

    @property
    def output_shape(self) -> list:
        return [int(x) for x in self.index_map.map_shape(self.shape)]

    def __repr__(self) -> str:
        return f"Layout({self.shape}, {self.index_map})"


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]
