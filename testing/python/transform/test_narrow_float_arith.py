"""PromoteNarrowFloatArith: float8 arithmetic (min, max, + - * /) on CUDA is done in float32 and
rounded back once; CUDA's fp8 types have none of it (nvcc rejected max(fp8, fp8))."""

import pytest
import torch
import tvm

import tilelang
import tilelang.language as T
from tilelang.engine.target import resolve
from tilelang.transform.narrow_float_arith import PromoteNarrowFloatArith

OPS = {
    "max": lambda a, b: T.max(a, b),
    "min": lambda a, b: T.min(a, b),
    "add": lambda a, b: a + b,
    "mul": lambda a, b: a * b,
}


def _kernel(op: str, vec: int, dtype: str = "float8_e4m3fn"):
    @T.prim_func
    def main(A: T.Tensor((128,), dtype), B: T.Tensor((128,), dtype), C: T.Tensor((128,), dtype)):
        with T.Kernel(1, threads=128 // vec):
            tx = T.get_thread_binding()
            for v in T.vectorized(vec):
                C[tx * vec + v] = OPS[op](A[tx * vec + v], B[tx * vec + v])

    return main


def test_fp8_max_is_computed_in_float32():
    func = _kernel("max", 1).with_attr("target", resolve("cuda -arch=sm_90a"))
    text = PromoteNarrowFloatArith()(tvm.IRModule({"main": func}))["main"].script()
    assert 'T.max(T.Cast("float32"' in text


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("vec", [1, 4])
def test_fp8_arithmetic_compiles_with_nvcc(op, vec):
    k = tilelang.compile(_kernel(op, vec), target="cuda -arch=sm_90a")
    assert ".target sm_90a" in k.get_ptx()


def test_cpu_keeps_fp8_arithmetic_as_written():
    func = _kernel("max", 1).with_attr("target", resolve("cpu"))
    text = PromoteNarrowFloatArith()(tvm.IRModule({"main": func}))["main"].script()
    assert "float32" not in text


@pytest.mark.gpu
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("vec", [1, 4])
def test_fp8_arithmetic_matches_torch_on_the_gpu(op, vec):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    fp8 = torch.float8_e4m3fn
    a = (torch.randn(128, device="cuda") * 4).to(fp8)
    b = (torch.randn(128, device="cuda") * 4).to(fp8)
    c = torch.empty(128, device="cuda", dtype=fp8)
    tilelang.compile(_kernel(op, vec))(a, b, c)
    ref = {"max": torch.maximum, "min": torch.minimum, "add": torch.add,
           "mul": torch.mul}[op](a.float(), b.float()).to(fp8)
    torch.testing.assert_close(c.float(), ref.float(), atol=0, rtol=0)
