"""On CUDA a contiguous vector access is one wide (``float4``) access only at an offset proven a
multiple of its width, whatever the sign of its runtime part (``ScalarizeUnalignedVectors``);
anything else is done lane by lane instead of faulting with "misaligned address"."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T

SM90 = "cuda -arch=sm_90a"


def shifted_stores():
    @T.prim_func
    def main(B: T.Tensor((4, 4), T.float32), A: T.Tensor((1024,), T.float32)):
        with T.Kernel(1, threads=1) as _:
            for i in T.serial(1024):
                A[i] = T.float32(0)
            for t in T.serial(4):
                A[T.Ramp(t + 1, 1, 4)] = B[t, T.Ramp(0, 1, 4)]  # offsets 1..4: unaligned
                A[T.Ramp(t * 8 + 16, 1, 4)] = B[t, T.Ramp(0, 1, 4)]  # multiples of 4
                A[T.Ramp(t * 4 - 4 + 128, 1, 4)] = B[t, T.Ramp(0, 1, 4)]  # -4 + 4t: aligned
                for i in T.vectorized(4):
                    A[t * 3 + 512 + i] = B[t, i]  # 3t: unaligned

    return main


def _expected(b):
    a = torch.zeros(1024, device=b.device)
    for t in range(4):
        a[t + 1:t + 5] = b[t]
        a[t * 8 + 16:t * 8 + 20] = b[t]
        a[t * 4 + 124:t * 4 + 128] = b[t]
        a[t * 3 + 512:t * 3 + 516] = b[t]
    return a


def _src():
    src = tilelang.compile(shifted_stores(), out_idx=[1], target=SM90).get_kernel_source()
    return src[src.index('extern "C"'):]


def test_unaligned_vector_stores_go_lane_by_lane_on_sm90():
    src = _src()
    wide = re.findall(r"\*\(float4\*\)\(A_ptr \+ \(?([^;]*?)\)\s*=", src)
    # the two aligned stores stay wide, the two unaligned ones do not
    assert len(wide) == 2, src
    assert any("t * 8" in w for w in wide) and any("t * 4" in w for w in wide), wide
    assert not any("t + 1" in w or "t * 3" in w for w in wide), wide
    # the B loads (offset 4t) stay wide
    assert src.count("*(float4*)(B_ptr") >= 1, src


def test_swizzled_offset_is_proven_aligned():
    @T.prim_func
    def main(A: T.Tensor((64, 64), T.float16), B: T.Tensor((64, 64), T.float16)):
        with T.Kernel(1, threads=64) as _:
            tx = T.get_thread_binding()
            S = T.alloc_shared((64, 64), T.float16)
            for j in T.serial(8):
                for i in T.vectorized(8):
                    # the chunk start is xor-swizzled by the row: two multiples of 8 xor-ed
                    S[tx, ((j * 8) ^ ((tx % 8) * 8)) + i] = A[tx, j * 8 + i]
            for j in T.serial(64):
                B[tx, j] = S[tx, j]

    src = tilelang.compile(main, target=SM90).get_kernel_source()
    src = src[src.index('extern "C"'):]
    assert re.search(r"\*\(uint4\*\)\(\(\(half\*\)smem_ptr\) \+", src), src


def test_unaligned_vector_stores_cpu():
    k = tilelang.compile(shifted_stores(), out_idx=[1], target="cpu")
    b = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    torch.testing.assert_close(k(b), _expected(b))


@pytest.mark.gpu
def test_unaligned_vector_stores_gpu():
    k = tilelang.compile(shifted_stores(), out_idx=[1], target="cuda")
    b = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
    torch.testing.assert_close(k(b), _expected(b))
