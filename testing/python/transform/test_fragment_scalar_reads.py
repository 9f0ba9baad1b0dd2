"""Fragments that scalar code reads (``if mask[k]`` outside ``T.Parallel``) are replicated:
every thread holds the whole tile, and writes keep every copy up to date.  Small fragments
read inside a ``T.Parallel`` loop through a serial loop nested in it are held whole along
that dim."""

import numpy as np
import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.layout import codec
from tilelang.layout.fragment import is_replicated
from tilelang.transform import LayoutInference, LowerParallelLoops, LowerTileOps

from cuda_helpers import SM80
from helpers import bind

CUDA = "cuda -arch=sm_80"


def layouts(func):
    mod = LayoutInference()(bind(func, SM80))
    out = {}

    def on_alloc(a):
        if "tl.layout" in a.annotations:
            out[a.buffer.name] = codec.decode(a.annotations["tl.layout"])

    tvm_ffi.structural_walk(mod["main"].body, (tirx.AllocBuffer, on_alloc))
    return out


def block_sparse_sum(nblocks=8, bs=16, threads=64):
    """Y[b] = sum of the rows k of X whose mask bit M[b, k] is set (a block-sparse skip)."""

    @T.prim_func
    def main(X: T.Tensor((nblocks, bs), "float32"), M: T.Tensor((4, nblocks), "int8"),
             Y: T.Tensor((4, bs), "float32")):
        with T.Kernel(4, threads=threads) as b:
            mask = T.alloc_fragment((nblocks,), "int8")
            acc = T.alloc_fragment((bs,), "float32")
            T.copy(M[b, :], mask)
            T.clear(acc)
            for k in T.serial(nblocks):
                if mask[k] != 0:
                    for j in T.Parallel(bs):
                        acc[j] += X[k, j]
            T.copy(acc, Y[b, :])

    return main


def reference(x, m):
    return (m[:, :, None].astype(np.float32) * x[None]).sum(1)


def test_fragment_read_in_a_condition_is_replicated():
    lay = layouts(block_sparse_sum())
    assert is_replicated(lay["mask"]) and lay["mask"].replicate == 64
    assert not is_replicated(lay["acc"])  # the other fragments keep their layouts
    src = tilelang.lower(block_sparse_sum(), target=CUDA)  # used to raise "owner thread"
    assert src is not None


def test_block_sparse_sum_on_cpu_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    m = (rng.random((4, 8)) < 0.5).astype(np.int8)
    k = tilelang.compile(block_sparse_sum(), out_idx=[2], target="cpu")
    np.testing.assert_allclose(k(torch.from_numpy(x), torch.from_numpy(m)).numpy(),
                               reference(x, m), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_block_sparse_sum_on_gpu_matches_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16)).astype(np.float32)
    m = (rng.random((4, 8)) < 0.5).astype(np.int8)
    k = tilelang.compile(block_sparse_sum(), out_idx=[2])
    y = k(torch.from_numpy(x).cuda(), torch.from_numpy(m).cuda())
    np.testing.assert_allclose(y.cpu().numpy(), reference(x, m), rtol=1e-5, atol=1e-5)


def running_mask(n=16, threads=64):
    """A replicated fragment written by T.Parallel and by scalar code, then read in a
    condition: every copy must see every write."""

    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads) as b:
            keep = T.alloc_fragment((n,), "int32")
            twice = T.alloc_fragment((n,), "float32")
            out = T.alloc_shared((n,), "float32")
            for i in T.Parallel(n):
                twice[i] = X[i] * 2.0
                keep[i] = T.if_then_else(twice[i] > 2.0, 1, 0)
            keep[0] = 1
            for k in T.serial(n):
                if keep[k] != 0:
                    out[k] = X[k]
                else:
                    out[k] = 0.0
            T.copy(out, Y)

    return main


def test_writes_to_a_replicated_fragment_reach_every_copy():
    f = running_mask()
    lay = layouts(f)
    assert is_replicated(lay["keep"])
    mod = LowerParallelLoops()(LowerTileOps()(LayoutInference()(bind(f, SM80))))
    # the T.Parallel loop writing keep runs on every thread (16 registers each), and the
    # scalar store keep[0] = 1 is made by every thread, unguarded
    stores = []
    tvm_ffi.structural_walk(mod["main"].body, (tirx.BufferStore, stores.append))
    keep0 = [s for s in stores if s.buffer.name == "keep" and "0" == str(s.indices[0])]
    assert keep0
    x = np.linspace(-2, 3, 16).astype(np.float32)
    k = tilelang.compile(f, out_idx=[1], target="cpu")
    want = np.where(x > 1.0, x, 0.0)
    want[0] = x[0]
    np.testing.assert_allclose(k(torch.from_numpy(x)).numpy(), want)


@pytest.mark.gpu
def test_running_mask_on_gpu():
    x = np.linspace(-2, 3, 16).astype(np.float32)
    k = tilelang.compile(running_mask(), out_idx=[1])
    want = np.where(x > 1.0, x, 0.0)
    want[0] = x[0]
    np.testing.assert_allclose(k(torch.from_numpy(x).cuda()).cpu().numpy(), want)


def test_condition_on_a_fragment_fixed_elsewhere_still_raises():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128) as b:
            a = T.alloc_shared((64, 64), "float16")
            bb = T.alloc_shared((64, 64), "float16")
            c = T.alloc_fragment((64, 64), "float32")
            T.copy(A, a)
            T.copy(B, bb)
            T.gemm(a, bb, c, clear_accum=True)
            if c[3, 5] > 0:
                Y[0] = 1.0

    with pytest.raises(LoweringError, match="only its owner thread holds"):
        tilelang.lower(main, target=CUDA)


def small_matrix_mix(hc=4, w=64, threads=64):
    """Y[i, j] = sum_k A[k, i] * X[k, j]: the (hc, hc) fragment is read through a serial loop
    nested in the T.Parallel loop (deepseek mHC's post block)."""

    @T.prim_func
    def main(A: T.Tensor((hc, hc), "float32"), X: T.Tensor((hc, w), "float32"),
             Y: T.Tensor((hc, w), "float32")):
        with T.Kernel(1, threads=threads) as b:
            y = T.alloc_fragment((hc, w), "float32")  # the loop's layout comes from y
            a = T.alloc_fragment((hc, hc), "float32")
            x = T.alloc_fragment((hc, w), "float32")
            T.copy(A, a)
            T.copy(X, x)
            for i, j in T.Parallel(hc, w):
                y[i, j] = 0.0
                for k in T.serial(hc):
                    y[i, j] += a[k, i] * x[k, j]
            T.copy(y, Y)

    return main


def test_fragment_read_through_a_nested_serial_loop_is_held_whole_along_it():
    lay = layouts(small_matrix_mix())
    a = lay["a"]  # a[k, i]: k (the serial loop) in registers, i as the loop's dim i
    assert [x.kind for x in a.dims[0]] == ["reg"] and a.dims[0][0].extent == 4
    tilelang.lower(small_matrix_mix(), target=CUDA)  # used to raise "threads that do not hold"
    rng = np.random.default_rng(1)
    A = rng.standard_normal((4, 4)).astype(np.float32)
    X = rng.standard_normal((4, 64)).astype(np.float32)
    k = tilelang.compile(small_matrix_mix(), out_idx=[2], target="cpu")
    np.testing.assert_allclose(k(torch.from_numpy(A), torch.from_numpy(X)).numpy(), A.T @ X,
                               rtol=1e-5, atol=1e-5)


def test_symbolic_fragment_shape_error_says_what_is_allowed():
    n = T.dynamic("n")

    @T.prim_func
    def main(X: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128) as b:
            x = T.alloc_fragment((n,), "float32")
            T.copy(X, x)

    with pytest.raises(LoweringError, match="Python ints or jit parameters"):
        tilelang.lower(main, target=CUDA)
