"""RoundLowPrecisionStores: a bf16 tile on the CPU holds bf16 values, as on a GPU."""

import torch

import tilelang
import tilelang.language as T


def _through_bf16_fragment(n):
    @T.prim_func
    def main(X: T.Tensor((n,), "float32"), Y: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_fragment((n,), "bfloat16")
            for i in T.Parallel(n):
                s[i] = X[i]
            for i in T.Parallel(n):
                Y[i] = s[i]

    return tilelang.compile(main, out_idx=[1], target="cpu")


def test_bf16_fragment_rounds_like_torch():
    k = _through_bf16_fragment(256)
    x = torch.randn(256) * 100
    # ties: exactly halfway between two bf16 values (round to even), NaN and infinities
    x[0] = 1.0 + 2.0 ** -8
    x[1] = 1.0 + 3 * 2.0 ** -8
    x[2], x[3], x[4] = float("nan"), float("inf"), -float("inf")
    y = k(x)
    want = x.bfloat16().float()
    assert torch.isnan(y[2])
    torch.testing.assert_close(y[3:], want[3:], rtol=0, atol=0)
    torch.testing.assert_close(y[:2], want[:2], rtol=0, atol=0)


def test_float32_fragments_are_untouched():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            s = T.alloc_fragment((64,), "float32")
            for i in T.Parallel(64):
                s[i] = X[i]
            for i in T.Parallel(64):
                Y[i] = s[i]

    x = torch.randn(64)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[1], target="cpu")(x), x,
                               rtol=0, atol=0)
