"""The warp-level device operations: votes, shuffles, warp reductions, block votes and bit
searches, each a typed device op that emits the CUDA builtin of the same name.

Every op here needs the lanes of a warp (or the threads of a block) to run together, so none
has a CPU form: the CPU backend runs a block on one thread and rejects a kernel that uses one,
naming the op (:func:`tilelang.device.cpu_form.lower`).  ``__ffs`` is plain bit arithmetic and
has one there.
"""

from __future__ import annotations

from tvm import tirx

from .effects import Effect, call, register_device_op

#: the language name of each op, for messages
USER_NAMES: dict[str, str] = {}


def _op(name: str, user: str, emit, doc: str, effect: Effect = Effect()):
    USER_NAMES[f"tl.device.{name}"] = user
    return register_device_op(f"tl.device.{name}", effect, emit, doc)


def _builtin(fn: str, result: str | None = None):
    """Emit ``fn(args...)``; ``result``: the builtin's own return type when the op's differs
    (the op's value is then that result converted)."""
    def emit(c):
        ty = str(c.ty)
        out = tirx.call_extern(result or ty, fn, *c.args)
        return out if result is None or result == ty else tirx.Cast(ty, out)

    return emit


# votes over a warp ---------------------------------------------------------------------
ANY_SYNC = _op("any_sync", "T.any_sync", _builtin("__any_sync"),
               "__any_sync(mask, pred): non-zero when the predicate of any lane in mask is")
ALL_SYNC = _op("all_sync", "T.all_sync", _builtin("__all_sync"),
               "__all_sync(mask, pred): non-zero when the predicate of every lane in mask is")
BALLOT_SYNC = _op("ballot_sync", "T.ballot_sync", _builtin("__ballot_sync", "uint32"),
                  "__ballot_sync(mask, pred): bit i set when lane i's predicate is non-zero "
                  "(widened to uint64)")
ACTIVEMASK = _op("activemask", "T.activemask", _builtin("__activemask", "uint32"),
                 "__activemask(): the lanes of the warp executing it (widened to uint64)")
MATCH_ANY_SYNC = _op("match_any_sync", "T.match_any_sync", _builtin("__match_any_sync", "uint32"),
                     "__match_any_sync(mask, value): the lanes in mask holding this lane's value")
MATCH_ALL_SYNC = _op("match_all_sync", "T.match_all_sync", _builtin("__match_all_sync", "uint32"),
                     "__match_all_sync(mask, value, &pred): mask when all its lanes hold the "
                     "same value, else 0")
SYNC_WARP = _op("sync_warp", "T.sync_warp", _builtin("__syncwarp"),
                "__syncwarp(mask): the lanes in mask wait for each other (and order their "
                "memory accesses)")

# votes over the block (each is a __syncthreads of the whole block) ------------------------
SYNCTHREADS = {
    kind: _op(f"syncthreads_{kind}", f"T.syncthreads_{kind}", _builtin(f"__syncthreads_{kind}"),
              f"__syncthreads_{kind}(pred): a barrier of the block that also combines the "
              f"threads' predicates ({kind})")
    for kind in ("count", "and", "or")
}

# shuffles -------------------------------------------------------------------------------
SHUFFLE_MODES = {"idx": "__shfl_sync", "xor": "__shfl_xor_sync", "up": "__shfl_up_sync",
                 "down": "__shfl_down_sync"}
SHUFFLE = {
    mode: _op(f"shfl_{mode}", "T.shfl_sync" if mode == "idx" else f"T.shfl_{mode}",
              _builtin(fn), f"{fn}(mask, value, lane or delta, width)")
    for mode, fn in SHUFFLE_MODES.items()
}

# warp reductions ------------------------------------------------------------------------
REDUCE_OPS = {"sum": "tl::SumOp", "max": "tl::MaxOp", "min": "tl::MinOp",
              "bitand": "tl::BitAndOp", "bitor": "tl::BitOrOp"}


def _emit_warp_reduce(kind: str):
    def emit(c):
        return tirx.call_extern(str(c.ty), f"tl::all_reduce<{REDUCE_OPS[kind]}, 32, 1, 32>",
                                *c.args)

    return emit


WARP_REDUCE = {
    kind: _op(f"warp_reduce_{kind}", f"T.warp_reduce_{kind}", _emit_warp_reduce(kind),
              f"combine a value over the 32 lanes of the warp ({kind}, xor shuffles); every "
              f"lane gets the result")
    for kind in REDUCE_OPS
}

# bit searches ---------------------------------------------------------------------------


def _emit_ffs(c):
    (x,) = c.args
    if x.ty.dtype.bits == 64:
        return tirx.call_extern("int32", "__ffsll", tirx.Cast("int64", x))
    return tirx.call_extern("int32", "__ffs", tirx.Cast("int32", x))


FFS = _op("ffs", "T.__ffs", _emit_ffs,
          "__ffs / __ffsll: one plus the position of the lowest set bit, 0 for 0")
FNS = _op("fns", "T.__fns", _builtin("__fns"),
          "__fns(mask, base, offset): the position of the offset-th set bit of mask counted "
          "from bit base (0xFFFFFFFF when there is none)")


def warp_only(c) -> bool:
    """Whether ``c`` is a call of one of the ops here that needs a warp (all but ``__ffs``)."""
    return isinstance(getattr(c, "op", None), type(FFS.op)) and \
        c.op.name in USER_NAMES and c.op.name != FFS.name


def ffs_cpu_form(c):
    """``__ffs`` in plain arithmetic: ``popcount(x ^ (x - 1))`` counts the lowest set bit and
    the zeros below it."""
    (x,) = c.args
    ux = tirx.Cast("uint64" if x.ty.dtype.bits == 64 else "uint32", x)
    one = tirx.const(1, str(ux.ty))
    low = tirx.Cast("int32", tirx.popcount(tirx.bitwise_xor(ux, ux - one)))
    return tirx.Select(tirx.EQ(ux, tirx.const(0, str(ux.ty))), tirx.const(0, "int32"), low)


__all__ = ["USER_NAMES", "warp_only", "ffs_cpu_form", "call"]
