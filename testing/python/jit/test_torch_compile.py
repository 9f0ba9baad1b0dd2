"""Compiled kernels inside torch.compile (one custom-op node, no graph break), on torch's
stream and inside CUDA graphs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import KernelArgumentError
from tilelang.jit import torch_op


def add_const(M, N, c, dtype="float32"):
    @T.prim_func
    def main(A: T.Tensor((M, N), dtype), B: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(M, 16), threads=32) as bx:
            a = T.alloc_fragment((16, N), dtype)
            T.copy(A[bx * 16, 0], a)
            for i, j in T.Parallel(16, N):
                a[i, j] = a[i, j] + c
            T.copy(a, B[bx * 16, 0])

    return main


def scale_rows(block_M=16):
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 24), "float32"), s: T.float32, Y: T.Tensor((M, 24), "float32")):
        with T.Kernel(T.ceildiv(M, block_M), threads=64) as bx:
            x = T.alloc_fragment((block_M, 24), "float32")
            T.copy(X[bx * block_M, 0], x)
            for i, j in T.Parallel(block_M, 24):
                x[i, j] = x[i, j] * s
            T.copy(x, Y[bx * block_M, 0])

    return main


def accumulate(N=64):
    """Adds X into Acc in place and returns X's row sums: writes a non-output parameter."""

    @T.prim_func
    def main(X: T.Tensor((N, 8), "float32"), Acc: T.Tensor((N, 8), "float32"),
             S: T.Tensor((N,), "float32")):
        with T.Kernel(N // 16, threads=32) as bx:
            x = T.alloc_fragment((16, 8), "float32")
            s = T.alloc_fragment((16,), "float32")
            T.copy(X[bx * 16, 0], x)
            T.reduce_sum(x, s, dim=1)
            T.copy(s, S[bx * 16])
            for i, j in T.Parallel(16, 8):
                Acc[bx * 16 + i, j] = Acc[bx * 16 + i, j] + x[i, j]

    return main


@pytest.fixture(scope="module")
def plus_one():
    return tilelang.compile(add_const(32, 8, 1.0), out_idx=[1], target="cpu")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fullgraph_matches_eager(plus_one, backend):
    def f(x):
        return plus_one(x * 2).relu() + 1

    x = torch.randn(32, 8)
    out = torch.compile(f, fullgraph=True, backend=backend)(x)
    torch.testing.assert_close(out, f(x))


def test_no_graph_break(plus_one):
    def f(x):
        return plus_one(torch.sin(x)) * 3

    explained = torch._dynamo.explain(f)(torch.randn(32, 8))
    assert explained.graph_break_count == 0
    assert explained.graph_count == 1


def test_plain_call_registers_nothing():
    k = tilelang.compile(add_const(32, 8, 5.0), out_idx=[1], target="cpu")
    before = dict(torch_op._registered)
    k(torch.randn(32, 8))
    assert k.torch_op_name not in torch_op._registered
    assert torch_op._registered == before


def test_operator_schema_and_opcheck(plus_one):
    op = plus_one.as_torch_op()
    assert str(op._schema).startswith(f"tilelang::{torch_op.op_name(plus_one)}(Tensor A) -> Tensor")
    assert plus_one.as_torch_op() is op
    torch.library.opcheck(op, (torch.randn(32, 8),))


def test_dynamic_sizes_and_scalars_under_compile():
    k = tilelang.compile(scale_rows(), out_idx=[2], target="cpu")

    def f(x, s):
        return k(x + 1, s) - 1

    cf = torch.compile(f, fullgraph=True, backend="aot_eager", dynamic=True)
    for m in (5, 40, 77):
        x = torch.randn(m, 24)
        out = cf(x, 3)
        assert out.shape == (m, 24)
        torch.testing.assert_close(out, (x + 1) * 3 - 1)


def test_mutated_parameter_is_declared_and_honoured():
    k = tilelang.compile(accumulate(), out_idx=[2], target="cpu")
    assert torch_op.writes(k) == ["Acc"]
    assert "Tensor(a1!) Acc" in str(k.as_torch_op()._schema)

    def f(x, acc):
        s = k(x * 1, acc)
        return s * 2, acc + 0

    x = torch.randn(64, 8)
    acc_eager, acc_comp = torch.ones(64, 8), torch.ones(64, 8)
    want = f(x, acc_eager)
    got = torch.compile(f, fullgraph=True, backend="aot_eager")(x, acc_comp)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(acc_comp, torch.ones(64, 8) + x)


def test_two_kernels_through_one_compiled_function(plus_one):
    plus_ten = tilelang.compile(add_const(32, 8, 10.0), out_idx=[1], target="cpu")
    cf = torch.compile(lambda k, x: k(x) * 1, fullgraph=True, backend="eager")
    x = torch.zeros(32, 8)
    assert cf(plus_one, x)[0, 0].item() == 1.0
    assert cf(plus_ten, x)[0, 0].item() == 10.0
    assert cf(plus_one, x)[0, 0].item() == 1.0


def test_wrong_arguments_rejected_while_tracing(plus_one):
    cf = torch.compile(lambda x: plus_one(x), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"parameter 'A' expects dtype float32, got float16"):
        cf(torch.randn(32, 8).half())


def test_cuda_fake_outputs_need_no_address():
    """Tracing a CUDA kernel (here compiled without a GPU) sees fake and functional tensors,
    which have no address (``data_ptr()`` raises): the outputs come from the shapes alone, and
    a wrong shape is still refused."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode

    k = tilelang.compile(add_const(256, 64, 1.0), out_idx=[1], target="cuda -arch=sm_80")
    with FakeTensorMode():
        with FunctionalTensorMode():
            good = FunctionalTensor.to_functional(torch.empty(256, 64, device="cuda"))
            bad = FunctionalTensor.to_functional(torch.empty(256, 32, device="cuda"))
        (out,) = torch_op._fake_outputs(k, (good,))
        assert out.shape == (256, 64) and out.device.type == "cuda"
        with pytest.raises(KernelArgumentError, match="parameter 'A' expects shape"):
            torch_op._fake_outputs(k, (bad,))


@pytest.mark.gpu
def test_cuda_compile_stream_and_graph():
    k = tilelang.compile(add_const(256, 64, 1.0), out_idx=[1], target="cuda")
    x = torch.randn(256, 64, device="cuda")

    out = torch.compile(lambda t: k(t * 2) + 1, fullgraph=True, backend="aot_eager")(x)
    torch.testing.assert_close(out, x * 2 + 2)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # launched on torch's current stream: ordered after the fill
        y = torch.full((256, 64), 3.0, device="cuda")
        z = k(y)
    side.synchronize()
    torch.testing.assert_close(z, y + 1)

    static_in = torch.zeros(256, 64, device="cuda")
    k(static_in)  # warm up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = k(static_in)
    for v in (1.0, 7.0):
        static_in.fill_(v)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(static_out, torch.full_like(static_in, v + 1))


@pytest.mark.gpu
def test_cuda_inductor_fullgraph():
    k = tilelang.compile(add_const(256, 64, 1.0), out_idx=[1], target="cuda")
    x = torch.randn(256, 64, device="cuda")
    out = torch.compile(lambda t: k(t.sin()).cos(), fullgraph=True)(x)
    torch.testing.assert_close(out, (x.sin() + 1).cos())


def test_outputs_sized_by_an_expression_or_a_scalar_under_compile():
    # the fake implementation looked sizes up by name only: KeyError while tracing
    n = T.dynamic("n")
    m = T.dynamic("m")

    @T.prim_func
    def dup(A: T.Tensor((n,), "float32"), B: T.Tensor((n * 2,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(n):
                B[i] = A[i]
                B[n + i] = A[i]

    @T.prim_func
    def fill(A: T.Tensor((n,), "float32"), m: T.int32, B: T.Tensor((m,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(m):
                B[i] = A[0]

    k1 = tilelang.compile(dup, out_idx=[1], target="cpu")
    k2 = tilelang.compile(fill, out_idx=[2], target="cpu")
    x = torch.randn(10)
    torch._dynamo.reset()
    got = torch.compile(lambda x: (k1(x) + 0, k2(x, 5) + 0), fullgraph=True)(x)
    assert torch.equal(got[0], torch.cat([x, x])) and torch.equal(got[1], x[0].expand(5))


def test_a_pointer_parameter_cannot_be_a_torch_operator():
    # it was typed float: a tensor was refused by torch, an address rounded to a float
    @T.prim_func
    def scale_into(p: T.ptr, A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            S = T.make_tensor(p, (8,), "float32")
            for i in T.serial(8):
                B[i] = A[i] * S[i]

    k = tilelang.compile(scale_into, out_idx=[2], target="cpu")
    with pytest.raises(tilelang.TileLangError, match="parameter 'p' is a T.ptr, which a torch"):
        k.as_torch_op()


def test_inputs_that_require_grad():
    # outputs were detached: backward left x.grad short without a word; an in-place write into
    # a leaf requiring grad was accepted
    @T.prim_func
    def square(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                B[i] = A[i] * A[i]

    @T.prim_func
    def bump(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8):
            for i in T.Parallel(8):
                A[i] = A[i] + 1

    k = tilelang.compile(square, out_idx=[1], target="cpu")
    x = torch.randn(8, requires_grad=True)
    y = k(x)
    assert torch.equal(y.detach(), x.detach() ** 2) and y.requires_grad
    with pytest.raises(RuntimeError, match="tilelang kernel square has no gradient"):
        (y + x).sum().backward()
    with torch.no_grad():
        assert not k(x).requires_grad
    with pytest.raises(KernelArgumentError, match="'A' is written in place but is a leaf"):
        tilelang.compile(bump, target="cpu")(x)
