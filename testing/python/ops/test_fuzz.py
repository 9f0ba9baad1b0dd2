"""Seeded fuzzing of the tile operators: GEMM (sizes 1, primes, non-multiples of the tile, all
transposes, fp16/bf16/fp32), every reduction along each dim (unit dims included, both
``clear`` values) and copy windows (edges, negative offsets, unit-dim tiles).

The CPU backend is compared with torch; on a GPU (``gpu`` marker) the same cases compiled for
CUDA are compared with the CPU backend.  Kernels take their sizes as ``T.dynamic`` shapes and
their offsets as scalar arguments, so one compiled kernel serves many cases.  Set
``TILELANG_FUZZ_SEED`` to replay a failure; every message names the seed and the case.
"""

import functools
import os
import zlib

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T

SEED = int(os.environ.get("TILELANG_FUZZ_SEED", "20250131"))
TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def rng_for(*key) -> np.random.Generator:
    """A generator per test case, derived from the seed and the case's name."""
    return np.random.default_rng([SEED] + [zlib.crc32(str(k).encode()) for k in key])


def where(case) -> str:
    return f"(TILELANG_FUZZ_SEED={SEED}, case {case})"


@functools.lru_cache(maxsize=None)
def compiled(builder, target, *args):
    return tilelang.compile(builder(*args), target=target)


# GEMM ----------------------------------------------------------------------------------------

GEMM_SIZES = [1, 2, 3, 7, 13, 31, 32, 33, 47, 64, 71]


def gemm_kernel(dtype, tA, tB, bM=32, bN=32, bK=32):
    """``C = op(A) @ op(B)`` in float32 for any M, N, K (T.dynamic)."""
    M, N, K = T.dynamic("M"), T.dynamic("N"), T.dynamic("K")
    a_shape, b_shape = ((K, M) if tA else (M, K)), ((N, K) if tB else (K, N))
    as_shape, bs_shape = ((bK, bM) if tA else (bM, bK)), ((bN, bK) if tB else (bK, bN))

    @T.prim_func
    def main(A: T.Tensor(a_shape, dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared(as_shape, dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                if tA:
                    T.copy(A[k * bK, by * bM], A_s)
                else:
                    T.copy(A[by * bM, k * bK], A_s)
                if tB:
                    T.copy(B[bx * bN, k * bK], B_s)
                else:
                    T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f, transpose_A=tA, transpose_B=tB)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def gemm_cases(dtype, tA, tB, n=8):
    rng = rng_for("gemm", dtype, tA, tB)
    out = []
    for _ in range(n):
        M, N, K = (int(rng.choice(GEMM_SIZES)) for _ in range(3))
        a = torch.from_numpy(rng.standard_normal((K, M) if tA else (M, K))).to(TORCH[dtype])
        b = torch.from_numpy(rng.standard_normal((N, K) if tB else (K, N))).to(TORCH[dtype])
        out.append(((M, N, K), a, b))
    return out


def run_gemm(target, dtype, tA, tB, a, b, M, N, device="cpu"):
    k = compiled(gemm_kernel, target, dtype, tA, tB)
    c = torch.full((M, N), float("nan"), device=device)
    k(a.to(device), b.to(device), c)
    return c.cpu()


GEMM_PARAMS = [(d, tA, tB) for d in TORCH for tA in (False, True) for tB in (False, True)]


@pytest.mark.parametrize("dtype,tA,tB", GEMM_PARAMS)
def test_fuzz_gemm(dtype, tA, tB):
    for (M, N, K), a, b in gemm_cases(dtype, tA, tB):
        c = run_gemm("cpu", dtype, tA, tB, a, b, M, N)
        A = a.double().T if tA else a.double()
        B = b.double().T if tB else b.double()
        torch.testing.assert_close(c.double(), A @ B, rtol=1e-4, atol=1e-4 * K,
                                   msg=lambda m: f"{m} {where(('gemm', dtype, tA, tB, M, N, K))}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tA,tB", GEMM_PARAMS)
def test_fuzz_gemm_gpu(dtype, tA, tB):
    tol = 2e-3 if dtype != "float32" else 2e-2  # float32 operands go through tf32 on the GPU
    for (M, N, K), a, b in gemm_cases(dtype, tA, tB):
        ref = run_gemm("cpu", dtype, tA, tB, a, b, M, N)
        c = run_gemm("cuda", dtype, tA, tB, a, b, M, N, device="cuda")
        torch.testing.assert_close(c, ref, rtol=tol, atol=tol * K ** 0.5,
                                   msg=lambda m: f"{m} {where(('gemm', dtype, tA, tB, M, N, K))}")


# reductions ----------------------------------------------------------------------------------

REDUCE_SHAPES = [(1, 1), (1, 8), (8, 1), (6, 10), (16, 32), (2, 1, 4)]
KINDS = ["max", "min", "sum", "abssum", "absmax"]
TORCH_REDUCE = {
    "max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d), "sum": lambda x, d: x.sum(d),
    "abssum": lambda x, d: x.abs().sum(d), "absmax": lambda x, d: x.abs().amax(d),
}
TORCH_FOLD = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add,
              "abssum": torch.add, "absmax": torch.maximum}


def reduce_kernel(shape, dim, clear):
    """Every reduction kind of ``X`` over ``dim``: ``Y[k] = reduce_k(X, dim)`` (folded into
    ``Init`` when ``clear`` is False)."""
    out = tuple(e for d, e in enumerate(shape) if d != dim)
    zero = (0,) * len(out)

    @T.prim_func
    def main(X: T.Tensor(shape, "float32"), Init: T.Tensor(out, "float32"),
             Y: T.Tensor((5,) + out, "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment(shape, "float32")
            y0 = T.alloc_fragment(out, "float32")
            y1 = T.alloc_fragment(out, "float32")
            y2 = T.alloc_fragment(out, "float32")
            y3 = T.alloc_fragment(out, "float32")
            y4 = T.alloc_fragment(out, "float32")
            T.copy(X, x)
            T.copy(Init, y0)
            T.copy(Init, y1)
            T.copy(Init, y2)
            T.copy(Init, y3)
            T.copy(Init, y4)
            T.reduce_max(x, y0, dim=dim, clear=clear)
            T.reduce_min(x, y1, dim=dim, clear=clear)
            T.reduce_sum(x, y2, dim=dim, clear=clear)
            T.reduce_abssum(x, y3, dim=dim, clear=clear)
            T.reduce_absmax(x, y4, dim=dim, clear=clear)
            T.copy(y0, Y[(0,) + zero])
            T.copy(y1, Y[(1,) + zero])
            T.copy(y2, Y[(2,) + zero])
            T.copy(y3, Y[(3,) + zero])
            T.copy(y4, Y[(4,) + zero])

    return main


REDUCE_PARAMS = [(s, d, c) for s in REDUCE_SHAPES for d in range(len(s)) for c in (True, False)]


def run_reduce(target, shape, dim, clear, x, init, device="cpu"):
    k = compiled(reduce_kernel, target, shape, dim, clear)
    y = torch.full((5,) + tuple(init.shape), float("nan"), device=device)
    k(x.to(device), init.to(device), y)
    return y.cpu()


def reduce_inputs(shape, dim, clear):
    rng = rng_for("reduce", shape, dim, clear)
    x = torch.from_numpy(rng.standard_normal(shape).astype(np.float32))
    init = torch.from_numpy(rng.standard_normal(
        [e for d, e in enumerate(shape) if d != dim]).astype(np.float32))
    return x, init


@pytest.mark.parametrize("shape,dim,clear", REDUCE_PARAMS)
def test_fuzz_reduce(shape, dim, clear):
    x, init = reduce_inputs(shape, dim, clear)
    y = run_reduce("cpu", shape, dim, clear, x, init)
    for k, kind in enumerate(KINDS):
        ref = TORCH_REDUCE[kind](x, dim)
        if not clear:
            ref = TORCH_FOLD[kind](init, ref)
        torch.testing.assert_close(y[k], ref, rtol=1e-5, atol=1e-5,
                                   msg=lambda m: f"{m} {where(('reduce', kind, shape, dim, clear))}")


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dim,clear", REDUCE_PARAMS)
def test_fuzz_reduce_gpu(shape, dim, clear):
    """The GPU agrees with the CPU backend, or refuses a shape its all-reduce cannot do (the
    threads holding a line are not a power of two, as in the public TileLang) by saying so."""
    from tilelang.errors import LoweringError

    x, init = reduce_inputs(shape, dim, clear)
    ref = run_reduce("cpu", shape, dim, clear, x, init)
    try:
        y = run_reduce("cuda", shape, dim, clear, x, init, device="cuda")
    except LoweringError as e:
        assert "logical_width" in str(e) and "power of two" in str(e), str(e)
        return
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5,
                               msg=lambda m: f"{m} {where(('reduce', shape, dim, clear))}")


# copy windows --------------------------------------------------------------------------------

COPY_TILES = [(1, 1), (4, 1), (1, 4), (5, 3), (8, 8)]


def window_kernel(tile, fragment):
    """``L = A[oi:oi+h, oj:oj+w]`` (outside A reads 0) and ``O[pi:pi+h, pj:pj+w] = L``
    (outside O not written), through a shared tile or a fragment, for any A, O and offsets."""
    M, N = T.dynamic("M"), T.dynamic("N")
    P, Q = T.dynamic("P"), T.dynamic("Q")
    scope = T.alloc_fragment if fragment else T.alloc_shared

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), L: T.Tensor(tile, "float32"),
             O: T.Tensor((P, Q), "float32"), oi: T.int32, oj: T.int32, pi: T.int32,
             pj: T.int32):
        with T.Kernel(1, threads=32) as bx:
            S = scope(tile, "float32")
            T.copy(A[oi, oj], S)
            T.copy(S, L)
            T.copy(S, O[pi, pj])

    return main


def window_model(a, o, tile, oi, oj, pi, pj):
    h, w = tile
    load = np.zeros(tile, np.float32)
    for i in range(h):
        for j in range(w):
            si, sj = oi + i, oj + j
            if 0 <= si < a.shape[0] and 0 <= sj < a.shape[1]:
                load[i, j] = a[si, sj]
    out = o.copy()
    for i in range(h):
        for j in range(w):
            di, dj = pi + i, pj + j
            if 0 <= di < o.shape[0] and 0 <= dj < o.shape[1]:
                out[di, dj] = load[i, j]
    return load, out


def window_cases(tile, fragment, n=40):
    rng = rng_for("copy", tile, fragment)
    out = []
    for _ in range(n):
        M, N, P, Q = (int(rng.integers(1, 12)) for _ in range(4))
        h, w = tile
        # offsets from fully before the tensor to fully past it, edges included
        oi, oj = int(rng.integers(-h, M + 1)), int(rng.integers(-w, N + 1))
        pi, pj = int(rng.integers(-h, P + 1)), int(rng.integers(-w, Q + 1))
        a = rng.standard_normal((M, N)).astype(np.float32)
        o = rng.standard_normal((P, Q)).astype(np.float32)
        out.append((a, o, (oi, oj, pi, pj)))
    return out


def run_window(target, tile, fragment, a, o, offsets, device="cpu"):
    k = compiled(window_kernel, target, tile, fragment)
    load = torch.full(tile, float("nan"), device=device)
    out = torch.from_numpy(o.copy()).to(device)
    k(torch.from_numpy(a).to(device), load, out, *offsets)
    return load.cpu().numpy(), out.cpu().numpy()


WINDOW_PARAMS = [(t, f) for t in COPY_TILES for f in (False, True)]


@pytest.mark.parametrize("tile,fragment", WINDOW_PARAMS)
def test_fuzz_copy_windows(tile, fragment):
    for a, o, offsets in window_cases(tile, fragment):
        load, out = run_window("cpu", tile, fragment, a, o, offsets)
        want_load, want_out = window_model(a, o, tile, *offsets)
        case = where(("copy", tile, fragment, a.shape, o.shape, offsets))
        np.testing.assert_array_equal(load, want_load, err_msg=f"load {case}")
        np.testing.assert_array_equal(out, want_out, err_msg=f"store {case}")


@pytest.mark.gpu
@pytest.mark.parametrize("tile,fragment", WINDOW_PARAMS)
def test_fuzz_copy_windows_gpu(tile, fragment):
    for a, o, offsets in window_cases(tile, fragment):
        ref = run_window("cpu", tile, fragment, a, o, offsets)
        got = run_window("cuda", tile, fragment, a, o, offsets, device="cuda")
        case = where(("copy", tile, fragment, a.shape, o.shape, offsets))
        np.testing.assert_array_equal(got[0], ref[0], err_msg=f"load {case}")
        np.testing.assert_array_equal(got[1], ref[1], err_msg=f"store {case}")
