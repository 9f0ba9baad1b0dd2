"""The public kernel surface: kernel.kernel_source, kernel.run_once(), tilelang.lower(...)
.kernel_source and Profiler.assert_allclose(input_tensors=...)."""

import pytest
import torch
import tvm

import tilelang
import tilelang.language as T


def add_one(n=64, dtype=T.float32):
    @T.prim_func
    def main(A: T.Tensor((n,), dtype), B: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(n):
                B[i] = A[i] + T.cast(1, dtype)

    return main


def test_kernel_source_property_is_the_device_code():
    kernel = tilelang.compile(add_one(), out_idx=[1], target="cpu")
    assert kernel.kernel_source == kernel.get_kernel_source()
    assert "define" in kernel.kernel_source  # LLVM IR on the CPU


def test_run_once_calls_the_kernel_on_generated_inputs():
    kernel = tilelang.compile(add_one(), out_idx=[1], target="cpu")
    out = kernel.run_once()
    assert out.shape == (64,) and out.dtype == torch.float32


def test_lower_result_is_a_module_with_kernel_source():
    mod = tilelang.lower(add_one(), target="cpu")
    assert isinstance(mod, tvm.IRModule)
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]
    assert "define" in mod.kernel_source


def test_lower_for_cuda_gives_cuda_source_without_a_gpu():
    mod = tilelang.lower(add_one(), target="cuda -arch=sm_80")
    assert "__global__" in mod.kernel_source


def test_assert_allclose_uses_the_given_inputs():
    kernel = tilelang.compile(add_one(), out_idx=[1], target="cpu")
    a = torch.arange(64, dtype=torch.float32)
    seen = []

    def ref(x):
        seen.append(x)
        return x + 1

    kernel.get_profiler().assert_allclose(ref, input_tensors=[a], atol=0, rtol=0)
    assert seen[0] is a
    with pytest.raises(AssertionError):
        kernel.get_profiler().assert_allclose(lambda x: x + 2, input_tensors=[a])
