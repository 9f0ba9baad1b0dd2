"""``T.gemm``: ``C += op(A) @ op(B)`` on tiles, accumulated in C's dtype.

A is ``(M, K)`` (``(K, M)`` with ``transpose_A``), B is ``(K, N)`` (``(N, K)`` with
``transpose_B``), C is a ``(M, N)`` fragment.  Products are formed after converting A and B
elements to C's dtype (fp16/bf16 inputs accumulate in fp32).  ``clear_accum`` zeroes C first.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from tvm import tirx

from ..device import sm80 as device
from ..errors import LoweringError, TileOpError
from . import loops
from . import region as R
from .base import LowerContext, TileOp, register


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
              "wg_wait")

    def mnk(self) -> tuple:
        a, b = _matrix(self.A), _matrix(self.B)
        m, k = (a[1], a[0]) if self.transpose_A else (a[0], a[1])
        n = b[0] if self.transpose_B else b[1]
        return m, n, k


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
):
    """``C += A @ B`` (with optional transposes) for A, B in shared memory or fragments and C
    a fragment; ``policy`` chooses the warp layout on GPUs, ``clear_accum`` zeroes C first,
    ``k_pack`` and ``wg_wait`` tune the Hopper path (K packing, WGMMA groups left in flight)."""
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


def _operand(region, transpose: bool, row, col) -> list:
    """Buffer indices of logical element (row, col) of a gemm operand."""
    idx = [r.min for r in region.region]
    d0, d1 = _matrix_dims(region)
    if transpose:
        row, col = col, row
    idx[d0] = idx[d0] + row
    idx[d1] = idx[d1] + col
    return idx


@Gemm.lowering("cpu")
def _gemm_cpu(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """Reference loops in i, k, j order (contiguous inner loop for the CPU)."""
    m, n, k = op.mnk()
    A, B, C = (R.buffer_of(x) for x in (op.A, op.B, op.C))
    acc = C.dtype

    def c_idx(i, j):
        return _operand(op.C, False, i, j)

    def update(iv):
        i, kk, j = iv
        prod = loops.cast(tirx.BufferLoad(A, _operand(op.A, op.transpose_A, i, kk)), acc) * \
            loops.cast(tirx.BufferLoad(B, _operand(op.B, op.transpose_B, kk, j)), acc)
        return tirx.BufferStore(C, tirx.BufferLoad(C, c_idx(i, j)) + prod, c_idx(i, j))

    body = loops.loop_nest([m, k, n], update, kind=loops.SERIAL, prefix="g")
    if op.clear_accum:
        zero = loops.loop_nest(
            [m, n], lambda iv: tirx.BufferStore(C, tirx.const(0, acc), c_idx(*iv)),
            kind=loops.SERIAL, prefix="z")
        body = tirx.SeqStmt([zero, body])
    return body


_CTYPE = {"float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float", "int8": "int8_t",
          "int32": "int"}
_SUPPORTED = {("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"),
              ("int8", "int32")}


def _tile_ptr(region):
    """Address of the first element of a whole tile (or of one stage of a stacked tile)."""
    buf = R.buffer_of(region)
    ext = R.extents(region)
    lead, tail = ext[:-2], ext[-2:]
    if any(R.as_int(e) != 1 for e in lead) or not R.same_shape(tail, buf.shape[-2:]) or \
            any(R.as_int(r.min) != 0 for r in region.region[-2:]):
        raise LoweringError(f"T.gemm on CUDA needs whole tiles, got the slice {R.describe(region)}")
    return tirx.address_of(tirx.BufferLoad(buf, [r.min for r in region.region]))


def _swizzled(buf, ctx: LowerContext) -> bool:
    """Whether PlanSharedMemory lays the tile out swizzled (the template must agree)."""
    from ..layout.swizzle import can_swizzle

    return buf.__chandle__() in ctx.swizzled and can_swizzle(int(buf.shape[-1]), buf.dtype)


@Gemm.lowering("cuda")
def _gemm_cuda(op: Gemm, ctx: LowerContext) -> tirx.Stmt:
    """The device gemm ``gemm_ss`` (A, B in shared memory) or ``gemm_rs`` (A in registers):
    ldmatrix + mma.sync over the warp grid that ``LayoutInference`` chose for C, on the warps
    of the op's thread group."""
    from ..transform.layout_inference import warp_grid

    A, B, C = (R.buffer_of(x) for x in (op.A, op.B, op.C))
    m, n, k = (R.as_int(x) for x in op.mnk())
    if (A.dtype, C.dtype) not in _SUPPORTED or A.dtype != B.dtype:
        raise LoweringError(
            f"T.gemm on CUDA supports f16/bf16/tf32 -> f32 and int8 -> int32, got "
            f"A {A.dtype}, B {B.dtype}, C {C.dtype}")
    if R.scope_of(op.B) not in ("shared", "shared.dyn"):
        raise LoweringError(f"T.gemm on CUDA needs B ({B.name}) in shared memory")
    if A.scope() not in ("shared", "shared.dyn", "local.fragment"):
        raise LoweringError(f"T.gemm on CUDA needs A ({A.name}) in shared memory or a fragment, "
                            f"not {A.scope()!r}")
    if A.scope() == "local.fragment" and loops.elem_bytes(A.dtype) != 2:
        raise LoweringError(f"T.gemm: a register A operand ({A.name}) must be float16 or "
                            f"bfloat16 on CUDA, got {A.dtype}; stage it in shared memory")
    if C.scope() != "local.fragment":
        raise LoweringError(f"T.gemm on CUDA needs the accumulator C ({C.name}) in a fragment")
    wm, wn = warp_grid(op.policy, m, n, max(1, ctx.num_threads // 32))
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
