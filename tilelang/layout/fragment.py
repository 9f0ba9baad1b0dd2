"""``Fragment``: how the elements of a register tile are spread over a block's threads.

A fragment layout is a mixed-radix split of every logical dimension into *factors*; each
factor is either a slice of the thread index or of the register index, with a stride.  Element
``idx`` lives in thread ``sum(value(f) * f.stride)`` over its thread factors and register
``sum(value(f) * f.stride)`` over its register factors, where ``value(f)`` is the digit of
``idx[f.dim]`` that ``f`` stands for.  Thread factors that belong to no dimension are
*replicas*: every one of those threads holds its own copy of the element.

Both directions are closed-form expressions, which is what lowering needs: ``forward`` maps an
element to its (thread, register), ``inverse`` maps (thread, register) back to the element a
thread computes when a ``T.Parallel`` loop is partitioned by the layout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from tvm import tirx
from tvm.sym import Analyzer

from .layout import Layout

THREAD = "thread"
REG = "reg"


@dataclass(frozen=True)
class Factor:
    """One digit of a dimension (or a replica when ``dim`` is -1)."""

    dim: int
    extent: int
    kind: str  # THREAD or REG
    stride: int

    def __repr__(self) -> str:
        d = "rep" if self.dim < 0 else f"d{self.dim}"
        return f"{d}:{self.extent}@{'t' if self.kind == THREAD else 'r'}{self.stride}"


class Fragment(Layout):
    """A register tile's layout over ``num_threads`` threads.

    Users may also build one from functions, like the public TileLang API:
    ``Fragment(shape, forward_thread_fn=lambda i, j: ..., replicate=1, forward_index_fn=...)``.
    Such a layout is described and checked but cannot drive the CUDA lowering unless it is
    built from factors (``Fragment.from_factors``).
    """

    def __init__(self, shape: Sequence[int], forward_thread_fn: Callable | None = None,
                 replicate: int = 1, forward_index_fn: Callable | None = None):
        super().__init__(shape, forward_index_fn or (lambda *i: list(i)))
        self.replicate = int(replicate)
        self.dims: list[list[Factor]] | None = None
        self.replicas: list[Factor] = []
        self.thread_fn = forward_thread_fn

    # construction ------------------------------------------------------------------------
    @classmethod
    def from_factors(cls, shape: Sequence[int], dims: Sequence[Sequence[Factor]],
                     replicas: Sequence[Factor] = (), name: str = "") -> "Fragment":
        """``dims[d]`` lists the factors of dimension ``d`` from the most significant digit."""
        f = cls.__new__(cls)
        f.shape = [int(s) for s in shape]
        f.dims = [list(fs) for fs in dims]
        f.replicas = list(replicas)
        f.name = name
        f.thread_fn = None
        f.index_map = None
        for d, fs in enumerate(f.dims):
            ext = 1
            for x in fs:
                ext *= x.extent
            if ext < f.shape[d]:
                raise ValueError(f"fragment factors of dim {d} cover {ext} < {f.shape[d]}")
        f.replicate = 1
        for r in f.replicas:
            f.replicate *= r.extent
        return f

    @property
    def factors(self) -> list[Factor]:
        return [x for fs in self.dims for x in fs] + self.replicas

    @property
    def num_threads(self) -> int:
        n = 1
        for x in self.factors:
            if x.kind == THREAD:
                n *= x.extent
        return n

    @property
    def num_regs(self) -> int:
        n = 1
        for x in self.factors:
            if x.kind == REG:
                n *= x.extent
        return n

    @property
    def padded_shape(self) -> list[int]:
        out = []
        for fs in self.dims:
            e = 1
            for x in fs:
                e *= x.extent
            out.append(e)
        return out

    def is_padded(self) -> bool:
        return self.padded_shape != self.shape

    # maps ---------------------------------------------------------------------------------
    def _digits(self, idx):
        """(factor, digit expr) for the digits of ``idx``."""
        out = []
        for d, fs in enumerate(self.dims):
            inner = 1
            for x in reversed(fs):
                out.append((x, tirx.floormod(tirx.floordiv(idx[d], inner), x.extent)
                            if inner > 1 else tirx.floormod(idx[d], x.extent)))
                inner *= x.extent
        return out

    def forward(self, idx: Sequence, replica=None) -> tuple:
        """(thread, register) of element ``idx`` (replica 0, or the given replica digits)."""
        thread, reg = tirx.const(0, "int32"), tirx.const(0, "int32")
        for x, v in self._digits(idx):
            if x.kind == THREAD:
                thread = thread + v * x.stride
            else:
                reg = reg + v * x.stride
        a = Analyzer()
        return a.simplify(thread), a.simplify(reg)

    def forward_reg(self, idx: Sequence):
        return self.forward(idx)[1]

    def inverse(self, tx, r) -> list:
        """The element that thread ``tx`` holds in register ``r``."""
        a = Analyzer()
        out = []
        for fs in self.dims:
            e, inner = tirx.const(0, "int32"), 1
            for x in reversed(fs):
                src = tx if x.kind == THREAD else r
                digit = tirx.floormod(tirx.floordiv(src, x.stride), x.extent)
                e = e + digit * inner
                inner *= x.extent
            out.append(a.simplify(e))
        return out

    def replica_index(self, tx):
        """0 for the first copy of each element; used to keep one writer per element."""
        v = tirx.const(0, "int32")
        inner = 1
        for x in self.replicas:
            v = v + tirx.floormod(tirx.floordiv(tx, x.stride), x.extent) * inner
            inner *= x.extent
        return Analyzer().simplify(v)

    # derived layouts ----------------------------------------------------------------------
    def reduce(self, dim: int, keep_dim: bool = False) -> "Fragment":
        """The layout of ``reduce(self, dim)``: thread digits of ``dim`` become replicas (the
        threads that hold parts of a row all get the row's result), register digits vanish and
        the remaining register strides are compacted.  ``keep_dim`` keeps a unit dim."""
        kept_regs = [x for d, fs in enumerate(self.dims) if d != dim for x in fs if x.kind == REG]
        regmap = _compact_regs(kept_regs)
        kept = [(d, fs) for d, fs in enumerate(self.dims) if d != dim]
        shape = [self.shape[d] for d, _ in kept]
        if keep_dim:
            kept.insert(dim, (dim, None))
            shape.insert(dim, 1)
        dims = []
        for k, (d, fs) in enumerate(kept):
            if fs is None:
                dims.append([Factor(k, 1, REG, 1)])
                continue
            dims.append([Factor(k, x.extent, x.kind, regmap[x] if x.kind == REG else x.stride)
                         for x in fs])
        reps = self.replicas + [Factor(-1, x.extent, THREAD, x.stride)
                                for x in self.dims[dim] if x.kind == THREAD]
        return Fragment.from_factors(shape, dims, reps, name=f"reduce({self.name}, {dim})")

    def window(self, dim: int, extent: int) -> "Fragment | None":
        """The layout of an aligned window of ``extent`` indices along ``dim`` (indices
        ``w*extent .. w*extent + extent - 1`` for any ``w``), the same for every window: its
        digits are ``dim``'s innermost digits spanning ``extent`` (a digit may be split), and
        it exists only when the digits above them are registers (so every window lies in the
        same threads); registers are renumbered densely.  ``None`` otherwise."""
        low, high, span = [], list(self.dims[dim]), 1
        while high and span < extent:
            x = high.pop()
            if span * x.extent <= extent:
                low.insert(0, x)
                span *= x.extent
                continue
            q = extent // span
            if extent % span or x.extent % q:
                return None
            low.insert(0, Factor(x.dim, q, x.kind, x.stride))
            high.append(Factor(x.dim, x.extent // q, x.kind, x.stride * q))
            span = extent
        if span != extent or any(x.kind != REG and x.extent > 1 for x in high):
            return None
        dims = [low if d == dim else fs for d, fs in enumerate(self.dims)]
        regmap = _compact_regs([x for fs in dims for x in fs if x.kind == REG])
        dims = [[Factor(x.dim, x.extent, x.kind, regmap[x] if x.kind == REG else x.stride)
                 for x in fs] for fs in dims]
        shape = [extent if d == dim else n for d, n in enumerate(self.shape)]
        return Fragment.from_factors(shape, dims, self.replicas,
                                     name=f"window({self.name}, {dim}, {extent})")

    def coarsen(self, dim: int, c: int) -> "Fragment | None":
        """The layout of ``y`` with ``y[.., i // c, ..]`` read at every element ``i`` of ``self``
        (``c`` a power of two): ``dim``'s innermost digits spanning ``c`` (a digit may be split)
        no longer tell elements apart, so their registers vanish and their threads become
        replicas (each of them reads the element).  ``None`` when ``c`` does not split the
        digits evenly."""
        low, high, span = [], list(self.dims[dim]), 1
        while high and span < c:
            x = high.pop()
            if span * x.extent <= c:
                low.append(x)
                span *= x.extent
                continue
            q = c // span
            if c % span or x.extent % q:
                return None
            low.append(Factor(x.dim, q, x.kind, x.stride))
            high.append(Factor(x.dim, x.extent // q, x.kind, x.stride * q))
            span = c
        if span != c:
            return None
        high = high or [Factor(dim, 1, REG, 1)]
        dims = [high if d == dim else fs for d, fs in enumerate(self.dims)]
        regmap = _compact_regs([x for fs in dims for x in fs if x.kind == REG])
        dims = [[Factor(x.dim, x.extent, x.kind, regmap[x] if x.kind == REG else x.stride)
                 for x in fs] for fs in dims]
        reps = self.replicas + [Factor(-1, x.extent, THREAD, x.stride) for x in low
                                if x.kind == THREAD and x.extent > 1]
        shape = [-(-n // c) if d == dim else n for d, n in enumerate(self.shape)]
        return Fragment.from_factors(shape, dims, reps, name=f"coarsen({self.name}, {dim}, {c})")

    def resized(self, shape: Sequence[int]) -> "Fragment | None":
        """The same digits over another ``shape`` that they cover (indices beyond ``shape`` are
        padding: their registers exist but hold no element of the tile); ``None`` if some
        extent of ``shape`` exceeds the digits' (``padded_shape``)."""
        shape = [int(s) for s in shape]
        if len(shape) != len(self.shape) or \
                any(a > b for a, b in zip(shape, self.padded_shape)):
            return None
        return Fragment.from_factors(shape, self.dims, self.replicas, name=self.name)

    def reshaped(self, shape: Sequence[int]) -> "Fragment | None":
        """The layout of the same elements seen with another ``shape`` in row-major order
        (``T.reshape``): every element keeps its thread and register.  The new dims regroup
        the digits of the row-major flat index (a digit is split where a new dim ends inside
        it).  ``None`` when some new extent does not fall on digits an even split can make,
        or when a dim other than the outermost non-unit one is padded (the digits then are
        not those of the flat index)."""
        shape = [int(s) for s in shape]
        if int(np.prod(shape)) != int(np.prod(self.shape)):
            return None
        outer = next((d for d, n in enumerate(self.shape) if n > 1), 0)
        padded = self.padded_shape
        if any(padded[d] != (1 if d < outer else self.shape[d])
               for d in range(len(self.shape)) if d != outer):
            return None
        digits = [x for fs in self.dims for x in fs if x.extent > 1]  # most significant first
        dims: list[list[Factor]] = [[] for _ in shape]
        for d in reversed(range(len(shape))):
            if d == 0:  # the outermost new dim takes what is left (padding included)
                dims[0] = [Factor(0, x.extent, x.kind, x.stride) for x in digits]
                break
            need = shape[d]
            while need > 1:
                if not digits:
                    return None
                x = digits.pop()
                if need % x.extent == 0:
                    dims[d].insert(0, Factor(d, x.extent, x.kind, x.stride))
                    need //= x.extent
                elif x.extent % need == 0:
                    dims[d].insert(0, Factor(d, need, x.kind, x.stride))
                    digits.append(Factor(x.dim, x.extent // need, x.kind, x.stride * need))
                    need = 1
                else:
                    return None
        out = Fragment.from_factors(shape, [fs or [Factor(d, 1, REG, 1)]
                                            for d, fs in enumerate(dims)],
                                    self.replicas, name=f"reshape({self.name})")
        return out.normalized()

    def repeat(self, repeats: Sequence[int], repeat_on_thread: bool = False,
               lower_dim_first: bool = True) -> "Fragment":
        """This layout tiled ``repeats[d]`` times along each dim ``d``: every copy of the tile
        is laid out alike, in new registers (``repeat_on_thread=False``) or on new threads
        after the existing ones.  Copies are numbered with dim 0 slowest when
        ``lower_dim_first``, else fastest."""
        if self.dims is None:
            raise ValueError("Fragment.repeat needs a fragment built from factors")
        repeats = [int(r) for r in repeats]
        if len(repeats) != len(self.shape) or any(r < 1 for r in repeats):
            raise ValueError(f"Fragment.repeat: repeats {repeats} must be one positive count "
                             f"per dim of the shape {self.shape}")
        if self.is_padded() and any(r > 1 for r in repeats):
            raise ValueError(f"Fragment.repeat: the padded layout {self!r} cannot be tiled")
        kind = THREAD if repeat_on_thread else REG
        stride = self.num_threads if repeat_on_thread else self.num_regs
        outer = [None] * len(repeats)
        for d in (reversed(range(len(repeats))) if lower_dim_first else range(len(repeats))):
            if repeats[d] > 1:
                outer[d] = Factor(d, repeats[d], kind, stride)
                stride *= repeats[d]
        dims = [([outer[d]] if outer[d] else []) + list(fs) for d, fs in enumerate(self.dims)]
        shape = [n * r for n, r in zip(self.shape, repeats)]
        return Fragment.from_factors(shape, dims, self.replicas,
                                     name=f"repeat({self.name}, {repeats})")

    def permuted(self, order: Sequence[int]) -> "Fragment":
        """The layout of the transposed tile whose dim ``k`` is dim ``order[k]`` of this one:
        every element keeps its thread and register."""
        dims = [[Factor(k, x.extent, x.kind, x.stride) for x in self.dims[d]]
                for k, d in enumerate(order)]
        return Fragment.from_factors([self.shape[d] for d in order], dims, self.replicas,
                                     name=f"permute({self.name})")

    def normalized(self) -> "Fragment":
        """The same layout with unit digits dropped and adjacent digits of one dim merged
        where they form a single digit (same kind, the outer stride continuing the inner)."""
        dims = []
        for d, fs in enumerate(self.dims):
            out: list[Factor] = []
            for x in fs:
                if x.extent == 1:
                    continue
                if out and out[-1].kind == x.kind and out[-1].stride == x.stride * x.extent:
                    hi = out.pop()
                    x = Factor(d, hi.extent * x.extent, x.kind, x.stride)
                out.append(x)
            dims.append(out or [Factor(d, 1, REG, 1)])
        reps = [x for x in self.replicas if x.extent > 1]
        return Fragment.from_factors(self.shape, dims, reps, name=self.name)

    def reduced_thread_factors(self, dim: int) -> list[Factor]:
        return [x for x in self.dims[dim] if x.kind == THREAD]

    def same_as(self, other: "Fragment") -> bool:
        """Whether both put every element in the same thread and register (compared on
        their normalized digits)."""
        if not (isinstance(other, Fragment) and other.dims is not None and
                self.dims is not None and self.shape == other.shape):
            return False
        a, b = self.normalized(), other.normalized()
        return a.dims == b.dims and sorted(map(repr, a.replicas)) == sorted(map(repr, b.replicas))

    # numeric views (tests, checks, pictures) ---------------------------------------------
    def thread_table(self) -> np.ndarray:
        """thread id (replica 0) of every element, as an array of ``shape``."""
        return self._table(THREAD)

    def reg_table(self) -> np.ndarray:
        return self._table(REG)

    def _table(self, kind: str) -> np.ndarray:
        if self.dims is None:
            return np.vectorize(lambda *i: int(self.thread_fn(*i)))(*np.indices(self.shape))
        grids = np.indices(self.shape)
        out = np.zeros(self.shape, dtype=np.int64)
        for d, fs in enumerate(self.dims):
            inner = 1
            for x in reversed(fs):
                digit = (grids[d] // inner) % x.extent
                if x.kind == kind:
                    out += digit * x.stride
                inner *= x.extent
        return out

    def thread(self, *idx):
        if self.dims is None:
            return self.thread_fn(*idx)
        return int(self.thread_table()[tuple(idx)])

    def threads(self) -> int:
        return len(np.unique(self.thread_table()))

    def describe(self) -> str:
        """A text picture: ``T<thread>:<register>`` of every element, one tile row a line."""
        if len(self.shape) != 2:
            return repr(self)
        th, rg = self.thread_table(), (self.reg_table() if self.dims is not None else None)
        rows = []
        for i in range(self.shape[0]):
            cells = [f"T{th[i, j]}" + (f":{rg[i, j]}" if rg is not None else "")
                     for j in range(self.shape[1])]
            rows.append(" ".join(f"{c:>8}" for c in cells))
        return "\n".join(rows)

    def __repr__(self) -> str:
        if self.dims is None:
            return f"Fragment({self.shape}, thread_fn, replicate={self.replicate})"
        tag = f"{self.name} " if getattr(self, "name", "") else ""
        return (f"Fragment({tag}{self.shape}: " +
                " | ".join(" ".join(map(repr, fs)) for fs in self.dims) +
                (f" | {' '.join(map(repr, self.replicas))}" if self.replicas else "") + ")")


def _compact_regs(regs: list[Factor]) -> dict:
    """New dense strides for the register factors that remain, keeping their order."""
    out, stride = {}, 1
    for x in sorted(regs, key=lambda f: f.stride):
        out[x] = stride
        stride *= x.extent
    return out


# ---------------------------------------------------------------------------------------
# Layout families
# ---------------------------------------------------------------------------------------


def _split(total: int, want: int) -> int:
    """Largest power of two <= want that divides total (at least 1)."""
    g = 1
    while g * 2 <= want and total % (g * 2) == 0:
        g *= 2
    return g


def elementwise(shape: Sequence[int], num_threads: int, vec: int = 1, name: str = "",
                spans: Sequence[int | None] | None = None, pad: bool = True) -> Fragment:
    """Threads laid along the last dimension (``vec`` consecutive elements each), then along
    the others; what is left over becomes registers, spare threads become replicas.  Extents
    are padded to powers of two (the lowering guards the padding).  ``spans[d]`` (a power of
    two, ``None``: no limit) keeps dim ``d``'s thread digits inside its innermost ``spans[d]``
    indices, so that every aligned window of that many indices lies in the same threads (1:
    the dim is held in registers only).  ``pad=False`` pads nothing: a dim's threads are
    the largest power of two that divides it, the rest of it registers."""
    shape = [int(s) for s in shape]
    nd = len(shape)
    rem = [_pow2_ceil(max(1, s)) if pad else max(1, s) for s in shape]
    v = _split(rem[-1], vec)
    rem[-1] //= v
    room = list(rem)  # how many threads each dim may take
    for d, span in enumerate(spans or [None] * nd):
        if span is not None:
            room[d] = min(rem[d], max(1, span // (v if d == nd - 1 else 1)))
    threads, left = [1] * nd, num_threads
    for d in reversed(range(nd)):  # threads fastest along the last dim
        threads[d] = _split(room[d], left)
        left //= threads[d]
        rem[d] //= threads[d]
    # register index: the vector innermost, then the leftover digits, last dim fastest
    reg_stride, s = {}, 1
    for d in reversed(range(nd)):
        if d == nd - 1:
            reg_stride[(d, True)] = s
            s *= v
        reg_stride[(d, False)] = s
        s *= rem[d]
    t_stride, t = {}, 1
    for d in reversed(range(nd)):
        t_stride[d] = t
        t *= threads[d]
    dims = []
    for d in range(nd):
        fs = [Factor(d, rem[d], REG, reg_stride[(d, False)]),
              Factor(d, threads[d], THREAD, t_stride[d])]
        if d == nd - 1:
            fs.append(Factor(d, v, REG, reg_stride[(d, True)]))
        dims.append([x for x in fs if x.extent > 1] or [Factor(d, 1, REG, 1)])
    replicas = [Factor(-1, left, THREAD, t)] if left > 1 else []
    return Fragment.from_factors(shape, dims, replicas, name=name or "elementwise")


def make_gemm_fragment_8x8() -> Fragment:
    """The 8x8 tile of an mma operand or accumulator over one warp: row ``i`` on threads
    ``4 * i .. 4 * i + 3``, each holding two consecutive columns (``ldmatrix``'s layout)."""
    return Fragment.from_factors(
        [8, 8], [[Factor(0, 8, THREAD, 4)], [Factor(1, 4, THREAD, 1), Factor(1, 2, REG, 1)]],
        name="gemm_8x8")


def make_gemm_fragment_8x8_transposed() -> Fragment:
    """:func:`make_gemm_fragment_8x8` of the transposed tile: column ``j`` on threads
    ``4 * j .. 4 * j + 3``, each holding two consecutive rows (``ldmatrix.trans``)."""
    return Fragment.from_factors(
        [8, 8], [[Factor(0, 4, THREAD, 1), Factor(0, 2, REG, 1)], [Factor(1, 8, THREAD, 4)]],
        name="gemm_8x8_transposed")


def replicated(shape: Sequence[int], num_threads: int, name: str = "replicated") -> Fragment:
    """Every thread holds the whole tile: all elements are registers (row-major), and the
    ``num_threads`` threads are replicas.  The layout of a small fragment read in scalar code
    (``if mask[k]: ...`` outside ``T.Parallel``), which every thread must be able to read."""
    shape = [int(s) for s in shape]
    dims, stride = [None] * len(shape), 1
    for d in reversed(range(len(shape))):
        dims[d] = [Factor(d, max(1, shape[d]), REG, stride)]
        stride *= max(1, shape[d])
    replicas = [Factor(-1, num_threads, THREAD, 1)] if num_threads > 1 else []
    return Fragment.from_factors(shape, dims, replicas, name=name)


def is_replicated(f: Fragment) -> bool:
    """Whether every thread of the layout holds every element (no thread digit in any dim)."""
    return f.dims is not None and all(x.kind == REG for fs in f.dims for x in fs)


def _pow2_ceil(n: int) -> int:
    p = 1
    while p < n:
        p *= 2
    return p


def mma_accumulator(m: int, n: int, warps_m: int, warps_n: int, name: str = "mma_c") -> Fragment:
    """The C fragment of ``mma.sync.m16n8k*`` tiled over a ``warps_m x warps_n`` warp grid.

    Within a warp tile of ``(m/warps_m) x (n/warps_n)``: register ``(mi*NI + ni)*4 + h*2 + c``
    of lane ``l`` is row ``16*mi + 8*h + l/4``, column ``8*ni + 2*(l%4) + c``.  Warps are
    numbered ``warp_m * warps_n + warp_n``.
    """
    wm, wn = m // warps_m, n // warps_n
    mi, ni = wm // 16, wn // 8
    rows = [Factor(0, warps_m, THREAD, 32 * warps_n), Factor(0, mi, REG, 4 * ni),
            Factor(0, 2, REG, 2), Factor(0, 8, THREAD, 4)]
    cols = [Factor(1, warps_n, THREAD, 32), Factor(1, ni, REG, 4),
            Factor(1, 4, THREAD, 1), Factor(1, 2, REG, 1)]
    return Fragment.from_factors([m, n], [[x for x in rows if x.extent > 1],
                                          [x for x in cols if x.extent > 1]], name=name)


def wgmma_accumulator(m: int, n: int, wg_m: int, wg_n: int, name: str = "wgmma_c") -> Fragment:
    """The C fragment of ``wgmma.mma_async.m64nNk*`` tiled over a ``wg_m x wg_n`` grid of
    warpgroups (numbered ``wg_m_index * wg_n + wg_n_index``, 128 threads each).

    Within a warpgroup's ``(m/wg_m) x (n/wg_n)`` block, m64 tile ``mi``: register
    ``mi * (n/wg_n)/2 + 4j + 2h + c`` of thread (warp ``w``, lane ``l``) is row
    ``64 mi + 16w + l/4 + 8h``, column ``8j + 2(l%4) + c``.
    """
    m_wg, n_wg = m // wg_m, n // wg_n
    rows = [Factor(0, wg_m, THREAD, 128 * wg_n), Factor(0, m_wg // 64, REG, n_wg // 2),
            Factor(0, 4, THREAD, 32), Factor(0, 2, REG, 2), Factor(0, 8, THREAD, 4)]
    cols = [Factor(1, wg_n, THREAD, 128), Factor(1, n_wg // 8, REG, 4),
            Factor(1, 4, THREAD, 1), Factor(1, 2, REG, 1)]
    return Fragment.from_factors([m, n], [[x for x in rows if x.extent > 1],
                                          [x for x in cols if x.extent > 1]], name=name)


def wgmma_operand_a(m: int, k: int, wg_m: int, wg_n: int) -> Fragment:
    """The register A operand of ``wgmma ... rs``: the accumulator layout of the ``m x k`` tile
    over the ``wg_m`` warpgroups along M (registers ``8 kk .. 8 kk + 7`` of an m64 tile are the
    four 32-bit A registers of k-step ``kk``), replicated over the ``wg_n`` warpgroups along N."""
    base = wgmma_accumulator(m, k, wg_m, 1, name="wgmma_a")
    if wg_n == 1:
        return base
    dims = [[Factor(x.dim, x.extent, x.kind, x.stride * wg_n if x.kind == THREAD and
                    x.stride >= 128 else x.stride) for x in fs] for fs in base.dims]
    return Fragment.from_factors([m, k], dims, [Factor(-1, wg_n, THREAD, 128)], name="wgmma_a")


def check_ownership(loop: Fragment, frag: Fragment, index_fn: Callable) -> bool:
    """Whether, for every (thread, register) of ``loop``, the element ``index_fn(idx)`` of
    ``frag`` is held by that thread (numerically, over all threads and registers)."""
    got = owners(loop, frag, index_fn)
    if got is None:
        return True
    owner, mine, valid = got
    return bool(np.all((owner == mine) | ~valid))


def _targets(loop: Fragment, frag: Fragment, index_fn: Callable):
    """Over the (thread, register) grid of ``loop``: the thread index column, the grid shape,
    where the element ``index_fn(idx)`` of ``frag`` is in bounds, and that element's
    coordinates; ``None`` when ``index_fn`` gives no element."""
    tx = np.arange(loop.num_threads)[:, None]
    r = np.arange(loop.num_regs)[None, :]
    shape = np.broadcast(tx, r).shape
    idx = [np.broadcast_to(i, shape) for i in _np_inverse(loop, tx, r)]
    valid = np.ones(shape, dtype=bool)
    for d, s in enumerate(loop.shape):
        valid &= idx[d] < s
    tgt = index_fn(idx)
    if tgt is None:
        return None
    tgt = [np.broadcast_to(np.asarray(t), shape) for t in tgt]
    for d, s in enumerate(frag.shape):
        valid &= (tgt[d] >= 0) & (tgt[d] < s)
    return tx, shape, valid, tgt


def _owner_of(frag: Fragment, coords) -> np.ndarray:
    """The thread (replica digits cleared) that holds the elements at ``coords``."""
    owner = np.zeros(np.shape(coords[0]), dtype=np.int64)
    for d, fs in enumerate(frag.dims):
        inner = 1
        for x in reversed(fs):
            if x.kind == THREAD:
                owner += ((coords[d] // inner) % x.extent) * x.stride
            inner *= x.extent
    return owner


def _without_replicas(frag: Fragment, t) -> np.ndarray:
    base = np.array(t, copy=True)
    for x in frag.replicas:
        base -= ((base // x.stride) % x.extent) * x.stride
    return base


def owners(loop: Fragment, frag: Fragment, index_fn: Callable):
    """Over the (thread, register) grid of ``loop``: the thread (replica digits cleared) that
    holds element ``index_fn(idx)`` of ``frag``, the computing thread likewise cleared, and
    where the element is in bounds; ``None`` when ``index_fn`` gives no element."""
    got = _targets(loop, frag, index_fn)
    if got is None:
        return None
    tx, shape, valid, tgt = got
    return _owner_of(frag, tgt), _without_replicas(frag, np.broadcast_to(tx, shape)), valid


def check_replicas_written(loop: Fragment, frag: Fragment, index_fn: Callable) -> bool:
    """Whether a ``T.Parallel`` loop partitioned by ``loop`` that writes ``frag`` at
    ``index_fn(idx)`` has every thread holding a copy of a written element write it (so the
    copies of a replicated fragment stay equal)."""
    got = _targets(loop, frag, index_fn)
    if got is None:
        return True
    tx, shape, valid, tgt = got
    flat = np.zeros(shape, dtype=np.int64)
    for d, s in enumerate(frag.shape):
        flat = flat * s + np.clip(tgt[d], 0, s - 1)
    nthreads = max(loop.num_threads, frag.num_threads)
    written = np.zeros((nthreads, int(np.prod(frag.shape))), dtype=bool)
    rows = np.broadcast_to(tx, shape)
    written[rows[valid], flat[valid]] = True
    elems = np.unique(flat[valid])
    # the holders of element e: the threads whose non-replica digits equal its owner
    owner = _owner_of(frag, np.unravel_index(elems, frag.shape))
    base = _without_replicas(frag, np.arange(frag.num_threads))
    holders = base[:, None] == owner[None, :]
    return bool(np.all(written[:frag.num_threads][:, elems] | ~holders))


def _np_inverse(f: Fragment, tx, r) -> list:
    out = []
    for fs in f.dims:
        e, inner = 0, 1
        for x in reversed(fs):
            src = tx if x.kind == THREAD else r
            e = e + ((src // x.stride) % x.extent) * inner
            inner *= x.extent
        out.append(e)
    return out


__all__ = ["Factor", "Fragment", "elementwise", "mma_accumulator", "wgmma_accumulator",
           "wgmma_operand_a", "check_ownership", "owners", "check_replicas_written", "replicated", "is_replicated",
           "THREAD", "REG"]
