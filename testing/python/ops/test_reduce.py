"""T.reduce_* on the CPU backend: every kind, each dim, clear=True/False."""

import pytest
import torch

import tilelang
import tilelang.language as T  # noqa: F401
from programs import reduce_kernel
from tilelang.errors import DSLError

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


LOW_PRECISION = {"float16": torch.float16, "bfloat16": torch.bfloat16,
                 "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}


def low_precision_reduce(kind, dtype, clear):
    """``dtype`` data reduced over dim 1 into a ``dtype`` fragment (folded into ``Init``)."""
    reducer = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor((16, 32), dtype), Init: T.Tensor((16,), dtype),
             Y: T.Tensor((16,), dtype)):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((16, 32), dtype)
            y = T.alloc_fragment((16,), dtype)
            T.copy(X, x)
            T.copy(Init, y)
            reducer(x, y, dim=1, clear=clear)
            T.copy(y, Y)

    return main


def low_precision_inputs(dtype):
    x, init = torch.randn(16, 32) * 3, torch.randn(16) * 3
    if not dtype.startswith("float8"):  # (the CPU backend converts float8 infinities wrongly)
        x[0] = -float("inf")  # an all -inf row stays -inf
        x[1, 3] = float("inf")
    return x.to(LOW_PRECISION[dtype]), init.to(LOW_PRECISION[dtype])


def low_precision_ref(kind, clear, x, init):
    """Max/min are exact in any dtype: reduce in float32."""
    ref = KINDS[kind](x.float(), 1)
    return ref if clear else FOLD[kind](init.float(), ref)


@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("dtype", list(LOW_PRECISION))
def test_reduce_max_min_low_precision(dtype, kind, clear):
    k = tilelang.compile(low_precision_reduce(kind, dtype, clear), out_idx=[2], target="cpu")
    x, init = low_precision_inputs(dtype)
    assert torch.equal(k(x, init).float(), low_precision_ref(kind, clear, x, init))


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_reduce_sum_float8_accumulates_in_float32(dtype):
    k = tilelang.compile(low_precision_reduce("sum", dtype, True), out_idx=[2], target="cpu")
    x = torch.randn(16, 32).to(LOW_PRECISION[dtype])
    ref = x.float().sum(1).to(LOW_PRECISION[dtype]).float()
    assert torch.equal(k(x, torch.zeros(16).to(x.dtype)).float(), ref)


@pytest.mark.parametrize("dtype", list(LOW_PRECISION))
def test_reduce_low_precision_compiles_for_cuda(dtype):
    for kind in ("max", "min", "absmax", "sum"):
        tilelang.compile(low_precision_reduce(kind, dtype, False), out_idx=[2],
                         target="cuda -arch=sm_80")


@pytest.mark.gpu
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("kind", ["max", "min", "absmax"])
@pytest.mark.parametrize("dtype", list(LOW_PRECISION))
def test_reduce_max_min_low_precision_gpu(dtype, kind, clear):
    k = tilelang.compile(low_precision_reduce(kind, dtype, clear), out_idx=[2], target="cuda")
    x, init = low_precision_inputs(dtype)
    y = k(x.cuda(), init.cuda()).cpu().float()
    assert torch.equal(y, low_precision_ref(kind, clear, x, init))


@pytest.mark.parametrize("op", ["reduce_max", "reduce_min", "reduce_sum", "cumsum"])
def test_a_bool_tile_is_refused_naming_the_op(op):
    # (was: "Cannot decide min_value for type bool", a TVM check, on the CPU and CUDA)
    with pytest.raises(DSLError, match=rf"T.{op}: the source S is bool"):
        @T.prim_func
        def main(A: T.Tensor((4, 64), "bool"), B: T.Tensor((4,), "bool")):
            with T.Kernel(1, threads=128) as _:
                S = T.alloc_shared((4, 64), "bool")
                D = T.alloc_fragment((4,), "bool")
                T.copy(A, S)
                if op == "cumsum":
                    T.cumsum(S, dim=1)
                else:
                    getattr(T, op)(S, D, dim=1)
                T.copy(D, B)
