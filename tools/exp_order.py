"""Experiment: producer-first vs consumer-first order inside a pipelined GEMM iteration."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import torch
import tilelang
import tilelang.language as T
from common import bench_ms


def matmul(n, bM, bN, bK, threads, stages, dtype, order):
    @T.prim_func
    def main(A: T.Tensor((n, n), dtype), B: T.Tensor((n, n), dtype), C: T.Tensor((n, n), dtype)):
        with T.Kernel(n // bN, n // bM, threads=threads) as (bx, by):
            T.use_swizzle(8)
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(n // bK, num_stages=stages, order=order):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bN])
    return main


n = 8192
for dtype in ("float16", "bfloat16"):
    a = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    b = torch.randn(n, n, device="cuda", dtype=getattr(torch, dtype))
    ref = (a.float() @ b.float()).to(a.dtype).float()
    for tiles in ((128, 128, 32, 128), (128, 128, 64, 128), (128, 256, 32, 256)):
        res = {}
        for name, stages, order in (("producer-first", 3, None), ("consumer-first", 3, [1, 2, 0]),
                                    ("4st consumer-first", 4, [1, 2, 0]), ("1 stage", 1, None)):
            k = tilelang.compile(matmul(n, *tiles, stages, dtype, order), out_idx=[2])
            err = float((k(a, b).float() - ref).abs().max())
            assert err < 4.0, (name, tiles, err)
            ms = bench_ms(lambda: k(a, b))
            res[name] = 2 * n ** 3 / ms * 1e-9
        print(dtype, tiles, {k: round(v, 1) for k, v in res.items()},
              "3v1 best:", round(max(res["producer-first"], res["consumer-first"]) / res["1 stage"], 3))
