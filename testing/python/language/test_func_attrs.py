"""Compile options written in the kernel (T.annotate_pass_configs, T.annotate_compile_flags)
and the lazily typed T.prim_func (tensor parameters typed in the body, T.empty outputs
returned, recorded as the tilelang_out_idx attribute).  CPU runs and sm_90a source."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError
from tilelang.language.func_attrs import compile_options
from tilelang.transform import PassConfigKey


def gather(annotate: bool):
    """``B[i] = A[Idx[i]]``: an index read from memory, which GuardGlobalAccesses guards."""
    if annotate:
        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), Idx: T.Tensor((64,), "int32"),
                 B: T.Tensor((64,), "float32")):
            T.annotate_pass_configs({PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS: True})
            with T.Kernel(1, threads=64) as _:
                for i in T.Parallel(64):
                    B[i] = A[Idx[i]]
        return main

    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), Idx: T.Tensor((64,), "int32"),
             B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64) as _:
            for i in T.Parallel(64):
                B[i] = A[Idx[i]]
    return main


def test_annotated_pass_configs_apply_when_compiling():
    """(was: DSLError 'module tilelang.language has no attribute annotate_pass_configs')"""
    func = gather(True)
    assert dict(func.attrs["tilelang_pass_configs"]) == {"tl.disable_safe_memory_access": True}
    guarded = tilelang.compile(gather(False), target="cuda -arch=sm_90a").get_kernel_source()
    annotated = tilelang.compile(func, target="cuda -arch=sm_90a").get_kernel_source()
    assert guarded != annotated  # the guard of A[Idx[i]] is gone
    # an explicit pass config of the same key wins over the annotation
    explicit = tilelang.compile(func, target="cuda -arch=sm_90a", pass_configs={
        PassConfigKey.TL_DISABLE_SAFE_MEMORY_ACCESS: False}).get_kernel_source()
    assert explicit == guarded


def test_unknown_annotated_pass_config_is_refused_at_parse():
    with pytest.raises(DSLError, match="tl.no_such_option"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            T.annotate_pass_configs({"tl.no_such_option": True})
            with T.Kernel(1):
                A[0] = 1.0


def test_compile_flags_are_recorded_and_appended():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        T.annotate_compile_flags(["--use_fast_math"])
        with T.Kernel(1):
            A[0] = 1.0

    assert list(main.attrs["tilelang_compile_flags"]) == ["--use_fast_math"]
    assert compile_options(main, None, None, ["-lineinfo"])[2] == ["-lineinfo", "--use_fast_math"]


def test_body_typed_parameters_and_returned_empty():
    """(was: DSLError 'Type annotation required for function parameters.')"""
    @T.prim_func
    def add_one(A):
        T.annotate_pass_configs({PassConfigKey.TL_ENABLE_FAST_MATH: False})
        A: T.Tensor[[16, 8], T.float32]
        B = T.empty([16, 8], T.float32)
        with T.Kernel(1):
            for i, j in T.grid(16, 8):
                B[i, j] = A[i, j] + 1.0
        return B

    assert [p.name for p in add_one.params] == ["A", "B"]
    assert list(add_one.attrs["tilelang_out_idx"]) == [-1]
    assert "tilelang_pass_configs" in add_one.attrs
    k = tilelang.compile(add_one, target="cpu")
    a = torch.randn(16, 8)
    torch.testing.assert_close(k(a), a + 1.0)
    with pytest.raises(ValueError, match="Out index conflict"):
        tilelang.compile(add_one, out_idx=[-1], target="cpu")


def test_two_returned_outputs_and_annotation_order():
    @T.prim_func
    def split(A, Scale):
        A: T.Tensor[[8], T.float32]
        T.annotate_compile_flags(["-lineinfo"])
        Scale: T.Tensor[[1], T.float32]
        Lo = T.empty([8], T.float32)
        Hi = T.empty([8], T.float32)
        with T.Kernel(1):
            for i in T.serial(8):
                Lo[i] = T.min(A[i], 0.0) * Scale[0]
                Hi[i] = T.max(A[i], 0.0) * Scale[0]
        return Lo, Hi

    assert list(split.attrs["tilelang_out_idx"]) == [-2, -1]
    a, s = torch.randn(8), torch.tensor([3.0])
    lo, hi = tilelang.compile(split, target="cpu")(a, s)
    torch.testing.assert_close(lo, a.clamp(max=0) * 3)
    torch.testing.assert_close(hi, a.clamp(min=0) * 3)


def test_untyped_parameter_is_named():
    with pytest.raises(DSLError, match=r"parameter 'B' has no type"):
        @T.prim_func
        def main(A, B):
            A: T.Tensor[[4], T.float32]
            with T.Kernel(1):
                A[0] = 1.0


def test_signature_typed_prim_func_is_unchanged():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1):
            A[0] = 1.0

    assert main.attrs is None or "tilelang_out_idx" not in main.attrs
    k = tilelang.compile(main, out_idx=[0], target="cpu")
    assert float(k()[0]) == 1.0
