"""tilelang.compile / @tilelang.jit: outputs, dynamic sizes, in-process reuse, targets."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.engine.target import resolve
from tilelang.errors import TileLangError


def scale_rows(block_M=16, dtype="float32"):
    M = T.dynamic("M")
    N = 24

    @T.prim_func
    def main(X: T.Tensor((M, N), dtype), Y: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            x = T.alloc_fragment((block_M, N), dtype)
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, N):
                x[i, j] = x[i, j] * 2
            T.copy(x, Y[bx * block_M, 0])

    return main


def test_dynamic_m_two_sizes_one_compile():
    kernel = tilelang.compile(scale_rows(), out_idx=[1], target="cpu")
    for m in (5, 77):
        x = torch.randn(m, 24)
        y = kernel(x)
        assert y.shape == (m, 24)
        torch.testing.assert_close(y, x * 2)


def test_jit_reuses_kernel_for_same_arguments():
    calls = []

    @tilelang.jit(out_idx=[1], target="cpu")
    def build(block_M):
        calls.append(block_M)
        return scale_rows(block_M)

    k1 = build(16)
    k2 = build(16)
    k3 = build(32)
    assert k1 is k2 and k1 is not k3 and calls == [16, 32]
    x = torch.randn(40, 24)
    torch.testing.assert_close(k3(x), x * 2)


def test_multiple_outputs_return_a_tuple():
    @T.prim_func
    def main(X: T.Tensor((8,), "float32"), Y: T.Tensor((8,), "float32"),
             Z: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                Y[i] = X[i] + 1
                Z[i] = X[i] - 1

    k = tilelang.compile(main, out_idx=[-2, -1], target="cpu")
    x = torch.randn(8)
    y, z = k(x)
    torch.testing.assert_close(y, x + 1)
    torch.testing.assert_close(z, x - 1)


def test_scalar_parameter():
    @T.prim_func
    def main(X: T.Tensor((8,), "float32"), alpha: T.float32, Y: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                Y[i] = X[i] * alpha

    k = tilelang.compile(main, out_idx=[2], target="cpu")
    x = torch.randn(8)
    torch.testing.assert_close(k(x, 3.0), x * 3)


@pytest.mark.parametrize("spec,kind,arch", [
    ("cpu", "llvm", None), ("llvm", "llvm", None), ("cuda -arch=sm_90a", "cuda", "sm_90a"),
    ({"kind": "cuda", "arch": "sm_80"}, "cuda", "sm_80"),
])
def test_target_forms(spec, kind, arch):
    t = resolve(spec)
    assert t.kind.name == kind
    if arch:
        assert str(t.attrs["arch"]) == arch


def test_auto_target_is_cpu_without_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert resolve("auto").kind.name == "llvm"


def test_bad_target():
    with pytest.raises(TileLangError, match="unknown target"):
        resolve("tpu")


def test_compile_rejects_non_prim_func():
    with pytest.raises(TileLangError, match="expects a T.prim_func"):
        tilelang.compile(lambda: None)


def test_cpu_rejects_raw_thread_index():
    @T.prim_func
    def main(X: T.Tensor((32,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            X[tx] = 1.0

    with pytest.raises(tilelang.LoweringError, match="thread index"):
        tilelang.compile(main, target="cpu")


def test_kernel_source_and_repr():
    k = tilelang.compile(scale_rows(), out_idx=[1], target="cpu")
    assert "define" in k.get_kernel_source()
    assert k.get_kernel_source(kernel_only=True) == k.get_kernel_source() == k.kernel_source
    assert "out_idx=[1]" in repr(k)


def test_get_ptx_honours_the_kernels_fast_math_config():
    @T.prim_func
    def f(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                Y[i] = X[i] / (X[i] + 1.0)

    exact = tilelang.compile(f, target="cuda -arch=sm_80").get_ptx()
    fast = tilelang.compile(f, target="cuda -arch=sm_80",
                            pass_configs={"tl.enable_fast_math": True}).get_ptx()
    assert "div.rn.f32" in exact
    assert "div.rn.f32" not in fast


def test_a_failed_tvm_check_is_a_lowering_error(monkeypatch):
    """A TVM internal check failing on IR we produced (an InternalError from its codegen) comes
    out as a LoweringError naming the kernel and telling how to see the IR."""
    import tvm

    import tilelang
    import tilelang.language as T
    from tilelang.errors import LoweringError

    @T.prim_func
    def main(A: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=16):
            for i in T.Parallel(16):
                A[i] = A[i] + 1

    def broken(*args, **kwargs):
        raise tvm.error.InternalError("Check failed: (p.has_value()) is false:")

    monkeypatch.setattr(tvm, "compile", broken)
    monkeypatch.setenv("TILELANG_DISABLE_CACHE", "1")  # a cached kernel would not build
    with pytest.raises(LoweringError, match=r"kernel main: TVM failed an internal check .*"
                                            r"p\.has_value.*TILELANG_DUMP_IR"):
        tilelang.compile(main, target="llvm")
