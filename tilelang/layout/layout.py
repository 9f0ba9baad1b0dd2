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
        """The extent of each stored dimension: one past the largest stored index (the
        bounding box of the stored positions, which may exceed the tile: ``i * 2``)."""
        table = self.table()
        if table is not None and table[1].size:
            return [int(x) + 1 for x in table[1].max(axis=0)]
        return [int(x) for x in self.index_map.map_shape(self.shape)]

    def table(self):
        """``(logical, stored)``: every logical index of the tile (``[ndim, n]``) and the
        stored index of each (``[n, out_ndim]``), evaluated exhaustively; ``None`` for a map
        that is not plain integer arithmetic or a tile too large to enumerate."""
        import numpy as np

        from ..utils.np_eval import NotEvaluable, np_eval

        if not all(n > 0 for n in self.shape) or int(np.prod(self.shape)) > _MAX_ENUMERATED:
            return None
        im = getattr(self, "index_map", None)
        if im is None:
            return None
        logical = np.indices(self.shape).reshape(len(self.shape), -1)
        env = {v.__chandle__(): logical[d] for d, v in enumerate(im.initial_indices)}
        try:
            stored = [np.broadcast_to(np.asarray(np_eval(e, env), dtype=np.int64),
                                      logical[0].shape) for e in im.final_indices]
        except NotEvaluable:
            return None
        return logical, np.stack(stored, axis=1)

    def collision(self):
        """Two logical indices stored at the same position, as ``(a, b, stored, count)``
        (``count``: how many elements share a position with an earlier one), or ``None``
        when the layout is injective (or cannot be enumerated)."""
        import numpy as np

        table = self.table()
        if table is None:
            return None
        logical, stored = table
        _, first, inverse = np.unique(stored, axis=0, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        clash = np.nonzero(first[inverse] != np.arange(len(inverse)))[0]
        if len(clash) == 0:
            return None
        b = int(clash[0])
        a = int(first[inverse[b]])
        as_tuple = lambda v: tuple(int(x) for x in v)  # noqa: E731
        return as_tuple(logical[:, a]), as_tuple(logical[:, b]), as_tuple(stored[b]), len(clash)

    def __repr__(self) -> str:
        return f"Layout({self.shape}, {self.index_map})"


_MAX_ENUMERATED = 1 << 22  # elements of a tile whose layout is checked exhaustively


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]
