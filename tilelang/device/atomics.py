"""The CUDA device operations of atomics and reducers, each with its declared effect.

Atomics are calls of the helpers of ``src/tl_templates/cuda/atomic.h``, named as in the public
TileLang headers (``AtomicAdd``, ``AtomicAddRet``, ``AtomicAddx2``, ``AtomicOr`` ...): a
relaxed device-scope operation with fences for the requested memory order, passed as the last
argument (a number of ``cuda::memory_order``).  ``all_reduce_array`` is the
``T.finalize_reducer`` combine of ``reduce.h``.
"""

from __future__ import annotations

import tvm
from tvm import tirx

from .effects import Access, Effect, Memory, Sync, call, register_device_op

# cuda::memory_order
MEMORY_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "release": 3, "acq_rel": 4,
                 "seq_cst": 5}
# read-modify-write kinds and the names of their helpers
RMW_HELPERS = {"add": "AtomicAdd", "max": "AtomicMax", "min": "AtomicMin", "or": "AtomicOr",
               "and": "AtomicAnd", "xor": "AtomicXor"}


def _helper(fn: str):
    """Emit ``fn(args...)``; the last argument is the memory order."""
    def emit(c):
        return tirx.call_extern(str(c.ty), fn, *c.args)

    return emit


def _helper_into(fn: str, wrap: str | None = None, store: str = "tl::store_to"):
    """Emit ``store(prev, [wrap(]fn(args..., order)[)])``: the call arguments are (addr,
    operands..., prev address, order)."""
    def emit(c):
        value = tirx.call_extern(_pointee(c.args[-2]), fn, *c.args[:-2], c.args[-1])
        if wrap is not None:
            value = tirx.call_extern(_pointee(c.args[-2]), wrap, value)
        return tirx.call_extern("void", store, c.args[-2], value)

    return emit


def _pointee(addr) -> str:
    """The dtype of the element ``address_of(x[...])`` points to."""
    load = addr.args[0]
    return str(getattr(load, "dtype", None) or load.ty)


_RMW = Effect(accesses=(Access((0,), None), Access((0,), None, write=True)), atomic=True)
# the same, storing the old value through the address at argument 2 (a per-thread variable,
# or the shared slot that passes a block-level result on)
_RMW_INTO = Effect(accesses=(Access((0,), None), Access((0,), None, write=True),
                             Access((2,), None, write=True)), atomic=True)

RMW_INTO = {
    kind: register_device_op(
        f"tl.device.atomic_{kind}_into", _RMW_INTO, _helper_into(f"{fn}Ret"),
        f"atomic {kind} on an element; stores the old value through a pointer")
    for kind, fn in RMW_HELPERS.items()
}

RMW = {
    kind: register_device_op(
        f"tl.device.atomic_{kind}", _RMW, _helper(fn),
        f"atomic {kind} on an element of global or shared memory")
    for kind, fn in RMW_HELPERS.items()
}

ADD_VEC = {
    lanes: register_device_op(
        f"tl.device.atomic_addx{lanes}", _RMW, _helper(f"AtomicAddx{lanes}"),
        f"atomic add of {lanes} consecutive elements (packed where the hardware has it)")
    for lanes in (2, 4)
}


def _vec_into_emit(lanes: int):
    """``tl::store_bits(prev, AtomicAddxNRet(...))``; a 16-bit vector is first made TVM's
    ``uint1`` / ``uint2`` with ``tl::to_uint1`` / ``to_uint2``, as TVM types it."""
    def emit(c):
        bits = tvm.DataType(_pointee(c.args[-2])).bits
        wrap = None if bits == 32 else f"tl::to_uint{lanes // 2}"
        return _helper_into(f"AtomicAddx{lanes}Ret", wrap, "tl::store_bits")(c)

    return emit


# the vector adds that store the old values through the address at the argument before the
# order (``lanes`` per-thread elements)
ADD_VEC_INTO = {
    lanes: register_device_op(
        f"tl.device.atomic_addx{lanes}_into",
        Effect(accesses=(Access((0,), None), Access((0,), None, write=True),
                         Access((lanes + 1,), None, write=True)), atomic=True),
        _vec_into_emit(lanes),
        f"atomic add of {lanes} consecutive elements; stores their old values through a "
        "pointer")
    for lanes in (2, 4)
}

LOAD = register_device_op(
    "tl.device.atomic_load",
    Effect(accesses=(Access((0,), None), Access((1,), Memory.REGISTER, write=True)),
           atomic=True),
    _helper_into("AtomicLoad"),
    "atomic load of an element with a memory order, stored through a pointer")

STORE = register_device_op(
    "tl.device.atomic_store", Effect(accesses=(Access((0,), None, write=True),), atomic=True),
    _helper("AtomicStore"), "atomic store of an element with a memory order")


def rmw(kind: str, order: int, addr, value, dtype: str, prev_addr=None) -> tirx.Call:
    """``kind`` (add, max, min, or, and, xor) of ``value`` into ``*addr``; the old value is
    stored through ``prev_addr`` when given."""
    if prev_addr is None:
        return call(RMW[kind], addr, value, order, dtype=dtype)
    return call(RMW_INTO[kind], addr, value, prev_addr, order, dtype="void")


def add_vec(order: int, addr, values: list, prev_addr=None) -> tirx.Call:
    """Add ``values`` to the ``len(values)`` elements from ``*addr``; their old values are
    stored from ``prev_addr`` on when given."""
    if prev_addr is None:
        return call(ADD_VEC[len(values)], addr, *values, order, dtype="void")
    return call(ADD_VEC_INTO[len(values)], addr, *values, prev_addr, order, dtype="void")


def load(order: int, addr, result_addr) -> tirx.Call:
    """Load ``*addr`` atomically into ``*result_addr``."""
    return call(LOAD, addr, result_addr, order, dtype="void")


def store(order: int, addr, value, dtype: str) -> tirx.Call:
    return call(STORE, addr, value, order, dtype=dtype)


def _emit_all_reduce_array(c):
    targs = str(c.args[0].value)
    return tirx.call_extern("void", f"tl::all_reduce_array<{targs}>", *c.args[1:])


ALL_REDUCE_ARRAY = register_device_op(
    "tl.device.all_reduce_array",
    Effect(accesses=(Access((1,), Memory.REGISTER), Access((1,), Memory.REGISTER, write=True),
                     Access((2,), None), Access((2,), None, write=True)),
           sync=Sync(at_entry=True)),
    _emit_all_reduce_array,
    "combine every thread's copy of a reducer array over a thread group (shuffles, then "
    "shared scratch between barriers of the group); contains barriers of the group")


def all_reduce_array(template_args: str, vals_ptr, scratch_ptr) -> tirx.Call:
    return call(ALL_REDUCE_ARRAY, template_args, vals_ptr, scratch_ptr, dtype="void")
