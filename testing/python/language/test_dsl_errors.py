"""DSL misuse raises DSLError naming the op, the buffers/shapes and the user's source line."""

import pytest

import tilelang.language as T
from tilelang.errors import DSLError


def test_copy_shape_mismatch_names_op_buffers_and_line():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((32, 16), "float16")
                B_s = T.alloc_shared((16, 32), "float16")
                T.copy(A_s, B_s)  # the offending line

    msg = str(info.value)
    assert "T.copy" in msg and "A_s" in msg and "B_s" in msg
    assert "(32, 16)" in msg and "(16, 32)" in msg
    assert "the offending line" in msg and __file__.split("/")[-1] in msg


def test_copy_unit_dims_are_ignored():
    @T.prim_func
    def main(A: T.Tensor((4, 1, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((32,), "float16")
            T.copy(A[1, 0, :], S)

    assert "T.copy" in main.script()


def test_gemm_k_mismatch():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((16, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_f)

    msg = str(info.value)
    assert "T.gemm" in msg and "K" in msg and "A_s" in msg and "B_s" in msg
    assert "T.gemm(A_s, B_s, C_f)" in msg


def test_gemm_mn_mismatch():
    with pytest.raises(DSLError, match=r"T\.gemm: C must be \(M, N\)"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_f = T.alloc_fragment((64, 32), "float32")
                T.gemm(A_s, B_s, C_f)


def test_gemm_accumulator_must_be_fragment():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_s = T.alloc_shared((64, 64), "float32")
                T.gemm(A_s, B_s, C_s)

    msg = str(info.value)
    assert "T.gemm" in msg and "C_s" in msg and "fragment" in msg


def test_reduce_missing_dim():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                y = T.alloc_fragment((16,), "float32")
                T.reduce_max(x, y, dim=2)

    msg = str(info.value)
    assert "T.reduce_max" in msg and "dim=2" in msg and "x" in msg and "(16, 32)" in msg


def test_reduce_wrong_destination_shape():
    with pytest.raises(DSLError, match=r"T\.reduce_sum.*dim 0.*destination y"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                y = T.alloc_fragment((16,), "float32")
                T.reduce_sum(x, y, dim=0)


def test_unknown_dtype_in_allocation():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_shared((16,), "float17")

    msg = str(info.value)
    assert "T.alloc_shared" in msg and "float17" in msg and "T.alloc_shared((16,)" in msg


def test_unknown_dtype_in_tensor_annotation():
    with pytest.raises(DSLError, match="T.Tensor.*unknown dtype 'floatx'"):

        @T.prim_func
        def main(A: T.Tensor((64,), "floatx")):
            with T.Kernel(1, threads=128) as bx:
                T.evaluate(0)


def test_copy_between_two_elements():
    with pytest.raises(DSLError, match="T.copy: both source"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.copy(A[0], B[0])


def test_kernel_grid_arity():
    with pytest.raises(DSLError, match="T.Kernel takes 1 to 3 grid dimensions"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, 1, 1, 1, threads=128) as (a, b, c, d):
                T.evaluate(0)


def test_thread_binding_outside_kernel():
    with pytest.raises(DSLError, match="T.get_thread_binding is only valid inside a T.Kernel"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            tx = T.get_thread_binding()


def test_gemm_operand_dtypes_must_match():
    with pytest.raises(DSLError, match=r"T\.gemm: A = A_s is float16 but B = B_s is bfloat16"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "bfloat16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_f)
