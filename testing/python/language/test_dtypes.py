"""Dtype objects: ``T.float16`` is the string "float16", a TVM DataType and a constructor."""

import pickle
import shutil

import pytest
import torch
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_dtype_objects_are_their_names():
    assert T.float16 == "float16" and isinstance(T.float16, str)
    assert {"bfloat16": 1}[T.bfloat16] == 1
    assert f"{T.int8}" == "int8"
    assert T.float16.bits == 16 and T.int4.bits == 4 and T.float32.lanes == 1
    assert T.float16x4.lanes == 4


def test_dtype_objects_map_to_torch():
    assert T.float16.as_torch() is torch.float16
    assert T.bool.as_torch() is torch.bool
    assert getattr(torch, T.bfloat16) is torch.bfloat16
    assert T.float8_e4m3fn.as_torch() is torch.float8_e4m3fn
    assert T.int4.as_torch() is torch.uint8  # sub-byte types: the packed bytes
    with pytest.raises(DSLError, match="float6_e2m3fn.*no torch equivalent"):
        T.dtype("float6_e2m3fn").as_torch()


def test_dtype_constructor_accepts_every_spelling():
    assert T.dtype(torch.float16) == T.float16
    assert T.dtype(float) == "float32" and T.dtype(int) == "int32" and T.dtype(bool) == "bool"
    assert T.dtype("half") == "float16"
    assert T.dtype(T.float16) is T.float16
    # the short public aliases name the 32-bit types
    assert (T.float, T.int, T.uint) == ("float32", "int32", "uint32")
    assert T.tfloat32 == "float32"  # TF32 data is stored as float32
    with pytest.raises(DSLError, match="unknown dtype 'float17'"):
        T.dtype("float17")


def test_dtype_objects_construct_values_like_tvmscript():
    c = T.float16(1.5)
    assert isinstance(c, tirx.FloatImm) and str(c.ty) == "float16" and c.value == 1.5
    x = tirx.Var("x", "int32")
    cast = T.float32(x)
    assert isinstance(cast, tirx.Cast) and str(cast.ty) == "float32"
    four = T.int4(3)  # a type TVMScript has no constructor for
    assert isinstance(four, tirx.IntImm) and str(four.ty) == "int4" and four.value == 3
    assert T.float32("inf").value == float("inf")


def test_vector_annotation_and_slicing_and_pickle():
    ann = T.float32[4]
    assert ann.dtype == "float32" and tuple(ann.shape) == (4,)
    assert T.float16[:5] == "float"
    assert pickle.loads(pickle.dumps(T.bfloat16)) is not None
    assert pickle.loads(pickle.dumps(T.bfloat16)) == T.bfloat16


def _masked_scale(n, dtype=T.float16, accum=T.float):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), mask: T.Tensor((n,), T.bool), B: T.Tensor((n,), accum),
             scale: T.float32, k: T.int32):
        with T.Kernel(1, threads=32) as bx:
            frag = T.alloc_fragment((n,), accum)
            keep = T.alloc_var(T.bool)
            for i in T.Parallel(n):
                frag[i] = T.if_then_else(mask[i], T.cast(A[i], accum) * scale,
                                         A[i].astype(T.float32) + T.float32(k) * T.float32(0))
            for i in T.serial(n):
                keep = mask[i]
                if keep:
                    B[i] = T.max(frag[i], -T.infinity(T.float32))
                else:
                    B[i] = T.min(T.max(frag[i], T.min_value(accum)), T.max_value(T.float32))

    return main


def test_dtype_objects_inside_a_kernel_on_the_cpu():
    kernel = tilelang.compile(_masked_scale(64), target="llvm")
    a = torch.randn(64).half()
    mask = torch.rand(64) > 0.5
    b = torch.empty(64)
    kernel(a, mask, b, 2.0, 3)
    torch.testing.assert_close(b, torch.where(mask, a.float() * 2, a.float()))
    assert kernel.params[1].dtype == "bool"


def test_reinterpret_takes_value_then_dtype_and_the_tvm_order():
    """``T.reinterpret(x, T.uint16)`` (the public order, as in deepseek_v32/topk_selector.py)
    and ``T.reinterpret("int16", x)`` read the same bits."""
    import torch

    import tilelang
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((4,), T.float16), B: T.Tensor((4,), T.int16),
             C: T.Tensor((4,), T.int16)):
        with T.Kernel(1, threads=1) as bx:
            for i in T.serial(4):
                B[i] = T.reinterpret(A[i], T.int16)
                C[i] = T.reinterpret("int16", A[i])

    a = torch.tensor([1.0, -2.0, 0.5, 65504.0]).half()
    b, c = tilelang.compile(main, out_idx=[1, 2], target="cpu")(a)
    assert b.tolist() == a.view(torch.int16).tolist() == c.tolist()


def test_float8_e4m3_is_the_finite_cuda_format():
    """The public TileLang's float8_e4m3 is CUDA's and torch's e4m3 (finite, "fn"): the name,
    the T.float8_e4m3 object and the old e4m3_float8 spelling all give float8_e4m3fn, which
    CUDA code generation supports (TVM's IEEE-style float8_e4m3 it does not)."""
    assert T.float8_e4m3 == "float8_e4m3fn"
    assert T.dtype("float8_e4m3") == T.dtype("e4m3_float8") == "float8_e4m3fn"
    assert T.float8_e4m3.as_torch() is torch.float8_e4m3fn


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "float8_e5m2"])
def test_infinity_of_every_float_type_with_one(dtype):
    @T.prim_func
    def fill_inf(A: T.Tensor((8,), dtype), B: T.Tensor((8,), dtype)):
        with T.Kernel(1, threads=1):
            T.fill(A, T.infinity(dtype))
            T.fill(B, -T.infinity(T.dtype(dtype)))

    k = tilelang.compile(fill_inf, out_idx=[0, 1], target="cpu")
    a, b = k()
    # float8 arithmetic (the negation) is float32 rounded back with CUDA's saturation
    low = -torch.finfo(a.dtype).max if dtype.startswith("float8") else float("-inf")
    assert torch.all(a.float() == float("inf")) and torch.all(b.float() == low)
    if shutil.which("nvcc"):  # and the constant prints as CUDA that compiles
        assert ".target sm_90a" in tilelang.compile(fill_inf, out_idx=[0, 1],
                                                    target="cuda -arch=sm_90a").get_ptx()
    with pytest.raises(DSLError, match="float8_e4m3fn has no infinity"):
        T.infinity(T.float8_e4m3fn)


def test_integer_constructors_convert_toward_zero_and_refuse_what_does_not_fit():
    assert str(T.int8(-3.7)) == "T.int8(-3)" and str(T.uint8(255.9)) == "T.uint8(255)"
    for value in (128, -129.5, 2**64, float("nan"), float("inf")):
        with pytest.raises(DSLError, match=r"T.int8\(.*\): outside int8's range -128..127"):
            T.int8(value)


def test_python_ints_take_the_integer_type_of_a_bitwise_operand():
    assert str(T.uint32(0xFFFFFFFF)) == "T.uint32(4294967295)"
    assert str(T.uint64(2**64 - 1)) == "T.uint64(18446744073709551615)"
    u = T.uint32()
    for expr in (u & 0xFFFFFFFF, 0xFFFFFFFF & u, u | 0x80000000, u ^ 0xFFFFFFFF):
        assert str(expr.ty) == "uint32"
    i = T.int64()
    assert str((i & 0x7FFFFFFFFFFFFFFF).ty) == "int64"

    @T.prim_func
    def low_word(A: T.Tensor((4,), "uint32"), B: T.Tensor((4,), "uint32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                B[i] = (A[i] ^ 0xFFFFFFFF) & 0xFFFF0000

    a = torch.tensor([0, 1, 0xFFFF, 0x12345678], dtype=torch.int64).to(torch.uint32)
    b = tilelang.compile(low_word, out_idx=[1], target="cpu")(a)
    expect = [(~x & 0xFFFFFFFF) & 0xFFFF0000 for x in (0, 1, 0xFFFF, 0x12345678)]
    assert [int(v) for v in b.to(torch.int64)] == expect


@pytest.mark.parametrize("dt", ["bfloat16", "float8_e5m2", "float16"])
def test_isnan_isinf_isfinite_of_narrow_floats(dt):
    # TVM refused bfloat16 ("not supported for isnan op. Skipping isnan op...")
    @T.prim_func
    def f(A: T.Tensor((4,), dt), B: T.Tensor((3, 4), "int32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                B[0, i] = T.Cast("int32", T.isnan(A[i]))
                B[1, i] = T.Cast("int32", T.isinf(A[i]))
                B[2, i] = T.Cast("int32", T.isfinite(A[i]))

    a = torch.tensor([float("nan"), float("inf"), 0.0, -2.0]).to(getattr(torch, dt))
    got = tilelang.compile(f, out_idx=[1], target="cpu")(a).tolist()
    assert got == [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]]
    if shutil.which("nvcc"):
        assert ".entry" in tilelang.compile(f, target="cuda -arch=sm_90a").get_ptx()


def test_a_bfloat16_scalar_parameter_is_rounded_to_bfloat16():
    # (was: a TVM internal check on the CPU and CUDA; TVM's calling convention has none)
    import torch

    @T.prim_func
    def main(A: T.Tensor((4,), "bfloat16"), s: T.bfloat16, B: T.Tensor((4,), "bfloat16")):
        with T.Kernel(1, threads=32) as _:
            for i in T.Parallel(4):
                B[i] = A[i] * s

    a = torch.ones(4, dtype=torch.bfloat16)
    out = tilelang.compile(main, out_idx=[2], target="cpu")(a, 1.00390625 + 2 ** -12)
    assert out.tolist() == [1.0078125] * 4  # s rounded to bfloat16 (nearest even), not 1.0039
    tilelang.compile(main, target="cuda -arch=sm_90a")
