"""CPU bounds checks: an access outside a buffer raises OutOfBoundsError from the kernel call
(naming the buffer, the index, the shape and the source line) instead of corrupting memory;
accesses proven in range, such as the guarded edges of tile-op copies, are not checked."""

import inspect
import sys

import numpy as np
import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import OutOfBoundsError, TileLangError
from tilelang.transform import LowerTileOps, pass_config
from tilelang.transform.check_bounds import CALLBACK, SOURCE_LINE, CheckBounds, MarkSourceLines

from helpers import bind, copy_kernel

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/python")
from programs import cumsum_kernel, matmul, reduce_kernel  # noqa: E402

OFF = {"tl.disable_bounds_check": True}


def line_of(func, text):
    """``FILE:LINE`` of the line of ``func``'s source that contains ``text``."""
    lines, start = inspect.getsourcelines(func)
    n = next(i for i, s in enumerate(lines) if text in s)
    return f"{inspect.getsourcefile(func)}:{start + n}"


def store_past_end():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(8):
                B[bx * 8 + i] = A[i] + 1

    return main


def checks_in(func, configs=None) -> int:
    text = tilelang.lower(func, target="cpu", stage="tile", pass_configs=configs).script()
    return text.count(CALLBACK)


# --- calls ------------------------------------------------------------------------------
def test_parallel_store_past_the_end_raises_and_leaves_memory_alone():
    func = store_past_end()
    k = tilelang.compile(func, target="cpu")
    a = torch.randn(16)  # B is the first half of a larger tensor: the second half must survive
    big = torch.zeros(16)
    b = big[:8]
    with pytest.raises(OutOfBoundsError) as info:
        k(a[:8], b)
    msg = str(info.value)
    assert "main: out-of-bounds write B[8]; B has shape (8,)" in msg
    assert line_of(store_past_end, "B[bx * 8 + i] = A[i] + 1") in msg
    assert isinstance(info.value, IndexError) and isinstance(info.value, TileLangError)
    torch.testing.assert_close(b, a[:8] + 1)  # block 0 ran
    assert torch.equal(big[8:], torch.zeros(8))  # nothing written past B


def test_read_past_the_end_of_a_dynamic_tensor_names_its_runtime_shape():
    n = T.dynamic("n")

    @T.prim_func
    def shift(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 4), threads=32) as bx:
            for i in T.Parallel(4):
                if bx * 4 + i < n:
                    B[bx * 4 + i] = A[bx * 4 + i + 1]

    k = tilelang.compile(shift, target="cpu")
    with pytest.raises(OutOfBoundsError, match=r"out-of-bounds read A\[10\]; A has shape \(10,\)"):
        k(torch.randn(10), torch.zeros(10))


def test_first_failure_is_reported_from_the_lowest_block():
    @T.prim_func
    def every_block(A: T.Tensor((64,), "float32")):
        with T.Kernel(64, threads=32) as bx:
            for i in T.Parallel(4):
                A[bx + 61 + i] = 1.0

    k = tilelang.compile(every_block, target="cpu")
    for _ in range(3):
        with pytest.raises(OutOfBoundsError, match=r"write A\[64\]; A has shape \(64,\)"):
            k(torch.zeros(64))


def test_shared_tile_and_gathered_index():
    @T.prim_func
    def gather(A: T.Tensor((16,), "float32"), idx: T.Tensor((16,), "int32"),
               B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((16,), "float32")
            T.copy(A, s)
            for i in T.Parallel(16):
                B[i] = s[idx[i]]

    k = tilelang.compile(gather, target="cpu")
    a = torch.randn(16)
    idx = torch.arange(16, dtype=torch.int32).flip(0)
    b = torch.zeros(16)
    k(a, idx, b)
    torch.testing.assert_close(b, a.flip(0))
    idx[5] = -3
    with pytest.raises(OutOfBoundsError,
                       match=r"read s\[-3\]; s has shape \(16,\)\n  at .*s\[idx\[i\]\]"):
        k(a, idx, b)


def test_serial_grid_with_atomics_is_checked_too():
    @T.prim_func
    def atomic_then_oob(A: T.Tensor((8,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(4):
                T.atomic_add(B[i], A[bx * 4 + i])
            for i in T.Parallel(4):
                A[bx * 4 + i + 1] = 0.0

    k = tilelang.compile(atomic_then_oob, target="cpu")
    with pytest.raises(OutOfBoundsError, match=r"write A\[8\]"):
        k(torch.randn(8), torch.zeros(4))


def test_numpy_caller_gets_the_error():
    k = tilelang.compile(store_past_end(), target="cpu")
    with pytest.raises(OutOfBoundsError):
        k(np.zeros(8, np.float32), np.zeros(8, np.float32))


def test_checks_can_be_turned_off():
    func = store_past_end()
    assert checks_in(func) == 1
    assert checks_in(func, OFF) == 0
    k = tilelang.compile(func, target="cpu", pass_configs=OFF)
    assert "out_of_bounds" not in k.get_kernel_source()


# --- what is not checked ----------------------------------------------------------------
@pytest.mark.parametrize("func", [
    copy_kernel(40, 16),  # copies at a ragged edge: zero-filled / skipped by their guards
    matmul(70, 50, 40, 32, 32, 32),
    reduce_kernel("sum", 64, 64, 1, True),
    cumsum_kernel(64, 64, 1, False),  # reads x[k - 1] under "k != 0"
], ids=["copy", "gemm", "reduce", "cumsum"])
def test_tile_op_accesses_are_proven_in_range(func):
    assert checks_in(func) == 0


def test_negative_copy_offsets_are_guarded_not_flagged():
    @T.prim_func
    def window(A: T.Tensor((32,), "float32"), B: T.Tensor((16,), "float32"), off: T.int32):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_shared((16,), "float32")
            T.copy(A[off:off + 16], s)
            T.copy(s, B)

    assert checks_in(window) == 0
    k = tilelang.compile(window, target="cpu")
    a, b = torch.randn(32), torch.zeros(16)
    k(a, b, -4)
    torch.testing.assert_close(b, torch.cat([torch.zeros(4), a[:12]]))


# --- the passes alone -------------------------------------------------------------------
def test_mark_source_lines_wraps_each_tile_op():
    func = copy_kernel()
    with pass_config.scope({}):
        out = MarkSourceLines()(bind(func))["main"]
    marks = []
    tvm_ffi.structural_walk(out.body, (tirx.AttrStmt, lambda a: marks.append(a)
                                       if a.attr_key == SOURCE_LINE else None))
    assert [str(m.node.value).split(": ", 1)[1] for m in marks] == [
        "T.copy(A[bx * bM, 0], S)", "T.copy(S, B[bx * bM, 0])"]


@T.prim_func
def after_launch(A: T.Buffer((8,), "float32"), B: T.Buffer((8,), "float32")):
    for block in T.parallel(2):
        with T.attr("at kernel.py:3: T.copy(A, B)", "tl.source_line", 0):
            for i in range(8):
                B[i] = A[block * 8 + i]


def test_check_bounds_guards_unproven_accesses_and_reports_after_the_grid():
    with pass_config.scope({}):
        out = CheckBounds()(bind(after_launch))["main"]
    text = out.script()
    assert "tl.source_line" not in text
    assert text.count(CALLBACK) == 1 and '"at kernel.py:3: T.copy(A, B)"' in text
    loops = []
    tvm_ffi.structural_walk(out.body, (tirx.For, loops.append), order="pre")
    grid = [lp for lp in loops if lp.kind == tirx.ForKind.PARALLEL]
    assert len(grid) == 1 and grid[0].loop_var.name == "chunk"
    assert loops[-1].kind == tirx.ForKind.SERIAL and loops[-1].loop_var.name == "c"  # report
    # the load is guarded: a failed check reads 0 instead of memory
    assert "T.if_then_else(block * 8 + i < 8, A[block * 8 + i], T.float32(0.0))" in text


def test_check_bounds_leaves_cuda_alone():
    import tvm

    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    mod = LowerTileOps()(bind(store_past_end(), cuda))
    with pass_config.scope({}):
        assert CheckBounds()(mod)["main"].same_as(mod["main"])


def _divide(op, configs=None):
    @T.prim_func
    def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32"), C: T.Tensor((4,), "int32")):
        with T.Kernel(2, threads=1):
            for i in T.Parallel(4):
                C[i] = A[i] // B[i] if op == "//" else A[i] % B[i]  # the division

    return tilelang.compile(main, out_idx=[2], target="cpu", pass_configs=configs)


@pytest.mark.parametrize("configs", [None, OFF])  # the access checks off: divisions are not
@pytest.mark.parametrize("op", ["//", "%"])
def test_an_integer_division_by_zero_is_an_error_not_a_crash(op, configs):
    # x86 traps (SIGFPE) on an integer division by zero: the Python process died
    from tilelang.errors import DivisionByZeroError

    k = _divide(op, configs)
    a = torch.tensor([4, 5, -2**31, 7], dtype=torch.int32)
    with pytest.raises(DivisionByZeroError, match=r"main: integer division or remainder by "
                       r"zero\n  at .*the division"):
        k(a, torch.tensor([1, 0, 1, 1], dtype=torch.int32))
    # INT_MIN / -1 traps too: it wraps (the remainder is 0); the other elements are exact
    b = torch.tensor([3, -2, -1, 2], dtype=torch.int32)
    want = torch.tensor([1, -3, -2**31, 3] if op == "//" else [1, -1, 0, 1], dtype=torch.int32)
    assert k(a, b).tolist() == want.tolist()


def test_a_division_guarded_by_and_or_select_is_no_error():
    # the right operand of `and` (and the value a Select drops) does not count where the
    # left operand decides; LLVM evaluates it anyway, so it must still not trap
    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), D: T.Tensor((8,), "int32"), B: T.Tensor((2, 8), "int32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                B[0, i] = 0
                if D[i] != 0 and A[i] % D[i] == 0:
                    B[0, i] = 1
                B[1, i] = T.Select(D[i] != 0, A[i] // D[i], -1)

    a = torch.arange(8, dtype=torch.int32)
    d = torch.tensor([0, 1, 2, 0, 3, 0, 2, 5], dtype=torch.int32)
    b = torch.empty(2, 8, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(a, d, b)
    assert b.tolist() == [[0, 1, 1, 0, 0, 0, 1, 0], [-1, 1, 1, -1, 1, -1, 3, 1]]
