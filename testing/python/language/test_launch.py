"""T.pdl_trigger / T.pdl_sync: programmatic dependent launch between the kernels of one
function. Results are those of running the kernels in order on every target; sm_90a code has
griddepcontrol, sm_80 and the CPU nothing."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def chained(N=1000, block=256):
    """Two kernels; ``as (bx,)`` is the public spelling of a 1-D grid's index."""

    @T.prim_func
    def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32"),
             C: T.Tensor((N,), "float32")):
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx,):
            for i in T.Parallel(block):
                if bx * block + i < N:
                    B[bx * block + i] = A[bx * block + i] + 1.0
            T.pdl_trigger()
        with T.Kernel(T.ceildiv(N, block), threads=block) as (bx,):
            T.pdl_sync()
            for i in T.Parallel(block):
                if bx * block + i < N:
                    # reads an element another block of the first kernel wrote
                    C[bx * block + i] = B[N - 1 - bx * block - i] * 2.0

    return main


def test_dependent_kernels_on_the_cpu():
    kernel = tilelang.compile(chained(), out_idx=[1, 2], target="cpu")
    a = torch.randn(1000)
    b, c = kernel(a)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, (a + 1).flip(0) * 2)


@needs_nvcc
def test_sm90a_has_griddepcontrol_and_sm80_none():
    kernel = tilelang.compile(chained(), out_idx=[1, 2], target="cuda -arch=sm_90a")
    src = kernel.get_kernel_source()
    body = src.split('#include "tl_templates/cuda/tl.h"')[-1]
    first, second = body.split("void __launch_bounds__(256) main_kernel_1(")[-2:]
    assert "tl::pdl_trigger()" in first and "tl::pdl_sync()" in second
    assert "tl::pdl_sync()" not in first and "tl::pdl_trigger()" not in second
    ptx = kernel.get_ptx()
    assert "griddepcontrol.launch_dependents" in ptx and "griddepcontrol.wait" in ptx
    sm80 = tilelang.compile(chained(), out_idx=[1, 2], target="cuda -arch=sm_80").get_ptx()
    assert "griddepcontrol" not in sm80 and sm80.count(".entry") == 2


def test_outside_a_kernel_is_an_error():
    with pytest.raises(DSLError, match="only valid inside a T.Kernel"):
        T.pdl_sync()
    with pytest.raises(DSLError, match="only valid inside a T.Kernel"):
        T.pdl_trigger()


@pytest.mark.gpu
def test_dependent_kernels_on_the_gpu():
    kernel = tilelang.compile(chained(), out_idx=[1, 2], target="cuda")
    a = torch.randn(1000, device="cuda")
    b, c = kernel(a)
    torch.testing.assert_close(b, a + 1)
    torch.testing.assert_close(c, (a + 1).flip(0) * 2)


def test_a_symbolic_thread_count_is_refused():
    # (was: a TypeError from inside layout inference)
    from tilelang.errors import DSLTypeError

    n = T.dynamic("n")
    with pytest.raises(DSLTypeError, match=r"T.Kernel: threads must be constant ints.*got n"):
        @T.prim_func
        def main(A: T.Tensor((n,), "float32")):
            with T.Kernel(1, threads=n) as _:
                A[0] = 1.0
