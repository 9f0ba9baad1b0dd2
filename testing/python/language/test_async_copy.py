"""Explicit asynchronous copies: ``T.ptx_cp_async`` / ``T.ptx_commit_group`` /
``T.ptx_wait_group``, ``T.cp_async_barrier_noinc``, ``T.async_copy``, ``T.tma_copy`` (loads with
a leader scope, stores) and ``T.tma_store_wait``: results on the CPU backend, the PTX nvcc makes
for sm_90a and sm_80, the device ops the passes see, argument errors and GPU runs."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError, LoweringError

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def _gpu(major: int):
    ok = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= major
    return pytest.mark.skipif(not ok, reason=f"needs an sm_{major}0 GPU")


def _ptx(prog, target=SM90, **kw):
    return tilelang.compile(prog, target=target, **kw).get_ptx()


def _device_calls(prog, target, name):
    from tilelang.ir_utils import find_all
    import tvm

    mod = tilelang.lower(prog, target=target, stage="tile")
    f = mod[mod.get_global_vars()[0]]
    return find_all(f.body, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
                    c.op.name == f"tl.device.{name}")


# programs ---------------------------------------------------------------------------------
def bytes_through_shared(n=64, per=16, threads=1):
    """Y = X, ``per`` bytes at a time through a shared tile with one cp.async each."""

    @T.prim_func
    def main(X: T.Tensor((n,), "uint8"), Y: T.Tensor((n,), "uint8")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((per,), "uint8")
            for ko in T.serial(n // per):
                T.ptx_cp_async(T.access_ptr(S[0], "w", per), T.access_ptr(X[ko * per], "r", per),
                               per)
                T.ptx_commit_group()
                T.ptx_wait_group(0)
                for i in T.serial(per):
                    Y[ko * per + i] = S[i]

    return main


def rows_through_shared(rows=4, cols=16, valid_rows=4):
    """Y = X for a (rows, cols) fp16 tile, 8 elements (16 bytes) per cp.async into a 2-D
    shared tile; rows from ``valid_rows`` on are zero-filled through the predicate."""

    @T.prim_func
    def main(X: T.Tensor((rows, cols), "float16"), Y: T.Tensor((rows, cols), "float16")):
        with T.Kernel(1, threads=1):
            S = T.alloc_shared((rows, cols), "float16")
            for r in T.serial(rows):
                for c in T.serial(cols // 8):
                    T.ptx_cp_async(T.access_ptr(S[r, c * 8], "w", 8),
                                   T.access_ptr(X[r, c * 8], "r", 8), 8,
                                   predicate=r < valid_rows)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            for r in T.serial(rows):
                for c in T.serial(cols):
                    Y[r, c] = S[r, c]

    return main


def lanes_through_shared(dtype="float16", lanes=4, n=64, threads=32):
    """One element per lane of a vectorized loop: widened into one copy of all lanes."""

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((n,), dtype)
            for i in T.vectorized(lanes):
                T.ptx_cp_async(T.access_ptr(S[i], "w", 1), T.access_ptr(X[i], "r", 1), 1)
            T.ptx_commit_group()
            T.ptx_wait_group(0)
            for i in T.serial(lanes):
                Y[i] = S[i]

    return main


def async_tile(M=130, K=32, bm=128, threads=128):
    """Y = X through T.async_copy of bm-row tiles (rows past M read as zero), then a wait."""

    @T.prim_func
    def main(X: T.Tensor((M, K), "float16"), Y: T.Tensor((T.ceildiv(M, bm) * bm, K), "float16")):
        with T.Kernel(T.ceildiv(M, bm), threads=threads) as b:
            S = T.alloc_shared((bm, K), "float16")
            T.async_copy(X[b * bm:(b + 1) * bm, 0:K], S)
            T.ptx_wait_group(0)
            T.copy(S, Y[b * bm:(b + 1) * bm, 0:K])

    return main


def async_tile_no_wait():
    @T.prim_func
    def main(X: T.Tensor((128, 32), "float16"), Y: T.Tensor((128, 32), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128, 32), "float16")
            T.async_copy(X, S)
            Y[0, 0] = X[0, 0]

    return main


def noinc_producer_consumer(n=8, per=8):
    """Warp 1 copies a row into shared memory with cp.async and arrives through
    cp.async.mbarrier.arrive.noinc; warp 0 waits on the barrier and writes the row out."""

    @T.prim_func
    def main(X: T.Tensor((32 * per,), "float16"), Y: T.Tensor((32 * per,), "float16")):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            S = T.alloc_shared((32 * per,), "float16")
            ready = T.alloc_barrier(32)
            if tx >= 32:
                T.ptx_cp_async(T.access_ptr(S[(tx - 32) * per], "w", per),
                               T.access_ptr(X[(tx - 32) * per], "r", per), per)
                T.cp_async_barrier_noinc(ready)
            else:
                T.mbarrier_wait_parity(ready, 0)
                for i in T.serial(per):
                    Y[tx * per + i] = S[tx * per + i]

    return main


def per_warp_rows(M=32, K=1024, threads=256):
    """Each warp loads its own row (1024 floats: four boxes) with its own leader and barrier."""
    warps = threads // 32

    @T.prim_func
    def main(A: T.Tensor((M, K), "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(M // warps, threads=threads) as pid:
            tid = T.get_thread_binding()
            w = tid // 32
            S = T.alloc_shared((warps, K), "float32")
            bars = T.alloc_barrier([32] * warps)
            T.tma_copy(A[pid * warps + w, 0:K], S[w, 0:K], barrier=bars[w],
                       leader_scope_threads=32)
            T.mbarrier_arrive(bars[w])
            T.mbarrier_wait_parity(bars[w], 0)
            if tid % 32 == 0:
                B[pid * warps + w] = S[w, K - 1]

    return main


def tma_round_trip(M=128, N=64, bm=64, read=True):
    """B = A + 1 tile by tile: TMA load (every thread arrives), add, TMA store, wait."""

    @T.prim_func
    def main(A: T.Tensor((M, N), "float16"), B: T.Tensor((M, N), "float16")):
        with T.Kernel(M // bm, threads=128) as b:
            S = T.alloc_shared((bm, N), "float16")
            bar = T.alloc_barrier(128)
            T.tma_copy(A[b * bm, 0], S, barrier=bar)
            T.barrier_arrive(bar)
            T.barrier_wait(bar, 0)
            for r, c in T.Parallel(bm, N):
                S[r, c] = S[r, c] + T.float16(1)
            T.tma_copy(S, B[b * bm, 0])
            T.tma_store_wait(read=read)

    return main


def staged_tma_store(M=256, N=256, K=64, bm=128):
    """C = A @ B, each block's result going out through a shared tile that stages the
    accumulator fragment (stored in the TMA swizzle) and an explicit TMA store."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(M // bm, threads=128) as b:
            A_s = T.alloc_shared((bm, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((bm, N), "float32")
            C_s = T.alloc_shared((bm, N), "float16")
            T.copy(A[b * bm, 0], A_s)
            T.copy(B[0, 0], B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C_s)
            T.tma_copy(C_s, C[b * bm, 0])
            T.tma_store_wait(0)

    return main


def multicast_ring(iters=8, slots=4, tile=64, cluster=2, mask=0b11):
    """Each block of a cluster of ``cluster`` blocks copies A[k] out through a ring of
    ``slots`` shared tiles; the blocks of ``mask`` receive the tiles by multicast from the
    lowest of them, the others load their own.  A cluster barrier closes every round of the
    ring, so the issuer never overwrites a peer's slot still being stored.  B[block] == A for
    every block."""

    @T.prim_func
    def main(A: T.Tensor((iters, tile, tile), "float32"),
             B: T.Tensor((cluster, iters, tile, tile), "float32")):
        with T.ClusterKernel(cluster, threads=128, cluster_dims=(cluster, 1, 1)) as pid:
            S = T.alloc_shared((slots, tile, tile), "float32")
            bars = T.alloc_barrier([128] * slots)
            for k in T.serial(iters):
                slot = k % slots
                T.tma_copy(A[k, :, :], S[slot, :, :], barrier=bars[slot], cluster_mask=mask)
                T.mbarrier_arrive(bars[slot])
                T.mbarrier_wait_parity(bars[slot], (k // slots) % 2)
                T.copy(S[slot, :, :], B[pid, k, :, :])
                if slot == slots - 1:
                    # Flow control: no block multicasts into a slot of the next round before
                    # every block of the cluster has stored this round's tiles.
                    T.cluster_sync()

    return main


# CPU --------------------------------------------------------------------------------------
def test_cp_async_groups_copy_on_the_cpu():
    k = tilelang.compile(bytes_through_shared(), target="cpu")
    x = torch.randint(0, 256, (64,), dtype=torch.uint8)
    y = torch.zeros(64, dtype=torch.uint8)
    k(x, y)
    assert torch.equal(x, y)


def test_cp_async_of_2d_tile_elements_and_predicate_on_the_cpu():
    k = tilelang.compile(rows_through_shared(valid_rows=3), target="cpu")
    x = torch.randn(4, 16).half()
    y = torch.full((4, 16), 7.0).half()
    k(x, y)
    want = x.clone()
    want[3:] = 0
    assert torch.equal(y, want)


def test_per_lane_copies_are_widened_on_the_cpu():
    k = tilelang.compile(lanes_through_shared(threads=1), target="cpu")
    x = torch.randn(64).half()
    y = torch.zeros(64).half()
    k(x, y)
    assert torch.equal(y[:4], x[:4]) and not y[4:].any()


def test_async_copy_zero_fills_rows_outside_the_source_on_the_cpu():
    k = tilelang.compile(async_tile(), target="cpu")
    x = torch.randn(130, 32).half()
    y = torch.full((256, 32), 7.0).half()
    k(x, y)
    assert torch.equal(y[:130], x) and not y[130:].any()


def test_mbarrier_arrival_has_no_cpu_form():
    with pytest.raises(LoweringError, match="barrier"):
        tilelang.compile(noinc_producer_consumer(), target="cpu")


# device ops and passes --------------------------------------------------------------------
def test_user_waits_are_kept_as_written():
    """Neither InjectAsyncWaits nor the pipeline adds or drops cp.async waits of the user."""
    waits = _device_calls(bytes_through_shared(threads=32), SM90, "cp_async_wait")
    assert [int(w.args[0]) for w in waits] == [0]
    assert len(_device_calls(bytes_through_shared(threads=32), SM90, "cp_async_commit")) == 1


def test_async_copy_commits_and_does_not_wait():
    prog = async_tile_no_wait()
    assert _device_calls(prog, SM90, "cp_async")
    assert len(_device_calls(prog, SM90, "cp_async_commit")) == 1
    assert not _device_calls(prog, SM90, "cp_async_wait")


def test_noinc_arrival_is_a_device_op_committing_on_the_mbarrier():
    from tilelang.device import effects, sm80

    assert sm80.CP_ASYNC_ARRIVE_NOINC.effect.commits == effects.Mechanism.MBARRIER
    (arrive,) = _device_calls(noinc_producer_consumer(), SM90, "cp_async_mbarrier_arrive_noinc")
    assert arrive.args[0].op.name == "tirx.address_of"


def test_tma_copy_load_expects_bytes_without_arriving():
    prog = tma_round_trip()
    assert [int(c.args[1]) for c in _device_calls(prog, SM90, "mbarrier_expect_tx")] == [8192]
    assert not _device_calls(prog, SM90, "mbarrier_arrive_expect_tx")
    assert len(_device_calls(prog, SM90, "mbarrier_arrive")) == 1  # the program's own


def test_long_contiguous_box_is_split():
    loads = _device_calls(per_warp_rows(), SM90, "tma_load")
    assert len(loads) == 4  # 1024 floats: four boxes of 256


def test_multicast_is_issued_by_the_masks_lowest_rank():
    (mc,) = _device_calls(multicast_ring(cluster=4, mask=0b1010), SM90, "tma_load_multicast")
    assert int(mc.args[3]) == 0b1010
    src = tilelang.compile(multicast_ring(cluster=4, mask=0b1010), target=SM90) \
        .get_kernel_source()
    # rank 1 multicasts, ranks 0 and 2 load their own, rank 3 only expects the bytes
    assert "tl::block_rank_in_cluster() == 1" in src
    assert "((10 >> tl::block_rank_in_cluster()) & 1) == 0" in src
    # every block's barriers are initialized before any block multicasts into them
    head = src[src.index("fence_mbarrier_init"):src.index("for (int k")]
    assert "tl::cluster_sync();" in head and "__syncthreads" not in head


# PTX --------------------------------------------------------------------------------------
@needs_nvcc
@pytest.mark.parametrize("target", [SM90, SM80])
def test_cp_async_ptx(target):
    ptx = _ptx(bytes_through_shared(threads=32), target)
    assert "cp.async.cg.shared.global" in ptx and ", 16" in ptx
    assert "cp.async.commit_group" in ptx and "cp.async.wait_group 0" in ptx


@needs_nvcc
@pytest.mark.parametrize("dtype,lanes,width", [("float16", 4, 8), ("int4", 32, 16)])
def test_per_lane_copies_are_one_cp_async(dtype, lanes, width):
    ptx = _ptx(lanes_through_shared(dtype, lanes, n=128), SM80)
    copies = [ln for ln in ptx.splitlines() if "cp.async.c" in ln and "shared.global" in ln]
    assert len(copies) == 1 and f", {width}" in copies[0]


@needs_nvcc
def test_async_copy_ptx_is_predicated_and_unwaited():
    ptx = _ptx(async_tile(), SM90, pass_configs={"tl.disable_tma_lower": True})
    assert "cp.async.cg.shared.global" in ptx and "cp.async.commit_group" in ptx


@needs_nvcc
def test_noinc_arrive_ptx():
    ptx = _ptx(noinc_producer_consumer(), SM90)
    assert "cp.async.mbarrier.arrive.noinc.shared.b64" in ptx


@needs_nvcc
@pytest.mark.parametrize("read,wait", [(True, "cp.async.bulk.wait_group.read 0"),
                                       (False, "cp.async.bulk.wait_group 0")])
def test_tma_store_ptx(read, wait):
    ptx = _ptx(tma_round_trip(read=read), SM90)
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx
    assert "cp.async.bulk.tensor.2d.global.shared::cta" in ptx
    assert "cp.async.bulk.commit_group" in ptx and wait in ptx
    assert "mbarrier.expect_tx" in ptx and "fence.proxy.async" in ptx


@needs_nvcc
def test_staged_fragment_tma_store_ptx():
    # the staging tile's 512-byte rows go out in four 128-byte-swizzled boxes of 64 columns
    ptx = _ptx(staged_tma_store(), SM90)
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta") == 4
    assert "cp.async.bulk.wait_group.read 0" in ptx


def test_staged_fragment_tma_store_on_the_cpu():
    k = tilelang.compile(staged_tma_store(), out_idx=[2], target="cpu")
    a, b = torch.randn(256, 64).half(), torch.randn(64, 256).half()
    torch.testing.assert_close(k(a, b), (a.float() @ b.float()).half(), atol=0.1, rtol=1e-2)


@needs_nvcc
def test_per_warp_leaders_ptx():
    src = tilelang.compile(per_warp_rows(), target=SM90).get_kernel_source()
    assert "% 32) == 0" in src or "& 31) == 0" in src
    ptx = _ptx(per_warp_rows(), SM90)
    assert ptx.count("cp.async.bulk.tensor.2d.shared::cluster.global") == 4


@needs_nvcc
def test_multicast_ptx():
    ptx = _ptx(multicast_ring(), SM90)
    lines = [ln for ln in ptx.splitlines() if "multicast::cluster" in ln]
    assert lines and all("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx"
                         "::bytes" in ln for ln in lines)
    assert "barrier.cluster.arrive" in ptx and "barrier.cluster.wait" in ptx


# errors -----------------------------------------------------------------------------------
@pytest.mark.parametrize("mask,cluster,match", [
    (0b101, 2, r"cluster_mask=0b101\) names block ranks beyond the cluster: the kernel runs "
               r"in clusters of 2 blocks"),
    (0b11, 1, "a kernel without clusters")])
def test_multicast_mask_must_name_blocks_of_the_cluster(mask, cluster, match):
    with pytest.raises(LoweringError, match=match):
        tilelang.compile(multicast_ring(cluster=cluster, mask=mask), target=SM90)


def test_multicast_arguments():
    with pytest.raises(DSLError, match="cluster_mask must be an int with 1 to 16 low bits"):
        multicast_ring(mask=0)
    with pytest.raises(DSLError, match="cluster_mask must be an int"):
        multicast_ring(mask=1 << 16)

    with pytest.raises(DSLError, match="a store has none"):
        @T.prim_func
        def store(A: T.Tensor((64, 64), "float16")):
            with T.ClusterKernel(2, threads=128, cluster_dims=2):
                S = T.alloc_shared((64, 64), "float16")
                T.tma_copy(S, A[0, 0], cluster_mask=0b11)
    with pytest.raises(LoweringError, match=r"T.tma_copy A\[k, 0:64, 0:64\] -> S\[slot, .*a "
                                            r"TMA load has no CPU form"):
        tilelang.compile(multicast_ring(), target="cpu")


def _bad_store(case: str):
    """A T.tma_copy store no TMA store can do: one that converts float32 to float16, or one of
    half the shared tile."""
    dt = "float32" if case == "converts" else "float16"

    @T.prim_func
    def main(A: T.Tensor((128, 64), dt), C: T.Tensor((128, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128, 64), dt)
            T.copy(A, S)
            if case == "converts":
                T.tma_copy(S, C)
            else:
                T.tma_copy(S[0:64, :], C[0:64, :])
            T.tma_store_wait(0)

    return main


@pytest.mark.parametrize("target", [SM90, "cpu"])
@pytest.mark.parametrize("case,match", [
    ("converts", r"T.tma_copy S -> C: C is float16 and the shared tile S float32; TMA moves "
                 r"bytes, it does not convert"),
    ("part", r"T.tma_copy S\[0:64, 0:64\] -> C\[0:64, 0:64\]: the shared side is a part of S, "
             r"not the whole tile")])
def test_tma_store_is_refused_alike_on_every_target(case, match, target):
    # the CPU form refuses what the GPU's would: a program is not correct on one and
    # impossible on the other
    with pytest.raises(LoweringError, match=match) as e:
        tilelang.compile(_bad_store(case), target=target)
    assert "test_async_copy.py" in str(e.value)  # the user's line


def test_a_device_op_on_the_cpu_is_named_with_its_line():
    @T.prim_func
    def main(A: T.Tensor((64,), "float16"), C: T.Tensor((64,), "float16")):
        with T.Kernel(1, threads=64):
            S = T.alloc_shared((64,), "float16")
            T.copy(A, S)
            T.fence_proxy_async()
            T.copy(S, C)

    with pytest.raises(LoweringError, match=r"the CPU backend has no form of the device op "
                                            r"tl.device.fence_proxy_async") as e:
        tilelang.compile(main, target="cpu")
    assert "test_async_copy.py" in str(e.value) and "T.fence_proxy_async()" in str(e.value)


def test_cp_async_width_must_be_legal():
    with pytest.raises(DSLError, match="4, 8 or 16 bytes"):
        @T.prim_func
        def bad(X: T.Tensor((64,), "uint8")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((64,), "uint8")
                T.ptx_cp_async(T.access_ptr(S[0], "w", 3), T.access_ptr(X[0], "r", 3), 3)


def test_cp_async_goes_global_to_shared():
    with pytest.raises(DSLError, match="global -> shared"):
        @T.prim_func
        def bad(X: T.Tensor((64,), "uint8")):
            with T.Kernel(1, threads=32):
                S = T.alloc_shared((64,), "uint8")
                T.ptx_cp_async(T.access_ptr(X[0], "w", 16), T.access_ptr(S[0], "r", 16), 16)


def test_async_copy_refuses_shared_to_shared():
    @T.prim_func
    def main(A: T.Tensor((4,), "float16")):
        with T.Kernel(1, threads=1):
            S0 = T.alloc_shared((4,), "float16")
            S1 = T.alloc_shared((4,), "float16")
            T.async_copy(S0, S1)

    with pytest.raises(LoweringError, match="only supports global->shared"):
        tilelang.compile(main, target=SM90)


def test_tma_copy_arguments():
    with pytest.raises(DSLError, match="multiple of the warp size"):
        @T.prim_func
        def bad(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float16")
                b = T.alloc_barrier(128)
                T.tma_copy(A[0, 0], S, barrier=b, leader_scope_threads=48)
    with pytest.raises(DSLError, match="needs barrier="):
        @T.prim_func
        def bad2(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128):
                S = T.alloc_shared((64, 64), "float16")
                T.tma_copy(A[0, 0], S)


# GPU --------------------------------------------------------------------------------------
@pytest.mark.gpu
@_gpu(8)
def test_cp_async_runs():
    for prog, x in ((bytes_through_shared(threads=32),
                     torch.randint(0, 256, (64,), dtype=torch.uint8, device="cuda")),
                    (lanes_through_shared(n=64), torch.randn(64, device="cuda").half())):
        k = tilelang.compile(prog, target="cuda")
        y = torch.zeros_like(x)
        k(x, y)
        n = 64 if x.dtype == torch.uint8 else 4
        assert torch.equal(y[:n], x[:n])


@pytest.mark.gpu
@_gpu(8)
def test_async_copy_and_predicate_run():
    k = tilelang.compile(async_tile(), target="cuda")
    x = torch.randn(130, 32, device="cuda").half()
    y = torch.full((256, 32), 7.0, device="cuda").half()
    k(x, y)
    assert torch.equal(y[:130], x) and not y[130:].any()
    k2 = tilelang.compile(rows_through_shared(valid_rows=3), target="cuda")
    x = torch.randn(4, 16, device="cuda").half()
    y = torch.full((4, 16), 7.0, device="cuda").half()
    k2(x, y)
    assert torch.equal(y[:3], x[:3]) and not y[3:].any()


@pytest.mark.gpu
@_gpu(9)
def test_noinc_producer_consumer_runs():
    k = tilelang.compile(noinc_producer_consumer(), target="cuda")
    x = torch.randn(256, device="cuda").half()
    y = torch.zeros_like(x)
    k(x, y)
    assert torch.equal(y, x)


@pytest.mark.gpu
@_gpu(9)
def test_tma_copy_per_warp_and_store_run():
    k = tilelang.compile(per_warp_rows(), target="cuda")
    a = torch.randn(32, 1024, device="cuda")
    b = torch.zeros(32, device="cuda")
    k(a, b)
    assert torch.equal(b, a[:, -1])
    for read in (True, False):
        k = tilelang.compile(tma_round_trip(read=read), target="cuda")
        a = torch.randn(128, 64, device="cuda").half()
        b = torch.zeros_like(a)
        k(a, b)
        torch.cuda.synchronize()
        assert torch.equal(b, a + 1)


@pytest.mark.gpu
@_gpu(9)
def test_staged_fragment_tma_store_runs():
    k = tilelang.compile(staged_tma_store(), out_idx=[2], target="cuda")
    a = torch.randn(256, 64, device="cuda").half()
    b = torch.randn(64, 256, device="cuda").half()
    torch.testing.assert_close(k(a, b), (a.float() @ b.float()).half(), atol=0.1, rtol=1e-2)


@pytest.mark.gpu
@_gpu(9)
@pytest.mark.parametrize("cluster,mask", [(2, 0b11), (2, 0b10), (4, 0b1101)])
def test_multicast_ring_runs(cluster, mask):
    """Every block ends with every tile, whether multicast to it or loaded by itself; the ring
    is cycled twice, so each slot and barrier is reused under both parities."""
    k = tilelang.compile(multicast_ring(cluster=cluster, mask=mask), out_idx=[1],
                         target="cuda")
    a = torch.randn(8, 64, 64, device="cuda")
    b = k(a)
    for rank in range(cluster):
        assert torch.equal(b[rank], a)
