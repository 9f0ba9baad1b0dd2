"""T.reduce_* on the CPU backend: every kind, each dim, clear=True/False."""

import pytest
import torch

import tilelang
import tilelang.language as T  # noqa: F401
from programs import reduce_kernel

KINDS = {
    "max": lambda x, d: x.amax(d),
    "min": lambda x, d: x.amin(d),
    "sum": lambda x, d: x.sum(d),
    "abssum": lambda x, d: x.abs().sum(d),
    "absmax": lambda x, d: x.abs().amax(d),
}
FOLD = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add, "abssum": torch.add,
        "absmax": torch.maximum}


@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("kind", list(KINDS))
def test_reduce(kind, dim, clear):
    M, N = 24, 40
    k = tilelang.compile(reduce_kernel(kind, M, N, dim, clear), out_idx=[2], target="cpu")
    x = torch.randn(M, N)
    d = dim % 2
    init = torch.randn(x.shape[1 - d])
    ref = KINDS[kind](x, d)
    if not clear:
        ref = FOLD[kind](init, ref)
    torch.testing.assert_close(k(x, init), ref, rtol=1e-5, atol=1e-5)


def test_reduce_into_kept_unit_dim():
    @T.prim_func
    def main(X: T.Tensor((8, 16), "float32"), Y: T.Tensor((8, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((8, 16), "float32")
            y = T.alloc_fragment((8, 1), "float32")
            T.copy(X, x)
            T.reduce_sum(x, y, dim=1)
            T.copy(y, Y)

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    x = torch.randn(8, 16)
    torch.testing.assert_close(k(x), x.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)
