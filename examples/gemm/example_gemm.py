"""Tiled GEMM: C = A @ B with a pipelined K loop.

Runs on the GPU when one is visible, else on the CPU (the same program, lowered to loops).
"""

import argparse

import torch

import tilelang
import tilelang.language as T


def matmul(M, N, K, block_M, block_N, block_K, dtype="float16", accum_dtype="float32",
           num_stages=3, threads=128):
    @T.prim_func
    def main(
        A: T.Tensor((M, K), dtype),
        B: T.Tensor((K, N), dtype),
        C: T.Tensor((M, N), dtype),
    ):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_shared = T.alloc_shared((block_M, block_K), dtype)
            B_shared = T.alloc_shared((block_K, block_N), dtype)
            C_local = T.alloc_fragment((block_M, block_N), accum_dtype)
            T.clear(C_local)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=num_stages):
                T.copy(A[by * block_M, k * block_K], A_shared)
                T.copy(B[k * block_K, bx * block_N], B_shared)
                T.gemm(A_shared, B_shared, C_local)
            T.copy(C_local, C[by * block_M, bx * block_N])

    return main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--m", type=int, default=None)
    parser.add_argument("--n", type=int, default=None)
    parser.add_argument("--k", type=int, default=None)
    parser.add_argument("--target", default="auto")
    args = parser.parse_args(argv)
    on_gpu = torch.cuda.is_available() and args.target in ("auto", "cuda")
    size = 1024 if on_gpu else 256
    M, N, K = args.m or size, args.n or size, args.k or size

    kernel = tilelang.compile(matmul(M, N, K, 128, 128, 32), out_idx=[2], target=args.target)
    device = "cuda" if on_gpu else "cpu"
    a = torch.randn(M, K, device=device, dtype=torch.float16)
    b = torch.randn(K, N, device=device, dtype=torch.float16)
    c = kernel(a, b)
    ref = (a.float() @ b.float()).half()
    torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-2)

    profiler = kernel.get_profiler()
    profiler.assert_allclose(lambda x, y: (x.float() @ y.float()).half(), rtol=1e-2, atol=1e-2)
    ms = profiler.do_bench()
    gflops = 2 * M * N * K / ms * 1e-6
    rate = f"{gflops / 1e3:.1f} TFLOP/s" if gflops >= 1e3 else f"{gflops:.2f} GFLOP/s"
    print(f"gemm {M}x{N}x{K} on {kernel.target.kind.name}: matches torch; {ms:.3f} ms, {rate}")


if __name__ == "__main__":
    main()
