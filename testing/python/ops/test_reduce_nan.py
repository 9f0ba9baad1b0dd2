"""NaN in T.reduce_max / reduce_min / reduce_absmax: ignored by default (fmax semantics: a line
of NaN only gives the identity, -inf or +inf), propagated with ``nan_propagate=True`` (a NaN in
the line, or in ``dst`` with ``clear=False``, gives NaN).  CPU results, CUDA source for sm_90a
and sm_80, GPU-marked runs."""

import math
import shutil

import pytest
import torch

import tilelang
import tilelang.language as T

KINDS = ("max", "min", "absmax")
TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def line_reduce(kind, n, dtype, clear=True, nan_propagate=False, threads=32, seed_dst=-1.0):
    """``out[0] = reduce(a[0:n])`` through fragments; ``clear=False`` folds into ``seed_dst``
    (or ``init[0]``, when ``seed_dst`` is None)."""
    reducer = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(a: T.Tensor((n,), dtype), init: T.Tensor((1,), dtype), out: T.Tensor((1,), dtype)):
        with T.Kernel(1, threads=threads):
            frag = T.alloc_fragment((n,), dtype)
            acc = T.alloc_fragment((1,), dtype)
            T.copy(a, frag)
            if seed_dst is None:
                T.copy(init, acc)
            else:
                acc[0] = seed_dst
            reducer(frag, acc, clear=clear, nan_propagate=nan_propagate)
            T.copy(acc, out)

    return main


def ignoring_nan(kind, x):
    """The default result: the reduction over the non-NaN values (the identity if none)."""
    v = x[~torch.isnan(x)].float()
    if v.numel() == 0:
        return math.inf if kind == "min" else -math.inf
    v = v.abs() if kind == "absmax" else v
    return (v.min() if kind == "min" else v.max()).item()


@pytest.mark.parametrize("nan_at", [0, 7, 63])
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_nan_propagate_gives_nan_wherever_it_is(kind, nan_at):
    k = tilelang.compile(line_reduce(kind, 64, "float32", nan_propagate=True), out_idx=[2],
                         target="cpu")
    a = torch.arange(64, dtype=torch.float32) - 20
    a[nan_at] = math.nan
    assert math.isnan(k(a, torch.zeros(1)).item())


@pytest.mark.parametrize("nan_at", [0, 7, 63])
@pytest.mark.parametrize("kind", KINDS)
def test_cpu_default_ignores_nan_wherever_it_is(kind, nan_at):
    # (before: a NaN in the last position survived the compare-and-select fold)
    k = tilelang.compile(line_reduce(kind, 64, "float32"), out_idx=[2], target="cpu")
    a = torch.arange(64, dtype=torch.float32) - 20
    a[nan_at] = math.nan
    assert k(a, torch.zeros(1)).item() == ignoring_nan(kind, a)


@pytest.mark.parametrize("kind", KINDS)
def test_cpu_all_nan_line_gives_the_identity_by_default(kind):
    k = tilelang.compile(line_reduce(kind, 16, "float32"), out_idx=[2], target="cpu")
    assert k(torch.full((16,), math.nan), torch.zeros(1)).item() == \
        ignoring_nan(kind, torch.full((16,), math.nan))


@pytest.mark.parametrize("kind", KINDS)
def test_cpu_clear_false_nan_in_dst(kind):
    """A NaN already in ``dst`` propagates with nan_propagate=True and is dropped without."""
    a = torch.arange(16, dtype=torch.float32) - 5
    init = torch.tensor([math.nan])
    prop = tilelang.compile(line_reduce(kind, 16, "float32", clear=False, nan_propagate=True,
                                        seed_dst=None), out_idx=[2], target="cpu")
    assert math.isnan(prop(a, init).item())
    plain = tilelang.compile(line_reduce(kind, 16, "float32", clear=False, seed_dst=None),
                             out_idx=[2], target="cpu")
    assert plain(a, init).item() == ignoring_nan(kind, a)


@pytest.mark.parametrize("kind", KINDS)
def test_cpu_clear_false_nan_in_src_with_dst_seed(kind):
    k = tilelang.compile(line_reduce(kind, 64, "float32", clear=False, nan_propagate=True),
                         out_idx=[2], target="cpu")
    a = torch.arange(64, dtype=torch.float32)
    a[13] = math.nan
    assert math.isnan(k(a, torch.zeros(1)).item())


def test_cpu_rows_without_nan_are_unchanged():
    @T.prim_func
    def main(A: T.Tensor((8, 32), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=64):
            x = T.alloc_fragment((8, 32), "float32")
            y = T.alloc_fragment((8,), "float32")
            T.copy(A, x)
            T.reduce_max(x, y, dim=1, nan_propagate=True)
            T.copy(y, B)

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(8, 32)
    a[3, 30] = math.nan
    b = k(a)
    ref = a.amax(1)
    assert math.isnan(b[3].item())
    keep = torch.arange(8) != 3
    torch.testing.assert_close(b[keep], ref[keep])


def test_nan_propagate_on_integers_is_the_plain_reduction():
    @T.prim_func
    def main(A: T.Tensor((4, 16), "int32"), B: T.Tensor((4,), "int32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((4, 16), "int32")
            y = T.alloc_fragment((4,), "int32")
            T.copy(A, x)
            T.reduce_min(x, y, dim=1, nan_propagate=True)
            T.copy(y, B)

    a = torch.randint(-50, 50, (4, 16), dtype=torch.int32)
    assert torch.equal(tilelang.compile(main, out_idx=[1], target="cpu")(a), a.amin(1))
    src = tilelang.compile(main, out_idx=[1], target="cuda -arch=sm_90a").get_kernel_source()
    assert "tl::MinOp," in src and "Nan" not in src


def test_nan_propagate_must_be_a_bool():
    with pytest.raises(Exception, match="nan_propagate must be a bool"):
        line_reduce("max", 16, "float32", nan_propagate="yes")


# CUDA source -----------------------------------------------------------------------------


def cuda_source(kind, dtype, threads, nan_propagate, clear=True, arch="sm_90a", n=None):
    n = n or (64 if threads <= 32 else 4 * threads)
    k = tilelang.compile(line_reduce(kind, n, dtype, clear=clear, nan_propagate=nan_propagate,
                                     threads=threads),
                         out_idx=[2], target=f"cuda -arch={arch}")
    return k.get_kernel_source()


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("kind", KINDS)
def test_cuda_16bit_propagating_ops(kind, dtype, arch):
    """Each step propagates: the per-thread fold and the clear=False merge (__hmax_nan /
    __hmin_nan), the shuffles and the cross-warp step (tl::MaxOpNan / MinOpNan)."""
    which = "min" if kind == "min" else "max"
    src = cuda_source(kind, dtype, 128, True, clear=False, arch=arch)
    assert f"__h{which}_nan(" in src
    assert src.count(f"tl::{which.capitalize()}OpNan") >= 2  # in-warp and across warps
    assert f"__h{which}(" not in src


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cuda_16bit_default_is_native_and_plain(dtype):
    src = cuda_source("max", dtype, 32, False)
    assert "__hmax(" in src and "tl::MaxOp," in src
    assert "_nan" not in src and "Nan" not in src


@pytest.mark.parametrize("kind", KINDS)
def test_cuda_float32_propagating_ops(kind):
    which = "min" if kind == "min" else "max"
    src = cuda_source(kind, "float32", 128, True, clear=False)
    assert f"tl::{which}_nan(" in src
    assert src.count(f"tl::{which.capitalize()}OpNan") >= 2


def test_cuda_float32_default_has_no_nan_ops():
    src = cuda_source("max", "float32", 128, False)
    assert "_nan" not in src and "Nan" not in src


# GPU runs --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("threads", [32, 128])
@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_nan_behaviour(kind, dtype, threads):
    n = 64 if threads == 32 else 512
    for nan_at in (0, 7, n - 1):
        a = (torch.arange(n, dtype=torch.float32) - 20).to(TORCH_DTYPES[dtype])
        a[nan_at] = math.nan
        for clear in (True, False):
            prop = tilelang.compile(line_reduce(kind, n, dtype, clear=clear, nan_propagate=True,
                                                threads=threads), out_idx=[2], target="cuda")
            plain = tilelang.compile(line_reduce(kind, n, dtype, clear=clear, threads=threads),
                                     out_idx=[2], target="cuda")
            init = torch.zeros(1, dtype=a.dtype).cuda()
            assert math.isnan(prop(a.cuda(), init).float().item())
            want = ignoring_nan(kind, a)
            if not clear:
                want = min(want, -1.0) if kind == "min" else max(want, -1.0)
            assert plain(a.cuda(), init).float().item() == want


@pytest.mark.gpu
@pytest.mark.parametrize("kind", KINDS)
def test_gpu_nan_in_dst_propagates(kind):
    k = tilelang.compile(line_reduce(kind, 64, "float16", clear=False, nan_propagate=True,
                                     seed_dst=None), out_idx=[2], target="cuda")
    a = torch.arange(64, dtype=torch.float16).cuda()
    assert math.isnan(k(a, torch.tensor([math.nan], dtype=torch.float16).cuda()).float().item())


def _line_extreme(dtype, kind, nan_propagate):
    @T.prim_func
    def main(A: T.Tensor((4, 64), dtype), B: T.Tensor((4,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((4, 64), dtype)
            y = T.alloc_fragment((4,), dtype)
            T.copy(A, x)
            getattr(T, f"reduce_{kind}")(x, y, dim=1, nan_propagate=nan_propagate)
            T.copy(y, B)

    return main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("kind", ["max", "min"])
def test_sixteen_bit_infinity_identity_compiles(dtype, kind):
    """A 16-bit max/min starts from its infinity written as bits (the bfloat16 constant
    printed as __float2bfloat16_rn(-inff), which nvcc rejects: the H200 run of 2026-12-03)."""
    k = tilelang.compile(_line_extreme(dtype, kind, True), target="cuda -arch=sm_90a")
    assert "inff" not in k.get_kernel_source()
    k.get_ptx()


@pytest.mark.parametrize("kind", ["max", "min"])
def test_sixteen_bit_identity_on_the_cpu(kind):
    a = torch.randn(4, 64).bfloat16()
    b = torch.zeros(4).bfloat16()
    tilelang.compile(_line_extreme("bfloat16", kind, False), target="cpu")(a, b)
    torch.testing.assert_close(b, a.amax(1) if kind == "max" else a.amin(1))
