"""A shared tile read by a gemm that wgmma can run and by one it cannot (the public attention
backward kernels share K_shared this way): one layout per tile, so the kernel's gemms all run
as mma.sync instead of failing with a layout conflict."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T


def _two_gemms():
    @T.prim_func
    def main(Q: T.Tensor((64, 64), "float16"), K: T.Tensor((64, 64), "float16"),
             D: T.Tensor((16, 64), "float16"), S: T.Tensor((64, 64), "float32"),
             G: T.Tensor((16, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            q = T.alloc_shared((64, 64), "float16")
            k = T.alloc_shared((64, 64), "float16")
            d = T.alloc_shared((16, 64), "float16")
            s = T.alloc_fragment((64, 64), "float32")
            g = T.alloc_fragment((16, 64), "float32")
            T.copy(Q, q)
            T.copy(K, k)
            T.copy(D, d)
            T.gemm(q, k, s, transpose_B=True, clear_accum=True)  # m64: wgmma could
            T.gemm(d, k, g, clear_accum=True)  # m16: mma.sync only
            T.copy(s, S)
            T.copy(g, G)

    return main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_gemms_sharing_a_tile_with_an_mma_sync_gemm_take_mma_sync():
    ptx = tilelang.compile(_two_gemms(), target="cuda -arch=sm_90a").get_ptx()
    assert "wgmma" not in ptx and "mma.sync.aligned.m16n8k16" in ptx


def test_the_two_gemms_compute_on_the_cpu():
    q, k, d = (torch.randn(*s).half() for s in ((64, 64), (64, 64), (16, 64)))
    s, g = torch.zeros(64, 64), torch.zeros(16, 64)
    tilelang.compile(_two_gemms(), target="cpu")(q, k, d, s, g)
    torch.testing.assert_close(s, q.float() @ k.float().T, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(g, d.float() @ k.float(), rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
def test_the_two_gemms_on_the_gpu():
    q, k, d = (torch.randn(*s).half().cuda() for s in ((64, 64), (64, 64), (16, 64)))
    s, g = torch.zeros(64, 64).cuda(), torch.zeros(16, 64).cuda()
    tilelang.compile(_two_gemms(), target="cuda")(q, k, d, s, g)
    torch.testing.assert_close(s, q.float() @ k.float().T, rtol=1e-2, atol=1e-2)
    torch.testing.assert_close(g, d.float() @ k.float(), rtol=1e-2, atol=1e-2)
