"""T.gemm on sm_90a lowers to wgmma.mma_async (PTX checked on any machine with nvcc); the
sm80 path stays for sm_80 and with tl.disable_wgmma."""

import shutil

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

from programs import matmul

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def ptx(func, arch="sm_90a", **cfg):
    return tilelang.compile(func, out_idx=[2], target=f"cuda -arch={arch}",
                            pass_configs=cfg or None).get_ptx()


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype,ptype", [("float16", "f16"), ("bfloat16", "bf16")])
def test_gemm_is_wgmma_in_all_transposes(dtype, ptype, tA, tB):
    text = ptx(matmul(256, 256, 256, 128, 128, 64, tA, tB, dtype=dtype, num_stages=2))
    assert f"wgmma.mma_async.sync.aligned.m64n128k16.f32.{ptype}.{ptype}" in text
    assert "wgmma.fence.sync.aligned" in text and "wgmma.commit_group.sync.aligned" in text
    assert "wgmma.wait_group.sync.aligned" in text
    assert "mma.sync" not in text and ".local" not in text


def test_two_warpgroups_split_m_and_fp8_is_k_major():
    text = ptx(matmul(256, 256, 256, 128, 128, 64, threads=256, num_stages=2))
    assert "m64n128k16.f32.f16.f16" in text
    text = ptx(matmul(256, 256, 256, 128, 128, 64, tB=True, dtype="float8_e4m3fn",
                      out_dtype="float32", num_stages=2))
    assert "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3" in text
    with pytest.raises(LoweringError, match=r"(?s)K-major.*programs.py:\d+: +T.gemm"):
        ptx(matmul(256, 256, 256, 128, 128, 64, dtype="float8_e4m3fn", out_dtype="float32"))


def test_descriptors_are_one_per_operand_stepped_by_constants():
    """Every wgmma of a gemm names its operand tile (the address analyses follow it); late,
    ShareDescriptors binds each operand's descriptor once (lane 0's, broadcast) and the
    instructions step it by constants: two shuffles per gemm, not one per instruction."""
    src = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, threads=256, num_stages=2),
                           out_idx=[2], target="cuda -arch=sm_90a")
    cuda = src.get_kernel_source()
    assert "uint64_t A_s_desc = tl::wgmma_desc(" in cuda
    assert "uint64_t B_s_desc = tl::wgmma_desc(" in cuda and "(B_s_desc + (uint64_t)" in cuda
    text = src.get_ptx()
    per_gemm = text.count("wgmma.mma_async") // text.count("wgmma.commit_group")
    assert per_gemm == 4  # K = 64 in k16 steps
    assert text.count("shfl.sync.idx") == 2 * text.count("wgmma.commit_group")


def test_disable_wgmma_and_sm80_keep_mma_sync():
    f = matmul(256, 256, 256, 128, 128, 32)
    for text in (ptx(f, "sm_90a", **{"tl.disable_wgmma": True}), ptx(f, "sm_80")):
        assert "mma.sync.aligned.m16n8k16" in text and "wgmma" not in text


def chain(wg_wait=0):
    """gemm -> cast to fp16 -> gemm with A from registers (attention's P @ V)."""

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
            T.gemm(Qs, Ks, S, transpose_B=True, clear_accum=True, wg_wait=wg_wait)
            T.copy(S, P)
            T.gemm(P, Vs, Of, clear_accum=True)
            T.copy(Of, O)

    return main


def test_register_a_chain_uses_the_rs_form():
    text = tilelang.compile(chain(), out_idx=[3], target="cuda -arch=sm_90a").get_ptx()
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16" in text
    assert text.count("wgmma.mma_async") == 8  # 4 k-steps ss, 4 k-steps rs
    assert ".local" not in text


def test_wg_wait_leaves_a_group_in_flight_and_waits_before_the_use():
    src = tilelang.compile(chain(wg_wait=1), out_idx=[3],
                           target="cuda -arch=sm_90a").get_kernel_source()
    body = src[src.index("__global__"):]
    first_wait = body.index("wait_group_sync_aligned_1")
    zero = body.index("wait_group_sync_aligned_0", first_wait)
    # S -> P reads the accumulator (a paired float -> half conversion)
    cast = body.index("tl::cvt_pair<__float22half2_rn>", first_wait)
    assert first_wait < zero < cast


def test_accumulator_is_stored_two_halves_at_a_time():
    """The fp32 accumulator's two adjacent columns per thread go out as one half2 store (the
    cast between the fragment and the tile is element-wise), not two 16-bit stores."""
    import re

    text = ptx(matmul(256, 256, 256, 128, 128, 64, num_stages=3))
    stores = re.findall(r"st\.global[.\w]*", text)
    # (a half2 from a paired conversion goes out as one 32-bit word)
    assert stores and set(stores) <= {"st.global.v2.u16", "st.global.u32"}, sorted(set(stores))
    assert len(stores) == 128 * 128 // 128 // 2  # 64 per thread: 128 elements in pairs
