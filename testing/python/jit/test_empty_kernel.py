"""Kernels whose body does nothing on the device (it only binds parameter sizes) compile to a
host function without a device module and can be called: the call checks the arguments."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError


def _binds_only():
    m = T.dynamic("m")

    @T.prim_func
    def binds_only(x: T.Tensor((m, 16), "float32")):
        with T.Kernel(1, threads=32):
            pass

    return binds_only


def test_cuda_kernel_without_device_code_compiles_with_empty_source():
    k = tilelang.compile(_binds_only(), target="cuda -arch=sm_90a")
    assert k.get_kernel_source() == ""


def test_cpu_kernel_without_device_code_runs_and_checks_arguments():
    k = tilelang.compile(_binds_only(), target="cpu")
    k(torch.zeros(3, 16))
    with pytest.raises(KernelArgumentError, match="'x'"):
        k(torch.zeros(3, 8))


@pytest.mark.gpu
def test_cuda_kernel_without_device_code_runs():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    k = tilelang.compile(_binds_only())
    k(torch.zeros(3, 16, device="cuda"))
    with pytest.raises(KernelArgumentError, match="'x'"):
        k(torch.zeros(3, 8, device="cuda"))
