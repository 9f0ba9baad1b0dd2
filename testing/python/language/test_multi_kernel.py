"""Several ``T.Kernel`` blocks in one function: each is its own device kernel (own grid, threads,
layouts, shared memory, pipeline), launched in program order by the one host function, so a
later kernel reads what an earlier one wrote."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def gemm_then_bias(M=256, N=256, K=128, bM=128, bN=128, bK=32, threads=128, threads2=256,
                   dtype="float16", stages=2):
    """Kernel 1: C = A @ B (pipelined gemm, fragment accumulator); kernel 2 (another grid and
    thread count): D = relu(C + bias), reading C from global memory."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype),
             Bias: T.Tensor((N,), "float32"), C: T.Tensor((M, N), "float32"),
             D: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            acc = T.alloc_fragment((bM, bN), "float32")
            T.clear(acc)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, acc)
            T.copy(acc, C[by * bM, bx * bN])
        with T.Kernel(M // 32, threads=threads2) as bx:
            tile = T.alloc_fragment((32, N), "float32")
            T.copy(C[bx * 32, 0], tile)
            for i, j in T.Parallel(32, N):
                tile[i, j] = T.max(tile[i, j] + Bias[j], 0.0)
            T.copy(tile, D[bx * 32, 0])

    return main


def _inputs(M=256, N=256, K=128, device="cpu"):
    torch.manual_seed(0)
    a = torch.randn(M, K, dtype=torch.float16, device=device)
    b = torch.randn(K, N, dtype=torch.float16, device=device)
    bias = torch.randn(N, device=device)
    return a, b, bias


def _reference(a, b, bias):
    c = a.float() @ b.float()
    return c, torch.relu(c + bias)


def test_second_kernel_reads_the_first_kernels_output_on_the_cpu():
    kernel = tilelang.compile(gemm_then_bias(), out_idx=[3, 4], target="cpu")
    a, b, bias = _inputs()
    c, d = kernel(a, b, bias)
    want_c, want_d = _reference(a, b, bias)
    torch.testing.assert_close(c, want_c, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(d, want_d, rtol=1e-3, atol=1e-3)


def test_kernels_with_shared_tiles_of_different_sizes_on_the_cpu():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32"),
             C: T.Tensor((128,), "float32")):
        with T.Kernel(2, threads=64) as bx:
            s = T.alloc_shared((64,), "float32")
            T.copy(A[bx * 64], s)
            for i in T.Parallel(64):
                B[bx * 64 + i] = s[63 - i]
        with T.Kernel(1, threads=128) as bx:
            t = T.alloc_shared((128,), "float32")
            T.copy(B, t)
            for i in T.Parallel(128):
                C[i] = t[i] * 2.0 + 1.0

    kernel = tilelang.compile(main, out_idx=[1, 2], target="cpu")
    a = torch.arange(128, dtype=torch.float32)
    b, c = kernel(a)
    want_b = a.view(2, 64).flip(1).reshape(-1)
    torch.testing.assert_close(b, want_b)
    torch.testing.assert_close(c, want_b * 2 + 1)


def test_out_of_bounds_in_the_second_kernel_names_it_on_the_cpu():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(64):
                B[i] = A[i]
        with T.Kernel(2, threads=32) as bx:
            for i in T.serial(40):
                B[bx * 40 + i] = B[bx * 40 + i] + 1.0  # block 1 runs past 64

    kernel = tilelang.compile(main, target="cpu")
    with pytest.raises(tilelang.errors.OutOfBoundsError, match="B\\[64\\]"):
        kernel(torch.zeros(64), torch.zeros(64))


@tilelang.jit
def two_step(A, block: int = 32):
    """The eager style of the public fused-MoE example: T.const sizes, two kernels."""
    M, N = T.const("M, N")
    A: T.Tensor((M, N), T.float32)
    H = T.empty((M, N), T.float32)
    O = T.empty((M, N), T.float32)
    with T.Kernel(T.ceildiv(M, block), threads=64) as bx:
        for i, j in T.Parallel(block, N):
            if bx * block + i < M:
                H[bx * block + i, j] = A[bx * block + i, j] * 3.0
    with T.Kernel(M, threads=32) as bx:
        for j in T.Parallel(N):
            O[bx, j] = H[bx, j] + H[bx, N - 1 - j]
    return H, O


def test_eager_function_with_two_kernels():
    a = torch.randn(70, 16)
    h, o = two_step(a)
    torch.testing.assert_close(h, a * 3)
    torch.testing.assert_close(o, a * 3 + (a * 3).flip(1))


def test_each_kernel_is_checked_against_the_thread_limit_alone():
    def prog(t1, t2):
        @T.prim_func
        def main(A: T.Tensor((1024,), "float32"), B: T.Tensor((1024,), "float32")):
            with T.Kernel(1, threads=t1) as bx:
                for i in T.Parallel(1024):
                    B[i] = A[i]
            with T.Kernel(1, threads=t2) as bx:
                for i in T.Parallel(1024):
                    B[i] = B[i] + 1.0
        return main

    # 1024 and 512 threads: fine apart (the product, 524288, was checked before)
    tilelang.lower(prog(1024, 512), target="cuda -arch=sm_80", stage="tile")
    with pytest.raises(LoweringError, match="2048 threads per block"):
        tilelang.lower(prog(128, 2048), target="cuda -arch=sm_80", stage="tile")


def _globals(source):
    return [ln for ln in source.splitlines() if "__global__" in ln and ln.rstrip().endswith("{")]


@needs_nvcc
def test_sm90a_source_has_one_global_function_per_kernel():
    kernel = tilelang.compile(gemm_then_bias(), out_idx=[3, 4], target="cuda -arch=sm_90a")
    src = kernel.get_kernel_source()
    heads = _globals(src)
    assert len(heads) == 2, heads
    first = src[src.index(heads[0]):src.index(heads[1])]
    second = src[src.index(heads[1]):]
    # kernel 1: warp-specialized TMA + wgmma gemm (a producer warp group added: 256 threads);
    # kernel 2: a plain 256-thread elementwise kernel without shared memory or barriers
    assert "__launch_bounds__(256)" in heads[0] and "__launch_bounds__(256)" in heads[1]
    assert "wgmma" in first and "mbarrier" in first
    assert "wgmma" not in second and "smem" not in second and "mbarrier" not in second
    ptx = kernel.get_ptx()
    assert ptx.count(".entry") == 2


@needs_nvcc
def test_sm80_pipelines_each_kernel_in_its_own_shared_memory():
    kernel = tilelang.compile(gemm_then_bias(threads=128, threads2=64), out_idx=[3, 4],
                              target="cuda -arch=sm_80")
    heads = _globals(kernel.get_kernel_source())
    assert len(heads) == 2
    assert "__launch_bounds__(128)" in heads[0] and "__launch_bounds__(64)" in heads[1]
    assert "cp.async" in kernel.get_ptx()


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["sm80", "default"])
def test_two_kernels_run_in_order_on_the_gpu(path):
    """On this GPU's own architecture (a cubin for another one does not load): the default
    path, and the sm80-class path (mma.sync, cp.async) through the pass configs."""
    configs = {"tl.disable_wgmma": True, "tl.disable_tma_lower": True} if path == "sm80" else {}
    kernel = tilelang.compile(gemm_then_bias(), out_idx=[3, 4], target="cuda",
                              pass_configs=configs)
    a, b, bias = _inputs(device="cuda")
    c, d = kernel(a, b, bias)
    want_c, want_d = _reference(a, b, bias)
    torch.testing.assert_close(c, want_c, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(d, want_d, rtol=1e-2, atol=1e-2)
    x = torch.randn(70, 16, device="cuda")
    h, o = two_step(x)
    torch.testing.assert_close(h, x * 3)
    torch.testing.assert_close(o, x * 3 + (x * 3).flip(1))


def test_verify_names_the_block_of_the_kernel_that_wrote_the_element():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32"),
             C: T.Tensor((64,), "float32")):
        with T.Kernel(4, threads=32) as bx:
            for i in T.Parallel(16):
                B[bx * 16 + i] = A[bx * 16 + i] + 1.0
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(32):
                C[bx * 32 + i] = B[bx * 32 + i] * 2.0

    kernel = tilelang.compile(main, out_idx=[1, 2], target="cpu")
    a = torch.randn(64)
    b, c = kernel.verify(a)
    torch.testing.assert_close(c, (a + 1) * 2)
    # the reference's owner record: C[40] was written by block 1 of the second kernel
    from tilelang.jit.verify import build_reference

    ref = build_reference(kernel)
    owners = [torch.full((64,), -1, dtype=torch.int64) for _ in range(3)]
    ref(a, torch.zeros(64), torch.zeros(64), *owners)
    assert int(owners[1][40]) == 2 and int(owners[2][40]) == 1
