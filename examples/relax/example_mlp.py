"""A two-layer MLP in Relax whose matmuls are tilelang kernels.

    y = relu(x @ W1 + b1) @ W2 + b2

The matmuls are tile programs called with ``tilelang.contrib.relax.call_kernel``; the bias adds
and the relu stay ordinary Relax operators inside a dataflow block.  ``tilelang.contrib.relax.
build`` lowers the tile programs with tilelang's pipeline and Relax's own operators with TVM's.
The result is checked against the same model written with ``relax.op.matmul`` only.

    python examples/relax/example_mlp.py          # the CPU, and CUDA when a GPU is visible
"""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

import tilelang
import tilelang.contrib.relax as tl_relax
import tilelang.language as T

BATCH, D_IN, D_HIDDEN, D_OUT = 64, 128, 256, 64


def matmul(M, N, K, block_M=32, block_N=32, block_K=32, dtype="float32"):
    """C = A @ B for A (M, K) and B (K, N): one (block_M, block_N) tile of C per block."""

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            B_s = T.alloc_shared((block_K, block_N), dtype)
            C_f = T.alloc_fragment((block_M, block_N), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, block_K), num_stages=2):
                T.copy(A[by * block_M, k * block_K], A_s)
                T.copy(B[k * block_K, bx * block_N], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * block_M, bx * block_N])

    return main


def _signature():
    x = relax.Var("x", relax.TensorType((BATCH, D_IN), "float32"))
    w1 = relax.Var("w1", relax.TensorType((D_IN, D_HIDDEN), "float32"))
    b1 = relax.Var("b1", relax.TensorType((D_HIDDEN,), "float32"))
    w2 = relax.Var("w2", relax.TensorType((D_HIDDEN, D_OUT), "float32"))
    b2 = relax.Var("b2", relax.TensorType((D_OUT,), "float32"))
    return [x, w1, b1, w2, b2]


def mlp_with_tile_kernels() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x, w1, b1, w2, b2 = params = _signature()
    with bb.function("main", params):
        with bb.dataflow():
            h = tl_relax.call_kernel(bb, matmul(BATCH, D_HIDDEN, D_IN), [x, w1], name="linear1")
            h = bb.emit(relax.op.nn.relu(relax.op.add(h, b1)))
            y = tl_relax.call_kernel(bb, matmul(BATCH, D_OUT, D_HIDDEN), [h, w2], name="linear2")
            out = bb.emit_output(relax.op.add(y, b2))
        bb.emit_func_output(out)
    return bb.get()


def mlp_reference() -> tvm.IRModule:
    bb = relax.BlockBuilder()
    x, w1, b1, w2, b2 = params = _signature()
    with bb.function("main", params):
        with bb.dataflow():
            h = bb.emit(relax.op.nn.relu(relax.op.add(relax.op.matmul(x, w1), b1)))
            out = bb.emit_output(relax.op.add(relax.op.matmul(h, w2), b2))
        bb.emit_func_output(out)
    return bb.get()


def run(target: str, seed: int = 0) -> float:
    """Build both models for ``target``, run them on the same inputs, return the max error."""
    rng = np.random.default_rng(seed)
    shapes = [(BATCH, D_IN), (D_IN, D_HIDDEN), (D_HIDDEN,), (D_HIDDEN, D_OUT), (D_OUT,)]
    inputs = [rng.standard_normal(s).astype("float32") * 0.1 for s in shapes]
    dev = tvm.cpu() if target == "cpu" else tvm.cuda()

    def execute(ex):
        vm = relax.VirtualMachine(ex, dev)
        return vm["main"](*[tvm.runtime.tensor(a, dev) for a in inputs]).numpy()

    got = execute(tl_relax.build(mlp_with_tile_kernels(), target=target))
    want = execute(_build_reference(target))
    x, w1, b1, w2, b2 = inputs
    numpy_ref = np.maximum(x @ w1 + b1, 0) @ w2 + b2
    tol = 1e-4 if target == "cpu" else 2e-3  # on tensor cores fp32 gemm rounds inputs to tf32
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    np.testing.assert_allclose(got, numpy_ref, rtol=tol, atol=tol)
    return float(np.abs(got - want).max())


def _build_reference(target: str):
    from tilelang.engine.target import resolve

    return tvm.compile(mlp_reference(), target=resolve(target))  # GPU: Relax schedules (dlight)


def main() -> None:
    import torch

    targets = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    for target in targets:
        print(f"{target}: tile-kernel MLP matches the Relax MLP, max abs diff "
              f"{run(target):.2e}")


if __name__ == "__main__":
    main()
