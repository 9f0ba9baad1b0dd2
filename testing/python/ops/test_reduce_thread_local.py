"""T.reduce_* of a per-thread buffer (T.alloc_local source, T.alloc_local or T.alloc_var
destination): each thread reduces its own elements, no thread talks to another.  On CUDA,
16-bit floats whose innermost source dim is even fold two elements per instruction
(tl::add2 / max2 / min2 on a half2 / bfloat162 accumulator).  CPU values, sm_90a / sm_80
source and PTX, GPU-marked runs."""

import math
import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

KINDS = ("sum", "max", "min", "abssum", "absmax")
TORCH = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
PAIRED = {"sum": "add2", "abssum": "abs_add2", "max": "max2", "absmax": "abs_max2",
          "min": "min2"}
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def ref_of(kind, a, dim):
    """The reduction in float32: of ``|a|`` for the abs kinds."""
    a = a.float().abs() if kind.startswith("abs") else a.float()
    return a.sum(dim) if kind.endswith("sum") else a.amax(dim) if kind.endswith("max") \
        else a.amin(dim)


def fold(kind, old, new):
    return old + new if kind in ("sum", "abssum") else \
        torch.minimum(old, new) if kind == "min" else torch.maximum(old, new)


def per_thread(kind, shape, dim, dtype, clear=True, to_var=False, nan_propagate=False,
               threads=1):
    """Block ``t`` of ``threads`` one-thread blocks (the CPU runs a block on one thread) copies
    ``A[t]`` (``shape``) into registers, reduces it over ``dim`` into its own destination
    (seeded from ``B[t]`` for ``clear=False``) and writes it to ``B[t]``."""
    out = [e for k, e in enumerate(shape) if k != dim] or [1]
    red = getattr(T, f"reduce_{kind}")
    opts = {"nan_propagate": True} if nan_propagate else {}
    M, N = shape[0], shape[-1]
    if len(shape) == 1 and to_var:
        @T.prim_func
        def main(A: T.Tensor((threads, M), dtype), B: T.Tensor((threads, 1), dtype)):
            with T.Kernel(threads, threads=1) as t:
                src = T.alloc_local((M,), dtype)
                dst = T.alloc_var(dtype)
                dst = B[t, 0]
                for i in T.serial(M):
                    src[i] = A[t, i]
                red(src, dst, dim=0, clear=clear, **opts)
                B[t, 0] = dst
        return main
    if len(shape) == 1:
        @T.prim_func
        def main(A: T.Tensor((threads, M), dtype), B: T.Tensor((threads, 1), dtype)):
            with T.Kernel(threads, threads=1) as t:
                src = T.alloc_local((M,), dtype)
                dst = T.alloc_local((1,), dtype)
                dst[0] = B[t, 0]
                for i in T.serial(M):
                    src[i] = A[t, i]
                red(src, dst, dim=0, clear=clear, **opts)
                B[t, 0] = dst[0]
        return main
    K = out[0]

    @T.prim_func
    def main2(A: T.Tensor((threads, M, N), dtype), B: T.Tensor((threads, K), dtype)):
        with T.Kernel(threads, threads=1) as t:
            src = T.alloc_local((M, N), dtype)
            dst = T.alloc_local((K,), dtype)
            for k in T.serial(K):
                dst[k] = B[t, k]
            for i, j in T.grid(M, N):
                src[i, j] = A[t, i, j]
            red(src, dst, dim=dim, clear=clear, **opts)
            for k in T.serial(K):
                B[t, k] = dst[k]
    return main2


CASES = [  # (shape, dim, to_var)
    ((8,), 0, False),
    ((8,), 0, True),
    ((7,), 0, False),  # odd: one element at a time
    ((8, 4), 0, False),  # pairs of neighbouring lines
    ((4, 6), 1, False),  # pairs of one line
    ((3, 5), 1, False),
]
CASE_IDS = [f"{'x'.join(map(str, s))}-d{d}{'-var' if v else ''}" for s, d, v in CASES]


def expect(kind, a, dim, b0, clear):
    want = ref_of(kind, a, dim + 1).reshape(b0.shape)
    return want if clear else fold(kind, b0.float(), want)


UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def assert_reduced(got, kind, a, dim, b0, clear, dtype):
    """``got`` is the reduction within the rounding of accumulating in ``dtype``: each of the
    ``n`` folds rounds once, by at most half a unit in the last place of a partial result,
    which is at most the sum of the magnitudes (max and min are exact)."""
    want = expect(kind, a, dim, b0, clear)
    n = a.shape[dim + 1] + (0 if clear else 1)
    mag = a.float().abs().sum(dim + 1).reshape(b0.shape) + (0 if clear else b0.float().abs())
    bound = UNIT_ROUNDOFF[dtype] * (n if kind.endswith("sum") else 1) * mag + 1e-6
    assert bool(((got.float() - want).abs() <= bound).all()), \
        (kind, dtype, clear, (got.float() - want).abs().max().item())


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_values(kind, case):
    shape, dim, to_var = case
    threads = 2
    # one (dtype, clear) per (kind, case), all combinations across the parameters
    turn = (KINDS.index(kind) + CASES.index(case)) % 6
    for dtype, clear in [(list(TORCH)[turn % 3], turn < 3)]:
        k = tilelang.compile(per_thread(kind, shape, dim, dtype, clear, to_var, threads=threads),
                             target="cpu")
        a = torch.randn((threads, *shape)).to(TORCH[dtype])
        K = 1 if len(shape) == 1 else shape[1 - dim]
        b = torch.randn(threads, K).to(TORCH[dtype])
        b0 = b.clone()
        k(a, b)
        assert_reduced(b, kind, a, dim, b0, clear, dtype)


def cuda_source(kind, shape, dim, dtype, arch="sm_90a", to_var=False, nan_propagate=False,
                clear=True, ptx=False):
    k = tilelang.compile(per_thread(kind, shape, dim, dtype, clear, to_var, nan_propagate,
                                    threads=32), target=f"cuda -arch={arch}")
    if ptx:
        k.get_ptx()
    return k.get_kernel_source()


@pytest.mark.parametrize(("arch", "dtype"), [("sm_90a", "bfloat16"), ("sm_80", "float16")])
@pytest.mark.parametrize("case", [c for c in CASES if c[0][-1] % 2 == 0],
                         ids=[i for c, i in zip(CASES, CASE_IDS) if c[0][-1] % 2 == 0])
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_16bit_folds_pairs(kind, case, dtype, arch):
    """(was: LoweringError 'T.reduce_sum on CUDA reduces fragments and shared tiles; source src
    is in local')"""
    shape, dim, to_var = case
    src = cuda_source(kind, shape, dim, dtype, arch, to_var, clear=False)
    assert f"tl::{PAIRED[kind]}(" in src
    pair = "half2" if dtype == "float16" else "nv_bfloat162"
    assert f"{pair} " in src  # the two-lane accumulator
    assert "all_reduce" not in src and "__syncthreads" not in src and "shfl" not in src


@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_cuda_pairs_propagate_nan_when_asked(kind):
    which = "min" if kind == "min" else "max"
    src = cuda_source(kind, (8,), 0, "float16", nan_propagate=True, clear=False)
    assert f"{which}2_nan(" in src and f"__h{which}_nan(" in src
    assert f"tl::{PAIRED[kind]}(" not in src


@pytest.mark.parametrize("case", [((7,), 0), ((3, 5), 1)], ids=["7", "3x5-d1"])
@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_cuda_one_at_a_time_where_pairs_do_not_fit(case, dtype):
    """An odd innermost dim, or a dtype without paired instructions, folds serially."""
    src = cuda_source("sum", case[0], case[1], dtype)
    assert "tl::add2" not in src and "all_reduce" not in src


def test_cuda_float16_sum_into_float32_accumulates_in_float32():
    @T.prim_func
    def main(A: T.Tensor((8,), "float16"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=1):
            src = T.alloc_local((8,), "float16")
            dst = T.alloc_local((1,), "float32")
            for i in T.serial(8):
                src[i] = A[i]
            T.reduce_sum(src, dst, dim=0)
            B[0] = dst[0]

    src = tilelang.compile(main, target="cuda -arch=sm_90a").get_kernel_source()
    assert "tl::add2" not in src and "float dst_acc" in src
    a = torch.randn(8).half()
    b = torch.zeros(1)
    tilelang.compile(main, target="cpu")(a, b)
    torch.testing.assert_close(b[0], a.float().sum(), atol=1e-3, rtol=1e-3)


# each paired fold of reduce.h once per type (kind, nan_propagate)
PTX_KINDS = {"float16": [("sum", False), ("max", False), ("min", True), ("absmax", True)],
             "bfloat16": [("abssum", False), ("min", False), ("max", True), ("absmax", False)]}


@needs_nvcc
@pytest.mark.parametrize(("arch", "dtype"), [("sm_90a", "float16"), ("sm_80", "bfloat16")])
def test_cuda_pairs_compile_to_ptx(dtype, arch):
    for kind, nan_propagate in PTX_KINDS[dtype]:
        cuda_source(kind, (8, 4), 0, dtype, arch, nan_propagate=nan_propagate, clear=False,
                    ptx=True)


def test_per_thread_source_into_a_shared_tile_is_refused():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32):
            src = T.alloc_local((8,), "float32")
            dst = T.alloc_shared((1,), "float32")
            for i in T.serial(8):
                src[i] = A[i]
            T.reduce_sum(src, dst, dim=0)
            B[0] = dst[0]

    with pytest.raises(LoweringError, match=r"src.*per-thread.*dst is in shared"):
        tilelang.compile(main, target="cuda -arch=sm_90a")


# GPU runs --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_values(kind, case):
    shape, dim, to_var = case
    threads = 64
    for dtype, clear in [(d, c) for d in TORCH for c in (True, False)]:
        k = tilelang.compile(per_thread(kind, shape, dim, dtype, clear, to_var, threads=threads),
                             target="cuda")
        a = torch.randn((threads, *shape)).to(TORCH[dtype])
        K = 1 if len(shape) == 1 else shape[1 - dim]
        b0 = torch.randn(threads, K).to(TORCH[dtype])
        b = b0.cuda()
        k(a.cuda(), b)
        assert_reduced(b.cpu(), kind, a, dim, b0, clear, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
def test_gpu_pairs_nan(kind, dtype):
    for prop in (False, True):
        k = tilelang.compile(per_thread(kind, (8,), 0, dtype, True, nan_propagate=prop,
                                        threads=1), target="cuda")
        for nan_at in (0, 1, 6, 7):  # either lane of a pair
            a = (torch.arange(8, dtype=torch.float32) - 3).to(TORCH[dtype]).reshape(1, 8)
            a[0, nan_at] = math.nan
            b = torch.zeros(1, 1, dtype=TORCH[dtype]).cuda()
            k(a.cuda(), b)
            got = b.float().item()
            if prop:
                assert math.isnan(got)
            else:
                rest = torch.cat([a[0, :nan_at], a[0, nan_at + 1:]]).float()
                rest = rest.abs() if kind == "absmax" else rest
                assert got == (rest.min() if kind == "min" else rest.max()).item()
