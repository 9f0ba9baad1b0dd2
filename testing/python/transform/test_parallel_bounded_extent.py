"""A T.Parallel loop whose extent is symbolic but bounded by a constant (the public
``T.Parallel(T.min(valid_len, 512))``) is laid out over the bound, its body guarded."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T


def _clipped(max_len=512):
    @T.prim_func
    def main(A: T.Tensor((max_len,), "float32"), B: T.Tensor((max_len,), "float32"),
             valid_len: T.int32):
        with T.Kernel(1, threads=256) as _:
            for i in T.Parallel(max_len):
                B[i] = 0.0
            for i in T.Parallel(T.min(valid_len, max_len)):
                B[i] = A[i] - 1.0

    return main


def _reference(a, valid_len):
    want = torch.zeros_like(a)
    clip = max(0, min(valid_len, a.shape[0]))
    want[:clip] = a[:clip] - 1.0
    return want


@pytest.mark.parametrize("valid_len", [0, 13, 600])
def test_bounded_extent_on_the_cpu(valid_len):
    a, b = torch.randn(512), torch.empty(512)
    tilelang.compile(_clipped(), target="cpu")(a, b, valid_len)
    torch.testing.assert_close(b, _reference(a, valid_len))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_bounded_extent_compiles_for_cuda_with_a_guard():
    src = tilelang.compile(_clipped(), target="cuda -arch=sm_90a").get_kernel_source()
    body = src[src.index("__global__"):]
    assert "< valid_len)" in body  # the guard (i < min(valid_len, 512), simplified)


def test_an_unbounded_symbolic_extent_is_still_refused():
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=128) as _:
            for i in T.Parallel(n):
                A[i] = 0.0

    with pytest.raises(Exception, match="is not a constant"):
        tilelang.compile(main, target="cuda -arch=sm_90a")


@pytest.mark.gpu
@pytest.mark.parametrize("valid_len", [0, 13, 200, 600])
def test_bounded_extent_on_the_gpu(valid_len):
    a, b = torch.randn(512).cuda(), torch.empty(512).cuda()
    tilelang.compile(_clipped(), target="cuda")(a, b, valid_len)
    torch.testing.assert_close(b.cpu(), _reference(a.cpu(), valid_len))
