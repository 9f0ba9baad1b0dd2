"""SolveAffineSizes: a size variable given only through an affine dimension (``n * 3 + 1``) is
solved from the tensor's size at the call, and a size no whole ``n`` gives is refused."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError
from tilelang.transform.affine_sizes import affine_in


def zero_fill(shape_of):
    n = T.symbolic("n")

    @T.prim_func
    def kernel(A: T.Tensor((shape_of(n),), T.int32)):
        with T.Kernel(1, threads=1):
            for i in T.serial(shape_of(n)):
                A[i] = n

    return kernel


@pytest.mark.parametrize("shape_of,size,n", [(lambda n: n * 4, 16, 4), (lambda n: n + 1, 16, 15),
                                             (lambda n: n * 3 + 1, 16, 5)])
def test_the_size_variable_is_solved_from_the_tensor(shape_of, size, n):
    k = tilelang.compile(zero_fill(shape_of), target="cpu")
    a = torch.arange(size, dtype=torch.int32)
    k(a)
    assert torch.equal(a, torch.full((size,), n, dtype=torch.int32))


def test_a_size_that_no_whole_n_gives_is_refused():
    k = tilelang.compile(zero_fill(lambda n: n * 3 + 1), target="cpu")
    with pytest.raises(RuntimeError, match=r"dim 0 must be n \* 3 \+ 1 for a whole n >= 0"):
        k(torch.zeros(15, dtype=torch.int32))


def test_a_variable_some_dimension_gives_directly_stays_bound_there():
    n = T.symbolic("n")

    @T.prim_func
    def kernel(A: T.Tensor((n * 2,), T.int32), B: T.Tensor((n,), T.int32)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                A[i * 2] = B[i]

    k = tilelang.compile(kernel, target="cpu")
    a, b = torch.zeros(8, dtype=torch.int32), torch.arange(4, dtype=torch.int32)
    k(a, b)
    assert a[::2].tolist() == [0, 1, 2, 3]
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects shape \(n \* 2,\), got "
                       r"\(9,\) \(dim 0 is 9, expected n \* 2 = 8 with n = 4\)"):
        k(torch.zeros(9, dtype=torch.int32), b)
    if shutil.which("nvcc"):
        tilelang.compile(zero_fill(lambda n: n * 4), target="cuda -arch=sm_90a").get_ptx()

    @T.prim_func
    def odd(A: T.Tensor((n * 2 + 1,), T.int32), B: T.Tensor((n,), T.int32)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                A[i * 2 + 1] = B[i]

    # the message stripped every leading parenthesis: "expects shape (n * 2) + 1,)"
    with pytest.raises(KernelArgumentError, match=r"expects shape \(\(n \* 2\) \+ 1,\), got "
                       r"\(8,\) \(dim 0 is 8, expected \(n \* 2\) \+ 1 = 9 with n = 4\)"):
        tilelang.compile(odd, target="cpu")(torch.zeros(8, dtype=torch.int32), b)


def test_a_variable_in_several_affine_dimensions_is_solved_from_the_first():
    n = T.symbolic("n")

    @T.prim_func
    def kernel(A: T.Tensor((n * 4,), T.int32), B: T.Tensor((n * 2,), T.int32)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n * 2):
                B[i] = A[i * 2]

    k = tilelang.compile(kernel, target="cpu")
    a, b = torch.arange(8, dtype=torch.int32), torch.zeros(4, dtype=torch.int32)
    k(a, b)
    assert b.tolist() == [0, 2, 4, 6]
    with pytest.raises(RuntimeError, match=r"parameter 'B': dim 0 must be n \* 2, with n from "
                       r"dim 0 of 'A' \(n \* 4\)"):
        k(a, torch.zeros(6, dtype=torch.int32))
    if shutil.which("nvcc"):
        tilelang.compile(kernel, target="cuda -arch=sm_90a").get_ptx()


def test_affine_forms():
    n = T.int32()
    assert affine_in(n * 3 + 1, n) == (3, 1)
    assert affine_in(2 * (n - 1), n) == (2, -2)
    assert affine_in(n * n, n) is None
    assert affine_in(n // 2, n) is None
