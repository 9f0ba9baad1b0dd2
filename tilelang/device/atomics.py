"""The CUDA device operations of atomics and reducers, each with its declared effect.

Atomics are calls of the ``tl::atomic_*`` templates of ``src/tl_templates/cuda/atomic.h``:
a relaxed device-scope operation with fences for the requested memory order (the numbers of
``cuda::memory_order``, passed as the template argument).  ``all_reduce_array`` is the
``T.finalize_reducer`` combine of ``reduce.h``.
"""

from __future__ import annotations

from tvm import tirx

from .effects import Access, Effect, Memory, Sync, call, register_device_op

# cuda::memory_order
MEMORY_ORDERS = {"relaxed": 0, "consume": 1, "acquire": 2, "release": 3, "acq_rel": 4,
                 "seq_cst": 5}


def _ordered(fn: str):
    """Emit ``fn<order>(args...)``: the last call argument is the order."""
    def emit(c):
        return tirx.call_extern(str(c.ty), f"{fn}<{int(c.args[-1].value)}>", *c.args[:-1])

    return emit


def _ordered_into(fn: str):
    """Emit ``tl::store_to(prev, fn<order>(args...))``: the arguments are (addr, operands...,
    prev address, order)."""
    def emit(c):
        dtype = _pointee(c.args[-2])
        value = tirx.call_extern(dtype, f"{fn}<{int(c.args[-1].value)}>", *c.args[:-2])
        return tirx.call_extern("void", "tl::store_to", c.args[-2], value)

    return emit


def _pointee(addr) -> str:
    """The dtype of the element ``address_of(x[...])`` points to."""
    load = addr.args[0]
    return str(getattr(load, "dtype", None) or load.ty)


_RMW = Effect(accesses=(Access((0,), None), Access((0,), None, write=True)))
# the same, storing the old value through the address at argument 2 (a per-thread variable,
# or the shared slot that passes a block-level result on)
_RMW_INTO = Effect(accesses=(Access((0,), None), Access((0,), None, write=True),
                             Access((2,), None, write=True)))

RMW_INTO = {
    kind: register_device_op(
        f"tl.device.atomic_{kind}_into", _RMW_INTO, _ordered_into(f"tl::atomic_{kind}"),
        f"atomic {kind} on an element; stores the old value through a pointer")
    for kind in ("add", "max", "min")
}

RMW = {
    kind: register_device_op(
        f"tl.device.atomic_{kind}", _RMW, _ordered(f"tl::atomic_{kind}"),
        f"atomic {kind} on an element of global or shared memory; returns the old value")
    for kind in ("add", "max", "min")
}

ADD_VEC = {
    lanes: register_device_op(
        f"tl.device.atomic_addx{lanes}", _RMW, _ordered(f"tl::atomic_addx{lanes}"),
        f"atomic add of {lanes} consecutive elements (packed where the hardware has it)")
    for lanes in (2, 4)
}

LOAD = register_device_op(
    "tl.device.atomic_load",
    Effect(accesses=(Access((0,), None), Access((1,), Memory.REGISTER, write=True))),
    _ordered_into("tl::atomic_load"),
    "atomic load of an element with a memory order, stored through a pointer")

STORE = register_device_op(
    "tl.device.atomic_store", Effect(accesses=(Access((0,), None, write=True),)),
    _ordered("tl::atomic_store"), "atomic store of an element with a memory order")


def rmw(kind: str, order: int, addr, value, dtype: str, prev_addr=None) -> tirx.Call:
    """``kind`` (add, max, min) of ``value`` into ``*addr``; the old value is stored through
    ``prev_addr`` when given."""
    if prev_addr is None:
        return call(RMW[kind], addr, value, order, dtype=dtype)
    return call(RMW_INTO[kind], addr, value, prev_addr, order, dtype="void")


def add_vec(order: int, addr, values: list) -> tirx.Call:
    return call(ADD_VEC[len(values)], addr, *values, order, dtype="void")


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
