"""``T.unroll``: unrolled in the IR when the trip count is constant with unit step, otherwise a
``#pragma unroll [factor]`` loop; every form runs exactly its indices."""

import pytest
import torch

import tilelang
import tilelang.language as T


def _unrolls(n_runtime: bool):
    @T.prim_func
    def main(A: T.Tensor((4, 16), "float32"), n: T.int32):
        with T.Kernel(1, threads=1):
            for i in T.unroll(n):
                A[0, i] = 1.0
            for j in T.unroll(0, 16, step=4):
                A[1, j] = 2.0
            for j in T.unroll(0, 16, unroll_factor=4):
                A[2, j] = 3.0
            for j in T.unroll(2, 6):
                A[3, j] = 4.0

    return main


def _expected(n: int) -> torch.Tensor:
    a = torch.zeros(4, 16)
    a[0, :n] = 1
    a[1, ::4] = 2
    a[2, :] = 3
    a[3, 2:6] = 4
    return a


def test_every_form_runs_exactly_its_indices_on_the_cpu():
    k = tilelang.compile(_unrolls(True), target="cpu")
    a = torch.zeros(4, 16)
    k(a, 5)
    torch.testing.assert_close(a, _expected(5))


def test_cuda_source_keeps_pragma_loops_where_the_ir_cannot_unroll():
    src = tilelang.compile(_unrolls(True), target="cuda -arch=sm_90a").get_kernel_source()
    assert "#pragma unroll 4" in src                   # unroll_factor
    assert "j += 4" in src                             # the step survives (TVM's unroller drops it)
    assert "< n;" in src and src.count("#pragma unroll") == 3
    assert "A_ptr[50] =" in src and "A_ptr[53] =" in src   # T.unroll(2, 6) unrolled in the IR


def test_unroll_factor_must_be_positive():
    with pytest.raises(Exception, match="unroll_factor must be >= 1"):
        @T.prim_func
        def bad(A: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=1):
                for j in T.unroll(16, unroll_factor=0):
                    A[j] = 1.0


@pytest.mark.gpu
def test_every_form_runs_exactly_its_indices_on_the_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    k = tilelang.compile(_unrolls(True))
    a = torch.zeros(4, 16, device="cuda")
    k(a, 5)
    torch.testing.assert_close(a.cpu(), _expected(5))


def test_serial_and_vectorized_take_the_step_in_place():
    # the public TileLang's T.serial(start, stop, step): TVMScript takes step by keyword only
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(0, 16, 2):
                B[i] = A[i] + 1
            for i in T.serial(1, 16, step=2):
                B[i] = A[i] * 2
            for i in T.serial(4):
                for v in T.vectorized(0, 4, 1):
                    B[i * 4 + v] = B[i * 4 + v] + 1

    a, b = torch.arange(16.0), torch.zeros(16)
    tilelang.compile(main, target="cpu")(a, b)
    want = torch.where(torch.arange(16) % 2 == 0, a + 1, a * 2) + 1
    torch.testing.assert_close(b, want)


def test_negative_steps_run_as_python_ranges():
    # TVM's loop runs while i < min + extent: a negative step ran no iteration
    @T.prim_func
    def main(O: T.Tensor((4, 8), "int32"), n: T.int32):
        with T.Kernel(1, threads=1):
            for r, c in T.grid(4, 8):
                O[r, c] = -1
            for j in range(7, -1, -1):
                O[0, 7 - j] = j
            for j in T.serial(15, -1, step=-4):
                O[1, (15 - j) // 4] = j
            for j in T.unroll(15, -1, -5):
                O[2, (15 - j) // 5] = j
            for j in range(n, 0, -3):  # a trip count known at run time
                O[3, (n - j) // 3] = j

    o = torch.zeros(4, 8, dtype=torch.int32)
    tilelang.compile(main, target="cpu")(o, 10)
    rows = [list(range(7, -1, -1)), list(range(15, -1, -4)), list(range(15, -1, -5)),
            list(range(10, 0, -3))]
    assert o.tolist() == [r + [-1] * (8 - len(r)) for r in rows]


def test_a_step_of_zero_is_refused_with_its_line():
    from tilelang.errors import DSLError

    with pytest.raises(DSLError, match=r"loop over j: the step must not be 0(.|\n)*step=0"):
        @T.prim_func
        def main(O: T.Tensor((16,), "int32")):
            with T.Kernel(1, threads=1):
                for j in T.serial(0, 16, step=0):
                    O[j] = j


def test_a_lazily_typed_kernel_gets_the_same_loop_rewrites_and_checks():
    # parameters typed in the body go through the eager parser: negative steps, jumps out
    # of T.Parallel loops
    from tilelang.errors import DSLError

    @T.prim_func
    def reverse(A):
        A: T.Tensor[[8], T.int32]
        B = T.empty([8], T.int32)
        with T.Kernel(1, threads=1):
            for i in T.serial(7, -1, -1):
                B[7 - i] = A[i]
        return B

    a = torch.arange(8, dtype=torch.int32)
    assert tilelang.compile(reverse, target="cpu")(a).tolist() == a.flip(0).tolist()
    with pytest.raises(DSLError, match=r"`break` cannot leave a T.Parallel loop"):
        @T.prim_func
        def jump(A):
            A: T.Tensor[[8], T.float32]
            B = T.empty([8], T.float32)
            with T.Kernel(1, threads=8):
                for i in T.Parallel(8):
                    if A[i] < 0:
                        break
                    B[i] = A[i]
            return B


def test_vectorized_loop_of_a_run_time_extent_runs_serially():
    # (was: LoweringError "Failed to vectorize loop" from TVM, with no line)
    import torch

    @T.prim_func
    def main(n: T.int32, B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1) as _:
            for i in T.vectorized(n):
                B[i] = 1.0

    b = torch.zeros(8)
    tilelang.compile(main, target="cpu")(5, b)
    assert b.tolist() == [1.0] * 5 + [0.0] * 3
    tilelang.compile(main, target="cuda -arch=sm_90a")
