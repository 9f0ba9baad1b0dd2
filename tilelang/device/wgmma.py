"""The device operations of Hopper's warpgroup matrix multiply (``wgmma``), each with its
declared effect: the shared-memory matrix descriptor, ``wgmma.mma_async`` from shared memory
(``ss``) or with A in registers (``rs``), and the ``fence`` / ``commit_group`` /
``wait_group`` that order it.

Every instruction is emitted as TVM's PTX op (``T.ptx["wgmma..."]``); the accumulator (and the
register A operand) is passed as the address of the thread's first register of the
instruction, and the emitter expands it into the instruction's registers once fragments are
per-thread arrays.  ``src/tl_templates/cuda/gemm_sm90.h`` holds the two helpers that are not
instructions: the descriptor's bit packing and the operand fence that keeps the compiler from
moving accumulator reads above a ``wait_group``.

Descriptor (64 bits): start address >> 4 in bits 0-13, leading-dimension byte offset >> 4
in 16-29, stride-dimension byte offset >> 4 in 32-45, base offset 0 (tiles are aligned to
their swizzle's repeat), layout type in 62-63 (1: 128B, 2: 64B, 3: 32B swizzle).
"""

from __future__ import annotations

import tvm
from tvm import tirx
from tvm.script import tirx as _T

from .effects import Access, Effect, Mechanism, Memory, Proxy, call, register_device_op

S, R = Memory.SHARED, Memory.REGISTER
LAYOUT_TYPE = {128: 1, 64: 2, 32: 3}  # descriptor layout type of each swizzle mode
PTX_TYPE = {"float16": "f16", "bfloat16": "bf16", "float32": "tf32",
            "float8_e4m3fn": "e4m3", "float8_e4m3": "e4m3", "float8_e5m2": "e5m2"}


def _imm(e) -> int:
    return int(e.value)


def _registers(addr, count: int, dtype: str | None = None) -> list:
    """The ``count`` registers starting at ``address_of(local[i])``: loads of the per-thread
    array (as ``dtype`` when given, reinterpreting pairs of 16-bit values as one 32-bit)."""
    load = addr.args[0]
    buf, (base,) = load.source, list(load.indices)
    if dtype is None:
        return [tirx.BufferLoad(buf, [base + i]) for i in range(count)]
    lanes = 32 // tvm.DataType(buf.dtype).bits
    return [tirx.call_intrin(dtype, "tirx.reinterpret",
                             tirx.BufferLoad(buf, [tirx.Ramp(base + i * lanes, 1, lanes)]))
            for i in range(count)]


def _emit_mma(c):
    """args: mnemonic, n, trans_a, trans_b, acc address, a (a descriptor, or the address of
    the thread's A registers), b descriptor, scale_d."""
    name, n, ta, tb, acc, a, b, scale_d = c.args
    mnem = str(name.value)
    is_rs = isinstance(a, tvm.ir.Call) and isinstance(a.op, tvm.ir.Op) and \
        a.op.name == "tirx.address_of"
    a_args = _registers(a, 4, "uint32") if is_rs else [a]
    # only the 16-bit types take transpose immediates (the rs form has no trans-a)
    trans = [] if not any(t in mnem for t in (".f16.", ".bf16.")) else \
        ([_imm(tb)] if is_rs else [_imm(ta), _imm(tb)])
    return _T.ptx[mnem](*_registers(acc, _imm(n) // 2), *a_args, b, scale_d, 1, 1, *trans)


WGMMA_SS = register_device_op(
    "tl.device.wgmma_ss",
    Effect(accesses=(Access((5, 6), S), Access((4,), R), Access((4,), R, write=True)),
           proxy=Proxy.ASYNC, completes_on=Mechanism.WGMMA_GROUP),
    _emit_mma,
    "wgmma.mma_async with A and B in shared memory (matrix descriptors); the accumulator "
    "registers are final after a wgmma.wait_group that covers the group")

WGMMA_RS = register_device_op(
    "tl.device.wgmma_rs",
    Effect(accesses=(Access((5,), R), Access((6,), S), Access((4,), R),
                     Access((4,), R, write=True)),
           proxy=Proxy.ASYNC, completes_on=Mechanism.WGMMA_GROUP),
    _emit_mma,
    "wgmma.mma_async with A in registers (four 32-bit registers of the thread) and B in "
    "shared memory")


def mma(mnemonic: str, n: int, trans_a: int, trans_b: int, acc_addr, a, b_desc, scale_d,
        a_in_registers: bool) -> tirx.Call:
    """One ``wgmma.mma_async`` of shape m64nNk*: ``acc_addr`` is the address of the thread's
    first accumulator register of the instruction, ``a`` a descriptor or (``rs``) the address
    of the thread's first A register."""
    return call(WGMMA_RS if a_in_registers else WGMMA_SS, mnemonic, n, trans_a, trans_b,
                acc_addr, a, b_desc, scale_d)


def _desc_of(c):
    ptr, lbo, sbo, layout = c.args
    return tirx.call_extern("uint64", "tl::wgmma_desc", ptr, lbo, sbo, layout)


# The descriptor is address arithmetic, but it names the tile the wgmma taking it reads: its
# effect declares that read, so that the block's barrier comes between the threads' writes of
# the tile and the wgmma, and between the wgmma and later writes.
DESC = register_device_op(
    "tl.device.wgmma_desc", Effect(accesses=(Access((0,), S),)), _desc_of,
    "the 64-bit wgmma matrix descriptor of a shared tile at `ptr` (byte offsets LBO, SBO and "
    "the swizzle's layout type)")


def desc(ptr, lbo_bytes: int, sbo_bytes: int, swizzle_bytes: int) -> tirx.Call:
    return call(DESC, ptr, lbo_bytes, sbo_bytes, LAYOUT_TYPE[swizzle_bytes], dtype="uint64")


FENCE = register_device_op(
    "tl.device.wgmma_fence", Effect(proxy=Proxy.ASYNC),
    lambda c: _T.ptx["wgmma.fence.sync.aligned"](),
    "wgmma.fence: register (accumulator, A) writes of this thread before the next wgmma")

COMMIT = register_device_op(
    "tl.device.wgmma_commit", Effect(commits=Mechanism.WGMMA_GROUP),
    lambda c: _T.ptx["wgmma.commit_group.sync.aligned"](),
    "wgmma.commit_group: the wgmmas issued since the last commit form one group")

WAIT = register_device_op(
    "tl.device.wgmma_wait", Effect(waits=Mechanism.WGMMA_GROUP, pending_arg=0),
    lambda c: _T.ptx["wgmma.wait_group.sync.aligned"](_imm(c.args[0])),
    "wgmma.wait_group N: at most N committed groups of this warpgroup stay in flight")


def _emit_fence_operands(c):
    addr, count = c.args
    return tirx.call_extern("int32", f"tl::fence_operands<{_imm(count)}>", addr)


# No declared access: it moves no data, so it is no use of the registers that would wait for
# a wgmma still writing them (the next iteration's fence while its group is in flight).
FENCE_OPERANDS = register_device_op(
    "tl.device.wgmma_fence_operands", Effect(), _emit_fence_operands,
    "no instruction: the compiler keeps the registers' reads and writes on this side of the "
    "surrounding wgmma fence/wait")


def fence() -> tirx.Call:
    return call(FENCE)


def commit() -> tirx.Call:
    return call(COMMIT)


def wait(pending: int) -> tirx.Call:
    return call(WAIT, pending)


def fence_operands(addr, count: int) -> tirx.Call:
    return call(FENCE_OPERANDS, addr, count)
