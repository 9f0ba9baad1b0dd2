"""ScalarBindings: a kernel scalar assigned once inside ``T.vectorized`` is its expression (the
loop vectorizes and every lane gets its own value); a scalar the body updates keeps the loop
serial.  Before the pass both silently computed one lane per vector on every target."""

import shutil

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T


def copy_by_index():
    @T.prim_func
    def main(A: T.Tensor((1024,), "float16"), B: T.Tensor((1024,), "float16")):
        with T.Kernel(2, threads=128) as bx:
            for t in T.Parallel(128):
                for v in T.vectorized(4):
                    index = bx * 512 + t * 4 + v
                    B[index] = A[index]

    return main


def running_sum():
    """Each vector lane adds its own element to a scalar the body updates."""

    @T.prim_func
    def main(A: T.Tensor((512,), "float32"), B: T.Tensor((512,), "float32")):
        with T.Kernel(1, threads=128):
            for t in T.Parallel(128):
                acc = T.float32(0)
                for v in T.vectorized(4):
                    acc = acc + A[t * 4 + v]
                    B[t * 4 + v] = acc

    return main


def test_single_assignment_in_a_vectorized_loop_cpu():
    k = tilelang.compile(copy_by_index(), target="llvm")
    a = torch.randn(1024).half()
    b = torch.zeros(1024).half()
    k(a, b)
    torch.testing.assert_close(b, a)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_single_assignment_vectorizes_on_cuda():
    src = tilelang.compile(copy_by_index(), target="cuda -arch=sm_90a").get_kernel_source()
    body = src[src.index("main_kernel("):]
    assert "half4" in body and "index" not in body


def test_updated_scalar_keeps_the_loop_serial():
    k = tilelang.compile(running_sum(), target="llvm")
    a = torch.randn(512)
    b = torch.zeros(512)
    k(a, b)
    ref = np.cumsum(a.numpy().reshape(128, 4), axis=1).reshape(-1)
    np.testing.assert_allclose(b.numpy(), ref, rtol=1e-5, atol=1e-5)


def test_scalar_read_from_memory_is_not_moved():
    """``x = A[i]`` stays a load at its place: A changes after it."""

    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128):
            for t in T.Parallel(128):
                x = A[t]
                A[t] = x + 1
                B[t] = x

    k = tilelang.compile(main, target="llvm")
    a = torch.arange(128, dtype=torch.float32)
    b = torch.zeros(128)
    k(a.clone(), b)
    torch.testing.assert_close(b, torch.arange(128, dtype=torch.float32))
