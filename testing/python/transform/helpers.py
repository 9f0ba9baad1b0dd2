"""Small inputs for the pass tests."""

import tvm
from tvm import tirx

import tilelang.language as T

CPU = tvm.target.Target({"kind": "llvm"})


def bind(func, target=CPU) -> tvm.IRModule:
    return tirx.transform.BindTarget(target)(tvm.IRModule({"main": func}))


def copy_kernel(M=40, bM=16):
    @T.prim_func
    def main(A: T.Tensor((M, 8), "float32"), B: T.Tensor((M, 8), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=64) as bx:
            S = T.alloc_shared((bM, 8), "float32")
            T.copy(A[bx * bM, 0], S)
            for k in T.Pipelined(2, num_stages=3):
                for i, j in T.Parallel(bM, 8):
                    S[i, j] = S[i, j] + 1
            T.copy(S, B[bx * bM, 0])

    return main


def loops_of(node):
    import tvm_ffi

    out = []
    tvm_ffi.structural_walk(node, (tirx.For, out.append), order="pre")
    return out


def calls_of(node, prefix="tl."):
    import tvm_ffi

    out = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name.startswith(prefix):
            out.append(c.op.name)

    tvm_ffi.structural_walk(node, (tvm.ir.Call, on_call))
    return out
