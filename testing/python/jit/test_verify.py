"""``kernel.verify``: the kernel against the CPU reference on the same inputs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from programs import matmul


def _corrupt(kernel, index, delta):
    """Make ``kernel`` return a result that is wrong at one element of its output ``C``."""
    run = kernel._fn

    def wrong(*args):
        run(*args)
        args[2][index] += delta

    kernel._fn = wrong


def test_verify_passes_and_returns_outputs():
    k = tilelang.compile(matmul(96, 64, 64, 32, 32, 32, dtype="float32"), out_idx=[2],
                         target="cpu")
    a, b = torch.randn(96, 64), torch.randn(64, 64)
    c = k.verify(a, b)
    torch.testing.assert_close(c, a @ b, rtol=1e-4, atol=1e-4)


def test_verify_names_index_values_and_block():
    k = tilelang.compile(matmul(96, 64, 64, 32, 32, 32, dtype="float32"), out_idx=[2],
                         target="cpu")
    a, b = torch.randn(96, 64), torch.randn(64, 64)
    _corrupt(k, (70, 40), 5.0)
    with pytest.raises(tilelang.KernelMismatchError) as info:
        k.verify(a, b)
    m = info.value.mismatch
    assert m.param == "C" and m.index == (70, 40) and m.count == 1
    assert m.block == (1, 2, 0)  # column 40 // 32, row 70 // 32
    assert abs(m.got - m.expected - 5.0) < 1e-3
    msg = str(info.value)
    assert "'C'" in msg and "(70, 40)" in msg and "bx=1, by=2" in msg
    assert isinstance(info.value, AssertionError)


def test_verify_checks_tensors_written_in_place():
    @T.prim_func
    def scale(X: T.Tensor((64,), "float32")):
        with T.Kernel(2, threads=32) as bx:
            for i in T.Parallel(32):
                X[bx * 32 + i] = X[bx * 32 + i] * 2.0

    k = tilelang.compile(scale, target="cpu")
    x = torch.randn(64)
    want = x * 2
    k.verify(x)
    torch.testing.assert_close(x, want)

    run = k._fn

    def wrong(x):
        run(x)
        x[33] = 0.0

    k._fn = wrong
    with pytest.raises(tilelang.KernelMismatchError, match=r"'X'.*\(33,\).*bx=1"):
        k.verify(torch.ones(64))


def test_verify_refuses_thread_index_programs():
    @T.prim_func
    def by_thread(X: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            X[tx] = 1.0

    k = tilelang.compile(by_thread, target="cuda -arch=sm_80")
    with pytest.raises(tilelang.ReferenceUnsupportedError, match="thread index"):
        k.verify(torch.zeros(128))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_verify_gpu_gemm_against_cpu(dtype):
    k = tilelang.compile(matmul(257, 129, 96, 64, 64, 32, dtype=dtype), out_idx=[2])
    tdt = getattr(torch, dtype)
    a = torch.randn(257, 96, device="cuda", dtype=tdt)
    b = torch.randn(96, 129, device="cuda", dtype=tdt)
    c = k.verify(a, b, rtol=2e-2, atol=2e-2)
    assert c.device.type == "cuda"
