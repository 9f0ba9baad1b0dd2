"""Explicit memory accesses (``T.ldg*/stg*/lds*/sts*``, ``T.__ldg``) and ``T.any_of`` /
``T.all_of``: results on the CPU backend, the CUDA source (compiled by nvcc for sm_90a and
sm_80), argument checks and GPU runs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"


def _body(src: str) -> str:
    return src[src.find('extern "C" __global__'):]


def _copy_global(bits: int, pred_blocks=None, n=64, dtype="float32"):
    """Y = X through one ``bits``-wide load and store per block (blocks from ``pred_blocks``
    on load nothing, i.e. zeros)."""
    per = bits // torch.tensor([], dtype=getattr(torch, dtype)).element_size() // 8
    ld, st = getattr(T, f"ldg{bits}"), getattr(T, f"stg{bits}")

    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Y: T.Tensor((n,), dtype)):
        with T.Kernel(n // per, threads=32) as b:
            if pred_blocks is None:
                v = ld(X[b * per:(b + 1) * per])
            else:
                v = ld(X[b * per:(b + 1) * per], pred=b < pred_blocks)
            st(Y[b * per:(b + 1) * per], v)

    return main


@pytest.mark.parametrize("bits", [32, 64, 128, 256])
def test_global_load_store_on_the_cpu(bits):
    k = tilelang.compile(_copy_global(bits), target="cpu")
    x = torch.randn(64)
    y = torch.zeros(64)
    k(x, y)
    assert torch.equal(x, y)


@pytest.mark.parametrize("bits", [32, 64, 128])
def test_predicated_load_reads_zero_on_the_cpu(bits):
    per = bits // 32
    k = tilelang.compile(_copy_global(bits, pred_blocks=5), target="cpu")
    x = torch.randn(64)
    y = torch.full((64,), 7.0)
    k(x, y)
    want = x.clone()
    want[5 * per:] = 0
    assert torch.equal(y, want)


def test_predicated_store_writes_nothing_on_the_cpu():
    @T.prim_func
    def main(X: T.Tensor((16,), "float16"), Y: T.Tensor((16,), "float16")):
        with T.Kernel(4, threads=32) as b:
            T.stg64(Y[b * 4:b * 4 + 4], T.ldg64(X[b * 4:b * 4 + 4]), pred=b % 2 == 0)

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(16).half()
    y = torch.full((16,), -1.0).half()
    k(x, y)
    want = torch.full((16,), -1.0).half()
    want[0:4], want[8:12] = x[0:4], x[8:12]
    assert torch.equal(y, want)


def test_bits_are_reinterpreted_on_the_cpu():
    """Two float16 in one 32-bit load, stored back from an element (``X[i]`` = 32 bits from
    there), and a float32 view of the raw bits."""
    @T.prim_func
    def main(X: T.Tensor((8,), "float16"), Y: T.Tensor((8,), "float16"),
             U: T.Tensor((4,), "uint32"), F: T.Tensor((4,), "float32")):
        with T.Kernel(4, threads=32) as b:
            v = T.ldg32(X[b * 2])
            U[b] = v
            T.stg32(Y[b * 2:b * 2 + 2], v)
            F[b] = T.reinterpret(T.ldg32(U[b]), "float32")

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(8).half()
    y, u, f = torch.zeros(8).half(), torch.zeros(4, dtype=torch.uint32), torch.zeros(4)
    k(x, y, u, f)
    assert torch.equal(y, x)
    assert torch.equal(u.view(torch.int32), x.view(torch.int32))
    assert torch.equal(f, x.view(torch.float32))


@pytest.mark.parametrize("bits", [32, 64, 128])
def test_shared_load_store_on_the_cpu(bits):
    """Chunks of X go through shared memory in reversed order."""
    per = bits // 32
    ldg, stg = getattr(T, f"ldg{bits}"), getattr(T, f"stg{bits}")
    lds, sts = getattr(T, f"lds{bits}"), getattr(T, f"sts{bits}")
    chunks = 64 // per

    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), Y: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((64,), "float32")
            for i in T.serial(chunks):
                sts(S[(chunks - 1 - i) * per:(chunks - i) * per], ldg(X[i * per:(i + 1) * per]))
            for i in T.serial(chunks):
                stg(Y[i * per:(i + 1) * per], lds(S[i * per:(i + 1) * per]))

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(64)
    y = torch.zeros(64)
    k(x, y)
    assert torch.equal(y.view(chunks, per), x.view(chunks, per).flip(0))


def test_ldg_readonly_on_the_cpu():
    @T.prim_func
    def main(X: T.Tensor((4, 8), "bfloat16"), Y: T.Tensor((4, 8), "bfloat16")):
        with T.Kernel(4, threads=32) as b:
            for j in T.serial(8):
                Y[b, j] = T.__ldg(X[b, 7 - j]) + T.__ldg(X, [b, j])

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(4, 8).bfloat16()
    y = torch.zeros(4, 8).bfloat16()
    k(x, y)
    assert torch.equal(y, x.flip(1) + x)


# CUDA source ------------------------------------------------------------------------------

@pytest.mark.parametrize("target", [SM90, SM80])
@pytest.mark.parametrize("bits", [32, 64, 128, 256])
def test_global_accesses_are_one_helper_call(bits, target):
    src = _body(tilelang.compile(_copy_global(bits, pred_blocks=3), target=target)
                .get_kernel_source())
    vec = {32: "uint", 64: "uint2", 128: "uint4", 256: "ulonglong4"}[bits]
    assert f"{vec} ldg{bits}_bits_ptr[1];" in src
    assert src.count(f"tl::load_global_{bits}_conditional(") == 1
    assert f"tl::store_to((&(ldg{bits}_bits_ptr[0])), tl::load_global_{bits}_conditional(" in src
    assert src.count(f"tl::store_global_{bits}(") == 1


def test_shared_accesses_and_predicated_stores_in_cuda():
    @T.prim_func
    def main(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(32, threads=32) as b:
            S = T.alloc_shared((128,), "float32")
            T.sts64(S[b * 4:b * 4 + 2], T.ldg64(X[b * 4:b * 4 + 2]))
            T.sts32(S[b * 4 + 2], T.reinterpret(X[b * 4 + 2], "uint32"))
            T.sync_threads()
            T.stg64(Y[b * 4:b * 4 + 2], T.lds64(S[b * 4:b * 4 + 2]), pred=b < 16)
            T.stg32(Y[b * 4 + 2], T.lds32(S[b * 4 + 2]), pred=b < 16)

    src = _body(tilelang.compile(main, target=SM90).get_kernel_source())
    for name in ("store_shared_64(", "store_shared_32(", "load_shared_64(", "load_shared_32(",
                 "store_global_64_conditional(", "store_global_32_conditional("):
        assert f"tl::{name}" in src, name


def test_ldg_readonly_in_cuda():
    @T.prim_func
    def main(X: T.Tensor((64,), "float16"), Y: T.Tensor((64,), "float16")):
        with T.Kernel(64, threads=32) as b:
            Y[b] = T.__ldg(X[b])

    src = _body(tilelang.compile(main, target=SM90).get_kernel_source())
    assert "Y_ptr[((int)blockIdx.x)] = __ldg(&(X_ptr[((int)blockIdx.x)]));" in src


# argument checks --------------------------------------------------------------------------

def _parse(body):
    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), H: T.Tensor((64,), "float16"),
             Z: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((64,), "float32")
            body(X, H, Z, S)

    return main


@pytest.mark.parametrize("body, match", [
    (lambda X, H, Z, S: T.ldg64(X[0:4]), r"covers 4 float32 elements of X \(128 bits\); T.ldg64"),
    (lambda X, H, Z, S: T.ldg32(S[0]), "S is in shared.dyn memory; T.ldg32 accesses global"),
    (lambda X, H, Z, S: T.lds32(X[0]), "X is in global memory; T.lds32 accesses shared"),
    (lambda X, H, Z, S: T.stg64(X[0:2], T.ldg32(X[0])), r"the value is uint32 \(32 bits\)"),
    (lambda X, H, Z, S: T.ldg128(Z[0:2, 0:2]), "not contiguous"),
    (lambda X, H, Z, S: T.__ldg(S[0]), "__ldg reads global memory"),
])
def test_bad_accesses_name_the_op(body, match):
    with pytest.raises(DSLError, match=match):
        _parse(body)


def test_loads_need_a_kernel():
    @T.prim_func
    def ok(X: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            X[0] = T.reinterpret(T.ldg32(X[1]), "float32")

    assert ok is not None
    with pytest.raises(DSLError, match="T.ldg32 is only valid inside a T.Kernel"):
        T.ldg32(None)


# any_of / all_of --------------------------------------------------------------------------

def _masked_sum(kind: str, where: str):
    @T.prim_func
    def main(M: T.Tensor((4, 3), "bool"), X: T.Tensor((4, 8), "float32"),
             Y: T.Tensor((4, 8), "float32")):
        with T.Kernel(4, threads=32) as b:
            L = T.alloc_local((3,), "bool") if where == "local" else T.alloc_shared((3,), "bool")
            x = T.alloc_fragment((8,), "float32")
            for i in T.serial(3):
                L[i] = M[b, i]
            T.copy(X[b, :], x)
            if (T.any_of(M[b, :]) if kind == "any" else T.all_of(M[b, 0:3])) \
                    if where == "global" else (T.any_of(L) if kind == "any" else T.all_of(L)):
                for j in T.Parallel(8):
                    x[j] = x[j] * 2.0
            T.copy(x, Y[b, :])

    return main


@pytest.mark.parametrize("kind", ["any", "all"])
@pytest.mark.parametrize("where", ["global", "shared", "local"])
def test_any_all_of_on_the_cpu(kind, where):
    k = tilelang.compile(_masked_sum(kind, where), target="cpu")
    m = torch.tensor([[0, 0, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool)
    x = torch.randn(4, 8)
    y = torch.zeros(4, 8)
    k(m, x, y)
    hit = m.any(1) if kind == "any" else m.all(1)
    assert torch.equal(y, torch.where(hit[:, None], x * 2, x))


def test_any_of_needs_constant_extents():
    with pytest.raises(DSLError, match="T.any_of: the region .* must have constant extents"):
        @T.prim_func
        def main(M: T.Tensor((8,), "bool"), n: T.int32):
            with T.Kernel(1, threads=32):
                if T.any_of(M[0:n]):
                    M[0] = False


# GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("bits", [32, 64, 128])
def test_global_copy_on_gpu(bits):
    per = bits // 32
    k = tilelang.compile(_copy_global(bits, pred_blocks=5), target="cuda")
    x = torch.randn(64, device="cuda")
    y = torch.full((64,), 7.0, device="cuda")
    k(x, y)
    want = x.clone()
    want[5 * per:] = 0
    assert torch.equal(y, want)


@pytest.mark.gpu
def test_shared_and_ldg_on_gpu():
    @T.prim_func
    def main(X: T.Tensor((128,), "float32"), Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            S = T.alloc_shared((128,), "float32")
            T.sts128(S[tx * 4:tx * 4 + 4], T.ldg128(X[tx * 4:tx * 4 + 4]))
            T.sync_threads()
            T.stg128(Y[tx * 4:tx * 4 + 4], T.lds128(S[(31 - tx) * 4:(32 - tx) * 4]))

    k = tilelang.compile(main, target="cuda")
    x = torch.randn(128, device="cuda")
    y = torch.zeros(128, device="cuda")
    k(x, y)
    assert torch.equal(y.view(32, 4), x.view(32, 4).flip(0))


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["any", "all"])
def test_any_all_of_on_gpu(kind):
    k = tilelang.compile(_masked_sum(kind, "shared"), target="cuda")
    m = torch.tensor([[0, 0, 0], [1, 0, 0], [1, 1, 1], [0, 1, 1]], dtype=torch.bool,
                     device="cuda")
    x = torch.randn(4, 8, device="cuda")
    y = torch.zeros(4, 8, device="cuda")
    k(m, x, y)
    hit = m.any(1) if kind == "any" else m.all(1)
    assert torch.equal(y, torch.where(hit[:, None], x * 2, x))
