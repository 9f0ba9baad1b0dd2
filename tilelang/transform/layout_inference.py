"""``LayoutInference``: choose how every fragment is spread over the block's threads.

Expects: a CUDA-targeted PrimFunc with tile-op calls and ``T.Parallel`` nests.
Guarantees: every ``local.fragment`` allocation carries ``tl.layout`` (a ``Fragment``), every
outermost ``T.Parallel`` loop carries ``tl.loop_layout``, and shared tiles that feed a gemm
carry ``tl.swizzle`` (a shared tile given a layout by ``T.annotate_layout`` carries it as
``tl.shared_layout``, applied when shared memory is planned).  Order: layouts fixed by ``T.annotate_layout`` and by gemm (its
accumulator and register operand), then propagation through fragment copies, reductions and
``T.Parallel`` bodies until nothing changes; a fragment still free gets a default element-wise
layout and propagation resumes.  Two different demands on one fragment raise a
``LoweringError`` naming both sources and both layouts.  The CPU needs no layouts: it returns
the function unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
import tvm_ffi
from tvm import tirx

from ..engine.target import is_cpu
from ..errors import LoweringError
from ..layout import codec
from ..layout.swizzle import SwizzledLayout
from ..layout.fragment import REG, Factor, Fragment, elementwise, mma_accumulator
from ..ops import decode
from ..ops import region as R
from ..ops.annotate import AnnotateLayout
from ..ops.copy import Copy
from ..ops.gemm import Gemm, operand_layout, warp_grid
from ..ops.reduce import Reduce
from ..ir_utils import StmtMutator, peel_parallel
from .passes import at_source, function_pass, target_of

FRAGMENT = "local.fragment"
SHARED = ("shared", "shared.dyn")


def key(obj) -> int:
    return obj.__chandle__()


def is_fragment(buf) -> bool:
    return buf.scope() == FRAGMENT


def num_threads_of(body) -> int:
    n = 1
    for a in _attrs(body):
        if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx"):
            n *= int(a.value)
    return n


def _attrs(node):
    out = []
    tvm_ffi.structural_walk(node, (tirx.AttrStmt, out.append))
    return out


@dataclass
class _Loop:
    node: tirx.For
    vars: list
    extents: list
    accesses: list  # (buffer, indices)
    inner: set = field(default_factory=set)  # handles of the loop vars nested in the body


@dataclass
class _State:
    layouts: dict = field(default_factory=dict)  # buffer key -> Fragment
    origin: dict = field(default_factory=dict)
    buffers: dict = field(default_factory=dict)  # key -> buffer
    loops: dict = field(default_factory=dict)  # loop key -> Fragment
    shared_layouts: dict = field(default_factory=dict)  # shared buffer key -> encoded Layout
    changed: bool = False

    def set(self, buf, layout: Fragment, why: str):
        k = key(buf)
        old = self.layouts.get(k)
        if old is not None:
            if not old.same_as(layout):
                raise LoweringError(
                    f"layout conflict on fragment {buf.name}: {self.origin[k]} gives {old}, "
                    f"but {why} needs {layout}")
            return
        if list(layout.shape) != [int(s) for s in buf.shape]:
            raise LoweringError(f"layout of shape {layout.shape} from {why} does not fit "
                                f"fragment {buf.name} of shape {R.fmt_shape(buf.shape)}")
        self.layouts[k] = layout
        self.origin[k] = why
        self.buffers[k] = buf
        self.changed = True

    def get(self, buf):
        return self.layouts.get(key(buf))


def fragment_accesses(body) -> list:
    out = []

    def on_load(x):
        if is_fragment(x.source):
            out.append((x.source, list(x.indices)))

    def on_store(s):
        if is_fragment(s.buffer):
            out.append((s.buffer, list(s.indices)))

    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])
    return out


def _as_loop_vars(indices, loop_vars) -> list[int] | None:
    """Positions of the loop vars the indices are (in order), or None."""
    pos = []
    keys = [key(v) for v in loop_vars]
    for e in indices:
        if not isinstance(e, tvm.ir.Var) or key(e) not in keys:
            return None
        pos.append(keys.index(key(e)))
    if pos != sorted(pos) or len(set(pos)) != len(pos):
        return None
    return pos


class _Collect:
    def __init__(self):
        self.ops: list = []
        self.loops: list[_Loop] = []
        self.fragments: list = []
        self.shared: list = []

    def run(self, body):
        self._visit(body, in_parallel=False)

    def _visit(self, s, in_parallel):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                self._visit(x, in_parallel)
        elif isinstance(s, tirx.For):
            if s.kind == tirx.ForKind.PARALLEL and not in_parallel:
                vars_, exts, body = peel_parallel(s)
                inner = set()
                tvm_ffi.structural_walk(body, (tirx.For, lambda f: inner.add(key(f.loop_var))))
                self.loops.append(_Loop(s, vars_, exts, fragment_accesses(body), inner))
                return
            self._visit(s.body, in_parallel)
        elif isinstance(s, (tirx.AttrStmt, tirx.While)):
            self._visit(s.body, in_parallel)
        elif isinstance(s, tirx.IfThenElse):
            self._visit(s.then_case, in_parallel)
            if s.else_case is not None:
                self._visit(s.else_case, in_parallel)
        elif isinstance(s, tirx.AllocBuffer):
            if is_fragment(s.buffer):
                if not all(isinstance(x, tirx.IntImm) for x in s.buffer.shape):
                    raise LoweringError(f"fragment {s.buffer.name} has shape "
                                        f"{list(s.buffer.shape)}; on CUDA fragments need "
                                        "constant shapes")
                self.fragments.append(s.buffer)
            elif s.buffer.scope() in SHARED:
                self.shared.append(s.buffer)
        elif isinstance(s, tirx.Evaluate):
            op = decode(s)
            if op is not None:
                self.ops.append(op)


def infer(body, num_threads: int, target=None) -> tuple[_State, set, _Collect]:
    col = _Collect()
    col.run(body)
    st = _State()
    swizzle: set = set()
    shared_layouts: dict = {}  # shared buffer key -> encoded user layout
    gemm_operands: dict = {}
    gmma_layouts: dict = {}  # wgmma operand key -> (encoded GMMA layout, buffer)
    num_warps = max(1, num_threads // 32)
    # 1. fixed demands
    for op in col.ops:
        with at_source(op.span):  # errors name the op's line
            if isinstance(op, AnnotateLayout):
                lay = codec.decode(op.layout)
                if is_fragment(op.buffer):
                    if not isinstance(lay, Fragment) or lay.dims is None:
                        raise LoweringError(f"T.annotate_layout: fragment {op.buffer.name} needs a "
                                            "Fragment built from factors on CUDA")
                    st.set(op.buffer, lay, "T.annotate_layout")
                elif op.buffer.scope() in SHARED:
                    shared_layouts[key(op.buffer)] = op.layout
            elif isinstance(op, Gemm) and _wgmma_demands(op, st, target, num_threads,
                                                         gmma_layouts):
                pass
            elif isinstance(op, Gemm):
                m, n, k = (R.as_int(x) for x in op.mnk())
                C = R.buffer_of(op.C)
                wm, wn = warp_grid(op.policy, m, n, num_warps)
                if is_fragment(C):
                    st.set(C, mma_accumulator(m, n, wm, wn), f"T.gemm accumulator {C.name}")
                A = R.buffer_of(op.A)
                if is_fragment(A):
                    st.set(A, operand_layout(m, k, wm, wn), f"T.gemm register operand {A.name}")
                for x in (op.A, op.B):
                    if R.scope_of(x) in SHARED:
                        swizzle.add(key(R.buffer_of(x)))
                        gemm_operands[key(R.buffer_of(x))] = R.buffer_of(x)
    for k, (text, buf) in gmma_layouts.items():
        if k in shared_layouts and shared_layouts[k] != text and \
                not isinstance(codec.decode(shared_layouts[k]), SwizzledLayout):
            raise LoweringError(
                f"T.annotate_layout: {buf.name} is a wgmma operand, stored in the GMMA swizzle "
                f"{codec.decode(text)}; got {codec.decode(shared_layouts[k])}")
        if k in gemm_operands:
            raise LoweringError(f"{buf.name} feeds both a wgmma and an mma.sync gemm, whose "
                                "shared layouts differ")
        shared_layouts[k] = text
    for k, text in shared_layouts.items():
        lay = codec.decode(text)
        if _is_sm80_swizzle(lay) and k not in gmma_layouts:
            swizzle.add(k)
            continue
        if k in gemm_operands:
            raise LoweringError(
                f"T.annotate_layout: {gemm_operands[k].name} feeds a T.gemm, whose shared "
                f"operands use the swizzled layout (make_swizzled_layout); got {lay}")
        swizzle.discard(k)
    st.shared_layouts = {k: v for k, v in shared_layouts.items()
                         if k in gmma_layouts or not _is_sm80_swizzle(codec.decode(v))}
    # 2. propagation, defaults for what stays free
    pending = [b for b in col.fragments]
    while True:
        st.changed = True
        while st.changed:
            st.changed = False
            _propagate(col, st)
        free = [b for b in pending if st.get(b) is None]
        if not free:
            break
        # the largest free fragment first: reductions and projections derive the smaller ones
        b = max(free, key=lambda x: (_size(x), -pending.index(x)))
        vec = max(1, 16 // max(1, tvm.DataType(b.dtype).bits // 8))
        st.set(b, elementwise([int(s) for s in b.shape], num_threads, vec=vec), "default")
    for lp in col.loops:
        if key(lp.node.loop_var) not in st.loops:
            st.loops[key(lp.node.loop_var)] = elementwise(
                [R.as_int(e) for e in lp.extents], num_threads, vec=1)
    return st, swizzle, col


def _wgmma_demands(op: Gemm, st: _State, target, num_threads: int, gmma: dict) -> bool:
    """A gemm that runs as wgmma fixes its accumulator (and register A) layout and its shared
    operands' GMMA swizzles; False when it takes the mma.sync path."""
    from ..ops.gemm import wgmma_plan
    from . import pass_config

    plan = wgmma_plan(op, target, num_threads, pass_config.current())
    if plan is None:
        return False
    m, n, k = (R.as_int(x) for x in op.mnk())
    C, A = R.buffer_of(op.C), R.buffer_of(op.A)
    st.set(C, plan.accumulator(m, n), f"T.gemm (wgmma) accumulator {C.name}")
    if is_fragment(A):
        st.set(A, plan.register_a(m, k), f"T.gemm (wgmma) register operand {A.name}")
    for role, x in (("A", op.A), ("B", op.B)):
        if R.scope_of(x) in SHARED:
            text = codec.encode(plan.shared_layout(role, x))
            old = gmma.get(key(R.buffer_of(x)))
            if old is not None and old[0] != text:
                raise LoweringError(f"{R.buffer_of(x).name} is an operand of two wgmma gemms "
                                    "that need different swizzles")
            gmma[key(R.buffer_of(x))] = (text, R.buffer_of(x))
    return True


def _is_sm80_swizzle(lay) -> bool:
    """The conflict-free swizzle of the sm80 path (one panel per row), which the mma.sync gemm
    template reads; other swizzles (paneled GMMA layouts) are applied as index maps."""
    return isinstance(lay, SwizzledLayout) and not lay.paneled


def _size(buf) -> int:
    n = 1
    for s in buf.shape:
        n *= int(s)
    return n


def _loop_layout_from(lay: Fragment, idx, lp: _Loop) -> Fragment | None:
    """The loop's layout read off a fragment access: indices that are the loop vars in order,
    with dims indexed by serial loops inside the body (or constants) reduced away."""
    keys = [key(v) for v in lp.vars]
    pos, drop = [], []
    for d, e in enumerate(idx):
        if isinstance(e, tvm.ir.Var) and key(e) in keys:
            pos.append(keys.index(key(e)))
        elif (isinstance(e, tvm.ir.Var) and key(e) in lp.inner) or isinstance(e, tirx.IntImm):
            drop.append(d)
        else:
            return None
    if pos != list(range(len(lp.vars))):
        return None
    for d in reversed(drop):
        lay = lay.reduce(d)
    return lay


def _buffer_layout_from(loop_layout: Fragment, idx, lp: _Loop, buf) -> Fragment | None:
    """A fragment's layout read off a loop access: its indices are loop vars in order, or 0 at
    the fragment's unit dims (``s[i, 0]`` of a ``(bM, 1)`` tile); the loop dims it does not use
    are reduced away (their threads become replicas)."""
    shape = [int(s) for s in buf.shape]
    var_idx = [e for e in idx if not isinstance(e, tirx.IntImm)]
    units = [d for d, e in enumerate(idx) if isinstance(e, tirx.IntImm)]
    if any(int(idx[d]) != 0 or shape[d] != 1 for d in units):
        return None
    pos = _as_loop_vars(var_idx, lp.vars)
    if pos is None:
        return None
    lay = loop_layout
    for d in reversed(range(len(lp.vars))):
        if d not in pos:
            lay = lay.reduce(d)
    if units:
        lay = _insert_unit_dims(lay, units)
    return lay if list(lay.shape) == shape else None


def _insert_unit_dims(lay: Fragment, units: list[int]) -> Fragment:
    """``lay`` with unit dims inserted so that they stand at positions ``units``."""
    dims, shape, src = [], [], iter(range(len(lay.shape)))
    for k in range(len(lay.shape) + len(units)):
        if k in units:
            dims.append([Factor(k, 1, REG, 1)])
            shape.append(1)
        else:
            d = next(src)
            dims.append([Factor(k, x.extent, x.kind, x.stride) for x in lay.dims[d]])
            shape.append(lay.shape[d])
    return Fragment.from_factors(shape, dims, lay.replicas, name=lay.name)


def _propagate(col: _Collect, st: _State) -> None:
    for op in col.ops:
        with at_source(op.span):  # errors name the op's line
            if isinstance(op, Copy):
                s, d = R.buffer_of(op.src), R.buffer_of(op.dst)
                if is_fragment(s) and is_fragment(d) and R.same_shape(s.shape, d.shape):
                    if st.get(s) is not None:
                        st.set(d, st.get(s), f"T.copy({s.name}, {d.name})")
                    elif st.get(d) is not None:
                        st.set(s, st.get(d), f"T.copy({s.name}, {d.name})")
            elif isinstance(op, Reduce):
                s, d = R.buffer_of(op.src), R.buffer_of(op.dst)
                if is_fragment(s) and is_fragment(d) and st.get(s) is not None:
                    keep = len(d.shape) == len(s.shape)
                    st.set(d, st.get(s).reduce(op.dim, keep_dim=keep),
                           f"T.reduce_{op.kind}({s.name}, {d.name})")
    for lp in col.loops:
        lk = key(lp.node.loop_var)
        extents = [R.as_int(e) for e in lp.extents]
        if lk not in st.loops:
            for buf, idx in lp.accesses:
                lay = st.get(buf)
                if lay is None:
                    continue
                derived = _loop_layout_from(lay, idx, lp)
                if derived is not None and list(derived.shape) == extents:
                    st.loops[lk] = derived
                    st.changed = True
                    break
        loop_layout = st.loops.get(lk)
        if loop_layout is None:
            continue
        for buf, idx in lp.accesses:
            if st.get(buf) is not None:
                continue
            lay = _buffer_layout_from(loop_layout, idx, lp, buf)
            if lay is not None:
                st.set(buf, lay, f"the T.Parallel loop over {extents}")


class _Annotate(StmtMutator):
    def __init__(self, st: _State, swizzle: set):
        self.st, self.swizzle = st, swizzle

    def visit_AllocBuffer(self, s):
        b = s.buffer
        lay = self.st.get(b) if is_fragment(b) else None
        ann = dict(s.annotations)
        if lay is not None:
            ann["tl.layout"] = codec.encode(lay)
        elif key(b) in self.swizzle:
            ann["tl.swizzle"] = 1
        elif key(b) in self.st.shared_layouts:
            ann["tl.shared_layout"] = self.st.shared_layouts[key(b)]
        else:
            return s
        return tirx.AllocBuffer(b, annotations=ann)

    def visit_For(self, s):
        lay = self.st.loops.get(key(s.loop_var))
        if lay is None or s.kind != tirx.ForKind.PARALLEL:
            return self.generic(s)
        ann = dict(s.annotations)
        ann["tl.loop_layout"] = codec.encode(lay)
        return tirx.For(s.loop_var, s.min, s.extent, s.kind, s.body, s.thread_binding, ann, s.step)


def _check_thread_dims(body) -> None:
    n = num_threads_of(body)
    if n > 1024:
        raise LoweringError(f"T.Kernel asks for {n} threads per block; CUDA allows at most 1024")
    for a in _attrs(body):
        if a.attr_key == "thread_extent" and a.node.thread_tag in ("threadIdx.y", "threadIdx.z") \
                and not (isinstance(a.value, tirx.IntImm) and int(a.value) == 1):
            raise LoweringError(
                f"the CUDA lowering maps tiles onto a 1-D block of threads; this kernel has "
                f"{a.node.thread_tag} = {a.value} (write threads=N instead of a tuple)")


@function_pass("tl.LayoutInference")
def LayoutInference(func: tirx.PrimFunc) -> tirx.PrimFunc:
    if is_cpu(target_of(func)):
        return func
    _check_thread_dims(func.body)
    st, swizzle, _ = infer(func.body, num_threads_of(func.body), target_of(func))
    return func.with_body(_Annotate(st, swizzle)(func.body))


def layout_of(alloc_or_for) -> Fragment | None:
    """The layout a LayoutInference annotation carries, if any."""
    ann = alloc_or_for.annotations
    for k in ("tl.layout", "tl.loop_layout"):
        if k in ann:
            return codec.decode(ann[k])
    return None


def shared_layout_of(alloc) -> "Layout | None":
    """The layout a shared tile's allocation is stored in after PlanSharedMemory: its
    ``tl.shared_layout`` (a wgmma operand's GMMA swizzle, or a ``T.annotate_layout``), the sm80
    swizzle for ``tl.swizzle``, else ``None`` (row-major).  ``swizzle_bytes`` on the result
    says which TMA/GMMA swizzle mode it equals (``None``: none can produce it)."""
    from ..layout.swizzle import can_swizzle, make_swizzled_layout

    ann = alloc.annotations
    if "tl.shared_layout" in ann:
        return codec.decode(ann["tl.shared_layout"])
    b = alloc.buffer
    if "tl.swizzle" in ann and can_swizzle(int(b.shape[-1]), b.dtype):
        return make_swizzled_layout(b)
    return None
