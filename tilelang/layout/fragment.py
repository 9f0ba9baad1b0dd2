"""``Fragment``: how the elements of a register tile are spread over a block's threads."""

from __future__ import annotations

from typing import Callable, Sequence

from tvm import tirx

from .layout import Layout, _as_list


class Fragment(Layout):
    """Element ``idx`` of a tile of ``shape`` lives in thread ``forward_thread_fn(*idx)`` (plus
    ``rep * threads_per_replica`` for replica ``rep`` of ``replicate``), at register
    ``forward_index_fn(*idx)`` (default: row-major order of the thread's elements)."""

    def __init__(self, shape: Sequence[int], forward_thread_fn: Callable,
                 replicate: int = 1, forward_index_fn: Callable | None = None):
        if forward_index_fn is None:
            super().__init__(shape, lambda *i: list(i))
        else:
            super().__init__(shape, forward_index_fn)
        self.replicate = int(replicate)
        self.thread_map = tirx.IndexMap.from_func(
            lambda *i: _as_list(forward_thread_fn(*i)), ndim=len(self.shape), index_dtype="int32")

    def thread(self, *idx):
        """The thread that holds element ``idx`` (replica 0)."""
        return self.thread_map.map_indices(list(idx))[0]

    def threads(self) -> int:
        """How many threads the fragment spans (one replica)."""
        import itertools

        seen = set()
        for idx in itertools.product(*[range(s) for s in self.shape]):
            seen.add(int(self.thread(*idx)))
        return len(seen)

    def describe(self) -> str:
        """A text picture: the thread id of every element, one tile row per line."""
        if len(self.shape) != 2:
            return repr(self)
        rows = []
        for i in range(self.shape[0]):
            rows.append(" ".join(f"{int(self.thread(i, j)):3d}" for j in range(self.shape[1])))
        return "\n".join(rows)

    def __repr__(self) -> str:
        return f"Fragment({self.shape}, thread={self.thread_map}, replicate={self.replicate})"
