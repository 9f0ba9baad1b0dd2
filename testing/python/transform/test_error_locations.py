"""A LoweringError raised for a tile operator ends with the user's source line of that op."""

import pytest

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError

_FILE = __file__.split("/")[-1]
CUDA = "cuda -arch=sm_80"


def _assert_located(err, op, marker):
    msg = str(err)
    assert isinstance(err, RuntimeError)
    assert op in msg and marker in msg and f"{_FILE}:" in msg, msg
    assert msg.count(f"{_FILE}:") == 1, msg  # one location, not two


def test_lower_tile_ops_error_names_the_op_line():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.gemm(A, B_s, C_f)  # <- gemm of a global A
            T.copy(C_f, C)

    with pytest.raises(LoweringError) as info:
        tilelang.lower(main, target=CUDA)
    _assert_located(info.value, "T.gemm on CUDA needs A", "<- gemm of a global A")


def test_location_survives_software_pipelining():
    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            for k in T.Pipelined(2, num_stages=2):
                T.copy(A[0:32, 0:32], B_s[0:32, 0:32])
                T.gemm(A, B_s, C_f)  # <- pipelined gemm
            T.copy(C_f, C)

    with pytest.raises(LoweringError) as info:
        tilelang.lower(main, target=CUDA)
    _assert_located(info.value, "T.gemm", "<- pipelined gemm")


def test_layout_inference_error_names_the_op_line():
    @T.prim_func
    def main(A: T.Tensor((16, 16), "float16"), C: T.Tensor((16, 8), "float32")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((16, 16), "float16")
            B_s = T.alloc_shared((16, 8), "float16")
            C_f = T.alloc_fragment((16, 8), "float32")
            T.copy(A, A_s)
            T.gemm(A_s, B_s, C_f)  # <- too small for 4 warps
            T.copy(C_f, C)

    with pytest.raises(LoweringError) as info:
        tilelang.lower(main, target=CUDA)
    _assert_located(info.value, "cannot be split over 4 warps", "<- too small for 4 warps")
