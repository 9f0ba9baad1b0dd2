"""CUDA-targeted inputs for the pass tests."""

import tvm

import tilelang.language as T

SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


def gemm_kernel(stages=3, M=256, bM=128, bK=32):
    @T.prim_func
    def main(A: T.Tensor((M, M), "float16"), B: T.Tensor((M, M), "float16"),
             C: T.Tensor((M, M), "float16")):
        with T.Kernel(M // bM, M // bM, threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bM), "float16")
            C_f = T.alloc_fragment((bM, bM), "float32")
            T.clear(C_f)
            for k in T.Pipelined(M // bK, num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bM], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bM])

    return main


def row_max_kernel():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            s = T.alloc_shared((64,), "float32")
            T.copy(X, x)
            T.reduce_max(x, m, dim=1)
            for i in T.Parallel(64):
                s[i] = m[i]
            for i in T.Parallel(64):
                Y[i] = s[63 - i]

    return main
