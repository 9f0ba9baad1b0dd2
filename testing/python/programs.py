"""Tile programs shared by the tests: the CPU op tests, CUDA codegen and GPU numerics."""

import importlib.util
import os

import tilelang.language as T

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "examples")


def example(rel):
    path = os.path.join(EXAMPLES, rel)
    spec = importlib.util.spec_from_file_location(os.path.basename(rel)[:-3], path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def matmul(M, N, K, bM, bN, bK, tA=False, tB=False, dtype="float16", accum="float32",
           out_dtype=None, num_stages=3, threads=128, policy=T.GemmWarpPolicy.Square,
           wg_wait=0, shared_epilogue=False):
    """C = op(A) @ op(B), pipelined; ``shared_epilogue`` sends C out through a shared tile."""
    out_dtype = out_dtype or (accum if dtype in ("int8", "float32") else dtype)
    a_shape = (K, M) if tA else (M, K)
    b_shape = (N, K) if tB else (K, N)
    as_shape = (bK, bM) if tA else (bM, bK)
    bs_shape = (bN, bK) if tB else (bK, bN)

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bM, bN), accum)
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=num_stages):
                if tA:
                    T.copy(A[k * bK, by * bM], A_s)
                else:
                    T.copy(A[by * bM, k * bK], A_s)
                if tB:
                    T.copy(B[bx * bN, k * bK], B_s)
                else:
                    T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=tA, transpose_B=tB, policy=policy,
                       wg_wait=wg_wait)
            if shared_epilogue:
                C_s = T.alloc_shared((bM, bN), out_dtype)
                T.copy(C_f, C_s)
                T.copy(C_s, C[by * bM, bx * bN])
            else:
                T.copy(C_f, C[by * bM, bx * bN])

    return main


def reduce_kernel(kind, M, N, dim, clear, threads=128):
    reducer = getattr(T, f"reduce_{kind}")
    out_len = N if dim == 0 else M

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Init: T.Tensor((out_len,), "float32"),
             Y: T.Tensor((out_len,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment((M, N), "float32")
            y = T.alloc_fragment((out_len,), "float32")
            T.copy(X, x)
            T.copy(Init, y)
            reducer(x, y, dim=dim, clear=clear)
            T.copy(y, Y)

    return main


def cumsum_kernel(M, N, dim, reverse):
    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_shared((M, N), "float32")
            T.copy(X, x)
            T.cumsum(x, dim=dim, reverse=reverse)
            T.copy(x, Y)

    return main


def atomic_sum(M, bM=128):
    @T.prim_func
    def main(X: T.Tensor((M,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=128) as bx:
            x = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx * bM], x)
            T.reduce_sum(x, s, dim=0)
            T.atomic_add(S[0], s[0])

    return main


def add_dynamic():
    """C = A + B over a dynamic length n, 32 elements per block (the tail guarded)."""
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(T.ceildiv(n, 32), threads=32) as bx:
            for i in T.Parallel(32):
                if bx * 32 + i < n:
                    C[bx * 32 + i] = A[bx * 32 + i] + B[bx * 32 + i]

    return main
