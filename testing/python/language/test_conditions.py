"""``if`` / ``while`` on a number test it against zero, as in C (``tilelang.language.conditions``)."""

import pytest
import torch

import tilelang
import tilelang.language as T


def masked(dtype):
    @T.prim_func
    def main(M: T.Tensor((8,), dtype), A: T.Tensor((8,), "float32"),
             B: T.Tensor((8,), "float32"), N: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(8):
                if M[i]:
                    B[i] = A[i]
                else:
                    B[i] = 0.0
            c = T.alloc_var("int32", init=0)
            while M[c]:  # the leading run of true values
                c = c + 1
            N[0] = c

    return main


@pytest.mark.parametrize("dtype", ["int32", "uint8", "float32", "bool"])
def test_a_number_condition_is_compared_with_zero(dtype):
    k = tilelang.compile(masked(dtype), out_idx=[2, 3], target="cpu")
    m = torch.tensor([1, 2, 0, 3, 0, 0, 1, 0]).to(getattr(torch, dtype))
    b, n = k(m, torch.arange(1.0, 9.0))
    assert b.tolist() == [1.0, 2.0, 0.0, 4.0, 0.0, 0.0, 7.0, 0.0] and n.tolist() == [2]
    tilelang.compile(masked(dtype), target="cuda -arch=sm_90a")  # (was: an internal check)
