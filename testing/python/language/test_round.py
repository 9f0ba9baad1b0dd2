"""T.round: halfway cases to the even neighbour by default, away from zero on request; float8
and 16-bit floats are rounded through float32 (CUDA has no float8 round)."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError

HALVES = [0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 0.49999997]


def rounder(dtype, mode):
    @T.prim_func
    def main(A: T.Tensor((8,), dtype), B: T.Tensor((8,), dtype)):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                B[i] = T.round(A[i], mode)

    return main


@pytest.mark.parametrize("mode,expect", [
    (None, [0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0, 0.0]),
    ("ties-away-from-zero", [1.0, 2.0, 3.0, -1.0, -2.0, 2.0, -3.0, 0.0])])
def test_round_modes_on_the_cpu(mode, expect):
    out = tilelang.compile(rounder("float32", mode), out_idx=[1], target="cpu")(
        torch.tensor(HALVES))
    assert out.tolist() == expect


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
def test_narrow_floats_round_on_cuda(dtype):
    for mode in (None, "ties-away-from-zero"):
        tilelang.compile(rounder(dtype, mode), out_idx=[1], target="cuda -arch=sm_90a").get_ptx()


def test_unknown_mode_is_refused():
    with pytest.raises(DSLError, match="T.round: mode must be one of"):
        rounder("float32", "up")
