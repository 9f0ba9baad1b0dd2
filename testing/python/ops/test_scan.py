"""T.cumsum and T.cummax: running sum / maximum along one dim of a shared tile or a fragment.
CPU numerics against torch, the sm_90a lowering of fragment scans (staged through shared
memory between barriers), GPU-marked runs."""

import re
import shutil

import pytest
import torch

import tilelang
import tilelang.language as T

SCANS = {"cumsum": T.cumsum, "cummax": T.cummax}


def scan_kernel(op, M, N, dim, reverse, scope, out_of_place=False, threads=128):
    scan = SCANS[op]

    @T.prim_func
    def main(X: T.Tensor((M, N), "float32"), Y: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=threads):
            s = T.alloc_shared((M, N), "float32")
            f = T.alloc_fragment((M, N), "float32")
            g = T.alloc_fragment((M, N), "float32")
            T.copy(X, s)
            if scope == "fragment":
                T.copy(s, f)
                if out_of_place:
                    scan(f, g, dim=dim, reverse=reverse)
                    T.copy(g, Y)
                else:
                    scan(f, dim=dim, reverse=reverse)
                    T.copy(f, Y)
            else:
                scan(src=s, dim=dim, reverse=reverse)
                T.copy(s, Y)

    return main


def reference(op, x, dim, reverse):
    if reverse:
        x = x.flip(dim)
    y = x.cumsum(dim) if op == "cumsum" else x.cummax(dim).values
    return y.flip(dim) if reverse else y


CASES = [(op, dim, reverse, scope) for op in SCANS for dim in (0, 1) for reverse in (False, True)
         for scope in ("shared", "fragment")]


@pytest.mark.parametrize("op,dim,reverse,scope", CASES)
def test_scan_cpu(op, dim, reverse, scope):
    x = torch.randn(16, 24)
    k = tilelang.compile(scan_kernel(op, 16, 24, dim, reverse, scope), out_idx=[1], target="cpu")
    torch.testing.assert_close(k(x), reference(op, x, dim, reverse), rtol=1e-5, atol=1e-5)


def test_cummax_region_cpu():
    """A scan of a region of a wider tile leaves the rest of the tile alone."""

    @T.prim_func
    def main(X: T.Tensor((8, 16), "float32"), Y: T.Tensor((8, 16), "float32")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((8, 16), "float32")
            T.copy(X, s)
            T.cummax(s[2:6, 4:12], dim=1)
            T.copy(s, Y)

    x = torch.randn(8, 16)
    ref = x.clone()
    ref[2:6, 4:12] = x[2:6, 4:12].cummax(1).values
    y = tilelang.compile(main, out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(y, ref)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@needs_nvcc
@pytest.mark.parametrize("op", ["cumsum", "cummax"])
def test_fragment_scan_stages_through_shared_sm90a(op):
    """A fragment scan on CUDA (refused before): the holders write the fragment into a shared
    tile, one thread per line scans it, the holders read it back, with a barrier between the
    steps."""
    k = tilelang.compile(scan_kernel(op, 32, 64, 1, True, "fragment"), out_idx=[1],
                         target="cuda -arch=sm_90a")
    k.get_ptx()
    src = k.get_kernel_source()
    body = src[src.index('extern "C" __global__ void __launch_bounds__(128) main_kernel'):]
    body = body[body.index("{"):]
    steps = body.split("__syncthreads();")
    scan_step = [s for s in steps if "for (int k0 = 0; k0 < 64; ++k0)" in s]
    assert len(scan_step) == 1, body
    assert re.search(r"smem_ptr\)\[[^\]]*\] = f_ptr\[0\];", steps[steps.index(scan_step[0]) - 1])
    assert re.search(r"f_ptr\[0\] = \(\(float\*\)smem_ptr\)\[",
                     steps[steps.index(scan_step[0]) + 1])
    assert ("max(" in scan_step[0]) == (op == "cummax")


@pytest.mark.gpu
@pytest.mark.parametrize("op,dim,reverse,scope", CASES)
def test_scan_gpu(op, dim, reverse, scope):
    x = torch.randn(32, 64, device="cuda")
    k = tilelang.compile(scan_kernel(op, 32, 64, dim, reverse, scope), out_idx=[1],
                         target="cuda")
    torch.testing.assert_close(k(x), reference(op, x, dim, reverse), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["cumsum", "cummax"])
def test_fragment_scan_out_of_place_gpu(op):
    x = torch.randn(32, 64, device="cuda")
    k = tilelang.compile(scan_kernel(op, 32, 64, 0, False, "fragment", out_of_place=True),
                         out_idx=[1], target="cuda")
    torch.testing.assert_close(k(x), reference(op, x, 0, False), rtol=1e-4, atol=1e-4)
