"""Per-thread random number generation: the ``tl.rng_*`` ops and their lowering.

The language (``T.rng_init`` / ``T.rng_rand`` / ``T.rng_rand_float``) emits three ops; per
kernel, :func:`lower_kernel` gives every thread a generator state (local buffers allocated at
the top of the kernel) and replaces each op by the statements that update the state, placed
before the statement that uses the op's value (draws in evaluation order).

Philox4x32-10 (``curandStatePhilox4_32_10_t``, the default) is lowered here into plain TIR
arithmetic on the CPU and into calls of ``tl_templates/cuda/random.h``'s functions (the same
algorithm in C++, one call per op) on CUDA: the state is cuRAND's (key, 128-bit counter, the
four outputs of the current counter, the position among them, the Box-Muller carry-overs),
``rng_init`` is ``curand_init`` (counter = (off / 4, seq), position off % 4), a draw returns the
next output and runs the ten rounds when the counter advances.  So the stream is cuRAND's and
Triton's ``tl.randint4x`` bit for bit, and the floats follow cuRAND's conversions.

``curandStateXORWOW_t`` and ``curandStateMRG32k3a_t`` (whose skip-ahead needs cuRAND's
precomputed tables) call cuRAND's device API through ``tl_templates/cuda/random.h`` on CUDA
(the kernel then needs cuRAND's headers); the CPU backend rejects them.
"""

from __future__ import annotations

import math

import numpy as np
import tvm
import tvm_ffi
from tvm import tirx

from ..errors import LoweringError, source_location
from ..ir_utils import StmtMutator, launch_chain, map_nodes, relaunch, seq

PHILOX = "curandStatePhilox4_32_10_t"
GENERATORS = (PHILOX, "curandStateXORWOW_t", "curandStateMRG32k3a_t")

INIT, RAND, FLOAT = "tl.rng_init", "tl.rng_rand", "tl.rng_rand_float"
for _name in (INIT, RAND, FLOAT):
    tvm.ir.register_op_attr(_name, "TCallEffectKind", tirx.CallEffectKind.Opaque.value)
    tvm.ir.register_op_attr(_name, "TScriptPrinterName", _name.replace("tl.", ""))


def init_call(seed, seq_, off, generator: str) -> tvm.ir.Call:
    return tvm.ir.Call(tvm.ir.Op.get(INIT), [seed, seq_, off, tvm.ir.StringImm(generator)],
                       ret_ty="int32")


def rand_call() -> tvm.ir.Call:
    return tvm.ir.Call(tvm.ir.Op.get(RAND), [], ret_ty="uint32")


def float_call(bit: int, dist: str) -> tvm.ir.Call:
    return tvm.ir.Call(tvm.ir.Op.get(FLOAT), [tvm.ir.StringImm(dist)], ret_ty=f"float{bit}")


def _rng_op(node) -> str | None:
    if isinstance(node, tvm.ir.Call) and isinstance(node.op, tvm.ir.Op) and \
            node.op.name in (INIT, RAND, FLOAT):
        return node.op.name
    return None


def _calls(node) -> list:
    """The rng ops in ``node`` in evaluation order (arguments before the call, left to right)."""
    out: list = []
    tvm_ffi.structural_walk(node, (tvm.ir.Call, lambda c: out.append(c) if _rng_op(c) else None))
    return out


# The device header of cuRAND's other generators (the kernel's prelude includes it).
CURAND_HEADER = '#include "tl_templates/cuda/curand.h"'


def _generator(init: tvm.ir.Call) -> str:
    """The generator a ``tl.rng_init`` call starts."""
    return str(init.args[3].value)


def needs_curand(node) -> bool:
    """Whether ``node`` starts one of cuRAND's generators other than Philox: their device
    functions come from cuRAND's headers, which only such kernels include."""
    return any(_rng_op(c) == INIT and _generator(c) != PHILOX for c in _calls(node))


# -- Philox4x32-10 in TIR -------------------------------------------------------------------
M0, M1 = 0xD2511F53, 0xCD9E8D57  # round multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85  # key schedule (Weyl) increments
ROUNDS = 10
# the state's uint32 words: key, counter, the counter's four outputs, position, round key
KEY, CTR, OUT, POS, RKEY = 0, 2, 6, 10, 11
WORDS = 13
INV32 = 2.0 ** -32
INV53 = 2.0 ** -53
INV32_2PI = INV32 * float(np.float32(2 * math.pi))  # cuRAND: 2^-32 times 2*pi in float32


def _u32(v) -> tirx.PrimExpr:
    return tirx.const(v, "uint32") if isinstance(v, int) else v


def _shr(v, n: int):
    if isinstance(v, tirx.IntImm):
        return tirx.const(int(v.value) >> n, "uint64")
    return tirx.shift_right(v, tirx.const(n, "uint64"))


def _wrapping_add(v, n: int):
    """``v + n`` modulo 2**32, computed in 64 bits: the CPU backend's LLVM code may assume
    that unsigned 32-bit additions do not wrap (and fold a carry test away)."""
    return tirx.Cast("uint32", tirx.bitwise_and(tirx.Cast("uint64", v) + tirx.const(n, "uint64"),
                                                tirx.const(0xFFFFFFFF, "uint64")))


def _low_word(v, mask: int = 0xFFFFFFFF):
    """``v & mask`` (a uint64) as a uint32; folded here for constants (TVM refuses a uint32
    literal above 2**32 - 1 when it folds the cast)."""
    if isinstance(v, tirx.IntImm):
        return tirx.const(int(v.value) & mask, "uint32")
    return tirx.Cast("uint32", tirx.bitwise_and(v, tirx.const(mask, "uint64")))


class _Philox:
    """The statements of one thread's Philox state ``st`` (uint32[WORDS]), ``flag`` (int32[2]:
    whether a float / double Box-Muller value is carried over) and ``f32`` / ``f64`` (2 each:
    the carried value, the result of the last draw)."""

    def __init__(self):
        self.st = tirx.decl_buffer([WORDS], "uint32", "rng_state", scope="local")
        self.flag = tirx.decl_buffer([2], "int32", "rng_flag", scope="local")
        self.f32 = tirx.decl_buffer([2], "float32", "rng_f32", scope="local")
        self.f64 = tirx.decl_buffer([2], "float64", "rng_f64", scope="local")

    def buffers(self) -> list:
        return [self.st, self.flag, self.f32, self.f64]

    def w(self, i):
        return tirx.BufferLoad(self.st, [tirx.const(i, "int32") if isinstance(i, int) else i])

    def set(self, i, v):
        return tirx.BufferStore(self.st, _u32(v), [tirx.const(i, "int32")])

    def refill(self) -> tirx.Stmt:
        """The four outputs of the current counter: ten rounds over (counter, key)."""
        body = []
        x, y, z, w = (tirx.Var(n, "uint32") for n in "xyzw")
        body += [tirx.Bind(v, self.w(OUT + i)) for i, v in enumerate((x, y, z, w))]
        p0 = tirx.Var("p0", "uint64")
        p1 = tirx.Var("p1", "uint64")
        body.append(tirx.Bind(p0, tirx.const(M0, "uint64") * tirx.Cast("uint64", x)))
        body.append(tirx.Bind(p1, tirx.const(M1, "uint64") * tirx.Cast("uint64", z)))
        hi = lambda p: tirx.Cast("uint32", tirx.shift_right(p, tirx.const(32, "uint64")))  # noqa: E731
        body += [self.set(OUT, tirx.bitwise_xor(tirx.bitwise_xor(hi(p1), y), self.w(RKEY))),
                 self.set(OUT + 1, tirx.Cast("uint32", p1)),
                 self.set(OUT + 2, tirx.bitwise_xor(tirx.bitwise_xor(hi(p0), w), self.w(RKEY + 1))),
                 self.set(OUT + 3, tirx.Cast("uint32", p0)),
                 self.set(RKEY, _wrapping_add(self.w(RKEY), W0)),
                 self.set(RKEY + 1, _wrapping_add(self.w(RKEY + 1), W1))]
        r = tirx.Var("round", "int32")
        rounds = tirx.For(r, tirx.const(0, "int32"), tirx.const(ROUNDS, "int32"),
                          tirx.ForKind.SERIAL, seq(body))
        start = [self.set(OUT + i, self.w(CTR + i)) for i in range(4)]
        start += [self.set(RKEY + i, self.w(KEY + i)) for i in range(2)]
        return seq(start + [rounds])

    def init(self, seed, seq_, off) -> tirx.Stmt:
        """``curand_init(seed, seq, off)``: counter (off / 4, seq), position off % 4."""
        lo, hi = _low_word, lambda v: _low_word(_shr(v, 32))  # noqa: E731
        n = _shr(off, 2)
        stmts = [self.set(KEY, lo(seed)), self.set(KEY + 1, hi(seed)),
                 self.set(CTR, lo(n)), self.set(CTR + 1, hi(n)),
                 self.set(CTR + 2, lo(seq_)), self.set(CTR + 3, hi(seq_)),
                 self.set(POS, _low_word(off, 3))]
        stmts += [tirx.BufferStore(self.flag, tirx.const(0, "int32"), [tirx.const(i, "int32")])
                  for i in range(2)]
        return seq(stmts + [self.refill()])

    def next_u32(self, out: tirx.Var) -> list:
        """``out`` = the next output; past the fourth, the counter advances (128-bit)."""
        pos = self.w(POS)
        value = self.w(OUT + 3)
        for i in (2, 1, 0):
            value = tirx.Select(pos == _u32(i), self.w(OUT + i), value)
        carry = None
        for i in (3, 2, 1):  # counter word i increments when the words below it wrapped
            inc = tirx.IfThenElse(self.w(CTR + i - 1) == _u32(0),
                                  seq([self.set(CTR + i, _wrapping_add(self.w(CTR + i), 1))] +
                                      ([carry] if carry is not None else [])), None)
            carry = inc
        advance = seq([self.set(POS, 0), self.set(CTR, _wrapping_add(self.w(CTR), 1)), carry,
                       self.refill()])
        return [tirx.Bind(out, value), self.set(POS, pos + _u32(1)),
                tirx.IfThenElse(self.w(POS) == _u32(4), advance, None)]

    def draw(self, call: tvm.ir.Call, out: tirx.Var) -> list:
        """The statements that leave the value of the ``rng_rand[_float]`` ``call`` in ``out``."""
        if _rng_op(call) == RAND:
            return self.next_u32(out)
        dist = str(call.args[0].value)
        bits = 64 if str(call.ty.dtype) == "float64" else 32
        if dist == "uniform" and bits == 32:  # curand_uniform: (0, 1]
            x = tirx.Var("x", "uint32")
            f = tirx.Cast("float32", x)
            return self.next_u32(x) + [tirx.Bind(out, f * tirx.const(INV32, "float32") +
                                                 tirx.const(INV32 / 2, "float32"))]
        if dist == "uniform":  # curand_uniform_double: two draws, 53 bits
            x, y = tirx.Var("x", "uint32"), tirx.Var("y", "uint32")
            z = self._bits53(x, y)
            return self.next_u32(x) + self.next_u32(y) + [
                tirx.Bind(out, tirx.Cast("float64", z) * tirx.const(INV53, "float64") +
                          tirx.const(INV53 / 2, "float64"))]
        return self._normal(bits, out)

    @staticmethod
    def _bits53(x, y):
        return tirx.bitwise_xor(tirx.Cast("uint64", x),
                                tirx.shift_left(tirx.Cast("uint64", y), tirx.const(21, "uint64")))

    def _normal(self, bits: int, out: tirx.Var) -> list:
        """Box-Muller as cuRAND's ``curand_normal[_double]``: a pair of values from two (four
        for doubles) draws; the first is returned, the second on the next call."""
        buf, slot = (self.f32, 0) if bits == 32 else (self.f64, 1)
        dt = f"float{bits}"
        flag = tirx.BufferLoad(self.flag, [tirx.const(slot, "int32")])
        set_flag = lambda v: tirx.BufferStore(self.flag, tirx.const(v, "int32"),  # noqa: E731
                                              [tirx.const(slot, "int32")])
        put = lambda i, v: tirx.BufferStore(buf, v, [tirx.const(i, "int32")])  # noqa: E731
        if bits == 32:
            x, y = tirx.Var("x", "uint32"), tirx.Var("y", "uint32")
            draws = self.next_u32(x) + self.next_u32(y)
            u = tirx.Cast(dt, x) * tirx.const(INV32, dt) + tirx.const(INV32 / 2, dt)
            v = tirx.Cast(dt, y) * tirx.const(INV32_2PI, dt) + tirx.const(INV32_2PI / 2, dt)
        else:
            x0, x1, y0, y1 = (tirx.Var(n, "uint32") for n in ("x0", "x1", "y0", "y1"))
            draws = [s for var in (x0, x1, y0, y1) for s in self.next_u32(var)]
            u = tirx.Cast(dt, self._bits53(x0, x1)) * tirx.const(INV53, dt) + \
                tirx.const(INV53 / 2, dt)
            # sincospi(v) with v in (0, 2]
            v = (tirx.Cast(dt, self._bits53(y0, y1)) * tirx.const(2 * INV53, dt) +
                 tirx.const(INV53, dt)) * tirx.const(math.pi, dt)
        uv, vv, s = tirx.Var("u", dt), tirx.Var("v", dt), tirx.Var("s", dt)
        fresh = seq(draws + [tirx.Bind(uv, u), tirx.Bind(vv, v),
                             tirx.Bind(s, tirx.sqrt(tirx.const(-2.0, dt) * tirx.log(uv))),
                             put(1, s * tirx.sin(vv)), put(0, s * tirx.cos(vv)), set_flag(1)])
        carried = seq([put(1, tirx.BufferLoad(buf, [tirx.const(0, "int32")])), set_flag(0)])
        return [tirx.IfThenElse(flag == tirx.const(1, "int32"), carried, fresh),
                tirx.Bind(out, tirx.BufferLoad(buf, [tirx.const(1, "int32")]))]


class _PhiloxCalls(_Philox):
    """CUDA: the same state, updated by ``tl_templates/cuda/random.h``'s functions (one call
    per op, so that loops unrolled around a draw stay small)."""

    def _ptr(self, buf):
        return tirx.address_of(tirx.BufferLoad(buf, [tirx.const(0, "int32")]))

    def init(self, seed, seq_, off) -> tirx.Stmt:
        return tirx.Evaluate(tirx.call_extern("int32", "tl::philox_init", self._ptr(self.st),
                                              self._ptr(self.flag), seed, seq_, off))

    def draw(self, call, out) -> list:
        st = self._ptr(self.st)
        if _rng_op(call) == RAND:
            value = tirx.call_extern("uint32", "tl::philox_next", st)
        else:
            dt = str(call.ty.dtype)
            suffix = "_double" if dt == "float64" else ""
            dist = str(call.args[0].value)
            args = [st] if dist == "uniform" else \
                [st, self._ptr(self.flag), self._ptr(self.f64 if suffix else self.f32)]
            value = tirx.call_extern(dt, f"tl::philox_{dist}{suffix}", *args)
        return [tirx.Bind(out, value)]


class _Curand:
    """XORWOW / MRG32k3a through cuRAND's device API (``tl_templates/cuda/random.h``); the
    state is an opaque, 8-byte aligned local array of cuRAND's state struct's size or more."""

    WORDS = 8  # uint64 words: 64 bytes hold either state

    def __init__(self, generator: str):
        self.generator = generator
        self.st = tirx.decl_buffer([self.WORDS], "uint64", "rng_state", scope="local")

    def buffers(self) -> list:
        return [self.st]

    def _ptr(self):
        return tirx.address_of(tirx.BufferLoad(self.st, [tirx.const(0, "int32")]))

    def _fn(self, name: str) -> str:
        return f"tl::{name}<{self.generator}>"

    def init(self, seed, seq_, off) -> tirx.Stmt:
        return tirx.Evaluate(tirx.call_extern("int32", self._fn("rng_init"), self._ptr(),
                                              seed, seq_, off))

    def draw(self, call, out) -> list:
        if _rng_op(call) == RAND:
            fn = "rng_rand"
        else:
            bits = 64 if str(call.ty.dtype) == "float64" else 32
            fn = f"rng_{call.args[0].value}" + ("_double" if bits == 64 else "")
        return [tirx.Bind(out, tirx.call_extern(str(call.ty.dtype), self._fn(fn), self._ptr()))]


# -- the per-kernel rewrite -----------------------------------------------------------------

class _Rewrite(StmtMutator):
    """Every statement that uses an rng op gets the ops' state updates before it."""

    def __init__(self, gen):
        self.gen = gen

    def _hoist(self, exprs: list):
        """(statements, ``exprs`` with each rng op replaced by its value)."""
        pre: list = []
        values: list = []
        for c in [c for e in exprs if e is not None for c in _calls(e)]:
            if _rng_op(c) == INIT:
                raise LoweringError("T.rng_init is a statement; its value cannot be used")
            out = tirx.Var("rng", str(c.ty.dtype))
            pre += self.gen.draw(c, out)
            values.append(out)
        it = iter(values)

        def on_call(c):
            return next(it) if _rng_op(c) in (RAND, FLOAT) else c

        new = [map_nodes(e, (tvm.ir.Call, on_call)) if e is not None else None for e in exprs]
        return pre, new

    def visit_Evaluate(self, s):
        if _rng_op(s.value) == INIT:
            a = s.value.args
            return self.gen.init(a[0], a[1], a[2])
        pre, (value,) = self._hoist([s.value])
        return seq(pre + [tirx.Evaluate(value)]) if pre else s

    def visit_BufferStore(self, s):
        pre, new = self._hoist([s.value] + list(s.indices))
        if not pre:
            return s
        return seq(pre + [tirx.BufferStore(s.buffer, new[0], new[1:], span=s.span)])

    def visit_Bind(self, s):
        pre, (value,) = self._hoist([s.value])
        return seq(pre + [tirx.Bind(s.var, value)]) if pre else s

    def visit_IfThenElse(self, s):
        pre, (cond,) = self._hoist([s.condition])
        els = self.visit(s.else_case) if s.else_case is not None else None
        return seq(pre + [tirx.IfThenElse(cond, self(s.then_case), els, span=s.span)])

    def visit_For(self, s):
        if _calls(s.min) or _calls(s.extent):
            raise LoweringError("a loop's bounds cannot draw random numbers (T.rng_*); draw "
                                "into a variable before the loop")
        return self.generic(s)

    def visit_While(self, s):
        if _calls(s.condition):
            raise LoweringError("a while loop's condition cannot draw random numbers "
                                "(T.rng_*); draw into a variable in the loop")
        return self.generic(s)


def uses_rng(node) -> bool:
    return bool(_calls(node))


def lower_kernel(kernel: tirx.Stmt, cpu: bool) -> tirx.Stmt:
    """One ``T.Kernel`` (its launch chain and body) with its rng ops lowered: the state
    allocated at the top of the body, each op replaced by its updates."""
    calls = _calls(kernel)
    if not calls:
        return kernel
    inits = [c for c in calls if _rng_op(c) == INIT]
    if not inits:
        raise LoweringError("T.rng_rand / T.rng_rand_float draw from the thread's generator, "
                            "which T.rng_init must start first in the same T.Kernel")
    generators = {_generator(c) for c in inits}
    if len(generators) > 1:
        raise LoweringError(f"one T.Kernel uses the generators {sorted(generators)}; a thread "
                            "has one generator state, so give every T.rng_init the same one")
    (generator,) = generators
    chain, body = launch_chain(kernel)
    if generator == PHILOX:
        gen = _Philox() if cpu else _PhiloxCalls()
    elif cpu:
        raise LoweringError(f"T.rng_init(generator={generator!r}): the CPU backend has only "
                            f"{PHILOX!r} (cuRAND's other generators skip ahead with its "
                            "precomputed tables)")
    else:
        gen = _Curand(generator)
    if cpu:
        threads = 1
        for a in chain:
            if a.attr_key == "thread_extent" and a.node.thread_tag.startswith("threadIdx"):
                threads *= int(a.value) if isinstance(a.value, tirx.IntImm) else 0
        if threads != 1:
            raise LoweringError(
                "T.rng_*: each thread of a block draws from its own generator, but the CPU "
                "backend runs a block on one thread; use threads=1 for a CPU kernel that draws "
                "random numbers (the stream is then the same as on CUDA)")
    body = _Rewrite(gen)(body)
    allocs = [tirx.AllocBuffer(b) for b in gen.buffers()]
    return relaunch(chain, seq(allocs + [body]))


__all__ = ["CURAND_HEADER", "GENERATORS", "PHILOX", "float_call", "init_call", "lower_kernel",
           "needs_curand", "rand_call", "uses_rng"]
