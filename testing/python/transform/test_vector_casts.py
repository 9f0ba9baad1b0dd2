"""Vectorized casts on CUDA (``tilelang.device.casts``, ``tilelang.transform.vector_casts``):
element-wise conversions in ``T.Parallel`` loops and converting ``T.copy``s run as 2- or 4-lane
vectors whose casts become paired conversions (``__float22half2_rn``,
``__nv_cvt_float2_to_fp8x2``, ...), with the values of the scalar casts; a converting copy is
never a ``cp.async`` (which moves bytes)."""

import re
import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.device.casts import PAIR_CONVERSIONS, pair_conversion
from tilelang.transform import vector_casts
from tilelang.transform.lower_parallel_loops import PARTITIONED
from tvm import tirx
from tvm.target import Target

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
FP8 = ("float8_e4m3fn", "float8_e5m2")


def cast_copy(n, src, dst):
    """``T.copy`` between global tensors of two element types."""

    @T.prim_func
    def main(A: T.Tensor((n,), src), B: T.Tensor((n,), dst)):
        with T.Kernel(1, threads=128):
            T.copy(A, B)

    return main


def cast_parallel(n, src, dst):
    """Fragments in, a ``T.Parallel`` cast between them, fragments out."""

    @T.prim_func
    def main(A: T.Tensor((n,), src), B: T.Tensor((n,), dst)):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((n,), src)
            b = T.alloc_fragment((n,), dst)
            T.copy(A, a)
            for i in T.Parallel(n):
                b[i] = a[i]
            T.copy(b, B)

    return main


KERNELS = [cast_copy, cast_parallel]
SM90_PAIRS = sorted(PAIR_CONVERSIONS)


def _body(src: str) -> str:
    return src[src.index('extern "C"'):]


def source(func, target=SM90, **cfg):
    return _body(tilelang.compile(func, target=target, pass_configs=cfg or None)
                 .get_kernel_source())


# the table ---------------------------------------------------------------------------------
def test_pair_conversions_follow_tvm_native_types():
    sm90 = Target({"kind": "cuda", "arch": "sm_90a"})
    sm80 = Target({"kind": "cuda", "arch": "sm_80"})
    sm75 = Target({"kind": "cuda", "arch": "sm_75"})
    for src, dst in PAIR_CONVERSIONS:
        assert pair_conversion(src, dst, sm90) is not None
        fp8 = src.startswith("float8") or dst.startswith("float8")
        assert (pair_conversion(src, dst, sm80) is None) == fp8  # TVM emulates fp8 there
    assert pair_conversion("float32", "float16", sm75) is not None
    assert pair_conversion("float32", "bfloat16", sm75) is None
    assert pair_conversion("float32", "int32") is None
    assert pair_conversion("float16", "float16") is None


# VectorizeCastLoops --------------------------------------------------------------------------
def _register_loop(extent, load_index, dst="float16", src="float32"):
    a = tirx.decl_buffer((8,), src, "a", scope="local")
    b = tirx.decl_buffer((8,), dst, "b", scope="local")
    r = tirx.Var("r", "int32")
    body = tirx.BufferStore(b, tirx.Cast(dst, tirx.BufferLoad(a, [load_index(r)])), [r])
    return tirx.For(r, tirx.const(0, "int32"), extent, tirx.ForKind.UNROLLED, body,
                    annotations={PARTITIONED: 1})


@pytest.mark.parametrize("extent,index,want", [
    (4, lambda r: r, 4),
    (8, lambda r: r, 4),
    (2, lambda r: r, 2),
    (6, lambda r: r, 2),
    (3, lambda r: r, 1),          # no even split
    (4, lambda r: 3 - r, 1),      # reversed: not contiguous
    (4, lambda r: r + 1, 1),      # contiguous, but no pair starts at an even register
    (4, lambda r: r * 2, 1),      # strided
    (4, lambda r: r + 2, 2),      # pairs aligned, quads not
])
def test_register_loop_width(extent, index, want):
    sm90 = Target({"kind": "cuda", "arch": "sm_90a"})
    assert vector_casts.vector_width(_register_loop(extent, index), sm90) == want


def test_register_loop_without_a_paired_cast_stays_unrolled():
    sm90 = Target({"kind": "cuda", "arch": "sm_90a"})
    assert vector_casts.vector_width(_register_loop(4, lambda r: r, dst="int32"), sm90) == 1
    assert vector_casts.vector_width(
        _register_loop(4, lambda r: r, dst="float32", src="float32"), sm90) == 1
    # float8 is integer code on sm_80 (TVM's FP8 legalization): no pairs there
    sm80 = Target({"kind": "cuda", "arch": "sm_80"})
    assert vector_casts.vector_width(_register_loop(4, lambda r: r, dst="float8_e4m3fn"),
                                     sm80) == 1


def _vector_loops(func, target=SM90):
    mod = tilelang.lower(func, target=target, stage="tile")
    found = []
    tvm_walk = __import__("tvm_ffi").structural_walk
    tvm_walk(mod["main"].body, (tirx.For, lambda f: found.append(f)
                                if f.kind == tirx.ForKind.VECTORIZED else None))
    return found


def test_parallel_cast_loop_is_vectorized():
    loops = _vector_loops(cast_parallel(512, "float32", "float16"))
    casts = [f for f in loops if "Cast" in f.body.script()]
    assert [int(f.extent) for f in casts] == [4]


# LowerVectorCasts: CUDA source -------------------------------------------------------------
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("src,dst", SM90_PAIRS)
def test_vector_casts_are_paired_on_sm90(kernel, src, dst):
    code = source(kernel(512, src, dst))
    conv = PAIR_CONVERSIONS[(src, dst)]
    calls = re.findall(r"tl::cvt_pair<(.*?)>\(", code)
    assert calls and all(c == conv for c in calls), code
    # each thread converts its 4 (or 2, for 8-byte sources) elements in pairs
    assert len(calls) in (1, 2, 4, 8), code


def test_public_helper_names_are_in_the_source():
    for (src, dst), name in [(("float8_e4m3fn", "float32"), "__tl_cvt_fp8x2_to_float2"),
                             (("float16", "float8_e5m2"), "__tl_cvt_half2_to_fp8x2"),
                             (("float32", "float8_e4m3fn"), "__nv_cvt_float2_to_fp8x2"),
                             (("float64", "float8_e8m0fnu"), "__tl_cvt_double2_to_e8m0x2")]:
        for kernel in KERNELS:
            assert name in source(kernel(256, src, dst))


def test_register_to_register_cast_writes_its_registers():
    code = source(cast_parallel(512, "float32", "float16"))
    assert "tl::cvt_pair<__float22half2_rn>((&(b_ptr[0])), *(float2*)(a_ptr + 0));" in code
    assert "tl::cvt_pair<__float22half2_rn>((&(b_ptr[2])), *(float2*)(a_ptr + 2));" in code
    assert "((half)" not in code  # no scalar cast left


def test_memory_operands_keep_wide_accesses():
    # global -> global: one 16-byte load, two pair conversions, one 8-byte store
    code = source(cast_copy(512, "float32", "float16"))
    assert re.search(r"\*\(float4\*\)\(cast_in_ptr \+ 0\) = \*\(float4\*\)\(A_ptr", code), code
    assert re.search(r"\*\(half4\*\)\(B_ptr \+ .*\) = \*\(half4\*\)\(cast_out_ptr \+ 0\)", code)


def cast_of_expression(n=512):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), C: T.Tensor((n,), "bfloat16"),
             B: T.Tensor((n,), "float8_e4m3fn")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((n,), "float32")
            c = T.alloc_fragment((n,), "bfloat16")
            b = T.alloc_fragment((n,), "float8_e4m3fn")
            T.copy(A, a)
            T.copy(C, c)
            for i in T.Parallel(n):
                # a cast of a product, and a chain bfloat16 -> float32 -> float8
                b[i] = T.cast(a[i] * 2.0 + T.cast(c[i], "float32"), "float8_e4m3fn")
            T.copy(b, B)

    return main


def test_cast_of_an_expression_is_paired():
    code = source(cast_of_expression())
    assert "tl::cvt_pair<__bfloat1622float2>" in code
    assert "tl::cvt_pair<__nv_cvt_float2_to_fp8x2, __NV_SATFINITE, __NV_E4M3>" in code
    assert "((__nv_fp8_e4m3)" not in code


def guarded_cast(n=512):
    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), B: T.Tensor((n,), "float16")):
        with T.Kernel(1, threads=128):
            a = T.alloc_fragment((n,), "float32")
            b = T.alloc_fragment((n,), "float16")
            T.copy(A, a)
            for i in T.Parallel(n):
                b[i] = T.if_then_else(a[i] > 0, T.cast(a[i], "float16"), T.float16(0))
            T.copy(b, B)

    return main


def test_cast_under_a_condition_stays_scalar():
    assert "cvt_pair" not in source(guarded_cast())


def test_vectorize_off_keeps_scalar_casts():
    code = source(cast_parallel(512, "float32", "float16"), **{"tirx.disable_vectorize": True})
    assert "cvt_pair" not in code and "((half)" in code


def test_sm80_float8_stays_with_tvm_emulation():
    # TVM emulates float8 in integer code before sm_89: nothing to pair, the copy stays scalar
    code = source(cast_copy(512, "float32", "float8_e4m3fn"), target=SM80)
    assert "cvt_pair" not in code


# nvcc ---------------------------------------------------------------------------------------
PTX = [
    ("sm_80", "float32", "float16", "cvt.rn.f16x2.f32"),
    ("sm_80", "float32", "bfloat16", "cvt.rn.bf16x2.f32"),
    ("sm_80", "float16", "float32", None),
    ("sm_90a", "float32", "float16", "cvt.rn.f16x2.f32"),
    ("sm_90a", "float32", "bfloat16", "cvt.rn.bf16x2.f32"),
    ("sm_90a", "float32", "float8_e4m3fn", "cvt.rn.satfinite.e4m3x2.f32"),
    ("sm_90a", "float32", "float8_e5m2", "cvt.rn.satfinite.e5m2x2.f32"),
    ("sm_90a", "float8_e4m3fn", "float32", "cvt.rn.f16x2.e4m3x2"),
    ("sm_90a", "float8_e5m2", "float16", "cvt.rn.f16x2.e5m2x2"),
    ("sm_90a", "float16", "float8_e4m3fn", "cvt.rn.satfinite.e4m3x2.f16x2"),
    ("sm_90a", "bfloat16", "float8_e5m2", "cvt.rn.satfinite.e5m2x2.f32"),
    ("sm_90a", "float8_e4m3fn", "bfloat16", "cvt.rn.bf16x2.f32"),
    ("sm_90a", "float8_e8m0fnu", "bfloat16", None),
    ("sm_90a", "bfloat16", "float8_e8m0fnu", None),
    ("sm_90a", "float32", "float8_e8m0fnu", None),
    ("sm_90a", "float64", "float8_e8m0fnu", None),
]


@needs_nvcc
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("arch,src,dst,instr", PTX)
def test_paired_casts_compile(kernel, arch, src, dst, instr):
    ptx = tilelang.compile(kernel(512, src, dst), target=f"cuda -arch={arch}").get_ptx()
    if instr is not None:
        assert instr in ptx


@needs_nvcc
def test_cast_of_an_expression_compiles():
    ptx = tilelang.compile(cast_of_expression(), target=SM90).get_ptx()
    assert "cvt.rn.satfinite.e4m3x2.f32" in ptx
    tilelang.compile(guarded_cast(), target=SM90).get_ptx()


# a converting copy is never cp.async ------------------------------------------------------
def pipelined_convert(src, dst, n=4, m=128):
    @T.prim_func
    def main(A: T.Tensor((n, m), src), B: T.Tensor((n, m), dst)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((m,), dst)
            for k in T.Pipelined(n, num_stages=2):
                T.copy(A[k, :], S)
                T.copy(S, B[k, :])

    return main


@pytest.mark.parametrize("src,dst", [("float16", "bfloat16"), ("float32", "float16")])
def test_pipelined_converting_copy_is_not_cp_async(src, dst):
    code = source(pipelined_convert(src, dst), target=SM80)
    assert "cp_async_cg" not in code and "cp_async_ca" not in code  # no byte copies
    assert "(nv_bfloat16)" in code or "cvt_pair" in code  # the values are converted


# CPU: the same programs, the reference values ---------------------------------------------
EDGES = [0.0, -0.0, 1.0, -1.5, 1.0009765625, 65504.0, 65520.0, 1e6, float("inf"),
         -float("inf"), float("nan"), 3e-8, 6e-5, 2.0 ** -126, 3.14159, -2.71828]


def _edge_input(n, dtype=torch.float32):
    x = torch.randn(n, generator=torch.Generator().manual_seed(0)) * 100
    x[:len(EDGES)] = torch.tensor(EDGES)
    return x.to(dtype)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("src,dst", [("float32", "float16"), ("float32", "bfloat16"),
                                     ("float16", "float32"), ("bfloat16", "float32")])
def test_casts_on_cpu_match_torch(kernel, src, dst):
    k = tilelang.compile(kernel(512, src, dst), target="cpu")
    a = _edge_input(512, getattr(torch, src))
    b = torch.zeros(512, dtype=getattr(torch, dst))
    k(a, b)
    torch.testing.assert_close(b, a.to(getattr(torch, dst)), equal_nan=True, rtol=0, atol=0)


# GPU --------------------------------------------------------------------------------------
_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}


def _reference(a: torch.Tensor, dst: str) -> torch.Tensor:
    """torch's cast, saturating float8 results to the largest finite value (what CUDA's
    scalar and paired float8 conversions do: __NV_SATFINITE, +-inf included)."""
    if dst in _MAX:
        a = a.float().clamp(-_MAX[dst], _MAX[dst])
    return a.to(getattr(torch, dst))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.element_size() == 1 else t.view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("src,dst", SM90_PAIRS)
def test_paired_casts_on_gpu_equal_scalar_casts_and_torch(kernel, src, dst):
    n = 1024
    if not all(hasattr(torch, t) for t in (src, dst)):
        pytest.skip(f"this torch has no {src} / {dst} tensors")
    vec = tilelang.compile(kernel(n, src, dst), target="cuda")
    scalar = tilelang.compile(kernel(n, src, dst), target="cuda",
                              pass_configs={"tirx.disable_vectorize": True})
    if "cvt_pair" not in vec.get_kernel_source():
        pytest.skip("the GPU has no native float8 (before sm_89): TVM emulates it")
    if src == "float8_e8m0fnu":  # every byte but 0xff (NaN) is a power of two
        a = torch.arange(n, dtype=torch.int32).remainder(255).to(torch.uint8).cuda()
        a = a.view(torch.float8_e8m0fnu)
    else:
        a = _edge_input(n).cuda()
        if src in _MAX:  # float8 inputs: the values float8 has (saturated)
            a = _reference(a, src)
        else:
            a = a.to(getattr(torch, src))
    out_v = torch.zeros(n, dtype=getattr(torch, dst), device="cuda")
    out_s = torch.zeros_like(out_v)
    vec(a, out_v)
    scalar(a, out_s)
    # the paired conversions give the scalar casts' bits, NaN, inf and saturation included
    assert torch.equal(_bits(out_v), _bits(out_s))
    if "e8m0" not in src + dst:
        torch.testing.assert_close(out_v.float(), _reference(a, dst).float(), equal_nan=True,
                                   rtol=0, atol=0)
