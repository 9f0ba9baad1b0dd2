"""Row softmax: each block normalizes block_M rows with T.reduce_max / T.reduce_sum."""

import argparse

import torch

import tilelang
import tilelang.language as T


def softmax(M, N, block_M, dtype="float32", accum_dtype="float32", threads=128):
    log2e = 1.4426950408889634

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=threads) as bx:
            x = T.alloc_fragment((block_M, N), accum_dtype)
            row_max = T.alloc_fragment((block_M,), accum_dtype)
            row_sum = T.alloc_fragment((block_M,), accum_dtype)
            T.copy(X[bx * block_M, 0], x)
            T.reduce_max(x, row_max, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = T.exp2((x[i, j] - row_max[i]) * log2e)
            T.reduce_sum(x, row_sum, dim=1)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] / row_sum[i]
            T.copy(x, Y[bx * block_M, 0])

    return main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--m", type=int, default=1000)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--target", default="auto")
    args = parser.parse_args(argv)
    kernel = tilelang.compile(softmax(args.m, args.n, 16), out_idx=[1], target=args.target)
    device = "cpu" if kernel.target.kind.name == "llvm" else "cuda"
    x = torch.randn(args.m, args.n, device=device)
    torch.testing.assert_close(kernel(x), torch.softmax(x, dim=1), rtol=1e-5, atol=1e-5)
    print(f"softmax {args.m}x{args.n} on {kernel.target.kind.name}: matches torch")


if __name__ == "__main__":
    main()
