"""CUDA generation on any machine: the programs compile with nvcc for sm_80 and sm_90a and the
PTX has the instructions the sm80-class path must use."""

import re
import shutil

import pytest

import tilelang

from programs import example, matmul

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
ARCHS = ["sm_80", "sm_90a"]


# the sm80-class path on sm_90a: what these tests check (Hopper's own path has its tests)
SM80_PATH = {"tl.disable_wgmma": True, "tl.disable_tma_lower": True}


def ptx_of(func, out_idx, arch, sm80_path=True):
    cfg = SM80_PATH if sm80_path and arch == "sm_90a" else None
    k = tilelang.compile(func, out_idx=out_idx, target=f"cuda -arch={arch}", pass_configs=cfg)
    return k, k.get_ptx()


@pytest.mark.parametrize("arch", ARCHS)
def test_pipelined_gemm_uses_cp_async_ldmatrix_mma(arch):
    k, ptx = ptx_of(matmul(512, 512, 512, 128, 128, 32, num_stages=3), [2], arch)
    assert "cp.async.cg.shared.global" in ptx
    assert "cp.async.wait_group" in ptx and "cp.async.commit_group" in ptx
    assert "ldmatrix.sync.aligned" in ptx
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in ptx
    assert ".local" not in ptx  # the accumulator lives in registers
    # three stages of a 128x32 and a 32x128 fp16 tile in the dynamic shared arena
    m = re.search(r'"tirx.dyn_smem_bytes", T.int64\((\d+)\)',
                  tilelang.lower(matmul(512, 512, 512, 128, 128, 32, num_stages=3),
                                 target=f"cuda -arch={arch}", stage="tile",
                                 pass_configs=SM80_PATH)["main"].script())
    assert int(m.group(1)) == 3 * (128 * 32 + 32 * 128) * 2


@pytest.mark.parametrize("arch", ARCHS)
def test_unpipelined_gemm_has_no_cp_async(arch):
    _, ptx = ptx_of(matmul(256, 256, 256, 128, 128, 32, num_stages=1), [2], arch)
    # (on sm_90a a copy may still be a synchronous TMA load: cp.async.bulk.tensor)
    assert "cp.async.cg" not in ptx and "cp.async.ca" not in ptx and "mma.sync" in ptx


@pytest.mark.parametrize("dtype,instr", [("bfloat16", "m16n8k16.row.col.f32.bf16.bf16.f32"),
                                         ("float32", "m16n8k8.row.col.f32.tf32.tf32.f32"),
                                         ("int8", "m16n8k32.row.col.s32.s8.s8.s32")])
def test_gemm_dtypes(dtype, instr):
    accum = "int32" if dtype == "int8" else "float32"
    _, ptx = ptx_of(matmul(256, 256, 256, 64, 64, 32, dtype=dtype, accum=accum), [2], "sm_80")
    assert instr in ptx and ".local" not in ptx


@pytest.mark.parametrize("arch", ARCHS)
def test_softmax_and_attention_compile(arch):
    sm = example("softmax/example_softmax.py").softmax(1000, 256, 16)
    _, ptx = ptx_of(sm, [1], arch)
    assert "shfl.sync.bfly" in ptx
    fa = example("flash_attention/example_mha_fwd.py").flashattn(2, 4, 512, 64, True,
                                                                 num_stages=2)
    _, ptx = ptx_of(fa, [3], arch)
    assert "mma.sync" in ptx and "ldmatrix" in ptx and "cp.async" in ptx and ".local" not in ptx


def test_kernel_source_includes_headers():
    k = tilelang.compile(matmul(128, 128, 128, 64, 64, 32), out_idx=[2], target="cuda -arch=sm_80")
    src = k.get_kernel_source()
    assert '#include "tl_templates/cuda/tl.h"' in src and "tl::gemm_ss<" in src


def test_export_and_show_ptx(tmp_path, capsys):
    k = tilelang.compile(matmul(128, 128, 128, 64, 64, 32), out_idx=[2], target="cuda -arch=sm_80")
    path = tmp_path / "k.ptx"
    k.export_ptx(str(path))
    assert ".target sm_80" in path.read_text()
    k.show_ptx()
    assert "mma.sync" in capsys.readouterr().out


def test_compile_error_shows_message_and_saved_source(tmp_path, monkeypatch):
    from tilelang.engine.cuda import nvcc_compile
    from tilelang.errors import CompileError

    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError) as info:
        nvcc_compile('extern "C" __global__ void k() { this is not cuda; }', "sm_80")
    msg = str(info.value)
    assert "error" in msg and str(tmp_path) in msg
    assert list((tmp_path / "src").iterdir())


def test_shared_memory_limit_is_reported():
    from tilelang.errors import LoweringError

    # one copy of the tiles is already 256 KB (too many stages just get fewer: see
    # testing/python/transform/test_pipeline_fits.py)
    with pytest.raises(LoweringError, match="bytes of shared memory"):
        tilelang.compile(matmul(1024, 1024, 1024, 256, 256, 256, num_stages=1), out_idx=[2],
                         target="cuda -arch=sm_80")


def test_prelude_and_coalesced_width():
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128, prelude="__device__ int tl_test_marker = 7;") as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A, S, coalesced_width=2)
            T.copy(S, B)

    k = tilelang.compile(main, target="cuda -arch=sm_80")
    src = k.get_kernel_source()
    assert "tl_test_marker = 7" in src
    ptx = k.get_ptx()
    assert "ld.global.v4" not in ptx.split("st.shared")[0]  # the first copy moves 2 halves at a time


def test_too_many_threads_is_an_error():
    import tilelang.language as T
    from tilelang.errors import LoweringError

    @T.prim_func
    def main(A: T.Tensor((2048,), "float32")):
        with T.Kernel(1, threads=2048) as bx:
            for i in T.Parallel(2048):
                A[i] = 0.0

    with pytest.raises(LoweringError, match="at most 1024"):
        tilelang.compile(main, target="cuda -arch=sm_80")


def rs_gemm(policy):
    """P = softmax-like fragment (fp16, from a first gemm) times V: the register-A path."""
    import tilelang.language as T

    @T.prim_func
    def main(Q: T.Tensor((64, 64), "float16"), K: T.Tensor((64, 64), "float16"),
             V: T.Tensor((64, 64), "float16"), O: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            Qs = T.alloc_shared((64, 64), "float16")
            Ks = T.alloc_shared((64, 64), "float16")
            Vs = T.alloc_shared((64, 64), "float16")
            S = T.alloc_fragment((64, 64), "float32")
            P = T.alloc_fragment((64, 64), "float16")
            Of = T.alloc_fragment((64, 64), "float32")
            T.copy(Q, Qs)
            T.copy(K, Ks)
            T.copy(V, Vs)
            T.clear(S)
            T.clear(Of)
            T.gemm(Qs, Ks, S, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(S, P)
            T.gemm(P, Vs, Of, policy=policy)
            T.copy(Of, O)

    return main


@pytest.mark.parametrize("policy", ["FullRow", "FullCol", "Square"])
def test_gemm_policies_compile(policy):
    import tilelang.language as T

    pol = getattr(T.GemmWarpPolicy, policy)
    _, ptx = ptx_of(matmul(256, 256, 256, 128, 128, 32, policy=pol), [2], "sm_80")
    assert "mma.sync" in ptx and ".local" not in ptx


def test_register_operand_gemm_compiles():
    import tilelang.language as T

    _, ptx = ptx_of(rs_gemm(T.GemmWarpPolicy.FullRow), [3], "sm_90a")
    assert ptx.count("mma.sync") >= 2 and ".local" not in ptx


def test_register_operand_with_a_different_warp_grid_is_a_layout_conflict():
    import tilelang.language as T
    from tilelang.errors import LoweringError

    with pytest.raises(LoweringError, match="layout conflict on fragment"):
        tilelang.compile(rs_gemm(T.GemmWarpPolicy.FullCol), out_idx=[3], target="cuda -arch=sm_80")


@pytest.mark.parametrize("tA,tB", [(False, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_gather_fragment_paths_compile(dtype, tA, tB):
    accum = "int32" if dtype == "int8" else "float32"
    _, ptx = ptx_of(matmul(200, 136, 96, 64, 64, 32, tA, tB, dtype=dtype, accum=accum), [2],
                    "sm_90a")
    assert "mma.sync" in ptx and ".local" not in ptx
