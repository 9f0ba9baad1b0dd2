"""A gemm whose output tile no warp grid covers (each warp a multiple of 16 rows and 8
columns) is refused with "No valid warp partition" (the public wording) and what each warp
needs, naming the user's line; it never leaves rows or columns unwritten."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.language import GemmWarpPolicy

SM90 = "cuda -arch=sm_90a"
NO_WGMMA = {"tl.disable_wgmma": True}


def matmul(M, N, K, threads, policy):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, 1, threads=threads):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.clear(C_f)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, policy=policy)  # <- the gemm
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("M, N, threads, policy, configs", [
    (16, 104, 384, GemmWarpPolicy.Square, None),      # 12 warps cannot cover N = 104
    (288, 8, 544, GemmWarpPolicy.Square, None),       # 17 warps cannot cover M = 288
    (16, 104, 384, GemmWarpPolicy.FullRow, None),
    (336, 8, 640, GemmWarpPolicy.FullCol, NO_WGMMA),
    (16, 16, 224, GemmWarpPolicy.Square, None),       # 7 warps: no grid at all
    (336, 16, 640, GemmWarpPolicy.Square, None),      # the sm_90a wgmma-sized shape
])
def test_uncovered_tile_is_refused(M, N, threads, policy, configs):
    with pytest.raises(LoweringError) as info:
        tilelang.compile(matmul(M, N, 32, threads, policy), out_idx=[2], target=SM90,
                         pass_configs=configs)
    msg = str(info.value)
    assert "No valid warp partition" in msg, msg
    assert f"a {M}x{N} tile cannot be split over {threads // 32} warps with policy " \
           f"{policy.name}" in msg, msg
    assert "<- the gemm" in msg, msg


def test_covering_tiles_still_compile():
    tilelang.compile(matmul(16, 104, 32, 416, GemmWarpPolicy.Square), out_idx=[2], target=SM90)
    tilelang.compile(matmul(48, 64, 32, 256, GemmWarpPolicy.FullRow), out_idx=[2], target=SM90)
