"""``LowerCPUMath``: on the CPU, half-precision math is computed in float32 and rounded once,
``tanh`` and ``fmod`` come from the C library; ``T.pow`` of bfloat16 values computes in float32."""

import pytest
import torch
import tvm

import tilelang
import tilelang.language as T


def _unary(op, dtype, n):
    fn = getattr(T, op)

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                B[i] = fn(A[i])

    return tilelang.compile(main, out_idx=[1], target="cpu")


def _binary(op, dtype, n):
    fn = getattr(T, op)

    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype), C: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                C[i] = fn(A[i], B[i])

    return tilelang.compile(main, out_idx=[2], target="cpu")


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_tanh_keeps_its_precision_near_zero(dtype):
    # TVM's (1 - exp(-2x)) / (1 + exp(-2x)) gave tanh(1e-8) = 0 and tanh(1e-4) = 0 in float16
    x = torch.tensor([1e-8, 1e-6, 1e-4, 1e-3, 0.5, -0.7, 9.0, -30.0]).to(getattr(torch, dtype))
    got = _unary("tanh", dtype, 8)(x)
    torch.testing.assert_close(got, torch.tanh(x.double()).to(x.dtype), rtol=2e-7, atol=0)


TORCH = {"erf": torch.erf, "cosh": torch.cosh, "sinh": torch.sinh, "atan": torch.atan,
         "asin": torch.asin, "acos": torch.acos, "log1p": torch.log1p, "asinh": torch.asinh}


@pytest.mark.parametrize("op", sorted(TORCH))
def test_float16_math_is_computed_in_float32_and_rounded_once(op):
    # TVM's LLVM backend has no float16 lowering of these ("TVM failed an internal check")
    x = torch.tensor([0.1, 0.25, 0.5, 0.75, -0.3, 0.9], dtype=torch.float16)
    want = TORCH[op](x.float()).half()
    torch.testing.assert_close(_unary(op, "float16", 6)(x), want, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fmod_atan2_and_pow(dtype):
    t = getattr(torch, dtype)
    a = torch.tensor([5.5, -5.5, 7.25, 0.3, 2.0, 9.0]).to(t)
    b = torch.tensor([2.0, 2.0, -1.5, 0.1, 0.5, 0.5]).to(t)
    exact = dict(rtol=0, atol=0)
    torch.testing.assert_close(_binary("fmod", dtype, 6)(a, b),
                               torch.fmod(a.double(), b.double()).to(t), **exact)
    torch.testing.assert_close(_binary("atan2", dtype, 6)(a, b),
                               torch.atan2(a.double(), b.double()).to(t), rtol=2e-7, atol=0)
    torch.testing.assert_close(_binary("pow", dtype, 6)(a.abs(), b),
                               torch.pow(a.abs().double(), b.double()).to(t), rtol=2e-7, atol=0)


def _shifts():
    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), S: T.Tensor((8,), "int32"), O: T.Tensor((2, 8), "int32")):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                O[0, i] = A[i] << S[i]
                O[1, i] = A[i] >> S[i]

    return main


SHIFT_A = [3, 3, 3, -8, -8, 1, 5, -5]
SHIFT_S = [31, 32, 33, 32, 33, 64, -1, 2]
# the GPU's shl/shr clamp the amount (a negative one is a huge unsigned one)
SHIFT_WANT = [[-2**31, 0, 0, 0, 0, 0, 0, -20], [0, 0, 0, -1, -1, 0, 0, -2]]


def test_shifts_by_the_width_or_more_clamp_as_on_the_gpu():
    k = tilelang.compile(_shifts(), out_idx=[2], target="cpu")
    o = k(torch.tensor(SHIFT_A, dtype=torch.int32), torch.tensor(SHIFT_S, dtype=torch.int32))
    assert o.tolist() == SHIFT_WANT


@pytest.mark.gpu
def test_shifts_by_the_width_or_more_on_the_gpu_match_the_cpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    k = tilelang.compile(_shifts(), out_idx=[2])
    o = k(torch.tensor(SHIFT_A, dtype=torch.int32, device="cuda"),
          torch.tensor(SHIFT_S, dtype=torch.int32, device="cuda"))
    assert o.cpu().tolist() == SHIFT_WANT


def _float_to_int(src, dst):
    @T.prim_func
    def main(A: T.Tensor((8,), src), O: T.Tensor((8,), dst)):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                O[i] = T.cast(A[i], dst)

    return main


CONVERSIONS = [("float32", "int32"), ("float32", "int8"), ("float32", "uint8"),
               ("float64", "uint32"), ("float32", "int64"), ("float16", "int8"),
               ("float16", "uint8"), ("float16", "int16"), ("bfloat16", "int8"),
               ("bfloat16", "uint16"), ("float8_e4m3fn", "uint8"), ("float8_e5m2", "int8"),
               ("float64", "int32"), ("float64", "int64"), ("float32", "uint64"),
               ("float16", "int64"), ("bfloat16", "uint64")]
BEYOND = [1e10, -1e10, 300.7, -300.7, float("nan"), float("inf"), -2.9, 2.9]


@pytest.mark.parametrize("src, dst, want", [
    # float32/64: clamped to 32 (64) bits, then the low bits; narrow floats: to the target;
    # NaN: 0, but 1 << (bits - 1) from float64 or into 64 bits (what sm_90 gives)
    ("float32", "int32", [2**31 - 1, -2**31, 300, -300, 0, 2**31 - 1, -2, 2]),
    ("float32", "int8", [-1, 0, 44, -44, 0, -1, -2, 2]),
    ("float64", "uint32", [2**32 - 1, 0, 300, 0, 2**31, 2**32 - 1, 0, 2]),
    ("float64", "int32", [2**31 - 1, -2**31, 300, -300, -2**31, 2**31 - 1, -2, 2]),
    ("float32", "int64", [10**10, -10**10, 300, -300, -2**63, 2**63 - 1, -2, 2]),
    ("float16", "int8", [-1, 0, 44, -44, 0, -1, -2, 2]),  # TVM's (signed char)(int)h
    ("float16", "int16", [32767, -32768, 300, -300, 0, 32767, -2, 2]),
    ("float8_e4m3fn", "uint8", [255, 0, 255, 0, 0, 255, 0, 3])])
def test_float_to_integer_conversions_clamp_as_on_the_gpu(src, dst, want):
    # LLVM leaves them undefined: x86 gave INT_MIN for 1e10 and NaN, 254 for uint8(-2.9)
    k = tilelang.compile(_float_to_int(src, dst), out_idx=[1], target="cpu")
    assert k(_beyond(src)).tolist() == want


def _beyond(src):
    """BEYOND in ``src``; float8 gets its largest finite value for 1e10 and inf (torch 2.11
    made them NaN, torch 2.13 saturates)."""
    x = torch.tensor(BEYOND)
    if src.startswith("float8"):
        big = torch.finfo(getattr(torch, src)).max
        x = torch.where(x.isnan(), x, x.clamp(-big, big))
    return x.to(getattr(torch, src))


@pytest.mark.gpu
@pytest.mark.parametrize("src, dst", CONVERSIONS)
def test_float_to_integer_conversions_on_the_gpu_match_the_cpu(src, dst):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    a = _beyond(src)
    cpu = tilelang.compile(_float_to_int(src, dst), out_idx=[1], target="cpu")(a)
    gpu = tilelang.compile(_float_to_int(src, dst), out_idx=[1])(a.cuda())
    assert gpu.cpu().tolist() == cpu.tolist()


@pytest.mark.parametrize("src, dst", [("float32", "int8"), ("float32", "uint8"),
                                      ("float32", "int32"), ("float64", "uint32")])
def test_a_float_constant_converts_as_a_value_does(src, dst):
    # TVM's constant folding refused 1e10 -> int8 ("Literal value ... exceeds range")
    make = getattr(T, src)
    folded = [T.cast(make(v), dst) for v in BEYOND]
    assert all(isinstance(c, tvm.tirx.IntImm) for c in folded)
    k = tilelang.compile(_float_to_int(src, dst), out_idx=[1], target="cpu")
    assert [int(c.value) for c in folded] == k(_beyond(src)).tolist()


def _min_max(dtype):
    @T.prim_func
    def main(A: T.Tensor((4,), dtype), B: T.Tensor((4,), dtype), O: T.Tensor((2, 4), dtype)):
        with T.Kernel(1, threads=4):
            for i in T.vectorized(4):
                O[0, i] = T.max(A[i], B[i])
                O[1, i] = T.min(A[i], B[i])

    return main


MIN_MAX_TYPES = ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn"]
NAN_PAIRS = (torch.tensor([float("nan"), 1.0, float("nan"), -2.0]),
             torch.tensor([1.0, float("nan"), float("nan"), 3.0]))


@pytest.mark.parametrize("dtype", MIN_MAX_TYPES)
def test_min_and_max_ignore_a_nan_in_either_order(dtype):
    # LLVM's compare-and-select (and TVM's CUDA max(half, half)) gave the second operand:
    # T.max(nan, 1) was 1, T.max(1, nan) nan
    t = getattr(torch, dtype)
    a, b = (x.to(t) for x in NAN_PAIRS)
    o = tilelang.compile(_min_max(dtype), out_idx=[2], target="cpu")(a, b).float()
    assert o[:, :2].tolist() == [[1.0, 1.0], [1.0, 1.0]] and bool(o[:, 2].isnan().all())
    assert o[:, 3].tolist() == [3.0, -2.0]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", MIN_MAX_TYPES)
def test_min_and_max_with_a_nan_on_the_gpu_match_the_cpu(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    t = getattr(torch, dtype)
    a, b = (x.to(t) for x in NAN_PAIRS)
    cpu = tilelang.compile(_min_max(dtype), out_idx=[2], target="cpu")(a, b).float()
    gpu = tilelang.compile(_min_max(dtype), out_idx=[2])(a.cuda(), b.cuda()).float().cpu()
    assert torch.equal(gpu.nan_to_num(7.0), cpu.nan_to_num(7.0))


def test_exp10_is_the_c_library_s():
    # TVM's lowering gave 10000012288 for exp10(10)
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                B[i] = T.exp10(A[i])

    a = torch.tensor([10.0, 3.3, -7.25, 0.5])
    got = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(got, (10 ** a.double()).float(), rtol=2e-7, atol=0)
