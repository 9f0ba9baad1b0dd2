"""T.sync_threads(barrier_id, arrive_count): a named barrier over part (or all) of the block."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, DSLTypeError

SM80, SM90 = "cuda -arch=sm_80", "cuda -arch=sm_90a"


def _body(src: str) -> str:
    return src[src.index('extern "C" __global__'):]


def _reverse_in_half_block():
    """The first 128 of 256 threads reverse a tile among themselves; the others copy."""
    @T.prim_func
    def main(A: T.Tensor((256,), T.int32), B: T.Tensor((256,), T.int32)):
        with T.Kernel(1, threads=256):
            tx = T.get_thread_binding()
            S = T.alloc_shared((128,), T.int32)
            v = T.alloc_var(T.int32)
            if tx < 128:
                S[tx] = A[tx]
                T.sync_threads(1, 128)
                v = S[127 - tx]
                T.sync_threads(1, 128)
                S[tx] = v
                T.sync_threads(1, 128)
                B[tx] = S[tx]
            else:
                B[tx] = A[tx]
    return main


def _reverse(*sync):
    @T.prim_func
    def main(A: T.Tensor((128,), T.float32), B: T.Tensor((128,), T.float32)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128,), T.float32)
            for i in T.Parallel(128):
                S[i] = A[i]
            T.sync_threads(*sync)
            for i in T.Parallel(128):
                B[i] = S[127 - i]
    return main


def test_named_barrier_emits_barrier_sync_over_the_group():
    src = _body(tilelang.compile(_reverse_in_half_block(), target=SM90).get_kernel_source())
    assert src.count("tl::__sync_thread_partial(1, 128);") == 3
    assert "__syncthreads" not in src


@pytest.mark.parametrize("sync, block_syncs", [((2,), 0), ((2, 128), 0), ((2, 64), 1)])
def test_inject_thread_sync_counts_a_whole_block_named_barrier_as_a_sync(sync, block_syncs):
    """A named barrier over the whole block (arrive_count omitted or 128) orders the shared
    write before the read, so no __syncthreads is added; one over part of the block does not,
    so one is."""
    src = _body(tilelang.compile(_reverse(*sync), target=SM80).get_kernel_source())
    n = sync[1] if len(sync) > 1 else 128
    assert src.count(f"tl::__sync_thread_partial(2, {n});") == 1
    assert src.count("__syncthreads()") == block_syncs


def test_named_barrier_on_the_cpu_is_met_by_the_single_thread():
    k = tilelang.compile(_reverse(2, 128), out_idx=[1], target="cpu")
    a = torch.randn(128)
    assert torch.equal(k(a), a.flip(0))


@pytest.mark.parametrize("args, err, match", [
    ((16, 128), DSLError, "barrier_id 16 is out of range"),
    ((1, 100), DSLError, "multiple of 32"),
    ((1, 256), DSLError, "at most the block's 128 threads"),
    ((0, 64), DSLError, "barrier 0 is the whole block's"),
    ((1.0, 128), DSLTypeError, "barrier_id must be a Python int or an integer expression"),
    ((-1, 128), DSLError, "barrier_id must be at least 0"),
])
def test_named_barrier_errors(args, err, match):
    with pytest.raises(err, match=match):
        @T.prim_func
        def main(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                T.sync_threads(*args)
                A[0] = 1.0


@pytest.mark.gpu
def test_named_barrier_on_gpu():
    k = tilelang.compile(_reverse_in_half_block(), out_idx=[1], target="cuda")
    a = torch.arange(256, dtype=torch.int32, device="cuda")
    want = torch.cat([a[:128].flip(0), a[128:]])
    assert torch.equal(k(a), want)
    k = tilelang.compile(_reverse(2, 128), out_idx=[1], target="cuda")
    x = torch.randn(128, device="cuda")
    assert torch.equal(k(x), x.flip(0))


# ids computed at run time, T.named_barrier_arrive ------------------------------------------
def _runtime_ids():
    """Each warp group of 128 threads syncs on its own barrier, chosen from the thread index."""
    @T.prim_func
    def main(A: T.Tensor((256,), T.int32), B: T.Tensor((256,), T.int32)):
        with T.Kernel(1, threads=256):
            tx = T.launch_thread("threadIdx.x", 256)  # the kernel's own thread index
            S = T.alloc_shared((256,), T.int32)
            S[tx] = A[tx]
            T.sync_threads(tx // 128 + 1, 128)
            B[tx] = S[(tx // 128) * 128 + 127 - tx % 128]
    return main


def test_runtime_barrier_id_is_computed_in_the_kernel():
    body = _body(tilelang.compile(_runtime_ids(), target=SM90).get_kernel_source())
    assert re.search(r"tl::__sync_thread_partial\(\(+\(int\)threadIdx\.x\) >> 7\) \+ 1\), 128\);",
                     body), body
    # sync insertion cannot tell which group a runtime barrier orders: it keeps its own sync
    assert "__syncthreads()" in body


def _producer_consumer():
    """Warp 0 publishes a value and arrives on barrier 10 (no wait); warp 1 waits there,
    reads it and arrives on barrier 11, which warp 0 waits on (as in the public issue 2188)."""
    @T.prim_func
    def main(inp: T.Tensor((1,), T.int32), out: T.Tensor((1,), T.int32)):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            slot = T.alloc_shared((1,), T.int32)
            if tx < 32:
                if tx == 0:
                    slot[0] = inp[0] + 1
                T.named_barrier_arrive(10, 64)
                T.sync_threads(11, 64)
            else:
                T.sync_threads(10, 64)
                if tx == 32:
                    out[0] = slot[0]
                T.named_barrier_arrive(11, 64)
    return main


def test_named_barrier_arrive_source_and_ptx():
    k = tilelang.compile(_producer_consumer(), out_idx=[1], target=SM90)
    body = _body(k.get_kernel_source())
    for bar in (10, 11):
        assert body.count(f"tl::__named_barrier_arrive({bar}, 64);") == 1
        assert body.count(f"tl::__sync_thread_partial({bar}, 64);") == 1
    assert "__syncthreads" not in body  # no block barrier inside the diverged branches
    ptx = k.get_ptx()
    assert "barrier.arrive" in ptx and "barrier.sync" in ptx
    assert "bar.arrive" not in ptx  # the unaligned form: lanes may arrive diverged


def test_named_barriers_on_the_cpu_hold_already():
    @T.prim_func
    def main(A: T.Tensor((128,), T.float32), B: T.Tensor((128,), T.float32)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128,), T.float32)
            for i in T.Parallel(128):
                S[i] = A[i]
            T.named_barrier_arrive(3, 128)
            T.sync_threads(3, 128)
            for i in T.Parallel(128):
                B[i] = S[127 - i]

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(128)
    assert torch.equal(k(a), a.flip(0))


@pytest.mark.parametrize("call, err, match", [
    (lambda: T.named_barrier_arrive(0, 64), DSLError, "barrier 0 is the block's"),
    (lambda: T.named_barrier_arrive(1, 48), DSLError, "multiple of 32"),
    (lambda: T.named_barrier_arrive(16, 64), DSLError, "out of range"),
    (lambda: T.sync_threads(T.float32(1.0), 64), DSLTypeError, "must be an integer"),
])
def test_named_barrier_arrive_errors(call, err, match):
    with pytest.raises(err, match=match):
        @T.prim_func
        def main(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                call()
                A[0] = 1.0


def test_launch_thread_of_another_extent_is_refused():
    with pytest.raises(DSLError, match="launched threadIdx.x with extent 128"):
        @T.prim_func
        def main(A: T.Tensor((128,), T.float32)):
            with T.Kernel(1, threads=128):
                tx = T.launch_thread("threadIdx.x", 256)
                A[tx] = 1.0


@pytest.mark.gpu
def test_named_barrier_arrive_and_runtime_ids_on_gpu():
    k = tilelang.compile(_producer_consumer(), out_idx=[1], target="cuda")
    assert k(torch.tensor([41], dtype=torch.int32, device="cuda")).item() == 42
    k = tilelang.compile(_runtime_ids(), out_idx=[1], target="cuda")
    a = torch.arange(256, dtype=torch.int32, device="cuda")
    want = torch.cat([a[:128].flip(0), a[128:].flip(0)])
    assert torch.equal(k(a), want)
