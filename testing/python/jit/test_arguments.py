"""Calling a compiled kernel with bad inputs raises KernelArgumentError naming the parameter."""

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError


def add_one(M, N, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, 16), threads=32) as bx:
            a = T.alloc_fragment((16, N), dtype)
            T.copy(A[bx * 16, 0], a)
            for i, j in T.Parallel(16, N):
                a[i, j] = a[i, j] + 1
            T.copy(a, B[bx * 16, 0])

    return main


@pytest.fixture(scope="module")
def kernel():
    return tilelang.compile(add_one(32, 8), out_idx=[1], target="cpu")


def test_good_call(kernel):
    a = torch.randn(32, 8)
    torch.testing.assert_close(kernel(a), a + 1)


def test_wrong_dtype(kernel):
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects dtype float32, got float16"):
        kernel(torch.randn(32, 8).half())


def test_wrong_shape(kernel):
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects shape \(32, 8\), got \(32, 9\)"):
        kernel(torch.randn(32, 9))


def test_wrong_rank(kernel):
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects 2 dims"):
        kernel(torch.randn(32 * 8))


def test_non_contiguous(kernel):
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' must be contiguous"):
        kernel(torch.randn(8, 32).T)


def test_wrong_argument_count(kernel):
    with pytest.raises(KernelArgumentError, match=r"main takes 1 arguments \(A\), got 2"):
        kernel(torch.randn(32, 8), torch.randn(32, 8))


def test_not_a_tensor(kernel):
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects a torch.Tensor"):
        kernel([1, 2, 3])


def test_wrong_device(kernel):
    meta = torch.empty(32, 8, device="meta")
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' must be on the cpu device"):
        kernel(meta)


def test_failed_check_leaves_inputs_untouched(kernel):
    a = torch.randn(32, 8)
    before = a.clone()
    with pytest.raises(KernelArgumentError):
        kernel(a, a)
    assert torch.equal(a, before)


def test_numpy_in_numpy_out(kernel):
    a = np.random.randn(32, 8).astype(np.float32)
    out = kernel(a)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, a + 1, rtol=1e-6)


def test_symbolic_size_consistency():
    from programs import add_dynamic

    k = tilelang.compile(add_dynamic(), out_idx=[2], target="cpu")
    with pytest.raises(KernelArgumentError, match=r"parameter 'B' has n = 7 in dim 0, but an earlier argument bound n = 8"):
        k(torch.randn(8), torch.randn(7))
    a, b = torch.randn(8), torch.randn(8)
    torch.testing.assert_close(k(a, b), a + b)


def test_a_dimension_computed_from_sizes_is_checked_against_them():
    m = T.dynamic("m")

    @T.prim_func
    def main(A: T.Tensor((m, m * 2), "float32"), B: T.Tensor((m,), "float32")):
        with T.Kernel(1, threads=1) as _:
            for i in T.serial(m):
                B[i] = A[i, 2 * m - 1]

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.randn(3, 6)
    torch.testing.assert_close(k(a), a[:, 5])
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' expects shape \(m, m \* 2\), "
                       r"got \(3, 7\) \(dim 1 is 7, expected m \* 2 = 6 with m = 3\)"):
        k(torch.randn(3, 7))


def test_out_idx_range():
    with pytest.raises(IndexError, match="out_idx 5"):
        tilelang.compile(add_one(32, 8), out_idx=[5], target="cpu")


@T.prim_func
def store_scalars(A: T.Tensor((5,), "float64"), i: T.int32, b: T.int8, u: T.uint64,
                  h: T.float16, flag: T.bool):
    with T.Kernel(1, threads=1) as _:
        A[0] = T.cast(i, "float64")
        A[1] = T.cast(b, "float64")
        A[2] = T.cast(u, "float64")
        A[3] = T.cast(h, "float64")
        A[4] = T.cast(flag, "float64")


@pytest.fixture(scope="module")
def scalars():
    return tilelang.compile(store_scalars, target="cpu")


def call_scalars(kernel, i=1, b=2, u=3, h=4.0, flag=True):
    a = torch.zeros(5, dtype=torch.float64)
    kernel(a, i, b, u, h, flag)
    return a.tolist()


def test_scalars_at_their_limits(scalars):
    got = call_scalars(scalars, 2**31 - 1, -128, 2**64 - 1, 65504.0, np.bool_(False))
    assert got == [2**31 - 1, -128, float(2**64 - 1), 65504.0, 0.0]
    got = call_scalars(scalars, -2**31, np.int8(127), np.uint64(2**63), float("nan"), 1)
    assert got[:3] == [-2**31, 127, float(2**63)] and np.isnan(got[3]) and got[4] == 1.0
    assert call_scalars(scalars, h=float("-inf"))[3] == float("-inf")


@pytest.mark.parametrize("kw, message", [
    ({"i": 2**31}, r"parameter 'i' expects an int32 in \[-2147483648, 2147483647\], got 2147483648"),
    ({"i": -2**31 - 1}, r"parameter 'i' expects an int32 in"),
    ({"b": 300}, r"parameter 'b' expects an int8 in \[-128, 127\], got 300"),
    ({"b": np.int64(-129)}, r"parameter 'b' expects an int8 in"),
    ({"u": -1}, r"parameter 'u' expects a uint64 in \[0, 18446744073709551615\], got -1"),
    ({"u": 2**64}, r"parameter 'u' expects a uint64 in"),
    ({"i": 1.5}, r"parameter 'i' expects an integer \(int32\), got 1.5"),
    ({"i": True}, r"parameter 'i' expects an int32 scalar, got bool"),
    ({"h": 70000}, r"parameter 'h' expects a float16 \(finite values up to \+-65504\), got 70000"),
    ({"h": 1e300}, r"parameter 'h' expects a float16"),
    ({"h": 10**400}, r"parameter 'h' expects a float16"),
    ({"flag": 2}, r"parameter 'flag' expects a bool, got 2"),
    ({"flag": 0.0}, r"parameter 'flag' expects a bool, got 0.0"),
])
def test_scalar_out_of_range(scalars, kw, message):
    with pytest.raises(KernelArgumentError, match=message):
        call_scalars(scalars, **kw)


def test_numpy_arrays_are_shared_not_copied():
    """A numpy array passed for a parameter the kernel writes sees the write."""
    k = tilelang.compile(add_one(32, 8), target="cpu")
    a = np.random.randn(32, 8).astype(np.float32)
    b = np.zeros((32, 8), np.float32)
    k(a, b)
    np.testing.assert_allclose(b, a + 1, rtol=1e-6)


@pytest.mark.parametrize("make, message", [
    (lambda: np.zeros((8, 32), np.float32).T, r"parameter 'B' must be a C-contiguous .*np.ascontiguousarray"),
    (lambda: np.asfortranarray(np.zeros((32, 8), np.float32)), r"parameter 'B' must be a C-contiguous"),
    (lambda: np.zeros((32, 16), np.float32)[:, ::2], r"parameter 'B' must be a C-contiguous"),
    (lambda: np.broadcast_to(np.zeros(8, np.float32), (32, 8)), r"parameter 'B' .*(C-contiguous|read-only)"),
])
def test_numpy_output_that_would_be_copied_is_refused(make, message):
    k = tilelang.compile(add_one(32, 8), target="cpu")
    b = make()
    with pytest.raises(KernelArgumentError, match=message):
        k(np.zeros((32, 8), np.float32), b)


def test_read_only_numpy_array_is_refused():
    k = tilelang.compile(add_one(32, 8), target="cpu")
    b = np.zeros((32, 8), np.float32)
    b.flags.writeable = False
    with pytest.raises(KernelArgumentError, match=r"parameter 'B' is a read-only numpy array.*copy"):
        k(np.zeros((32, 8), np.float32), b)
    a = np.zeros((32, 8), np.float32)
    a.flags.writeable = False
    with pytest.raises(KernelArgumentError, match=r"parameter 'A' is a read-only numpy array"):
        k(a, np.zeros((32, 8), np.float32))


def test_fast_path_keeps_every_check(kernel):
    """A call whose argument differs from a good one in one respect only is refused: the
    checks computed at kernel creation cover dtype, shape, rank, device and layout."""
    good = torch.randn(32, 8)
    torch.testing.assert_close(kernel(good), good + 1)
    torch.testing.assert_close(kernel(torch.nn.Parameter(good)), good + 1)  # a Tensor subclass
    for bad, message in [(good.double(), "dtype"), (good[:, :4].contiguous(), "shape"),
                         (torch.randn(8, 32).T, "contiguous"), (good.reshape(256), "dims"),
                         (good.to("meta"), "device"), (good.numpy().tolist(), "torch.Tensor")]:
        with pytest.raises(KernelArgumentError, match=message):
            kernel(bad)


def test_float_scalar_overflow_refused_on_the_fast_path(scalars):
    with pytest.raises(KernelArgumentError, match=r"parameter 'h' expects a float16"):
        call_scalars(scalars, h=70000.0)  # a Python float, not an int
    assert call_scalars(scalars, h=65504.0)[3] == 65504.0
    assert np.isnan(call_scalars(scalars, h=float("nan"))[3])


def scale_into(n=16):
    @T.prim_func
    def main(C: T.Tensor((n,), "float32"), A: T.Tensor((n,), "float32"), k: T.float32,
             D: T.Tensor((n,), "int32")):
        with T.Kernel(1, threads=n) as _:
            for i in T.Parallel(n):
                C[i] = A[i] * k
                D[i] = i

    return main


@pytest.mark.parametrize("out_idx", [[0], [3, 0], [0, 3]])
def test_outputs_anywhere_among_the_parameters(out_idx):
    """Outputs are placed at their parameter positions and returned in out_idx order."""
    k = tilelang.compile(scale_into(), out_idx=out_idx, target="cpu")
    a = torch.arange(16, dtype=torch.float32)
    ins = [a, 2.0] if out_idx != [0] else [a, 2.0, torch.zeros(16, dtype=torch.int32)]
    outs = k(*ins)
    outs = outs if isinstance(outs, tuple) else (outs,)
    want = {0: a * 2, 3: torch.arange(16, dtype=torch.int32)}
    assert len(outs) == len(out_idx)
    for i, o in zip(out_idx, outs):
        torch.testing.assert_close(o, want[i])


def test_out_idx_twice_is_refused():
    with pytest.raises(KernelArgumentError, match=r"out_idx names parameter 'C' twice"):
        tilelang.compile(scale_into(), out_idx=[0, -4], target="cpu")


def test_tensors_without_elements_get_the_strides_tvm_checks():
    K = T.dynamic("K")

    @T.prim_func
    def row_sums(A: T.Tensor((8, K), "float32"), S: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                S[i] = 0.0
                for k in T.serial(K):
                    S[i] += A[i, k]

    kernel = tilelang.compile(row_sums, out_idx=[1], target="cpu")
    empty = torch.randn(8, 0)
    assert empty.stride() == (1, 1)  # torch's strides for it; TVM expects (0, 1)
    assert kernel(empty).tolist() == [0.0] * 8
    assert kernel(empty).tolist() == [0.0] * 8  # the fast path leaves it to the binder too
    a = torch.randn(8, 3)
    torch.testing.assert_close(kernel(a), a.sum(1))
