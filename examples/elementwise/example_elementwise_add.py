"""Element-wise add: C = A + B over 2-D tiles with T.Parallel."""

import argparse

import torch

import tilelang
import tilelang.language as T


def elementwise_add(M, N, block_M, block_N, dtype="float32", threads=128):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=threads) as (bx, by):
            A_f = T.alloc_fragment((block_M, block_N), dtype)
            B_f = T.alloc_fragment((block_M, block_N), dtype)
            T.copy(A[by * block_M, bx * block_N], A_f)
            T.copy(B[by * block_M, bx * block_N], B_f)
            for i, j in T.Parallel(block_M, block_N):
                A_f[i, j] = A_f[i, j] + B_f[i, j]
            T.copy(A_f, C[by * block_M, bx * block_N])

    return main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--target", default="auto")
    args = parser.parse_args(argv)
    kernel = tilelang.compile(elementwise_add(args.m, args.n, 32, 64), out_idx=[2],
                              target=args.target)
    device = "cpu" if kernel.target.kind.name == "llvm" else "cuda"
    a = torch.randn(args.m, args.n, device=device)
    b = torch.randn(args.m, args.n, device=device)
    torch.testing.assert_close(kernel(a, b), a + b)
    print(f"elementwise add {args.m}x{args.n} on {kernel.target.kind.name}: matches torch")


if __name__ == "__main__":
    main()
