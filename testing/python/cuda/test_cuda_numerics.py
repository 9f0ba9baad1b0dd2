"""On the GPU: results match torch (and the CPU backend on small sizes)."""

import pytest
import torch

import tilelang
import tilelang.language as T

from programs import atomic_sum, cumsum_kernel, example, matmul, reduce_kernel

pytestmark = pytest.mark.gpu

TORCH = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
         "int8": torch.int8}


def rand(shape, dtype):
    if dtype == "int8":
        return torch.randint(-4, 5, shape, dtype=torch.int8, device="cuda")
    return torch.randn(shape, device="cuda").to(TORCH[dtype])


def ref_gemm(a, b, tA, tB):
    a = a.double().T if tA else a.double()
    b = b.double().T if tB else b.double()
    return a @ b


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "int8"])
@pytest.mark.parametrize("M,N,K", [(256, 256, 256), (257, 129, 96)])
def test_gemm(M, N, K, dtype, tA, tB):
    accum = "int32" if dtype == "int8" else "float32"
    f = matmul(M, N, K, 64, 64, 32, tA, tB, dtype=dtype, accum=accum)
    k = tilelang.compile(f, out_idx=[2], target="cuda")
    a = rand((K, M) if tA else (M, K), dtype)
    b = rand((N, K) if tB else (K, N), dtype)
    c = k(a, b)
    ref = ref_gemm(a, b, tA, tB)
    if dtype == "int8":
        assert torch.equal(c.cpu().long(), ref.cpu().long())
    else:
        tol = 2e-2 if dtype != "float32" else 5e-2  # tf32 inputs
        torch.testing.assert_close(c.double(), ref, rtol=tol, atol=tol * 4)


def test_gemm_fp16_out_matches_cpu_backend():
    f = matmul(130, 70, 64, 64, 64, 32, out_dtype="float16")
    a, b = rand((130, 64), "float16"), rand((64, 70), "float16")
    gpu = tilelang.compile(f, out_idx=[2], target="cuda")(a, b)
    cpu = tilelang.compile(f, out_idx=[2], target="cpu")(a.cpu(), b.cpu())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("dim", [0, 1])
@pytest.mark.parametrize("kind", ["max", "min", "sum", "abssum", "absmax"])
def test_reduce(kind, dim, clear):
    M, N = 32, 64
    k = tilelang.compile(reduce_kernel(kind, M, N, dim, clear), out_idx=[2], target="cuda")
    x = torch.randn(M, N, device="cuda")
    init = torch.randn(N if dim == 0 else M, device="cuda")
    ops = {"max": lambda t: t.amax(dim), "min": lambda t: t.amin(dim), "sum": lambda t: t.sum(dim),
           "abssum": lambda t: t.abs().sum(dim), "absmax": lambda t: t.abs().amax(dim)}
    ref = ops[kind](x)
    if not clear:
        ref = torch.maximum(init, ref) if kind in ("max", "absmax") else \
            torch.minimum(init, ref) if kind == "min" else init + ref
    torch.testing.assert_close(k(x, init), ref, rtol=1e-4, atol=1e-4)


def test_softmax():
    mod = example("softmax/example_softmax.py")
    k = tilelang.compile(mod.softmax(1000, 256, 16), out_idx=[1], target="cuda")
    x = torch.randn(1000, 256, device="cuda")
    torch.testing.assert_close(k(x), torch.softmax(x, 1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dim,reverse", [(0, False), (1, False), (1, True)])
def test_cumsum(dim, reverse):
    k = tilelang.compile(cumsum_kernel(32, 48, dim, reverse), out_idx=[1], target="cuda")
    x = torch.randn(32, 48, device="cuda")
    ref = x.flip(dim).cumsum(dim).flip(dim) if reverse else x.cumsum(dim)
    torch.testing.assert_close(k(x), ref, rtol=1e-4, atol=1e-4)


def test_atomic_add():
    k = tilelang.compile(atomic_sum(10000), target="cuda")
    x = torch.randn(10000, device="cuda")
    s = torch.zeros(1, device="cuda")
    k(x, s)
    torch.testing.assert_close(s, x.sum(0, keepdim=True), rtol=1e-4, atol=1e-3)


def test_elementwise_add():
    mod = example("elementwise/example_elementwise_add.py")
    k = tilelang.compile(mod.elementwise_add(1000, 1000, 32, 64), out_idx=[2], target="cuda")
    a, b = torch.randn(1000, 1000, device="cuda"), torch.randn(1000, 1000, device="cuda")
    torch.testing.assert_close(k(a, b), a + b)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("S", [256, 200])
def test_attention(S, D, causal):
    mod = example("flash_attention/example_mha_fwd.py")
    f = mod.flashattn(2, 4, S, D, causal, num_stages=2)
    k = tilelang.compile(f, out_idx=[3], target="cuda")
    q, kk, v = (torch.randn(2, S, 4, D, device="cuda", dtype=torch.float16) for _ in range(3))
    torch.testing.assert_close(k(q, kk, v), mod.reference(q, kk, v, causal), rtol=1e-2, atol=1e-2)


def test_attention_matches_cpu_backend():
    mod = example("flash_attention/example_mha_fwd.py")
    f = mod.flashattn(1, 2, 100, 64, True)
    q, kk, v = (torch.randn(1, 100, 2, 64, dtype=torch.float16) for _ in range(3))
    cpu = tilelang.compile(f, out_idx=[3], target="cpu")(q, kk, v)
    gpu = tilelang.compile(f, out_idx=[3], target="cuda")(q.cuda(), kk.cuda(), v.cuda())
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-2, atol=1e-2)


def test_dynamic_m_on_gpu():
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 64), "float16"), Y: T.Tensor((M, 64), "float16")):
        with T.Kernel(T.ceildiv(M, 32), threads=128) as bx:
            x = T.alloc_fragment((32, 64), "float16")
            T.copy(X[bx * 32, 0], x)
            for i, j in T.Parallel(32, 64):
                x[i, j] = x[i, j] * 2
            T.copy(x, Y[bx * 32, 0])

    k = tilelang.compile(main, out_idx=[1], target="cuda")
    for m in (33, 300):
        x = torch.randn(m, 64, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(x), x * 2)


def test_large_dynamic_shared_memory():
    f = matmul(512, 512, 512, 128, 256, 64, num_stages=3, threads=256)  # 147 KB of shared tiles
    k = tilelang.compile(f, out_idx=[2], target="cuda")
    a, b = rand((512, 512), "float16"), rand((512, 512), "float16")
    torch.testing.assert_close(k(a, b).double(), ref_gemm(a, b, False, False), rtol=2e-2, atol=8e-2)


def test_argument_on_wrong_device_index_or_type():
    k = tilelang.compile(matmul(128, 128, 128, 64, 64, 32), out_idx=[2], target="cuda")
    with pytest.raises(tilelang.KernelArgumentError, match="cuda"):
        k(torch.randn(128, 128).half(), torch.randn(128, 128).half())


@pytest.mark.parametrize("K", [32, 64, 320])
def test_pipeline_trip_counts_below_and_above_the_stage_count(K):
    f = matmul(128, 128, K, 64, 64, 32, num_stages=4)
    k = tilelang.compile(f, out_idx=[2], target="cuda")
    a, b = rand((128, K), "float16"), rand((K, 128), "float16")
    torch.testing.assert_close(k(a, b).double(), ref_gemm(a, b, False, False), rtol=2e-2, atol=5e-2)


def test_pipeline_with_dynamic_trip_count():
    K = T.dynamic("K")

    @T.prim_func
    def main(A: T.Tensor((128, K), "float16"), B: T.Tensor((K, 128), "float16"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, 32), num_stages=3):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    k = tilelang.compile(main, out_idx=[2], target="cuda")
    for kk in (32, 96, 1000):
        a, b = rand((128, kk), "float16"), rand((kk, 128), "float16")
        torch.testing.assert_close(k(a, b).double(), ref_gemm(a, b, False, False), rtol=2e-2,
                                   atol=5e-2)


def test_manual_stage_and_order():
    M = N = K = 256

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(4, 4, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 32, num_stages=2, order=[0, 1, 2], stage=[0, 0, 1]):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    k = tilelang.compile(main, out_idx=[2], target="cuda")
    a, b = rand((M, K), "float16"), rand((K, N), "float16")
    torch.testing.assert_close(k(a, b).double(), ref_gemm(a, b, False, False), rtol=2e-2, atol=5e-2)


def test_histogram_with_element_atomics_in_parallel():
    @T.prim_func
    def main(X: T.Tensor((4096,), "int32"), H: T.Tensor((16,), "int32")):
        with T.Kernel(4096 // 256, threads=128) as bx:
            for i in T.Parallel(256):
                T.atomic_add(H[X[bx * 256 + i]], 1)

    k = tilelang.compile(main, target="cuda")
    x = torch.randint(0, 16, (4096,), dtype=torch.int32, device="cuda")
    h = torch.zeros(16, dtype=torch.int32, device="cuda")
    k(x, h)
    assert torch.equal(h.cpu(), torch.bincount(x.cpu(), minlength=16).int())


def test_block_level_fragment_element_read():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            m = T.alloc_fragment((64,), "float32")
            T.copy(X, x)
            T.reduce_max(x, m, dim=1)
            Y[0] = x[5, 7]
            Y[1] = m[9]

    k = tilelang.compile(main, out_idx=[1], target="cuda")
    x = torch.randn(64, 64, device="cuda")
    y = k(x)
    assert float(y[0]) == float(x[5, 7]) and float(y[1]) == float(x[9].max())
