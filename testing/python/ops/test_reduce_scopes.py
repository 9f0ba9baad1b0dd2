"""T.reduce_* between shared tiles and fragments on CUDA (shared -> shared, shared ->
fragment, fragment -> shared; a region of a shared tile), and the all-reduce's rule that the
threads holding a line are a power of two.  sm_90a / sm_80 source, CPU results, GPU runs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

REFS = {
    "sum": lambda x, d: x.sum(d),
    "max": lambda x, d: x.amax(d),
    "min": lambda x, d: x.amin(d),
    "abssum": lambda x, d: x.abs().sum(d),
    "absmax": lambda x, d: x.abs().amax(d),
}
FOLD = {"sum": torch.add, "max": torch.maximum, "min": torch.minimum, "abssum": torch.add,
        "absmax": torch.maximum}


def scoped_reduce(M, N, src_scope, dst_scope, threads, kind="sum", dim=1, clear=True):
    """``B = reduce(A, dim)`` (folded into ``B``'s values with ``clear=False``) through a
    ``src_scope`` source and a ``dst_scope`` destination ("fragment" or "shared")."""
    out = M if dim == 1 else N
    reducer = getattr(T, f"reduce_{kind}")

    def alloc(shape, scope):
        return T.alloc_fragment(shape, "float32") if scope == "fragment" else \
            T.alloc_shared(shape, "float32")

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((out,), "float32")):
        with T.Kernel(1, threads=threads):
            src = alloc((M, N), src_scope)
            dst = alloc((out,), dst_scope)
            T.copy(A, src)
            T.copy(B, dst)
            reducer(src, dst, dim=dim, clear=clear)
            T.copy(dst, B)

    return main


CASES = [  # (M, N, src, dst, threads)
    (32, 32, "shared", "shared", 32),
    (32, 32, "fragment", "shared", 32),
    (128, 128, "fragment", "shared", 256),
    (128, 64, "shared", "fragment", 256),
    (64, 128, "shared", "fragment", 128),
    (16, 40, "shared", "shared", 64),
]
IDS = [f"{m}x{n}-{s[0]}2{d[0]}-t{t}" for m, n, s, d, t in CASES]


@pytest.mark.parametrize("arch", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_cuda_lowers_shared_scopes(case, arch):
    """(was: LoweringError 'T.reduce_sum on CUDA reduces a fragment into a fragment')"""
    M, N, s, d, threads = case
    src = tilelang.compile(scoped_reduce(M, N, s, d, threads, "max", clear=False),
                           target=f"cuda -arch={arch}").get_kernel_source()
    # a fragment source spread over lanes needs the all-reduce; a shared source is read
    # whole lines per thread
    assert ("tl::all_reduce<" in src) == (s == "fragment")


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("kind", list(REFS))
def test_cpu_results(case, kind):
    M, N, s, d, threads = case
    for dim in (0, 1):
        for clear in (True, False):
            k = tilelang.compile(scoped_reduce(M, N, s, d, threads, kind, dim, clear),
                                 target="cpu")
            a = torch.randn(M, N)
            b = torch.randn(M if dim == 1 else N)
            ref = REFS[kind](a, dim)
            if not clear:
                ref = FOLD[kind](b, ref)
            k(a, b)
            torch.testing.assert_close(b, ref, rtol=1e-5, atol=1e-5)


def shared_region_reduce(threads=64):
    """Rows 8..23, columns 4..35 of a shared tile summed into ``B[2:18]`` of a shared
    vector; the rest of the vector keeps its values."""

    @T.prim_func
    def main(A: T.Tensor((32, 48), "float32"), B: T.Tensor((20,), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((32, 48), "float32")
            o = T.alloc_shared((20,), "float32")
            T.copy(A, s)
            T.copy(B, o)
            T.reduce_sum(s[8:24, 4:36], o[2:18], dim=1)
            T.copy(o, B)

    return main


def test_shared_region():
    a, b = torch.randn(32, 48), torch.randn(20)
    ref = b.clone()
    ref[2:18] = a[8:24, 4:36].sum(1)
    tilelang.compile(shared_region_reduce(), target="cpu")(a, b)
    torch.testing.assert_close(b, ref, rtol=1e-5, atol=1e-5)
    tilelang.compile(shared_region_reduce(), target="cuda -arch=sm_90a")


def test_fragment_region_is_refused_on_cuda():
    @T.prim_func
    def main(A: T.Tensor((16, 32), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32):
            x = T.alloc_fragment((16, 32), "float32")
            y = T.alloc_fragment((8,), "float32")
            T.copy(A, x)
            T.reduce_sum(x[0:8, :], y, dim=1)
            T.copy(y, B)

    with pytest.raises(LoweringError, match=r"T\.reduce_sum\(x, y\)"):
        tilelang.compile(main, target="cuda -arch=sm_90a")


def width_kernel(M, width, threads, dim=1):
    shape = (M, width) if dim == 1 else (width, M)

    @T.prim_func
    def main(A: T.Tensor(shape, "float32"), B: T.Tensor((M,), "float32")):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment(shape, "float32")
            dst = T.alloc_fragment((M,), "float32")
            T.copy(A, src)
            T.reduce_sum(src, dst, dim=dim)
            T.copy(dst, B)

    return main


@pytest.mark.parametrize("M, width, threads, dim", [(1, 48, 48, 1), (1, 96, 96, 1),
                                                     (2, 48, 96, 0), (8, 48, 128, 1)])
def test_line_threads_must_be_a_power_of_two(M, width, threads, dim):
    """(was: an error about a T.Parallel loop of the lowering's own partial fragment)"""
    with pytest.raises(LoweringError, match=r"logical_width = \d+.*positive power of two"):
        tilelang.compile(width_kernel(M, width, threads, dim), target="cuda -arch=sm_90a")


@pytest.mark.parametrize("M, width, threads", [(4, 32, 32), (4, 64, 64), (4, 128, 128)])
def test_power_of_two_line_threads_compile(M, width, threads):
    src = tilelang.compile(width_kernel(M, width, threads), target="cuda -arch=sm_90a")
    assert "tl::all_reduce<tl::SumOp" in src.get_kernel_source()


@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("kind", list(REFS))
def test_gpu_results(case, kind):
    M, N, s, d, threads = case
    for clear in (True, False):
        k = tilelang.compile(scoped_reduce(M, N, s, d, threads, kind, 1, clear), target="cuda")
        a, b = torch.randn(M, N).cuda(), torch.randn(M).cuda()
        ref = REFS[kind](a, 1)
        if not clear:
            ref = FOLD[kind](b, ref)
        k(a, b)
        torch.testing.assert_close(b, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gpu_shared_region():
    a, b = torch.randn(32, 48).cuda(), torch.randn(20).cuda()
    ref = b.clone()
    ref[2:18] = a[8:24, 4:36].sum(1)
    tilelang.compile(shared_region_reduce(), target="cuda")(a, b)
    torch.testing.assert_close(b, ref, rtol=1e-4, atol=1e-4)
