"""The host code assumes a tensor parameter's address is aligned to one element, not the packed
API's 64 bytes (``RelaxParamAlignment``): CPU kernels run on views at any element offset and on
numpy arrays, where LLVM's aligned vector accesses used to kill the process."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.ir_utils import find_all
from tvm import tirx


def add(n, dtype):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=1) as _:
            for i in T.serial(n):  # LLVM vectorizes this loop
                C[i] = A[i] + B[i]

    return main


@pytest.mark.parametrize("dtype, nbytes", [("float32", 4), ("float16", 2), ("int8", 1),
                                           ("float64", 8)])
def test_parameters_are_aligned_to_one_element(dtype, nbytes):
    mod = tilelang.lower(add(64, dtype), target="cpu")
    found = [int(a.value) for f in mod.functions.values()
             for a in find_all(f.body, tirx.AttrStmt,
                               lambda a: a.attr_key == "storage_alignment")]
    assert found == [nbytes] * 3


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_views_at_an_element_offset(dtype):
    n = 1024
    k = tilelang.compile(add(n, dtype), target="cpu")
    base = torch.arange(3 * n + 3).to(getattr(torch, dtype)) % 7
    a, b = base[1:n + 1], base[n + 2:2 * n + 2]
    c = torch.zeros(n + 3, dtype=getattr(torch, dtype))
    out = c[3:]  # written through a view at an offset of 3 elements
    k(a, b, out)
    torch.testing.assert_close(out, a + b)
    assert (c[:3] == 0).all()


def test_numpy_arrays_at_any_offset():
    n = 1024
    k = tilelang.compile(add(n, "float32"), out_idx=[2], target="cpu")
    buf = np.arange(2 * n + 2, dtype=np.float32)
    a, b = buf[1:n + 1], buf[n + 1:2 * n + 1]
    np.testing.assert_allclose(k(a, b), a + b)
