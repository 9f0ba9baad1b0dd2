"""How T.gemm splits its output tile over the block's warps (``policy``): FullRow puts as many
warps (warpgroups on wgmma) along M as the tile allows and the rest along N, FullCol the
reverse; a tile no split fits raises a LoweringError saying what each warp needs.  Shared
operands may be slices of a tile (a K range of ``Q_s``) on the wgmma path."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.ops.gemm import GemmWarpPolicy, partitions, warp_grid

NVCC = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


@pytest.mark.parametrize("policy,m,n,warps,grid", [
    (GemmWarpPolicy.FullRow, 64, 64, 8, (4, 2)),    # only 4 warps of 16 rows fit along M
    (GemmWarpPolicy.FullRow, 128, 64, 8, (8, 1)),
    (GemmWarpPolicy.FullRow, 16, 256, 4, (1, 4)),
    (GemmWarpPolicy.FullCol, 64, 32, 8, (2, 4)),    # 4 warps of 8 columns along N
    (GemmWarpPolicy.FullCol, 64, 64, 8, (1, 8)),
    (GemmWarpPolicy.Square, 64, 64, 8, (4, 2)),
])
def test_warp_grid_fills_the_policy_axis_then_the_other(policy, m, n, warps, grid):
    assert warp_grid(policy, m, n, warps) == grid


def test_wgmma_partition_is_in_warpgroups_of_64_rows():
    # two warpgroups over a 64-row tile: one along M, the second along N
    assert partitions(GemmWarpPolicy.FullRow, 64, 64, 2, 64, 8)[0] == (1, 2)
    assert partitions(GemmWarpPolicy.FullRow, 128, 64, 2, 64, 8)[0] == (2, 1)


def test_no_split_fits_is_a_clear_error():
    with pytest.raises(LoweringError, match=r"16x8 tile cannot be split over 8 warps with policy "
                                            r"FullRow.*16 rows and 8 columns"):
        warp_grid(GemmWarpPolicy.FullRow, 16, 8, 8)


def attention_scores(H=64, D=128, D_tail=64, BI=64, threads=256, dtype="bfloat16"):
    """S = Q K^T over two K ranges of one shared Q tile (its first D and last D_tail columns,
    K = [K_main | K_tail]), then O = cast(S) @ K_main, all with policy FullRow: the shape of
    the deepseek sparse MLA forward kernel on 8 warps."""

    @T.prim_func
    def main(Q: T.Tensor((H, D + D_tail), dtype), K: T.Tensor((BI, D + D_tail), dtype),
             S: T.Tensor((H, BI), "float32"), O: T.Tensor((H, D), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            Q_s = T.alloc_shared((H, D + D_tail), dtype)
            K_s = T.alloc_shared((BI, D), dtype)
            Kt_s = T.alloc_shared((BI, D_tail), dtype)
            P_s = T.alloc_shared((H, BI), dtype)
            acc_s = T.alloc_fragment((H, BI), "float32")
            acc_o = T.alloc_fragment((H, D), "float32")
            T.copy(Q, Q_s)
            T.copy(K[0:BI, 0:D], K_s)
            T.copy(K[0:BI, D:D + D_tail], Kt_s)
            T.clear(acc_s)
            T.clear(acc_o)
            T.gemm(Q_s[:, :D], K_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(Q_s[:, D:], Kt_s, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc_s, S)
            T.copy(acc_s, P_s)
            T.gemm(P_s, K_s, acc_o, policy=T.GemmWarpPolicy.FullRow)
            T.copy(acc_o, O)

    return main


def reference(q, k, D):
    s = q.double() @ k.double().T
    o = s.to(q.dtype).double() @ k[:, :D].double()
    return s.float(), o.float()


def test_scores_kernel_on_cpu_matches_torch():
    q = torch.randn(64, 192).to(torch.bfloat16)
    k = torch.randn(64, 192).to(torch.bfloat16)
    s, o = tilelang.compile(attention_scores(), out_idx=[2, 3], target="cpu")(q, k)
    rs, ro = reference(q, k, 128)
    torch.testing.assert_close(s, rs, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(o, ro, rtol=2e-2, atol=0.5)


@NVCC
def test_full_row_over_8_warps_of_a_64_row_tile_is_wgmma_on_two_warpgroups():
    k = tilelang.compile(attention_scores(), out_idx=[2, 3], target="cuda -arch=sm_90a")
    ptx = k.get_ptx()
    # S: 64x64 split along N over the two warpgroups (32 columns each); O: 64x128 -> 64 each
    assert "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16" in ptx
    assert "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16" in ptx
    assert "mma.sync" not in ptx and ".local" not in ptx


@NVCC
def test_full_row_over_8_warps_of_a_64_row_tile_on_mma_sync():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
             C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=256) as bx:
            A_s = T.alloc_shared((64, 64), "float16")
            B_s = T.alloc_shared((64, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.clear(C_f)
            T.gemm(A_s, B_s, C_f, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
            T.copy(C_f, C)

    ptx = tilelang.compile(main, out_idx=[2], target="cuda -arch=sm_80").get_ptx()
    assert "mma.sync.aligned.m16n8k16" in ptx and ".local" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_scores_kernel_matches_torch(dtype):
    tdt = getattr(torch, dtype)
    q = torch.randn(64, 192, device="cuda").to(tdt)
    k = torch.randn(64, 192, device="cuda").to(tdt)
    s, o = tilelang.compile(attention_scores(dtype=dtype), out_idx=[2, 3], target="cuda")(q, k)
    rs, ro = reference(q, k, 128)
    torch.testing.assert_close(s, rs, rtol=1e-3, atol=1e-2)
    torch.testing.assert_close(o, ro, rtol=2e-2, atol=0.5)
