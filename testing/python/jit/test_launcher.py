"""The call path of a kernel (``tilelang/jit/launcher.py``): what is decided once per kernel or
per signature is not decided again on each call, and every check still applies."""

import sys
import threading

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError

from programs import add_dynamic


def add(shape, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor(shape, dtype), B: T.Tensor(shape, dtype), C: T.Tensor(shape, dtype)):
        with T.Kernel(1, threads=32) as _:
            for i, j in T.Parallel(shape[0], shape[1]):
                C[i, j] = A[i, j] + B[i, j]

    return main


def count_binds(kernel) -> list:
    """Make ``kernel`` record each call that goes through its full argument checks."""
    calls = []
    bind = kernel._binder.bind

    def counting(args):
        calls.append(tuple(getattr(a, "shape", a) for a in args))
        return bind(args)

    kernel._binder.bind = counting
    return calls


def test_a_good_call_skips_the_full_checks():
    k = tilelang.compile(add((4, 8)), out_idx=[2], target="cpu")
    calls = count_binds(k)
    a, b = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(3):
        torch.testing.assert_close(k(a, b), a + b)
    w = torch.nn.Parameter(b)  # a model's weight: no gradient to guard under no_grad or with it
    with torch.no_grad():
        torch.testing.assert_close(k(a, w), a + b)
    torch.testing.assert_close(k(a, w), a + b)
    assert calls == []
    with pytest.raises(KernelArgumentError, match="parameter 'B' expects dtype float32"):
        k(a, b.double())
    assert len(calls) == 1


def test_size_variables_are_checked_once_per_signature():
    k = tilelang.compile(add_dynamic(), out_idx=[2], target="cpu")
    calls = count_binds(k)
    for n, binds in [(8, 1), (8, 1), (40, 2), (40, 2), (8, 3)]:
        a, b = torch.randn(n), torch.randn(n)
        c = k(a, b)
        assert c.shape == (n,)
        torch.testing.assert_close(c, a + b)
        assert len(calls) == binds
    # each shape was seen before, but not together: n is bound twice
    with pytest.raises(KernelArgumentError, match="earlier argument bound n = 8"):
        k(torch.randn(8), torch.randn(40))
    a = torch.randn(8)
    with pytest.raises(KernelArgumentError, match="parameter 'B' must be contiguous"):
        k(a, torch.randn(16)[::2])
    with pytest.raises(KernelArgumentError, match="parameter 'A' expects dtype float32"):
        k(a.half(), a)


def test_outputs_are_row_major_whatever_the_inputs_strides():
    """A contiguous input may carry any stride in a dimension of size 1; the output that has its
    shape is still allocated with row-major strides."""
    k = tilelang.compile(add((1, 8)), out_idx=[2], target="cpu")
    a = torch.empty_strided((1, 8), (100, 1)).copy_(torch.randn(1, 8))
    b = torch.randn(1, 8)
    c = k(a, b)
    assert c.stride() == (8, 1)
    torch.testing.assert_close(c, a + b)
    n = tilelang.compile(add_dynamic(), out_idx=[2], target="cpu")
    x = torch.empty_strided((1,), (5,)).fill_(1.0)
    for _ in range(2):  # the second call takes the signature the first validated
        y = n(x, x)
        assert y.stride() == (1,) and y.item() == 2.0


def test_concurrent_calls_with_different_sizes():
    """Threads calling one kernel with different sizes each get outputs of their own size."""
    k = tilelang.compile(add_dynamic(), out_idx=[2], target="cpu")
    errors = []

    def work(n):
        a = torch.randn(n)
        try:
            for _ in range(300):
                c = k(a, a)
                if c.shape != (n,):
                    errors.append((n, tuple(c.shape)))
        except Exception as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=work, args=(n,)) for n in (8, 40, 72)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []


def scaled_rows():
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n, 4), "float32"), s: T.float32, C: T.Tensor((n,), "float16"),
             i: T.int32, flag: T.bool):
        with T.Kernel(1, threads=1) as _:
            for r in T.serial(n):
                C[r] = T.cast(A[r, 0] * s + T.cast(i, "float32") + T.cast(flag, "float32"),
                              "float16")

    return main


def test_scalars_and_outputs_between_inputs():
    k = tilelang.compile(scaled_rows(), out_idx=[2], target="cpu")
    calls = count_binds(k)
    a = torch.randn(6, 4)
    for s, i, flag in [(2.0, 3, True), (0.5, -1, False)]:
        c = k(a, s, i, flag)
        assert c.dtype == torch.float16 and c.shape == (6,)
        torch.testing.assert_close(c, (a[:, 0] * s + i + flag).half())
    assert len(calls) == 1  # the first call, which bound n
    with pytest.raises(KernelArgumentError, match="parameter 'i' expects an int32 in"):
        k(a, 1.0, 2**31, True)
    with pytest.raises(KernelArgumentError, match="parameter 'flag' expects a bool, got 2"):
        k(a, 1.0, 1, 2)


def test_cuda_launcher_refuses_host_tensors():
    """The CUDA kernel's launcher (compiled here without a GPU) hands host tensors to the full
    checks, which name the parameter."""
    k = tilelang.compile(scaled_rows(), out_idx=[2], target="cuda -arch=sm_80")
    with pytest.raises(KernelArgumentError, match="parameter 'A' must be on the cuda device"):
        k(torch.randn(6, 4), 1.0, 1, True)


@pytest.mark.gpu
def test_cuda_good_call_skips_the_full_checks():
    k = tilelang.compile(add((4, 8)), out_idx=[2], target="cuda")
    calls = count_binds(k)
    a, b = torch.randn(4, 8, device="cuda"), torch.randn(4, 8, device="cuda")
    for _ in range(3):
        c = k(a, b)
        assert c.device == a.device
        torch.testing.assert_close(c, a + b)
    assert calls == []
    with pytest.raises(KernelArgumentError, match="parameter 'B' must be on the cuda device"):
        k(a, b.cpu())
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):  # the kernel runs on the current stream
        c = k(a, b)
    s.synchronize()
    torch.testing.assert_close(c, a + b)


@pytest.mark.gpu
def test_cuda_refuses_a_misaligned_view_and_stays_usable():
    """A view whose address is not 16-byte aligned would fault in the kernel's wide accesses
    (a sticky CUDA error): both call paths refuse it, naming the parameter."""
    k = tilelang.compile(add((4, 8)), out_idx=[2], target="cuda")
    base = torch.randn(40, device="cuda")
    a, b = base[1:33].view(4, 8), torch.randn(4, 8, device="cuda")
    for _ in range(2):  # the fast path, then the full checks again
        with pytest.raises(KernelArgumentError, match="parameter 'A' must start at a "
                                                      "16-byte-aligned address"):
            k(a, b)
    aligned = base[4:36].view(4, 8)  # 16 bytes in: accepted
    torch.testing.assert_close(k(aligned, b), aligned + b)
    torch.testing.assert_close(k(a.clone(), b), a + b)
    torch.cuda.synchronize()


def test_gpu_alignment_follows_the_innermost_stride():
    """Only a tensor the kernel may read in wide accesses needs 16-byte alignment."""
    sa, sb = T.dynamic("sa"), T.dynamic("sb")

    @T.prim_func
    def main(A: T.Tensor((4, 8), "float16"), S: T.StridedTensor((4, 8), (16, 1), "float16"),
             E: T.StridedTensor((4, 8), (sa, sb), "float16"),
             R: T.StridedTensor((4, 8), (sa, 1), "float16"),
             F: T.StridedTensor((4, 8), (16, 2), "float32")):
        with T.Kernel(1, threads=32) as _:
            A[0, 0] = S[0, 0] + E[0, 0] + R[0, 0] + T.Cast("float16", F[0, 0])

    from tilelang.jit.params import params_of
    assert [p.gpu_alignment for p in params_of(main)] == [16, 16, 2, 2, 4]


@pytest.mark.gpu
def test_cuda_static_kernel_leaves_checks_to_its_host_code():
    """A CUDA kernel of static shapes lets its host code check dtype, shape, layout and device
    (before any launch); a call the host code refuses goes through the full checks, which name
    the parameter, and nothing was written."""
    k = tilelang.compile(add((4, 8)), out_idx=[2], target="cuda")
    calls = count_binds(k)
    good = torch.randn(4, 8, device="cuda")
    torch.testing.assert_close(k(good, good), good + good)
    torch.testing.assert_close(k(torch.nn.Parameter(good), good), good + good)
    assert calls == []
    for bad, message in [(good.double(), "dtype"), (torch.randn(4, 4, device="cuda"), "shape"),
                         (torch.randn(8, 4, device="cuda").T, "contiguous"),
                         (good.reshape(32), "dims"), (good.cpu(), "device"),
                         (good.to_sparse(), "contiguous|layout|strided|device"),
                         (good.tolist(), "torch.Tensor")]:
        with pytest.raises(KernelArgumentError, match=message):
            k(bad, good)
    assert len(calls) == 7
    torch.testing.assert_close(k(good, good), good + good)
