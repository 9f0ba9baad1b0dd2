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


def test_nans_stored_into_a_bf16_tensor_stay_nans():
    # TVM's float32 -> bfloat16 conversion of a tensor parameter rounds the bit pattern: a NaN
    # whose payload is in its low 16 bits became inf or a zero
    @T.prim_func
    def main(A: T.Tensor((6,), "float32"), B: T.Tensor((6,), "bfloat16"),
             C: T.Tensor((6,), "bfloat16")):
        with T.Kernel(1, threads=32):
            s = T.alloc_shared((6,), "bfloat16")
            for i in T.Parallel(6):
                B[i] = A[i]
                s[i] = A[i]
            T.copy(s, C)

    a = torch.tensor([0x7F800001, 0x7FFFFFFF, -1, 0x7FC00000, 0x3F808001, -0x407F8000],
                     dtype=torch.int32).view(torch.float32)
    b, c = torch.zeros(6, dtype=torch.bfloat16), torch.zeros(6, dtype=torch.bfloat16)
    tilelang.compile(main, target="cpu")(a, b, c)
    want = a.bfloat16()
    for out in (b, c):
        assert out[:4].isnan().all()
        torch.testing.assert_close(out[4:], want[4:], rtol=0, atol=0)


def test_a_conversion_to_bf16_inside_an_expression_rounds():
    # TVM computes bf16 in float32 and dropped the round trip (1.65000009 stayed, not 1.6484375)
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            for i in T.Parallel(64):
                Y[i] = T.cast(T.cast(X[i] * 1.1, "bfloat16"), "float32")

    x = torch.randn(64) * 10
    x[0] = 1.5
    y = tilelang.compile(main, out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(y, (x * 1.1).bfloat16().float(), rtol=0, atol=0)


def _bf16_chain(depth):
    """``depth`` nested ``T.cast(T.cast(v, "bfloat16"), "float32") * 1.01`` in one store."""
    def chain(v):
        for _ in range(depth):
            v = T.cast(T.cast(v, "bfloat16"), "float32") * 1.01
        return v

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), O: T.Tensor((8,), "bfloat16")):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                O[i] = chain(A[i])

    return main


def test_nested_bf16_conversions_round_at_every_level():
    x = torch.tensor([0.0, 1.0, 2.0, 3.3, -7.7, 100.1, 1e-3, 255.5])
    want = x
    for _ in range(2):
        want = want.bfloat16().float() * torch.tensor(1.01)
    got = tilelang.compile(_bf16_chain(2), out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(got, want.bfloat16(), rtol=0, atol=0)


def test_a_computed_value_stored_into_a_bf16_tensor_rounds():
    @T.prim_func
    def main(O: T.Tensor((64,), "bfloat16")):
        with T.Kernel(1, threads=1):
            for i in T.Parallel(64):
                O[i] = T.cast(i, "float32") * T.float32(0.3)

    out = tilelang.compile(main, out_idx=[0], target="cpu")()
    assert torch.equal(out, (torch.arange(64).float() * 0.3).bfloat16())
