"""CUDA-targeted inputs for the pass tests."""

import tvm

import tilelang.language as T
from programs import matmul

SM80 = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})


def gemm_kernel(stages=3, M=256, bM=128, bK=32):
    """The square fp16 GEMM of the test programs, with bM x bM output tiles."""
    return matmul(M, M, M, bM, bM, bK, num_stages=stages)


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
