"""T.alloc_reducer / T.finalize_reducer: per-thread copies combined at the finalize.  CPU
numerics against torch, and the CUDA lowering's combine (sm_90a source and PTX)."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError

from reducer_programs import centered, gemv, row_reduce

REF = {"sum": lambda a: a.sum(1), "max": lambda a: a.max(1).values,
       "min": lambda a: a.min(1).values}


@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("replication", ["all", None])
def test_row_reduce_cpu(op, replication):
    a = torch.randn(64, 32)
    b = tilelang.compile(row_reduce(64, 32, op, replication=replication), out_idx=[1],
                         target="cpu")(a)
    torch.testing.assert_close(b, REF[op](a), atol=1e-4, rtol=1e-4)


def test_gemv_pattern_cpu():
    a, x = torch.randn(96, 256).half(), torch.randn(256).half()
    o = tilelang.compile(gemv(96, 256), out_idx=[2], target="cpu")(a, x)
    torch.testing.assert_close(o.float(), a.float() @ x.float(), atol=5e-2, rtol=2e-2)


def test_reducer_read_after_finalize_cpu():
    g = torch.randn(64, 8)
    o = tilelang.compile(centered(64, 8), out_idx=[1], target="cpu")(g)
    torch.testing.assert_close(o, g - g.sum(1, keepdim=True), atol=1e-4, rtol=1e-4)


def test_reducer_argument_errors():
    def build(fn):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                fn(A)
        return main

    with pytest.raises(DSLError, match="op must be one of"):
        build(lambda A: T.alloc_reducer(8, "float32", op="prod"))
    with pytest.raises(DSLError, match="replication must be"):
        build(lambda A: T.alloc_reducer(8, "float32", replication="some"))
    with pytest.raises(DSLError, match="expects a buffer from T.alloc_reducer"):
        build(lambda A: T.finalize_reducer(T.alloc_fragment(8, "float32")))
    with pytest.raises(DSLError, match="batch must be >= 1"):
        build(lambda A: T.finalize_reducer(T.alloc_reducer(8, "float32"), batch=0))
    with pytest.raises(DSLError, match="exceeds total output elements"):
        build(lambda A: T.finalize_reducer(T.alloc_reducer(8, "float32"), batch=16))
    with pytest.raises(DSLError, match="must evenly divide"):
        build(lambda A: T.finalize_reducer(T.alloc_reducer(8, "float32"), batch=3))


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def cuda_source(func, out_idx):
    k = tilelang.compile(func, out_idx=out_idx, target="cuda -arch=sm_90a")
    k.get_ptx()  # nvcc compiles it
    src = k.get_kernel_source()
    return src[src.index("main_kernel("):]


@needs_nvcc
@pytest.mark.parametrize("op,combine", [("sum", "SumOp"), ("max", "MaxOp"), ("min", "MinOp")])
def test_finalize_combines_every_threads_copy(op, combine):
    body = cuda_source(row_reduce(64, 32, op, threads=128), [1])
    # every thread holds the whole reducer (64 elements) and updates only its own rows
    assert "float r_ptr[64];" in body
    assert f"tl::all_reduce_array<tl::{combine}, 64, 128, 0, 0>" in body


@needs_nvcc
def test_finalize_within_one_warp_needs_no_shared_scratch():
    body = cuda_source(row_reduce(16, 32, "sum", threads=32), [1])
    assert "tl::all_reduce_array<tl::SumOp, 16, 32, 0, 0>" in body
    assert "smem_ptr" not in body.split("tl::all_reduce_array")[1].split(";")[0]


@needs_nvcc
def test_gemv_pattern_compiles_pipelined():
    body = cuda_source(gemv(96, 256), [2])
    assert "tl::all_reduce_array<tl::SumOp, 32, 128, 0, 0>" in body


@needs_nvcc
def test_replication_none_is_a_fragment_without_combine():
    @T.prim_func
    def main(A: T.Tensor((64, 8), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            r = T.alloc_reducer(64, "float32", replication="none")
            T.clear(r)
            for i in T.Parallel(64):
                for j in T.serial(8):
                    r[i] += A[i, j]
            T.finalize_reducer(r)
            T.copy(r, B)

    assert "all_reduce_array" not in cuda_source(main, [1])
    a = torch.randn(64, 8)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[1], target="cpu")(a), a.sum(1))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "max", "min"])
@pytest.mark.parametrize("threads", [32, 128, 256])
def test_row_reduce_gpu(op, threads):
    a = torch.randn(64, 32, device="cuda")
    b = tilelang.compile(row_reduce(64, 32, op, threads=threads), out_idx=[1],
                         target="cuda")(a)
    torch.testing.assert_close(b, REF[op](a), atol=1e-4, rtol=1e-4)


@pytest.mark.gpu
def test_gemv_and_centered_gpu():
    a, x = torch.randn(96, 256, device="cuda").half(), torch.randn(256, device="cuda").half()
    o = tilelang.compile(gemv(96, 256), out_idx=[2], target="cuda")(a, x)
    torch.testing.assert_close(o.float(), a.float() @ x.float(), atol=5e-2, rtol=2e-2)
    g = torch.randn(64, 8, device="cuda")
    o = tilelang.compile(centered(64, 8), out_idx=[1], target="cuda")(g)
    torch.testing.assert_close(o, g - g.sum(1, keepdim=True), atol=1e-4, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# Epochs: T.reducer_init / T.reducer_update / T.finalize_reducer(acc, dst)
# ---------------------------------------------------------------------------------------------
import re  # noqa: E402

from tilelang.errors import LoweringError  # noqa: E402


def epoch_rows(M, N, op, dtype="float32", threads=128, seed=None):
    """B[i] = seed (op) A[i, 0] (op) ... (op) A[i, N-1], through one reducer epoch."""

    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M,), dtype)):
        with T.Kernel(1, threads=threads):
            a = T.alloc_fragment((M, N), dtype)
            T.copy(A, a)
            acc = T.alloc_reducer((M,), dtype, op=op)
            T.reducer_init(acc, seed)
            for i, j in T.Parallel(M, N):
                T.reducer_update(acc[i], a[i, j])
            out = T.alloc_fragment((M,), dtype)
            T.finalize_reducer(acc, out)
            T.copy(out, B)

    return main


def scalar_sum(extent=8, threads=128, seed=None):
    """B[0] = seed + sum(A): a T.Parallel(extent) loop whose iterations the layout repeats
    over threads // extent thread groups."""

    @T.prim_func
    def main(A: T.Tensor((extent,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((extent,), "float32")
            T.copy(A, src)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.reducer_init(acc, seed)
            for i in T.Parallel(extent):
                T.reducer_update(acc[0], src[i])
            out = T.alloc_fragment((1,), "float32")
            T.finalize_reducer(acc, out)
            T.copy(out, B)

    return main


def _fold(a, op):
    out = a[:, 0].clone()
    for j in range(1, a.shape[1]):
        out = {"bitand": out & a[:, j], "bitor": out | a[:, j], "bitxor": out ^ a[:, j]}[op]
    return out


EPOCH_REF = dict(REF, bitand=lambda a: _fold(a, "bitand"), bitor=lambda a: _fold(a, "bitor"),
                 bitxor=lambda a: _fold(a, "bitxor"))


@pytest.mark.parametrize("op", ["sum", "max", "min", "bitand", "bitor", "bitxor"])
def test_epoch_rows_cpu(op):
    dtype = "int32" if op.startswith("bit") else "float32"
    a = torch.randint(0, 2**31 - 1, (16, 64), dtype=torch.int32) if dtype == "int32" \
        else torch.randn(16, 64)
    b = tilelang.compile(epoch_rows(16, 64, op, dtype), out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, EPOCH_REF[op](a), atol=1e-4, rtol=1e-4)


def test_epoch_start_value_counted_once_cpu():
    a = torch.arange(1, 9, dtype=torch.float32)
    b = tilelang.compile(scalar_sum(seed=100.0), out_idx=[1], target="cpu")(a)
    assert b.item() == 136.0
    b = tilelang.compile(epoch_rows(4, 8, "max", seed=3.0), out_idx=[1], target="cpu")(
        torch.zeros(4, 8))
    assert b.tolist() == [3.0] * 4


def test_epoch_inside_serial_loop_cpu():
    """An epoch per tile of a serial loop, the max seeded from a running value (the online
    softmax's rescale): logsumexp."""
    K, BK = 256, 64

    @T.prim_func
    def main(A: T.Tensor((K,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64):
            a = T.alloc_fragment((BK,), "float32")
            run_max = T.alloc_fragment((1,), "float32")
            run_sum = T.alloc_fragment((1,), "float32")
            run_max[0] = -T.infinity("float32")
            run_sum[0] = 0.0
            for t in T.serial(K // BK):
                T.copy(A[t * BK], a)
                mx = T.alloc_reducer((1,), "float32", op="max")
                T.reducer_init(mx, run_max[0])
                for i in T.Parallel(BK):
                    T.reducer_update(mx[0], a[i])
                m = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(mx, m)
                sm = T.alloc_reducer((1,), "float32", op="sum")
                T.reducer_init(sm)
                for i in T.Parallel(BK):
                    T.reducer_update(sm[0], T.exp(a[i] - m[0]))
                s = T.alloc_fragment((1,), "float32")
                T.finalize_reducer(sm, s)
                run_sum[0] = T.exp(run_max[0] - m[0]) * run_sum[0] + s[0]
                run_max[0] = m[0]
            B[0] = T.log(run_sum[0]) + run_max[0]

    a = torch.randn(K)
    b = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, torch.logsumexp(a, 0).reshape(1), atol=1e-4, rtol=1e-4)


@needs_nvcc
def test_replicated_iterations_contribute_once_sm90a():
    """T.Parallel(8) over 128 threads runs each iteration on several threads; only the first
    copy of an iteration updates the reducer (the old lowering added it 16 times: 576, not
    36), and the start value enters the first thread's copy only."""
    body = cuda_source(scalar_sum(8, 128, seed=100.0), [1])
    guarded = re.findall(r"if \(\(\(\(int\)threadIdx\.x\) >> 1\) == 0\) \{\s*acc_ptr\[0\] = "
                         r"\(acc_ptr\[0\] \+ src_ptr\[\d\]\);", body)
    assert len(guarded) == 4, body
    assert "acc_ptr[0] = (acc_ptr[0] +" not in re.sub(r"if \([^\n]*\{\s*acc_ptr\[0\] = "
                                                      r"\(acc_ptr\[0\] \+", "", body)
    assert re.search(r"\(\(int\)threadIdx\.x\) == 0\) \? 0x1\.9p\+6f", body), body
    assert "tl::all_reduce_array<tl::SumOp, 1, 128, 0, 0>" in body


@needs_nvcc
def test_legacy_update_of_replicated_iteration_counted_once_sm90a():
    """The older form (acc[0] += x) gets the same one-contribution-per-iteration guard."""

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128):
            src = T.alloc_fragment((8,), "float32")
            T.copy(A, src)
            acc = T.alloc_reducer((1,), "float32", op="sum")
            T.clear(acc)
            for i in T.Parallel(8):
                acc[0] += src[i]
            T.finalize_reducer(acc)
            B[0] = acc[0]

    body = cuda_source(main, [1])
    assert len(re.findall(r"== 0\) \{\s*acc_ptr\[0\] = \(acc_ptr\[0\] \+", body)) == 4, body


@needs_nvcc
@pytest.mark.parametrize("op,combine", [("bitand", "BitAndOp"), ("bitor", "BitOrOp"),
                                        ("bitxor", "BitXorOp")])
def test_bitwise_epoch_sm90a(op, combine):
    body = cuda_source(epoch_rows(16, 64, op, "int32"), [1])
    assert f"tl::all_reduce_array<tl::{combine}, 16, 128, 0, 0>" in body


def _epoch_error(make_body, match, exc=LoweringError):
    with pytest.raises(exc, match=match):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
            with T.Kernel(1, threads=32):
                src = T.alloc_fragment((8,), "float32")
                T.copy(A, src)
                acc = T.alloc_reducer((1,), "float32", op="sum")
                out = T.alloc_fragment((1,), "float32")
                make_body(acc, src, out)
                T.copy(out, B)

        tilelang.compile(main, out_idx=[1], target="cpu")


def test_epoch_errors():
    @T.macro
    def upd(acc, src):
        for i in T.Parallel(8):
            T.reducer_update(acc[0], src[i])

    def double_init(acc, src, out):
        T.reducer_init(acc)
        T.reducer_init(acc)
        upd(acc, src)
        T.finalize_reducer(acc, out)

    def before_init(acc, src, out):
        upd(acc, src)
        T.finalize_reducer(acc, out)

    def never_finalized(acc, src, out):
        T.reducer_init(acc)
        upd(acc, src)

    def plain_store(acc, src, out):
        T.reducer_init(acc)
        for i in T.Parallel(8):
            acc[0] += src[i]
        T.finalize_reducer(acc, out)

    def plain_read(acc, src, out):
        T.reducer_init(acc)
        upd(acc, src)
        out[0] = acc[0]
        T.finalize_reducer(acc, out)

    def finalize_in_loop(acc, src, out):
        T.reducer_init(acc)
        for _ in T.serial(2):
            upd(acc, src)
            T.finalize_reducer(acc, out)

    def outside_parallel(acc, src, out):
        T.reducer_init(acc)
        T.reducer_update(acc[0], src[0])
        T.finalize_reducer(acc, out)

    for body, match in [(double_init, "double T.reducer_init"),
                        (before_init, "before T.reducer_init"),
                        (never_finalized, "never finalized"),
                        (plain_store, "illegal store to reducer acc"),
                        (plain_read, "illegal read of reducer acc"),
                        (finalize_in_loop, "not in the scope of its T.reducer_init"),
                        (outside_parallel, "outside any T.Parallel")]:
        _epoch_error(T.macro(body), match)


def test_epoch_argument_errors():
    def half_start(acc, src, out):
        T.reducer_init(acc, T.float16(1.0))

    _epoch_error(T.macro(half_start), "does not match reducer acc", exc=DSLError)
    with pytest.raises(AssertionError, match="integer dtype"):  # as the public API raises it
        @T.prim_func
        def main(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                T.alloc_reducer((1,), "float32", op="bitand")


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 128, 256])
def test_replicated_iterations_gpu(threads):
    a = torch.arange(1, 9, dtype=torch.float32, device="cuda")
    b = tilelang.compile(scalar_sum(8, threads, seed=100.0), out_idx=[1], target="cuda")(a)
    assert b.item() == 136.0


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["sum", "max", "min", "bitand", "bitor", "bitxor"])
def test_epoch_rows_gpu(op):
    dtype = "int32" if op.startswith("bit") else "float32"
    a = torch.randint(0, 2**31 - 1, (16, 64), dtype=torch.int32) if dtype == "int32" \
        else torch.randn(16, 64)
    b = tilelang.compile(epoch_rows(16, 64, op, dtype), out_idx=[1], target="cuda")(a.cuda())
    torch.testing.assert_close(b.cpu(), EPOCH_REF[op](a), atol=1e-4, rtol=1e-4)


def _counted_once_per_thread(case, op="sum"):
    """Older-form reducer programs CUDA would count once per thread (128 copies)."""

    @T.prim_func
    def main(a: T.Tensor((16, 8), "float32"), o: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=128) as _:
            r = T.alloc_reducer((16,), "float32", op=op)
            if case == "copy":
                T.copy(a[:, 0], r)
            else:
                T.clear(r)
            for k in T.serial(2):
                if case == "serial":
                    r[k] += a[k, 0]
                else:
                    for i, j in T.Parallel(16, 8):
                        r[i] += a[i, j]
                    if case == "again":
                        T.finalize_reducer(r)
            if case != "again":
                T.finalize_reducer(r)
            T.copy(r, o)

    return main


@pytest.mark.parametrize("case, message", [
    ("serial", r"store to reducer r outside any T.Parallel loop"),
    ("again", r"reducer r is updated after T.finalize_reducer"),
    ("copy", r"T.copy into reducer r: every thread's copy would hold the values")])
def test_older_form_counted_once_per_thread_is_an_error(case, message):
    with pytest.raises(LoweringError, match=r"(?s)" + message + r".*test_reducer.py:\d+"):
        tilelang.compile(_counted_once_per_thread(case), target="cpu")
    # max keeps its value when a contribution repeats: nothing to refuse
    tilelang.compile(_counted_once_per_thread(case, op="max"), target="cpu")
