"""ApplySafeValues: T.annotate_safe_value gives the out-of-range elements a T.copy reads from a
tensor, in the annotation's lexical scope, on the CPU and in the CUDA lowering."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def padded_copy(pad, src="float32", dst="float32", M=70, N=75, block=32):
    pM, pN = -(-M // block) * block, -(-N // block) * block

    @T.prim_func
    def main(A: T.Tensor((M, N), src), B: T.Tensor((pM, pN), dst)):
        with T.Kernel(pN // block, pM // block, threads=128) as (bx, by):
            if pad is not None:
                T.annotate_safe_value({A: pad})
            S = T.alloc_shared((block, block), src)
            T.copy(A[by * block, bx * block], S)
            T.copy(S, B[by * block, bx * block])

    return main, (M, N), (pM, pN)


@pytest.mark.parametrize("pad,dst", [(-99, "float32"), (-99, "float16"), (None, "float32"),
                                     (2.5, "bfloat16")])
def test_out_of_range_elements_read_as_the_safe_value(pad, dst):
    func, (M, N), (pM, pN) = padded_copy(pad, dst=dst)
    a = torch.randn(M, N)
    b = tilelang.compile(func, out_idx=[1], target="cpu")(a)
    ref = torch.full((pM, pN), 0.0 if pad is None else pad).to(getattr(torch, dst))
    ref[:M, :N] = a.to(ref.dtype)
    assert torch.equal(b, ref)


def test_the_annotation_holds_to_the_end_of_its_scope():
    @T.prim_func
    def main(A: T.Tensor((6,), "int32"), B: T.Tensor((4, 8), "int32")):
        with T.Kernel(1, threads=8):
            T.copy(A[0:8], B[0, 0:8])  # before any annotation: zeros
            T.annotate_safe_value({A: -1})
            T.copy(A[0:8], B[1, 0:8])
            for k in T.serial(1):
                T.annotate_safe_value({A: -7})  # inside the loop body only
                T.copy(A[0:8], B[2, 0:8])
            T.copy(A[0:8], B[3, 0:8])  # the outer annotation again

    b = tilelang.compile(main, out_idx=[1], target="cpu")(torch.arange(6, dtype=torch.int32))
    assert [row[6:].tolist() for row in b] == [[0, 0], [-1, -1], [-7, -7], [-1, -1]]
    assert b[:, :6].tolist() == [list(range(6))] * 4


def test_one_element_copies_in_a_parallel_loop():
    @T.prim_func
    def main(A: T.Tensor((5, 5), "float32"), B: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=64):
            T.annotate_safe_value({A: -99})
            for i, j in T.Parallel(8, 8):
                T.copy(A[i, j], B[i, j])

    a = torch.randn(5, 5)
    b = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    ref = torch.full((8, 8), -99.0)
    ref[:5, :5] = a
    assert torch.equal(b, ref)
    if shutil.which("nvcc"):
        ptx = tilelang.compile(main, out_idx=[1], target="cuda -arch=sm_90a").get_ptx()
        assert "0fC2C60000" in ptx  # -99.0f, the fill of the guarded load


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_annotated_copies_stay_off_the_zero_filling_copy_engines():
    func, _, _ = padded_copy(-99, N=76, block=64)  # 16-byte rows: TMA suits the plain copy
    plain, _, _ = padded_copy(None, N=76, block=64)
    assert "cp.async.bulk.tensor" in tilelang.compile(
        plain, out_idx=[1], target="cuda -arch=sm_90a").get_ptx()
    ptx = tilelang.compile(func, out_idx=[1], target="cuda -arch=sm_90a").get_ptx()
    # no TMA load (it fills with zeros); the store may be one
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" not in ptx and "0fC2C60000" in ptx


def test_bad_annotations_are_refused():
    with pytest.raises(DSLError, match="value for A must be a number"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                T.annotate_safe_value({A: "x"})


def test_the_l2_hint_is_checked_and_changes_nothing():
    from tilelang.language import annotate_l2_hit_ratio

    @T.prim_func
    def add_one(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            annotate_l2_hit_ratio({B: 0.8})
            for i in T.Parallel(64):
                B[i] = A[i] + 1.0

    a, b = torch.randn(64), torch.zeros(64)
    tilelang.compile(add_one, target="cpu")(a, b)
    assert torch.equal(b, a + 1)
    with pytest.raises(DSLError, match="the ratio for B must be a number in"):
        @T.prim_func
        def bad(B: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64):
                T.annotate_l2_hit_ratio({B: 1.5})
