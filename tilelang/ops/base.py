"""What a tile operator is: a registered TIR op, a decoded argument record, and a table of
lowerings keyed by target family.

An operator module defines a subclass of :class:`TileOp` with ``name`` (``"tl.copy"``) and
``fields`` (the argument names, in IR order), decorates it with :func:`register`, and adds its
lowerings with ``@Op.lowering("cuda", when=predicate)``: one table per op of (target family,
predicate on the op and its :class:`LowerContext`, lowering), tried in order, the entry
without a predicate last (e.g. TMA before the sm80 copies).  ``LowerTileOps`` calls
:meth:`TileOp.lower`, which runs the first entry that applies.  An op whose
lowering needs fragment or shared-tile layouts states them in :meth:`TileOp.infer_layout`
(fixed demands) and :meth:`TileOp.propagate_layout` (layouts derived from known ones), which
``LayoutInference`` calls through a :class:`LayoutContext`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Protocol

import sys

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as _builder
from tvm.sym import Analyzer
from tvm.target import Target

from ..device.thread_group import ThreadGroup
from ..errors import LoweringError

TILE_OPS: dict[str, type["TileOp"]] = {}


@dataclass
class LowerContext:
    """What a lowering may know about where its op stands."""

    target: Target
    family: str  # "cpu" or "cuda"
    group: ThreadGroup = ThreadGroup(0, 1)  # the threads that run the op (the block, or T.ws)
    analyzer: Analyzer = field(default_factory=Analyzer)
    config: dict = field(default_factory=dict)
    tx: Any = None  # threadIdx.x of the enclosing kernel (the user's thread index)
    barriers: Any = None  # the kernel's named-barrier ids (device.thread_group.BarrierIds)
    layouts: dict = field(default_factory=dict)  # fragment buffer handle -> Fragment
    swizzled: set = field(default_factory=set)  # shared buffer handles laid out swizzled
    async_copy: bool = False  # inside a pipelined loop's producer statement
    tma_barrier: Any = None  # the mbarrier element a TMA producer of a pipeline completes on
    tma_multicast: tuple = ()  # the groups (rank masks) that producer multicasts to
    tile_annotations: dict = field(default_factory=dict)  # shared tile handle -> its annotations
    in_parallel: bool = False  # inside a T.Parallel loop: the op is per element
    kernel_addressed: frozenset = frozenset()  # tensor handles whose address the kernel computes
    # handles of the global tensors the kernel accesses other than as a T.copy destination
    kernel_touched: frozenset = frozenset()
    kernel_written: frozenset = frozenset()  # handles of the global tensors the kernel writes

    @property
    def num_threads(self) -> int:
        """Threads the op is distributed over: those of its thread group."""
        return self.group.count

    @property
    def thread_var(self):
        """The running thread's rank in the op's group (``threadIdx.x`` for the block)."""
        return None if self.tx is None else self.group.rank(self.tx)

    def layout(self, buf):
        return self.layouts.get(buf.__chandle__())


class LayoutContext(Protocol):
    """What layout inference offers an op's layout hooks: the kernel's target, threads and
    pass configuration, the fragment layouts known so far, and the demands an op may add.
    A demand that contradicts an earlier one raises ``LoweringError`` naming both."""

    target: Target | None
    num_threads: int  # threads of the op's thread group (the block, T.ws, a warp-group branch)
    config: dict  # the pass configuration in force (string keys)

    def layout(self, buf) -> Any:
        """The ``Fragment`` fixed for fragment ``buf`` so far, or ``None``."""

    def demand(self, buf, layout, why: str) -> None:
        """Fix fragment ``buf`` to ``layout``; ``why`` names the demand in errors."""

    def annotate_shared(self, buf, layout: str) -> None:
        """A user-given layout (encoded, ``tilelang.layout.codec``) of shared tile ``buf``."""

    def swizzle_operand(self, buf) -> None:
        """Shared tile ``buf`` is read by an mma.sync gemm: stored in the sm80 swizzle."""

    def gmma_operand(self, buf, layout: str) -> None:
        """Shared tile ``buf`` is a wgmma operand stored in the (encoded) GMMA ``layout``."""


class TileOp:
    """Base of the tile operators.  Instances hold the decoded arguments as attributes, and
    ``span``: where in the user's source the op was written (``None`` when unknown)."""

    name: ClassVar[str]
    printer: ClassVar[str]  # the name ``func.script()`` shows after ``T.``
    fields: ClassVar[tuple[str, ...]]
    # the fields whose buffers the op writes (a region, a tile or an element address);
    # ``None``: any buffer among its arguments may be written
    writes: ClassVar[tuple[str, ...] | None] = None
    # trailing fields a pass fills in later, and their value until then (left out of the call)
    defaults: ClassVar[dict[str, Any]] = {}
    _lowerings: ClassVar[list[tuple[str, Callable | None, Callable]]]

    def __init__(self, span: Any = None, **kw: Any):
        for f in self.fields:
            setattr(self, f, kw[f] if f in kw or f not in self.defaults else self.defaults[f])
        self.span = span

    def replace(self, **changes: Any) -> "TileOp":
        """A copy of the op (same span) with some fields changed."""
        kw = {f: getattr(self, f) for f in self.fields}
        kw.update(changes)
        return type(self)(span=self.span, **kw)

    # IR encoding -------------------------------------------------------------------------
    @classmethod
    def op(cls) -> tvm.ir.Op:
        return tvm.ir.Op.get(cls.name)

    def to_call(self) -> tvm.ir.Call:
        """The op as a TIR call.  The call keeps the op's span; TVMScript's parser gives the
        call built from the user's ``T.op(...)`` the span of that line."""
        n = len(self.fields)
        while n and self.fields[n - 1] in self.defaults and \
                getattr(self, self.fields[n - 1]) == self.defaults[self.fields[n - 1]]:
            n -= 1
        call = tvm.ir.Call(self.op(), [_encode(getattr(self, f)) for f in self.fields[:n]],
                           span=self.span, ret_ty="handle")
        user = _helper_caller()
        if user is None:
            return call
        # called from a plain Python helper inside a kernel body: the parser never sees this
        # call (the helper returns None), so the op is emitted here, at the helper's line
        _builder.evaluate(tvm.ir.Call(call.op, call.args, span=user, ret_ty="handle"))
        return None

    @classmethod
    def from_call(cls, call: tvm.ir.Call) -> "TileOp":
        return cls(span=call.span, **{f: _decode(a) for f, a in zip(cls.fields, call.args)})

    # layouts -----------------------------------------------------------------------------
    def infer_layout(self, ctx: LayoutContext) -> "TileOp | None":
        """State the layouts this op fixes (once, in program order).  Returns the op with the
        decisions its lowering reads recorded in it (written back into the IR), or ``None``
        to leave the op as it is.  Most ops demand nothing."""
        return None

    def propagate_layout(self, ctx: LayoutContext) -> None:
        """Derive layouts from those already known (repeated until nothing changes)."""

    # lowering ----------------------------------------------------------------------------
    @classmethod
    def lowering(cls, family: str, when: Callable[[Any, LowerContext], bool] | None = None
                 ) -> Callable:
        """Add ``fn(op, ctx) -> Stmt`` to the op's table: the lowering for targets of
        ``family`` when ``when(op, ctx)`` holds (always without ``when``: the family's last
        entry, so entries with a predicate come first)."""
        if any(f == family and w is None for f, w, _ in cls._lowerings):
            raise ValueError(f"{cls.name}: the {family} lowering without a predicate is "
                             "already registered; entries after it would never run")

        def deco(fn):
            cls._lowerings.append((family, when, fn))
            return fn

        return deco

    def lower(self, ctx: LowerContext) -> tirx.Stmt:
        for family, when, fn in self._lowerings:
            if family == ctx.family and (when is None or when(self, ctx)):
                return fn(self, ctx)
        raise LoweringError(f"T.{self.printer} has no lowering for target {ctx.target.kind.name}")


def register(cls: type[TileOp]) -> type[TileOp]:
    """Register the TIR op of ``cls`` and make it known to the passes."""
    tvm.ir.register_op_attr(cls.name, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
    tvm.ir.register_op_attr(cls.name, "TScriptPrinterName", cls.printer)
    cls._lowerings = []
    TILE_OPS[cls.name] = cls
    return cls


def decode(node: Any) -> TileOp | None:
    """The tile op an ``Evaluate`` or ``Call`` holds, or ``None``."""
    call = node.value if isinstance(node, tirx.Evaluate) else node
    if not isinstance(call, tvm.ir.Call) or not isinstance(call.op, tvm.ir.Op):
        return None
    cls = TILE_OPS.get(call.op.name)
    return cls.from_call(call) if cls is not None else None


def _encode(v: Any):
    if isinstance(v, bool):
        return tirx.IntImm("int32", int(v))
    if isinstance(v, int):
        return tirx.IntImm("int32", v)
    if isinstance(v, str):
        return tvm.ir.StringImm(v)
    if isinstance(v, float):
        return tirx.FloatImm("float32", v)
    return v


def _decode(a: Any):
    if isinstance(a, tvm.ir.StringImm):
        return str(a.value)
    if isinstance(a, tirx.IntImm) and str(a.ty) == "int32":
        return int(a.value)
    return a


_PACKAGE = __file__.rsplit("/ops/", 1)[0] + "/"  # tilelang/


def _helper_caller():
    """The span of the user's line when a tile op's entry point (``T.copy`` ...) is called
    inside a kernel body by a plain Python function (not by TVMScript's parser evaluating the
    body, a ``T.macro`` included), else ``None``: the first frame outside tilelang decides."""
    if not IRBuilder.is_in_scope():
        return None
    frame = sys._getframe(2)  # who asked for the call
    if not frame.f_code.co_filename.startswith(_PACKAGE):
        return None  # code building the call itself (it decides where the call goes)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame = frame.f_back
    if frame is None:
        return None
    name = frame.f_code.co_filename
    if name.startswith("<") or "/tvm/script/" in name:
        return None  # the parser's evaluator: it emits the call it gets back
    return tvm.ir.Span(tvm.ir.SourceName(name), frame.f_lineno, frame.f_lineno, 0, 0)
