"""``T.gemm``: ``C += op(A) @ op(B)`` on tiles, accumulated in C's dtype.

A is ``(M, K)`` (``(K, M)`` with ``transpose_A``), B is ``(K, N)`` (``(N, K)`` with
``transpose_B``), C is a ``(M, N)`` fragment.  Products are formed after converting A and B
elements to C's dtype (fp16/bf16 inputs accumulate in fp32).  ``clear_accum`` zeroes C first.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from enum import IntEnum
from typing import Any, ClassVar

from tvm import tirx

from ..device import sm80 as device
from ..device import wgmma
from ..errors import LoweringError, TileOpError
from ..layout.fragment import REG, THREAD, Factor, Fragment, mma_accumulator
from . import loops
from . import region as R
from .base import LayoutContext, LowerContext, TileOp, register

FRAGMENT, SHARED = "local.fragment", ("shared", "shared.dyn")


class GemmWarpPolicy(IntEnum):
    """How the warps of a block split the ``(M, N)`` output tile."""

    Square = 0
    FullRow = 1
    FullCol = 2


@register
class Gemm(TileOp):
    name = "tl.gemm"
    printer = "gemm"
    fields = ("A", "B", "C", "transpose_A", "transpose_B", "policy", "clear_accum", "k_pack",
              "wg_wait", "wgmma_only", "plan")
    writes = ("C",)
    # ``plan``: how the gemm runs on CUDA (``encode_plan``), recorded by LayoutInference;
    # ``wgmma_only``: T.wgmma_gemm, which has no mma.sync fallback
    defaults = {"plan": "", "wgmma_only": False}

    def mnk(self) -> tuple:
        a, b = _matrix(self.A), _matrix(self.B)
        m, k = (a[1], a[0]) if self.transpose_A else (a[0], a[1])
        n = b[0] if self.transpose_B else b[1]
        return m, n, k

    def infer_layout(self, ctx: LayoutContext) -> "Gemm":
        """Plan the gemm once: wgmma where :func:`wgmma_plan` finds one (its shared operands
        then take the plan's GMMA swizzles), else mma.sync over the :func:`warp_grid` (shared
        operands swizzled).  The accumulator (and a register A operand) take the plan's
        layouts; the plan is recorded in the op, where the lowering reads it."""
        from ..layout import codec

        why: list = []
        plan = wgmma_plan(self, ctx.target, ctx.num_threads, ctx.config, why)
        shared = [R.buffer_of(x) for x in (self.A, self.B) if R.scope_of(x) in SHARED]
        taken = [b.name for b in shared
                 if b.__chandle__() in getattr(ctx, "mma_sync_tiles", ())]
        if plan is not None and taken:  # the kernel's gemms share tiles with mma.sync ones
            why.append(f"its shared operand {taken[0]} not also read by an mma.sync gemm")
            plan = None
        if plan is None and bool(self.wgmma_only):
            raise LoweringError(
                f"T.wgmma_gemm: {R.describe(self.A)} x {R.describe(self.B)} cannot run as wgmma "
                f"here: it needs {why[-1] if why else 'a shape, dtype and layout wgmma can do'} "
                "(T.gemm would fall back to mma.sync)")
        m, n, k = (R.as_int(x) for x in self.mnk())
        C, A = R.buffer_of(self.C), R.buffer_of(self.A)
        obstacle = mma_sync_obstacle(self) if plan is None else None
        if obstacle is not None:
            return self._infer_simt(ctx, obstacle)
        if plan is not None:
            ctx.demand(C, plan.accumulator(m, n), f"T.gemm (wgmma) accumulator {C.name}")
            if A.scope() == FRAGMENT:
                ctx.demand(A, plan.register_a(m, k), f"T.gemm (wgmma) register operand {A.name}")
            for role, x in (("A", self.A), ("B", self.B)):
                if R.scope_of(x) in SHARED:
                    ctx.gmma_operand(R.buffer_of(x), codec.encode(plan.shared_layout(role, x)))
            return self.replace(plan=encode_plan(plan))
        wm, wn = warp_grid(self.policy, m, n, max(1, ctx.num_threads // 32))
        if C.scope() == FRAGMENT:
            ctx.demand(C, mma_accumulator(m, n, wm, wn), f"T.gemm accumulator {C.name}")
        if A.scope() == FRAGMENT:
            ctx.demand(A, operand_layout(m, k, wm, wn, A.dtype),
                       f"T.gemm register operand {A.name}")
        for x in (self.A, self.B):
            if R.scope_of(x) in SHARED:
                ctx.swizzle_operand(R.buffer_of(x))
        return self.replace(plan=encode_plan(MmaPlan(wm, wn)))

    def _infer_simt(self, ctx: LayoutContext, obstacle: str) -> "Gemm":
        """The CUDA-core plan: each thread accumulates the elements of C it holds over K from
        shared A and B, for gemms no tensor-core instruction takes."""
        log.debug("T.gemm runs on CUDA cores (no mma.sync: %s)", obstacle)
        for name, x in (("A", self.A), ("B", self.B)):
            if R.scope_of(x) == FRAGMENT:
                raise LoweringError(
                    f"T.gemm: {R.describe(x)} ({name}) is a fragment, but the gemm runs on CUDA "
                    f"cores ({obstacle}), which read A and B from shared memory")
        C = R.buffer_of(self.C)
        if C.scope() != FRAGMENT or not whole_matrix(self.C):
            raise LoweringError(f"T.gemm on CUDA needs the whole accumulator {C.name} in a "
                                "fragment")
        # no demand on C: its threads compute the elements they hold in whatever layout C
        # takes (another gemm's accumulator layout, or the element-wise default)
        return self.replace(plan=encode_plan(SimtPlan(max(1, ctx.num_threads // 32))))


def mma_sync_obstacle(op: Gemm) -> str | None:
    """Why ``op`` cannot run as mma.sync (``tl::gemm_ss`` / ``gemm_rs``): element types it has
    no instruction for, or a shared operand that is a slice of a larger tile (the template
    addresses whole tiles); ``None`` when it can."""
    A, B, C = (R.buffer_of(x) for x in (op.A, op.B, op.C))
    if (A.dtype, C.dtype) not in _SUPPORTED or A.dtype != B.dtype:
        return f"no mma.sync for A {A.dtype}, B {B.dtype} -> C {C.dtype}"
    for x in (op.A, op.B):
        if R.scope_of(x) in SHARED and not _whole_tile(x):
            return f"the operand {R.describe(x)} is a slice of a larger shared tile"
    return None


def partitions(policy: int, m: int, n: int, units: int, m_unit: int,
               n_unit: int) -> list[tuple[int, int]]:
    """The ``(units_m, units_n)`` grids of ``units`` (warps or warpgroups) that split an
    ``m x n`` tile into blocks of a multiple of ``m_unit`` rows and ``n_unit`` columns, best
    first for ``policy``: ``FullRow`` puts as many units along M as fit (the rest along N),
    ``FullCol`` as many along N, ``Square`` makes the blocks closest to square."""
    grids = [(u, units // u) for u in range(units, 0, -1) if units % u == 0]
    fits = [(wm, wn) for wm, wn in grids if m % (m_unit * wm) == 0 and n % (n_unit * wn) == 0]
    if policy == GemmWarpPolicy.FullRow:
        return sorted(fits, key=lambda g: -g[0])
    if policy == GemmWarpPolicy.FullCol:
        return sorted(fits, key=lambda g: -g[1])
    return sorted(fits, key=lambda g: (abs(m / g[0] - n / g[1]), -g[0]))


def warp_grid(policy: int, m: int, n: int, num_warps: int, op: str = "T.gemm") -> tuple[int, int]:
    """The warps_m x warps_n grid a gemm of an m x n tile uses (mma.sync: each warp a multiple
    of 16 rows and 8 columns), chosen by :func:`partitions`."""
    grids = partitions(policy, m, n, num_warps, 16, 8)
    if not grids:
        raise LoweringError(
            f"{op}: No valid warp partition: a {m}x{n} tile cannot be split over {num_warps} "
            f"warps with policy "
            f"{GemmWarpPolicy(policy).name} (each warp needs a multiple of 16 rows and 8 "
            f"columns, so M must be a multiple of 16 and N of 8, and M / 16 x N / 8 at least "
            f"{num_warps}); use a larger tile or fewer threads")
    return grids[0]


@dataclass(frozen=True)
class MmaPlan:
    """How a gemm runs as mma.sync (``tl::gemm_ss`` / ``gemm_rs``): over a ``warps_m x
    warps_n`` grid of warps, each owning a block of C."""

    kind: ClassVar[str] = "mma"
    warps_m: int
    warps_n: int

    @property
    def warps(self) -> int:
        return self.warps_m * self.warps_n


def operand_layout(m: int, k: int, warps_m: int, warps_n: int,
                   dtype: str = "float16") -> Fragment:
    """A register A operand of mma.sync, replicated over the warps_n column warps of the gemm.
    Rows are the accumulator's (warps_m warps of m16 blocks; lane l holds rows l/4 and l/4 + 8).
    Columns: 16-bit, the accumulator layout's (lane holds 2(l%4), 2(l%4)+1 of each k8 block);
    tf32, the m16n8k8 A fragment's (l%4 and l%4 + 4 of each k8 step); int8, the m16n8k32
    one's (4(l%4) .. +3 and 16 + 4(l%4) .. +3 of each k32 step, a 32-bit word each)."""
    eb = loops.elem_bytes(dtype)
    if k % (32 // eb):
        raise LoweringError(f"T.gemm: K = {k} must be a multiple of {32 // eb} for a {dtype} "
                            "register A operand on CUDA")
    base = mma_accumulator(m, k, warps_m, 1, name="mma_a")
    if eb in (1, 4):
        warps = [x for x in base.dims[0] if x.kind == THREAD and x.stride >= 32]
        mi, lanes = m // warps_m // 16, Factor(1, 4, THREAD, 1)
        if eb == 4:  # registers as the accumulator's: column pair digit above the lanes
            rows = base.dims[0]
            cols = [Factor(1, k // 8, REG, 4), Factor(1, 2, REG, 1), lanes]
        else:  # registers: 4 bytes of a word, row half, column half, k32 step, m16 block
            rows = warps + [Factor(0, mi, REG, 16 * (k // 32)), Factor(0, 2, REG, 4),
                            Factor(0, 8, THREAD, 4)]
            cols = [Factor(1, k // 32, REG, 16), Factor(1, 2, REG, 8), lanes,
                    Factor(1, 4, REG, 1)]
        base = Fragment.from_factors([m, k], [[x for x in fs if x.extent > 1]
                                              for fs in (rows, cols)], name="mma_a")
    if warps_n == 1:
        return base
    dims = [[Factor(x.dim, x.extent, x.kind,
                    x.stride * warps_n if x.kind == THREAD and x.stride >= 32 else x.stride)
             for x in fs] for fs in base.dims]
    return Fragment.from_factors([m, k], dims, [Factor(-1, warps_n, THREAD, 32)], name="mma_a")


def _matrix(region) -> list:
    """The two trailing non-unit extents of a gemm operand (leading unit dims allowed)."""
    ext = R.extents(region)
    sq = R.squeeze(ext)
    if len(ext) >= 2 and len(sq) <= 2:
        return list(ext[-2:])
    return sq


def _matrix_dims(region) -> list[int]:
    """Buffer dims that carry the operand's two matrix axes."""
    n = len(region.region)
    return [n - 2, n - 1]


def gemm(
    A: Any,
    B: Any,
    C: Any,
    transpose_A: bool = False,
    transpose_B: bool = False,
    policy: GemmWarpPolicy = GemmWarpPolicy.Square,
    clear_accum: bool = False,
    k_pack: int = 1,
    wg_wait: int = 0,
    mbar: Any = None,
):
    """``C += A @ B`` (with optional transposes) for A, B in shared memory or fragments and C
    a fragment; ``policy`` chooses the warp layout on GPUs, ``clear_accum`` zeroes C first,
    ``k_pack`` and ``wg_wait`` tune the Hopper path (K packing, WGMMA groups left in flight;
    -1: no wait at all, later uses or ``T.wait_wgmma`` wait).  ``mbar`` (an mbarrier the gemm
    arrives on when done, sm_100) is refused."""
    from .hints import refuse

    if isinstance(wg_wait, bool) or not isinstance(wg_wait, int) or wg_wait < -1:
        raise TileOpError(f"T.gemm: wg_wait is the number of wgmma groups left in flight "
                          f"(an int >= 0, or -1 for no wait), got {wg_wait!r}")

    refuse("T.gemm", "mbar", mbar, "the gemm completes before the next statement; "
           "no barrier is arrived on")
    a = R.region_of(A, "T.gemm", "A")
    b = R.region_of(B, "T.gemm", "B")
    c = R.region_of(C, "T.gemm", "C")
    for role, reg in (("A", a), ("B", b), ("C", c)):
        if len(_matrix(reg)) != 2 or len(reg.region) < 2:
            raise TileOpError(
                f"T.gemm: {role} = {R.describe(reg)} must be a 2-D tile, got shape "
                f"{R.fmt_shape(R.extents(reg))}"
            )
    if R.scope_of(c) not in ("local.fragment", "local"):
        raise TileOpError(
            f"T.gemm: accumulator C = {R.describe(c)} must be a fragment (T.alloc_fragment), "
            f"not a {R.scope_of(c)!r} buffer"
        )
    ad, bd = R.buffer_of(a).dtype, R.buffer_of(b).dtype
    if ad != bd:
        raise TileOpError(f"T.gemm: A = {R.describe(a)} is {ad} but B = {R.describe(b)} is {bd}; "
                          "the operands must have one dtype")
    op = Gemm(
        A=a, B=b, C=c,
        transpose_A=bool(transpose_A), transpose_B=bool(transpose_B),
        policy=int(GemmWarpPolicy(policy)), clear_accum=bool(clear_accum),
        k_pack=int(k_pack), wg_wait=int(wg_wait),
    )
    m, n, k = op.mnk()
    a_s, b_s, c_s = (R.fmt_shape(R.extents(x)) for x in (a, b, c))
    cm, cn = _matrix(c)
    kb = _matrix(b)[1] if transpose_B else _matrix(b)[0]
    what = f"A = {R.describe(a)} {a_s}{' (transposed)' if transpose_A else ''}, " \
           f"B = {R.describe(b)} {b_s}{' (transposed)' if transpose_B else ''}, " \
           f"C = {R.describe(c)} {c_s}"
    if not R.same_extent(k, kb):
        raise TileOpError(f"T.gemm: K differs between A ({k}) and B ({kb}): {what}")
    if not (R.same_extent(m, cm) and R.same_extent(n, cn)):
        raise TileOpError(f"T.gemm: C must be (M, N) = ({m}, {n}): {what}")
    return op.to_call()


def wgmma_gemm(A: Any, B: Any, C: Any, transpose_A: bool = False, transpose_B: bool = False,
               policy: GemmWarpPolicy = GemmWarpPolicy.Square, clear_accum: bool = False,
               k_pack: int = 1):
    """``T.gemm`` as wgmma only (sm_90a; anything else is a ``LoweringError``) that issues its
    wgmmas and does not wait: ``T.wait_wgmma(n)``, or the compiler before any use of the
    results, waits."""
    call = gemm(A, B, C, transpose_A, transpose_B, policy, clear_accum, k_pack, wg_wait=-1)
    return Gemm.from_call(call).replace(wgmma_only=True).to_call()


def _operand(region, transpose: bool, row, col) -> list:
    """Buffer indices of logical element (row, col) of a gemm operand."""
    idx = [r.min for r in region.region]
    d0, d1 = _matrix_dims(region)
    if transpose:
        row, col = col, row
    idx[d0] = idx[d0] + row
    idx[d1] = idx[d1] + col
    return idx


def _product(op: Gemm, i, k, j):
    """``op(A)[i, k] * op(B)[k, j]`` in C's dtype."""
    acc = R.buffer_of(op.C).dtype
    return loops.cast(tirx.BufferLoad(R.buffer_of(op.A), _operand(op.A, op.transpose_A, i, k)),
                      acc) * \
        loops.cast(tirx.BufferLoad(R.buffer_of(op.B), _operand(op.B, op.transpose_B, k, j)), acc)


def _gemm_cpu(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """Reference loops in i, k, j order (contiguous inner loop for the CPU)."""
    m, n, k = op.mnk()
    C = R.buffer_of(op.C)
    acc = C.dtype

    def c_idx(i, j):
        return _operand(op.C, False, i, j)

    def update(iv):
        i, kk, j = iv
        return tirx.BufferStore(C, tirx.BufferLoad(C, c_idx(i, j)) + _product(op, i, kk, j),
                                c_idx(i, j))

    body = loops.loop_nest([m, k, n], update, kind=loops.SERIAL, prefix="g")
    if op.clear_accum:
        zero = loops.loop_nest(
            [m, n], lambda iv: tirx.BufferStore(C, tirx.const(0, acc), c_idx(*iv)),
            kind=loops.SERIAL, prefix="z")
        body = tirx.SeqStmt([zero, body])
    return body


_CTYPE = {"float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float", "int8": "int8_t",
          "int32": "int"}
_SUPPORTED = {("float16", "float32"), ("float16", "float16"), ("bfloat16", "float32"),
              ("float32", "float32"), ("int8", "int32")}


def _whole_tile(region) -> bool:
    """Whether ``region`` is a whole 2-D tile (or one stage of a stacked tile)."""
    buf = R.buffer_of(region)
    ext = R.extents(region)
    lead, tail = ext[:-2], ext[-2:]
    return not (any(R.as_int(e) != 1 for e in lead) or not R.same_shape(tail, buf.shape[-2:])
                or any(R.as_int(r.min) != 0 for r in region.region[-2:]))


def _tile_ptr(region):
    """Address of the first element of a whole tile (or of one stage of a stacked tile)."""
    if not _whole_tile(region):
        raise LoweringError(f"T.gemm on CUDA needs whole tiles, got the slice {R.describe(region)}")
    buf = R.buffer_of(region)
    return tirx.address_of(tirx.BufferLoad(buf, [r.min for r in region.region]))


def _gemm_simt(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """Each thread accumulates its elements of C over K (the :class:`SimtPlan`): a
    ``T.Parallel`` nest over C partitioned by C's layout, K serial inside."""
    m, n, k = op.mnk()
    C = R.buffer_of(op.C)
    acc = C.dtype

    def body(iv):
        i, j = iv
        c = _operand(op.C, False, i, j)
        kv = tirx.Var("gk", loops.index_dtype(k))
        update = tirx.For(kv, tirx.const(0, str(kv.ty)), k, tirx.ForKind.SERIAL,
                          tirx.BufferStore(C, tirx.BufferLoad(C, c) + _product(op, i, kv, j), c))
        if not op.clear_accum:
            return update
        return tirx.SeqStmt([tirx.BufferStore(C, tirx.const(0, acc), c), update])

    nest = loops.loop_nest([m, n], body, kind=loops.PARALLEL, prefix="g")
    return loops.with_layout(nest, ctx.layout(C))


def _planned_simt(op: Gemm, ctx: LowerContext) -> bool:
    return isinstance(recorded_plan(op, ctx), SimtPlan)


def _swizzled(buf, ctx: LowerContext) -> bool:
    """Whether PlanSharedMemory lays the tile out swizzled (the template must agree)."""
    from ..layout.swizzle import can_swizzle

    return buf.__chandle__() in ctx.swizzled and can_swizzle(int(buf.shape[-1]), buf.dtype)


def _gemm_sm80(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """The device gemm ``gemm_ss`` (A, B in shared memory) or ``gemm_rs`` (A in registers):
    ldmatrix + mma.sync over the warp grid of the plan, on the warps of the op's thread
    group."""
    plan = recorded_plan(op, ctx)
    A, B, C = (R.buffer_of(x) for x in (op.A, op.B, op.C))
    m, n, k = (R.as_int(x) for x in op.mnk())
    # element types mma.sync lacks take the SimtPlan (mma_sync_obstacle), not this lowering
    if R.scope_of(op.B) not in ("shared", "shared.dyn"):
        raise LoweringError(f"T.gemm on CUDA needs B ({B.name}) in shared memory")
    if A.scope() not in ("shared", "shared.dyn", "local.fragment"):
        raise LoweringError(f"T.gemm on CUDA needs A ({A.name}) in shared memory or a fragment, "
                            f"not {A.scope()!r}")
    if C.scope() != "local.fragment":
        raise LoweringError(f"T.gemm on CUDA needs the accumulator C ({C.name}) in a fragment")
    wm, wn = plan.warps_m, plan.warps_n
    step = 32 // loops.elem_bytes(A.dtype)
    if k % step:
        raise LoweringError(f"T.gemm: K = {k} must be a multiple of {step} for {A.dtype} on CUDA")
    c_ptr = tirx.address_of(tirx.BufferLoad(C, [0] * len(C.shape)))
    b_row = int(B.shape[-1])
    b_swz = "true" if _swizzled(B, ctx) else "false"
    tb = "true" if op.transpose_B else "false"
    if A.scope() == "local.fragment":
        if op.transpose_A:
            raise LoweringError("T.gemm: a register A operand cannot be transposed")
        targs = (f"{m}, {n}, {k}, {wm}, {wn}, {tb}, {b_row}, {b_swz}, "
                 f"{_CTYPE[A.dtype]}, {_CTYPE[C.dtype]}")
        a_ptr = tirx.address_of(tirx.BufferLoad(A, [0] * len(A.shape)))
    else:
        a_row = int(A.shape[-1])
        a_swz = "true" if _swizzled(A, ctx) else "false"
        ta = "true" if op.transpose_A else "false"
        targs = (f"{m}, {n}, {k}, {wm}, {wn}, {ta}, {tb}, {a_row}, {b_row}, {a_swz}, "
                 f"{b_swz}, {_CTYPE[A.dtype]}, {_CTYPE[C.dtype]}")
        a_ptr = _tile_ptr(op.A)
    if ctx.group.offset:
        targs += f", {ctx.group.offset}"
    call = tirx.Evaluate(device.gemm(targs, a_ptr, _tile_ptr(op.B), c_ptr,
                                     a_in_registers=A.scope() == "local.fragment"))
    if not op.clear_accum:
        return call
    from .fill import Fill

    zero = Fill(dst=op.C, value=tirx.const(0, C.dtype)).lower(ctx)
    return tirx.SeqStmt([zero, call])


# ------------------------------------------------------------------------------------------
# Hopper: wgmma.mma_async
# ------------------------------------------------------------------------------------------
log = logging.getLogger("tilelang")

WARP_GROUP = 128
_WGMMA_TYPES = {("float16", "float32"), ("bfloat16", "float32"), ("float8_e4m3fn", "float32"),
                ("float8_e4m3", "float32"), ("float8_e5m2", "float32"), ("float32", "float32")}


@dataclass(frozen=True)
class WgmmaPlan:
    """How a gemm runs as wgmma: ``wg_m x wg_n`` warpgroups each own an ``m_wg x n_wg`` block of
    C, issued as m64 x ``n_inst`` x ``k_step`` instructions; the shared operands are stored in
    the GMMA swizzles ``a_swizzle`` / ``b_swizzle`` (bytes; 0 for a register A)."""

    kind: ClassVar[str] = "wgmma"
    wg_m: int
    wg_n: int
    m_wg: int
    n_wg: int
    n_inst: int
    k_step: int
    a_swizzle: int
    b_swizzle: int
    mnemonic: str

    @property
    def warps(self) -> int:
        return self.wg_m * self.wg_n * WARP_GROUP // 32

    def accumulator(self, m: int, n: int):
        from ..layout.fragment import wgmma_accumulator

        return wgmma_accumulator(m, n, self.wg_m, self.wg_n)

    def register_a(self, m: int, k: int):
        from ..layout.fragment import wgmma_operand_a

        return wgmma_operand_a(m, k, self.wg_m, self.wg_n)

    def shared_layout(self, role: str, region):
        from ..layout.swizzle import make_gmma_swizzled_layout

        buf = R.buffer_of(region)
        return make_gmma_swizzled_layout(buf, swizzle_bytes=self.a_swizzle if role == "A"
                                         else self.b_swizzle)


@dataclass(frozen=True)
class SimtPlan:
    """How a gemm runs on CUDA cores: every thread of the ``warps`` warps accumulates the
    elements of C it holds (in C's layout, whatever fixed it) with scalar multiply-adds over K."""

    kind: ClassVar[str] = "simt"
    warps: int


_PLANS = {cls.kind: cls for cls in (MmaPlan, WgmmaPlan, SimtPlan)}


def encode_plan(plan: "MmaPlan | WgmmaPlan | SimtPlan") -> str:
    """The plan as text (``"mma:warps_m=2,warps_n=2"``), stored in the gemm's IR."""
    return f"{plan.kind}:" + ",".join(f"{k}={v}" for k, v in asdict(plan).items())


def decode_plan(text: str) -> "MmaPlan | WgmmaPlan | SimtPlan":
    """The plan :func:`encode_plan` wrote."""
    kind, _, rest = text.partition(":")
    cls = _PLANS[kind]
    kv = dict(item.split("=", 1) for item in rest.split(","))
    return cls(**{f.name: int(kv[f.name]) if f.type in (int, "int") else kv[f.name]
                  for f in dataclass_fields(cls)})


def recorded_plan(op: Gemm, ctx: LowerContext) -> "MmaPlan | WgmmaPlan":
    """The plan LayoutInference recorded in ``op``, which the fragment layouts follow; it must
    be for the warps the op runs on."""
    if not op.plan:
        raise LoweringError("T.gemm on CUDA has no plan: LayoutInference records it (with the "
                            "accumulator's layout); run it before LowerTileOps")
    plan = decode_plan(op.plan)
    warps = max(1, ctx.num_threads // 32)
    if plan.warps != warps:
        raise LoweringError(
            f"T.gemm runs on {ctx.group} ({warps} warps), but its layouts were inferred for "
            f"{plan.warps} warps; LayoutInference plans each gemm for the thread group of the "
            "code it is in (run it again after moving the gemm)")
    return plan


def _is_sm90a(target) -> bool:
    return target is not None and str(target.kind.name) == "cuda" and \
        str(target.attrs.get("arch", "")).startswith("sm_90a")


def whole_matrix(region) -> bool:
    """Whether ``region`` covers its buffer's last two dimensions whole."""
    buf = R.buffer_of(region)
    return all(R.as_int(r.min) == 0 for r in region.region[-2:]) and \
        R.same_shape(R.extents(region)[-2:], buf.shape[-2:])


def _fits(what: str, ok: bool, why: list) -> bool:
    if not ok:
        why.append(what)
    return ok


def wgmma_plan(op: Gemm, target, num_threads: int, config: dict | None = None,
                why: list | None = None):
    """The wgmma plan of ``op`` on ``target``, or ``None`` when the gemm takes the sm80 path
    (not sm_90a, ``tl.disable_wgmma``, or a shape/dtype/layout wgmma cannot do, logged at debug
    level; also tf32 operands that are not K-major).  fp8 operands that are not K-major raise
    ``LoweringError`` (mma.sync has no fp8 either).  Layout
    inference calls it once and records the plan in the op for the lowering.  The reason for
    ``None`` is appended to ``why`` when given."""
    from ..layout.swizzle import GMMA_SWIZZLES
    from ..pass_config_keys import PassConfigKey

    why = [] if why is None else why
    if not _is_sm90a(target) or (config or {}).get(PassConfigKey.TL_DISABLE_WGMMA.value):
        why.append("sm_90a without tl.disable_wgmma")
        return None
    A, B, C = (R.buffer_of(x) for x in (op.A, op.B, op.C))
    mnk = [R.as_int(x) for x in op.mnk()]
    a_regs = R.scope_of(op.A) == "local.fragment"
    ok = (_fits(f"dtypes {A.dtype} -> {C.dtype}", (A.dtype, C.dtype) in _WGMMA_TYPES
                and A.dtype == B.dtype, why)
          and _fits("static M, N, K", None not in mnk, why)
          and _fits(f"{num_threads} threads (a multiple of 128)",
                    num_threads % WARP_GROUP == 0, why)
          and _fits("B in shared memory", R.scope_of(op.B) in ("shared", "shared.dyn"), why)
          and _fits("A in shared memory or a 16-bit fragment",
                    R.scope_of(op.A) in ("shared", "shared.dyn")
                    or (a_regs and loops.elem_bytes(A.dtype) == 2 and not op.transpose_A), why))
    if not ok:
        log.debug("T.gemm keeps mma.sync on sm_90a: it needs %s", why[-1])
        return None
    m, n, k = mnk
    eb = loops.elem_bytes(A.dtype)
    if eb == 4 and (op.transpose_A or not op.transpose_B):
        why.append("K-major operands (tf32)")
        log.debug("T.gemm keeps mma.sync on sm_90a: tf32 wgmma needs K-major operands")
        return None
    if eb != 2 and (op.transpose_A or not op.transpose_B):
        raise LoweringError(
            f"T.gemm: wgmma on {A.dtype} needs K-major operands (A as (M, K), B as (N, K): "
            f"transpose_A=False, transpose_B=True), got transpose_A={bool(op.transpose_A)}, "
            f"transpose_B={bool(op.transpose_B)}; store the operands K-major")
    k_step = 32 // eb
    num_wg = num_threads // WARP_GROUP
    # Square keeps the most warpgroups along M (blocks of 64 rows are the instruction's)
    policy = GemmWarpPolicy.FullRow if op.policy == GemmWarpPolicy.Square else op.policy
    cands = partitions(policy, m, n, num_wg, 64, 8)
    if not (_fits(f"M = {m} a multiple of 64 per warpgroup and N = {n} of 8", bool(cands), why)
            and _fits(f"K = {k} a multiple of {k_step}", k % k_step == 0, why)):
        log.debug("T.gemm keeps mma.sync on sm_90a: it needs %s", why[-1])
        return None
    wm, wn = cands[0]
    m_wg, n_wg = m // wm, n // wn
    n_inst = max(d for d in range(8, min(n_wg, 256) + 1, 8) if n_wg % d == 0)

    def swizzle(region, k_major: bool, mn_step: int):
        """The widest GMMA swizzle of a shared operand: rows of whole panels, and for an
        MN-major operand every instruction's MN offset on a panel boundary.  A slice of the
        tile (``Q_s[:, 0:512]``) is read in place: its first row must start an 8-row group
        and its first column be where an instruction may start (a K offset of whole
        instructions, or an MN offset on a panel boundary)."""
        buf = R.buffer_of(region)
        r0, c0 = (R.as_int(r.min) for r in region.region[-2:])
        if int(buf.shape[-2]) % 8 or r0 is None or c0 is None or r0 % 8:
            return None
        row = int(buf.shape[-1]) * eb
        for sb in GMMA_SWIZZLES:
            if row % sb == 0 and (c0 % k_step == 0 if k_major else (c0 * eb) % sb == 0) \
                    and (k_major or (mn_step * eb) % sb == 0):
                return sb
        return None

    a_sw = 0 if a_regs else swizzle(op.A, not op.transpose_A, 64)
    b_sw = swizzle(op.B, bool(op.transpose_B), n_inst)
    if a_sw is None or b_sw is None:
        why.append(f"shared operand {R.describe(op.A if a_sw is None else op.B)} in whole "
                   "32-byte panels of a multiple of 8 rows, its slice starting on an 8-row "
                   "group and an instruction's column")
        log.debug("T.gemm keeps mma.sync on sm_90a: a shared operand's rows are not whole "
                  "32-byte panels of a multiple of 8 rows, or its slice starts off an 8-row "
                  "group or an instruction's column")
        return None
    ptx = wgmma.PTX_TYPE[A.dtype]
    mnem = f"wgmma.mma_async.sync.aligned.m64n{n_inst}k{k_step}.f32.{ptx}.{ptx}"
    return WgmmaPlan(wm, wn, m_wg, n_wg, n_inst, k_step, a_sw, b_sw, mnem)


def _addr(region, row, col):
    """Address of logical element (row, col) of a tile region (leading indices kept)."""
    buf = R.buffer_of(region)
    idx = [r.min for r in region.region]
    idx[-2] = idx[-2] + row
    idx[-1] = idx[-1] + col
    return tirx.address_of(tirx.BufferLoad(buf, idx))


def _desc(region, plan_swizzle: int, mn0, k0, k_major: bool):
    """Descriptor of the operand block starting at MN offset ``mn0``, K offset ``k0``."""
    buf = R.buffer_of(region)
    eb = loops.elem_bytes(buf.dtype)
    sbo = 8 * plan_swizzle  # between 8-row groups: 8 rows of one panel
    if k_major:  # stored (MN, K): rows are MN, the K slice of an instruction is in one panel
        return wgmma.desc(_addr(region, mn0, k0), 16, sbo, plan_swizzle)
    # stored (K, MN): rows are K; MN panels lie rows x swizzle bytes apart
    lbo = int(buf.shape[-2]) * plan_swizzle
    assert lbo % 16 == 0 and eb
    return wgmma.desc(_addr(region, k0, mn0), lbo, sbo, plan_swizzle)


def _operand_steps(region, ctx: LowerContext, k_major: bool, mn_bases: list,
                   steps: list) -> list | None:
    """How far, in 16-byte units, each instruction's operand block ``(mn, k)`` of ``steps``
    lies from the block at ``(0, 0)``, when that distance is the same from every warp group's
    base ``mn_bases`` in the tile's GMMA layout (then one descriptor per operand, advanced by
    constants, names every block); ``None`` when it is not, or the layout is not known here."""
    from ..layout import codec
    from ..layout.swizzle import SwizzledLayout

    buf = R.buffer_of(region)
    text = ctx.tile_annotations.get(buf.__chandle__(), {}).get("tl.shared_layout")
    lay = codec.decode(text) if text is not None else None
    r0, c0 = (R.as_int(r.min) for r in region.region[-2:])
    if not isinstance(lay, SwizzledLayout) or r0 is None or c0 is None:
        return None
    eb = loops.elem_bytes(buf.dtype)
    lead = [0] * (len(lay.shape) - 2)  # a stage ring's tile has the layout of one stage

    def at(mn, k):
        return lay.offset(*lead, *((r0 + mn, c0 + k) if k_major else (r0 + k, c0 + mn)))

    out = []
    for mn, k in steps:
        dist = {(at(b + mn, k) - at(b, 0)) * eb for b in mn_bases}
        if len(dist) != 1 or min(dist) < 0 or min(dist) % 16:
            return None
        out.append(min(dist) // 16)
    return out


def _gemm_wgmma(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """Each warpgroup issues the m64 x n_inst x k_step wgmmas of its block of C (descriptors
    from the GMMA-swizzled shared tiles, or A from registers), fenced, committed as one group
    and waited on (``wg_wait`` groups may stay in flight; InjectAsyncWaits waits before a
    later use)."""
    plan = recorded_plan(op, ctx)
    A, C = R.buffer_of(op.A), R.buffer_of(op.C)
    m, n, k = (R.as_int(x) for x in op.mnk())
    a_regs = A.scope() == "local.fragment"
    if C.scope() != "local.fragment":
        raise LoweringError(f"T.gemm on CUDA needs the accumulator C ({C.name}) in a fragment")
    if not whole_matrix(op.C):
        raise LoweringError(f"T.gemm on CUDA needs the whole accumulator {C.name}, not a slice")
    rank = ctx.thread_var if ctx.thread_var is not None else tirx.const(0, "int32")
    wg = tirx.floordiv(rank, WARP_GROUP)
    wgm, wgn = tirx.floordiv(wg, plan.wg_n), tirx.floormod(wg, plan.wg_n)
    c_lead = [0] * (len(C.shape) - 2)
    n_regs = plan.m_wg * plan.n_wg // WARP_GROUP  # accumulator registers per thread

    def c_addr(row, col):
        return tirx.address_of(tirx.BufferLoad(C, c_lead + [row, col]))

    # wgmma reads the shared operands through the async proxy: a fence orders this thread's
    # generic-proxy writes of them before (InjectThreadSync puts the group's barrier after it;
    # ElideProxyFences drops it when only TMA writes them)
    shared = [R.buffer_of(x) for x in ((op.B,) if a_regs else (op.A, op.B))]
    stmts = [tirx.Evaluate(device.fence_proxy_async(
        *[tirx.address_of(tirx.BufferLoad(b, [0] * len(b.shape))) for b in shared]))]
    stmts.append(tirx.Evaluate(wgmma.fence_operands(c_addr(0, 0), n_regs)))
    stmts.append(tirx.Evaluate(wgmma.fence()))
    insts = [(mi, q, kk) for mi in range(plan.m_wg // 64)
             for q in range(plan.n_wg // plan.n_inst) for kk in range(k // plan.k_step)]

    def operand(region, swizzle, k_major, mn_base, wg_count, block, step):
        """Each instruction's descriptor: the warp group's first block's descriptor plus a
        constant (the start-address field, in 16-byte units; shared addresses stay below
        2**18, so it does not carry) when every block lies a fixed distance from it (see
        :func:`_operand_steps`); else each block's own descriptor."""
        offsets = [step(*i) for i in insts]
        steps = _operand_steps(region, ctx, k_major, [w * block for w in range(wg_count)],
                               offsets)
        if steps is None:
            return [_desc(region, swizzle, mn_base * block + mn, k, k_major)
                    for mn, k in offsets]
        # each instruction names its tile (the declared read InjectAsyncWaits and
        # InjectThreadSync follow); ShareDescriptors later computes the first one once
        base = lambda: _desc(region, swizzle, mn_base * block, 0, k_major)  # noqa: E731
        return [base() + tirx.const(d, "uint64") if d else base() for d in steps]

    b_descs = operand(op.B, plan.b_swizzle, bool(op.transpose_B), wgn, plan.wg_n, plan.n_wg,
                      lambda mi, q, kk: (q * plan.n_inst, kk * plan.k_step))
    a_descs = None if a_regs else operand(
        op.A, plan.a_swizzle, not op.transpose_A, wgm, plan.wg_m, plan.m_wg,
        lambda mi, q, kk: (mi * 64, kk * plan.k_step))
    for j, (mi, q, kk) in enumerate(insts):
        a = tirx.address_of(tirx.BufferLoad(A, [0] * (len(A.shape) - 2) + [
            mi * 64, kk * plan.k_step])) if a_regs else a_descs[j]
        b = b_descs[j]
        scale_d = tirx.const(not (op.clear_accum and kk == 0), "bool")
        stmts.append(tirx.Evaluate(wgmma.mma(
            plan.mnemonic, plan.n_inst, int(bool(op.transpose_A)),
            int(not op.transpose_B), c_addr(mi * 64, q * plan.n_inst), a, b, scale_d,
            a_regs)))
    stmts.append(tirx.Evaluate(wgmma.commit()))
    if int(op.wg_wait) >= 0:  # -1: no wait here (InjectAsyncWaits waits before any use)
        stmts.append(tirx.Evaluate(wgmma.wait(min(int(op.wg_wait), 7))))
    if int(op.wg_wait) == 0:
        stmts.append(tirx.Evaluate(wgmma.fence_operands(c_addr(0, 0), n_regs)))
    return tirx.SeqStmt(stmts)


def _planned_wgmma(op: Gemm, ctx: LowerContext) -> bool:
    """LayoutInference planned the gemm as wgmma (sm_90a, see :func:`wgmma_plan`)."""
    return isinstance(recorded_plan(op, ctx), WgmmaPlan)


# The gemm's lowerings, tried in order.
Gemm.lowering("cpu")(_gemm_cpu)
Gemm.lowering("cuda", when=_planned_wgmma)(_gemm_wgmma)
Gemm.lowering("cuda", when=_planned_simt)(_gemm_simt)
Gemm.lowering("cuda")(_gemm_sm80)
