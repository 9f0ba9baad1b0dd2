"""Profiler: assert_allclose catches wrong kernels; do_bench returns milliseconds."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.utils.tensor import compare


def double(N=64):
    @T.prim_func
    def main(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                Y[i] = X[i] * 2

    return main


@pytest.fixture(scope="module")
def profiler():
    return tilelang.compile(double(), out_idx=[1], target="cpu").get_profiler()


def test_assert_allclose_passes_for_right_reference(profiler):
    profiler.assert_allclose(lambda x: x * 2)


def test_func_is_the_kernel_as_a_callable(profiler):
    x = torch.arange(64, dtype=torch.float32)
    torch.testing.assert_close(profiler.func(x), x * 2)


def test_assert_allclose_fails_for_wrong_reference(profiler):
    with pytest.raises(AssertionError, match="differ beyond"):
        profiler.assert_allclose(lambda x: x * 3)


def test_mismatch_ratio_tolerates_a_few_outliers():
    ref = torch.zeros(1000)
    out = ref.clone()
    out[:5] = 1
    compare(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.01)
    with pytest.raises(AssertionError):
        compare(out, ref, atol=1e-3, rtol=0, max_mismatched_ratio=0.001)


def test_do_bench_returns_positive_milliseconds(profiler):
    ms = profiler.do_bench(warmup=1, rep=5)
    assert 0 < ms < 1000
    q = profiler.do_bench(warmup=1, rep=5, quantiles=[0.5, 0.9])
    assert len(q) == 2 and q[0] <= q[1]


def test_supply_types():
    k = tilelang.compile(double(), out_idx=[1], target="cpu")
    p = k.get_profiler(tilelang.TensorSupplyType.One)
    torch.testing.assert_close(p.run_once(), torch.full((64,), 2.0))


def test_do_bench_is_a_module_function_with_the_public_signature():
    import inspect

    from tilelang.profiler import do_bench

    params = inspect.signature(do_bench).parameters
    assert list(params) == ["fn", "warmup", "rep", "_n_warmup", "_n_repeat", "quantiles",
                            "fast_flush", "backend", "return_mode"]
    def count(n_warmup, n_repeat):
        calls = []
        assert do_bench(lambda: calls.append(1), _n_warmup=n_warmup, _n_repeat=n_repeat) >= 0
        return len(calls)

    # the estimate calls (2 on the CPU, 6 on a GPU) are the same; the given counts add up
    assert count(4, 9) - count(3, 7) == 1 + 2


def test_counts_fill_the_time_budget():
    from tilelang.profiler.timing import counts

    assert counts(0.5, warmup=25, rep=100) == (50, 200)
    assert counts(1000.0, warmup=25, rep=100) == (1, 1)  # at least one call each
    assert counts(0.5, 25, 100, n_warmup=2, n_repeat=9) == (2, 9)


def test_summarize_modes_and_quantiles():
    from tilelang.profiler.timing import summarize

    times = [4.0, 1.0, 3.0, 2.0, 10.0]
    assert summarize(times) == 4.0
    assert summarize(times, return_mode="median") == 3.0
    assert summarize(times, return_mode="min") == 1.0
    assert summarize(times, return_mode="max") == 10.0
    assert summarize(times, quantiles=[0.5]) == 3.0
    assert summarize(times, quantiles=[0.0, 1.0]) == [1.0, 10.0]


def test_do_bench_refuses_unknown_backend_and_mode():
    from tilelang.profiler import do_bench

    with pytest.raises(ValueError, match="backend"):
        do_bench(lambda: None, backend="cupti-ish")
    with pytest.raises(ValueError, match="return_mode"):
        do_bench(lambda: None, return_mode="average")


@pytest.mark.gpu
@pytest.mark.parametrize("backend", ["event", "cudagraph", "cupti"])
def test_do_bench_cuda_backends_time_a_kernel(backend):
    """Both backends time a CUDA kernel (positive, finite) and the timed calls really run it.
    Their ratio is not checked: it is a speed, and other tests share the GPU."""
    from tilelang.profiler import do_bench

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    N = 1 << 22

    @T.prim_func
    def twice(X: T.Tensor((N,), "float32"), Y: T.Tensor((N,), "float32")):
        with T.Kernel(N // 256, threads=256) as bx:
            for i in T.Parallel(256):
                Y[bx * 256 + i] = X[bx * 256 + i] * 2

    k = tilelang.compile(twice, out_idx=[1])
    x = torch.randn(N, device="cuda")
    y = torch.empty(N, device="cuda")

    def into_y():
        y.copy_(k(x))

    ms = do_bench(into_y, backend=backend, rep=20)
    torch.testing.assert_close(y, x * 2)
    assert 0 < ms < 100


def test_device_time_leaves_out_the_activities_inside_the_excluded_range():
    """cupti timing, on the events torch 2.11's profiler gives on the H200 (2026-12-03): each
    record_function range has a device-side twin (a user annotation spanning the activities
    launched inside it).  Every device activity counts once, except those inside the flush
    range's span; annotations never count (the flush was counted twice before, so a 1 us
    kernel timed as the 57 us flush)."""
    from types import SimpleNamespace as NS
    from torch.autograd import DeviceType

    from tilelang.profiler.timing import device_time_us

    def ev(name, device, start, end, annotation=False):
        return NS(name=name, device_type=device, is_user_annotation=annotation,
                  time_range=NS(start=start, end=end, elapsed_us=lambda: end - start))

    CPU, CUDA = DeviceType.CPU, DeviceType.CUDA
    events = []
    for t0 in (0.0, 100.0):
        events += [ev("flush", CPU, t0, t0 + 30, annotation=True),
                   ev("aten::fill_", CPU, t0 + 1, t0 + 29),
                   ev("fill_kernel", CUDA, t0 + 30, t0 + 87),      # the flush
                   ev("flush", CUDA, t0 + 30, t0 + 87, annotation=True),
                   ev("aten::fill_", CPU, t0 + 31, t0 + 35),      # fn: the same kernel
                   ev("fill_kernel", CUDA, t0 + 88, t0 + 91),
                   ev("copy", CUDA, t0 + 91, t0 + 92)]
    assert device_time_us(events, "flush") == (2 * (57 + 3 + 1), 2 * 57)


@pytest.mark.gpu
def test_cupti_backend_times_kernels_without_the_flush():
    """A tiny kernel times far below the 256 MB flush, which is excluded although ``fn``
    itself may launch the same fill kernel (timed here as a function of its own)."""
    from tilelang.profiler import do_bench

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    small = torch.zeros(256, device="cuda")
    big = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    tiny_ms = do_bench(lambda: small.add_(1), backend="cupti", rep=10)
    fill_ms = do_bench(lambda: big.zero_(), backend="cupti", rep=10)
    assert 0 < tiny_ms < fill_ms / 4, (tiny_ms, fill_ms)


def test_do_bench_takes_symbolic_sizes_from_dynamic_symbolic_constraints():
    """Generated inputs of a kernel with a symbolic size need its value; a missing one is a
    ValueError naming the size."""
    m = T.dynamic("m")

    @T.prim_func
    def twice(X: T.Tensor((m,), "float32"), Y: T.Tensor((m,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(m):
                Y[i] = X[i] * 2

    prof = tilelang.compile(twice, out_idx=[1], target="cpu").get_profiler()
    assert prof.do_bench(warmup=1, rep=2, dynamic_symbolic_constraints={"m": 16}) > 0
    with pytest.raises(ValueError, match="'m'"):
        prof.do_bench(warmup=1, rep=2, dynamic_symbolic_constraints={"n": 16})


def test_the_reference_sees_the_inputs_before_the_kernel_writes_them():
    # B = 2 * C, then C cleared: the reference ran on the cleared C and every check failed
    @T.prim_func
    def drain(C: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                B[i] = C[i] * 2
                C[i] = 0.0

    k = tilelang.compile(drain, out_idx=[1], target="cpu")
    c = torch.randn(64)
    k.get_profiler().assert_allclose(lambda c: c * 2, input_tensors=[c])
    assert bool((c == 0).all())
