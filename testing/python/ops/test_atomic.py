"""T.atomic_add/max/min on the CPU backend: many blocks updating the same elements."""

import torch

import tilelang
import tilelang.language as T


def test_atomic_add_scalar_from_every_block():
    M, bM = 1000, 16

    @T.prim_func
    def main(X: T.Tensor((M,), "float32"), S: T.Tensor((1,), "float32")):
        with T.Kernel(T.ceildiv(M, bM), threads=32) as bx:
            x = T.alloc_fragment((bM,), "float32")
            s = T.alloc_fragment((1,), "float32")
            T.copy(X[bx * bM], x)
            T.reduce_sum(x, s, dim=0)
            T.atomic_add(S[0], s[0])

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(M)
    s = torch.zeros(1)
    k(x, s)
    torch.testing.assert_close(s, x.sum(0, keepdim=True), rtol=1e-4, atol=1e-4)


def test_atomic_add_region():
    G, N = 9, 32

    @T.prim_func
    def main(X: T.Tensor((G, N), "float32"), Acc: T.Tensor((N,), "float32")):
        with T.Kernel(G, threads=32) as bx:
            row = T.alloc_fragment((N,), "float32")
            T.copy(X[bx, 0], row)
            T.atomic_add(Acc[0], row)

    k = tilelang.compile(main, target="cpu")
    x = torch.randn(G, N)
    acc = torch.ones(N)
    k(x, acc)
    torch.testing.assert_close(acc, 1 + x.sum(0), rtol=1e-5, atol=1e-5)


def test_atomic_max_and_min():
    G = 7

    @T.prim_func
    def main(X: T.Tensor((G,), "int32"), Mx: T.Tensor((1,), "int32"), Mn: T.Tensor((1,), "int32")):
        with T.Kernel(G, threads=32) as bx:
            T.atomic_max(Mx[0], X[bx])
            T.atomic_min(Mn[0], X[bx])

    k = tilelang.compile(main, target="cpu")
    x = torch.randint(-100, 100, (G,), dtype=torch.int32)
    mx = torch.full((1,), -1000, dtype=torch.int32)
    mn = torch.full((1,), 1000, dtype=torch.int32)
    k(x, mx, mn)
    assert int(mx) == int(x.max()) and int(mn) == int(x.min())


# return_prev, memory orders, vector adds, loads and stores ----------------------------------
import pytest  # noqa: E402

from atomic_programs import addx, addx_prev, load_store, max_min_prev, slots, ticket  # noqa: E402,E501
from tilelang.errors import DSLError  # noqa: E402


def test_return_prev_at_block_level_is_one_ticket_per_block():
    k = tilelang.compile(ticket(5, threads=16), target="cpu")
    c = torch.full((1,), 10, dtype=torch.int32)
    out = torch.zeros(5, 16, dtype=torch.int32)
    k(c, out)
    assert int(c) == 15
    assert out.tolist() == [[10 + b] * 16 for b in range(5)]


def test_return_prev_inside_parallel_gives_distinct_slots():
    x = torch.tensor([3, -1, 2, 0, 5, 7, -2, 1] * 2, dtype=torch.int32)
    pos = torch.zeros(16, dtype=torch.int32)
    cnt = torch.zeros(1, dtype=torch.int32)
    tilelang.compile(slots(16), target="cpu")(x, pos, cnt)
    assert int(cnt) == int((x > 0).sum())
    assert sorted(pos[x > 0].tolist()) == list(range(int(cnt)))
    assert (pos[x <= 0] == -1).all()


def test_atomic_max_min_return_prev():
    G = 6
    x = torch.tensor([3.0, -1.0, 7.0, 2.0, 9.0, -5.0])
    m = torch.tensor([0.0, 0.0])
    old = torch.zeros(G, 2)
    tilelang.compile(max_min_prev(G), target="cpu")(x, m, old)
    assert m.tolist() == [9.0, -5.0]
    # blocks run in order on the CPU: each old value is the running max / min before it
    run_max = torch.cummax(torch.cat([torch.zeros(1), x]), 0).values[:-1]
    run_min = torch.cummin(torch.cat([torch.zeros(1), x]), 0).values[:-1]
    assert old[:, 0].tolist() == run_max.tolist() and old[:, 1].tolist() == run_min.tolist()


def test_atomic_load_and_store():
    G = 4
    flag = torch.zeros(G, dtype=torch.int32)
    seen = torch.zeros(G, dtype=torch.int32)
    tilelang.compile(load_store(G), target="cpu")(flag, seen)
    assert flag.tolist() == [1, 2, 3, 4] and seen.tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("lanes,dtype", [(2, "float16"), (2, "float32"), (4, "float32"),
                                         (4, "bfloat16")])
def test_atomic_addx(lanes, dtype):
    M, N = 4, 16
    t = getattr(torch, dtype)
    a = torch.randn(M, N).to(t)
    b = torch.randn(M, N).to(t)
    ref = b.float() + 3 * a.float()
    tilelang.compile(addx(lanes, M, N, dtype), target="cpu")(a, b)
    torch.testing.assert_close(b.float(), ref, atol=5e-2, rtol=2e-2)


def test_atomic_argument_errors():
    def build(fn):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=32):
                fn(A, B)
        return main

    with pytest.raises(DSLError, match="atomic_add does not support memory_order 'strong'"):
        build(lambda A, B: T.atomic_add(A[0], 1.0, memory_order="strong"))
    with pytest.raises(DSLError, match="return_prev=True needs an element destination"):
        build(lambda A, B: T.atomic_add(A[0:4], B[0:4], return_prev=True))
    with pytest.raises(DSLError, match="return_prev=True needs a single-element destination"):
        build(lambda A, B: T.atomic_add(A[0:4], 1.0, return_prev=True))
    with pytest.raises(DSLError, match="atomic_or: needs an integer destination"):
        build(lambda A, B: T.atomic_or(A[0], 1))
    with pytest.raises(DSLError, match="4 consecutive elements"):
        build(lambda A, B: T.atomic_addx4(A[0:2], B[0:2]))


# memory orders of loads and stores, bitwise atomics, regions with a scalar, vector old values --
@pytest.mark.parametrize("order,ok", [("acquire", True), ("consume", True), ("release", False),
                                      ("acq_rel", False), ("bogus", False)])
def test_atomic_load_memory_orders(order, ok):
    def build():
        @T.prim_func
        def main(S: T.Tensor((1,), "int32"), O: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=1):
                O[0] = T.atomic_load(S[0], memory_order=order)
        return main

    if ok:
        build()
    else:
        with pytest.raises(ValueError, match=f"atomic_load does not support memory_order '{order}'"):
            build()


@pytest.mark.parametrize("order,ok", [("release", True), ("relaxed", True), ("acquire", False),
                                      ("consume", False), ("acq_rel", False)])
def test_atomic_store_memory_orders(order, ok):
    def build():
        @T.prim_func
        def main(D: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=1):
                T.atomic_store(D[0], 1, memory_order=order)
        return main

    if ok:
        build()
    else:
        with pytest.raises(ValueError, match=f"atomic_store does not support memory_order '{order}'"):
            build()


def test_atomic_bitwise_from_every_block():
    G = 6

    @T.prim_func
    def main(X: T.Tensor((G,), "int32"), R: T.Tensor((3,), "int32"), P: T.Tensor((G,), "int32")):
        with T.Kernel(G, threads=32) as bx:
            T.atomic_or(R[0], X[bx])
            T.atomic_and(R[1], X[bx], memory_order="release")
            P[bx] = T.atomic_xor(R[2], X[bx], return_prev=True)

    x = torch.tensor([1, 6, 16, 7, 96, 3], dtype=torch.int32)
    r = torch.tensor([0, -1, 5], dtype=torch.int32)
    p = torch.zeros(G, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(x, r, p)
    want_xor = 5
    prevs = []
    for v in x.tolist():
        prevs.append(want_xor)
        want_xor ^= v
    assert r.tolist() == [1 | 6 | 16 | 7 | 96 | 3, -1 & 1 & 6 & 16 & 7 & 96 & 3, want_xor]
    assert p.tolist() == prevs  # the CPU runs the blocks in order


def test_atomic_region_with_scalar_value():
    M, N, b = 8, 8, 4

    @T.prim_func
    def main(A: T.Tensor((M, N), "float32"), B: T.Tensor((M, N), "float32")):
        with T.Kernel(M // b, N // b, threads=32) as (bx, by):
            T.atomic_add(A[bx * b:(bx + 1) * b, by * b:(by + 1) * b], 2.0)
            T.atomic_max(B[bx * b:(bx + 1) * b, by * b:(by + 1) * b], 0.5)

    a = torch.randn(M, N)
    bb = torch.randn(M, N)
    ra, rb = a + 2, torch.clamp(bb, min=0.5)
    tilelang.compile(main, target="cpu")(a, bb)
    torch.testing.assert_close(a, ra)
    torch.testing.assert_close(bb, rb)


def test_atomic_add_of_a_per_thread_value_into_a_one_element_tensor():
    @T.prim_func
    def main(A: T.Tensor((1,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(3) as _:
            a = T.alloc_local([1], "float32")
            T.copy(A, a)
            T.atomic_add(B, a)
            T.atomic_add(B, 1)

    a = torch.tensor([2.5])
    b = torch.zeros(1)
    tilelang.compile(main, target="cpu")(a, b)
    assert b.tolist() == [3 * 3.5]


@pytest.mark.parametrize("lanes,dtype,ramp", [(2, "float32", False), (2, "float32", True),
                                              (4, "float32", False), (2, "float16", False),
                                              (4, "bfloat16", False)])
def test_vector_add_returns_the_previous_values(lanes, dtype, ramp):
    t = getattr(torch, dtype)
    d = torch.arange(1, lanes + 1).to(t)
    v = (10 * torch.arange(1, lanes + 1)).to(t)
    p = torch.zeros(lanes).to(t)
    tilelang.compile(addx_prev(lanes, dtype, ramp), target="cpu")(d, v, p)
    assert p.tolist() == list(range(1, lanes + 1))
    assert d.tolist() == [11 * k for k in range(1, lanes + 1)]


def _outside(H_len: int = 4):
    """Three blocks add 1 to ``H[m]`` and keep the old value (``m`` may lie outside ``H``),
    and add a two-element tile at ``H[-2]`` (the last two elements)."""

    @T.prim_func
    def main(H: T.Tensor((H_len,), "float32"), P: T.Tensor((3,), "float32"), m: T.int32):
        with T.Kernel(3, threads=32) as bx:
            F = T.alloc_fragment((2,), "float32")
            T.fill(F, 5.0)
            P[bx] = T.atomic_add(H[m], 1.0, return_prev=True) + 10
            T.atomic_add(H[-2], F)

    return main


@pytest.mark.parametrize("m, prev", [(1, [10.0, 11.0, 12.0]), (-1, [10.0] * 3),
                                     (4, [10.0] * 3)])
def test_atomics_count_from_the_end_and_drop_updates_outside(m, prev):
    # H[-2] is the last two elements; H[m] with m at run time: -1 (of unknown sign when
    # compiled, so left as written) and 4 lie outside H: those updates are dropped and their
    # old value reads 0
    k = tilelang.compile(_outside(), target="cpu")
    h, p = torch.zeros(4), torch.full((3,), -1.0)
    k(h, p, m)
    want = torch.tensor([0.0, 0.0, 15.0, 15.0])
    if m == 1:
        want[1] = 3.0
    torch.testing.assert_close(h, want)
    assert sorted(p.tolist()) == prev


def test_atomic_outside_its_tensor_is_dropped_on_cuda():
    src = tilelang.compile(_outside(), target="cuda -arch=sm_90a").get_kernel_source()
    guard = src.index("if ((m < 4) && (0 <= m)) {")
    made, dropped = src.index("AtomicAddRet", guard), src.index("} else {", guard)
    assert made < dropped
    assert "smem_ptr)[0] = 0x0p+0f" in src[dropped:dropped + 80]  # its old value: 0
    assert "AtomicAdd((&(H_ptr[2]))" in src and "AtomicAdd((&(H_ptr[3]))" in src


@pytest.mark.parametrize("form", ["if_then_else", "conditional expression", "and"])
def test_an_atomic_read_on_one_side_of_a_condition_is_refused(form):
    # the atomic is made before the statement containing it, whether or not the condition holds
    with pytest.raises(DSLError, match=r"T.atomic_add\(\.\.\., return_prev=True\) is read on "
                       r"one side of a condition(.|\n)*the statement"):
        @T.prim_func
        def main(X: T.Tensor((2,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    if form == "if_then_else":
                        X[0] = T.if_then_else(i % 2 == 0, T.atomic_add(X[1], 1, return_prev=True), 9)  # the statement
                    elif form == "and":
                        X[0] = T.Cast("int32", (i % 2 == 0) and (T.atomic_add(X[1], 1, return_prev=True) > 0))  # the statement
                    else:
                        X[0] = T.atomic_add(X[1], 1, return_prev=True) if i % 2 == 0 else 9  # the statement


def test_an_atomic_under_an_if_statement_is_made_only_when_it_holds():
    @T.prim_func
    def main(X: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                if i % 2 == 0:
                    X[0] = X[0] + T.atomic_add(X[1], 1, return_prev=True)
                else:
                    X[0] = X[0] + 100

    x = torch.zeros(2, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(x)
    assert x.tolist() == [201, 2]


def test_an_atomic_in_a_while_condition_is_refused():
    # made once, before the loop: the loop would test a stale value
    with pytest.raises(DSLError, match=r"T.atomic_add\(\.\.\., return_prev=True\) in a `while` "
                       r"condition is made once, before the loop"):
        @T.prim_func
        def main(C: T.Tensor((1,), "int32"), N: T.Tensor((1,), "int32")):
            with T.Kernel(1, threads=1):
                n = T.alloc_var("int32", init=0)
                while T.atomic_add(C[0], 1, return_prev=True) < 5 and n < 100:
                    n = n + 1
                N[0] = n


@pytest.mark.parametrize("dtype", ["int64", "uint64"])
def test_64_bit_integer_atomics_compile_for_cuda(dtype):
    # int64_t is long on Linux, which none of CUDA's atomics nor our 64-bit overloads took
    import shutil

    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc")

    @T.prim_func
    def main(X: T.Tensor((64,), dtype), R: T.Tensor((3,), dtype)):
        with T.Kernel(1, threads=64):
            for i in T.Parallel(64):
                T.atomic_add(R[0], X[i])
                T.atomic_max(R[1], X[i])
                T.atomic_min(R[2], X[i])
                T.atomic_or(R[0], X[i])

    for arch in ("sm_80", "sm_90a"):
        assert ".entry" in tilelang.compile(main, target=f"cuda -arch={arch}").get_ptx()


def test_atomic_add_of_a_fragment_slice_on_cuda_names_the_op_and_line():
    import pytest

    from tilelang.errors import LoweringError

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            F = T.alloc_fragment((64, 64), "float32")
            T.copy(A, F)
            T.atomic_add(B[0:32, :], F[0:32, :])

    with pytest.raises(LoweringError, match=r"(?s)T.atomic_add: on CUDA a fragment value \(F\) "
                                            r"is used whole.*test_atomic.py:\d+: T.atomic_add"):
        tilelang.compile(main, target="cuda -arch=sm_90a")
