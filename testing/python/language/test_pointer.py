"""T.ptr parameters, tables of addresses (T.Tensor(..., T.ptr)) and T.make_tensor views."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLTypeError, KernelArgumentError
from tilelang.jit.params import ScalarParam, params_of

SM90 = "cuda -arch=sm_90a"


def _scale(n=16):
    @T.prim_func
    def main(a: T.ptr, out: T.Tensor((n,), T.float32), m: T.int32):
        A = T.make_tensor(a, (m,), T.float32)  # outside the kernel: a host-side declaration
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                out[i] = A[i] * 2.0
    return main


def _gather(G, N):
    @T.prim_func
    def main(srcs: T.Tensor((G,), T.ptr), out: T.Tensor((G, N), T.float32)):
        with T.Kernel(G, threads=1) as bx:
            S = T.make_tensor(srcs[bx], (N,), T.float32)
            for i in T.serial(N):
                out[bx, i] = S[i] + bx
    return main


def _only_pointers(M, N, K, bM=32, bN=32, bK=32):
    """A GEMM whose parameters are all addresses and sizes (no tensor parameter)."""
    @T.prim_func
    def main(a: T.ptr, b: T.ptr, c: T.ptr, m: T.int32, n: T.int32, k: T.int32):
        A = T.make_tensor(a, (m, k), T.float16)
        B = T.make_tensor(b, (k, n), T.float16)
        C = T.make_tensor(c, (m, n), T.float32)
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), T.float16)
            B_s = T.alloc_shared((bK, bN), T.float16)
            C_f = T.alloc_fragment((bM, bN), T.float32)
            T.clear(C_f)
            for ko in T.Pipelined(T.ceildiv(k, bK), num_stages=2):
                T.copy(A[by * bM, ko * bK], A_s)
                T.copy(B[ko * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bN])
    return main


def _grouped_gemm(sizes, N, K, bM=32, bN=32, bK=32, stages=1):
    """One GEMM per group; each group's A, B and C are separate tensors found through tables of
    addresses (the public example_grouped_gemm_fwd_ptr.py)."""
    G, max_M = len(sizes), max(sizes)
    offsets = [0]
    for s in sizes[:-1]:
        offsets.append(offsets[-1] + (s + bM - 1) // bM)
    blocks = offsets[-1] + (sizes[-1] + bM - 1) // bM

    @T.prim_func
    def main(a_ptrs: T.Tensor((G,), T.ptr), b_ptrs: T.Tensor((G,), T.ptr),
             c_ptrs: T.Tensor((G,), T.ptr), tile_offsets: T.Tensor((G,), T.int32)):
        with T.Kernel(blocks, T.ceildiv(N, bN), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), T.float16)
            B_s = T.alloc_shared((bK, bN), T.float16)
            C_f = T.alloc_fragment((bM, bN), T.float32)
            g = T.alloc_var(T.int32)
            g = 0
            for i in range(G):
                g = T.if_then_else(bx >= tile_offsets[i], i, g)
            m0 = (bx - tile_offsets[g]) * bM
            A = T.make_tensor(a_ptrs[g], (max_M, K), T.float16)
            B = T.make_tensor(b_ptrs[g], (K, N), T.float16)
            C = T.make_tensor(c_ptrs[g], (max_M, N), T.float16)
            T.clear(C_f)
            for ko in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[m0, ko * bK], A_s)
                T.copy(B[ko * bK, by * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[m0, by * bN])
    return main, offsets


def _grouped_inputs(sizes, N, K, bM, device):
    max_M = max(sizes)
    a = [torch.zeros(max_M, K, dtype=torch.float16, device=device) for _ in sizes]
    for t, s in zip(a, sizes):
        t[:s] = torch.randn(s, K, device=device).half()
    b = [torch.randn(K, N, device=device).half() for _ in sizes]
    c = [torch.zeros(max_M, N, dtype=torch.float16, device=device) for _ in sizes]
    table = lambda ts: torch.tensor([t.data_ptr() for t in ts], dtype=torch.int64, device=device)
    return a, b, c, table(a), table(b), table(c)


def test_ptr_parameter_takes_a_tensor_or_its_address():
    k = tilelang.compile(_scale(), target="cpu")
    x = torch.arange(16, dtype=torch.float32)
    out = torch.zeros(16)
    k(x, out, 16)
    torch.testing.assert_close(out, x * 2)
    out.zero_()
    k(x.data_ptr(), out, 16)
    torch.testing.assert_close(out, x * 2)
    assert [type(p) for p in k.params][0] is ScalarParam and k.params[0].dtype == "handle"


@pytest.mark.parametrize("bad", ["x", 1.5, -1, None, True, 2**64])
def test_ptr_argument_errors_name_the_parameter(bad):
    k = tilelang.compile(_scale(), target="cpu")
    with pytest.raises(KernelArgumentError, match=r"parameter 'a' \(a T.ptr\) expects"):
        k(bad, torch.zeros(16), 16)


def test_pointer_table_is_an_int64_tensor_and_make_tensor_reads_through_it():
    func = _gather(3, 8)
    assert str(func.params[0].dtype) == "int64"
    assert [p.dtype for p in params_of(func)][:1] == ["int64"]
    srcs = [torch.randn(8) for _ in range(3)]
    table = torch.tensor([s.data_ptr() for s in srcs], dtype=torch.int64)
    out = tilelang.compile(func, out_idx=[1], target="cpu")(table)
    torch.testing.assert_close(out, torch.stack(srcs) + torch.arange(3).float()[:, None])


def test_kernel_of_only_pointers_runs_on_the_cpu():
    # no tensor parameter: TVM found no device for the host's workspace allocations
    k = tilelang.compile(_only_pointers(64, 64, 64), target="cpu")
    a, b = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    c = torch.zeros(64, 64)
    k(a, b, c, 64, 64, 64)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)


def test_grouped_gemm_through_pointer_tables_cpu():
    sizes, N, K = [16, 33, 64], 64, 64
    func, offsets = _grouped_gemm(sizes, N, K)
    k = tilelang.compile(func, target="cpu")
    a, b, c, pa, pb, pc = _grouped_inputs(sizes, N, K, 32, "cpu")
    k(pa, pb, pc, torch.tensor(offsets, dtype=torch.int32))
    for ai, bi, ci, s in zip(a, b, c, sizes):
        torch.testing.assert_close(ci[:s].float(), ai[:s].float() @ bi.float(),
                                   rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("ws", [False, True])
def test_address_computed_in_the_kernel_gets_no_tensor_map(ws):
    """A TMA tensor map is encoded on the host before the launch; an address loaded inside the
    kernel cannot have one, so those copies fall back to cp.async (the host code referenced
    the kernel-local tensor and lowering failed)."""
    func, _ = _grouped_gemm([64, 64], 64, 64, stages=2)
    k = tilelang.compile(func, target=SM90,
                         pass_configs={"tl.disable_warp_specialized": not ws})
    src = k.get_kernel_source()
    assert "CUtensorMap" not in src and "tma_load" not in src
    assert "cp.async" in src or "cp_async" in src


def test_make_tensor_refuses_what_is_not_an_address():
    with pytest.raises(DSLTypeError, match="T.make_tensor: expected a pointer.*got the buffer X"):
        @T.prim_func
        def f(X: T.Tensor((4,), T.float32)):
            with T.Kernel(1, threads=1):
                Y = T.make_tensor(X, (4,), T.float32)
                Y[0] = 1.0

    with pytest.raises(DSLTypeError, match="64-bit integer address, got .* int32"):
        @T.prim_func
        def g(P: T.Tensor((4,), T.int32)):
            with T.Kernel(1, threads=1):
                Y = T.make_tensor(P[0], (4,), T.float32)
                Y[0] = 1.0


@pytest.mark.gpu
def test_ptr_parameters_and_tables_on_gpu():
    k = tilelang.compile(_only_pointers(128, 128, 128), target="cuda")
    a = torch.randn(128, 128, device="cuda").half()
    b = torch.randn(128, 128, device="cuda").half()
    c = torch.zeros(128, 128, device="cuda")
    k(a, b, c, 128, 128, 128)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    c.zero_()
    k(a.data_ptr(), b.data_ptr(), c.data_ptr(), 128, 128, 128)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    with pytest.raises(KernelArgumentError, match="must point into cuda memory"):
        k(a.cpu(), b, c, 128, 128, 128)

    sizes, N, K = [16, 33, 64], 96, 128
    for stages in (1, 2):
        func, offsets = _grouped_gemm(sizes, N, K, stages=stages)
        g = tilelang.compile(func, target="cuda")
        a, b, c, pa, pb, pc = _grouped_inputs(sizes, N, K, 32, "cuda")
        g(pa, pb, pc, torch.tensor(offsets, dtype=torch.int32, device="cuda"))
        for ai, bi, ci, s in zip(a, b, c, sizes):
            torch.testing.assert_close(ci[:s].float(), ai[:s].float() @ bi.float(),
                                       rtol=1e-2, atol=1e-2)
