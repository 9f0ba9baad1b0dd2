"""Python in kernel bodies, as the public TileLang reads it: names bound to Python values stay
Python values, chained assignments, generator expressions, asserts on Python conditions, and
``and`` / ``or`` / ``not`` / ``x if c else y`` on kernel expressions."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_chained_assignment_evaluates_once_and_binds_every_name():
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32), B: T.Tensor((4,), T.float32)):
        with T.Kernel(1, threads=1) as bx:
            BK = BV = 4                       # Python values
            S1 = S2 = T.alloc_shared((BK,), T.float32)   # one tile, two names
            x = y = A[3] * 2.0                # one scalar expression
            for i in T.serial(BV):
                S1[i] = A[i]
            B[0] = S2[1]
            B[1] = x + y
            B[2] = BK * BV
            B[3] = S2[3]

    assert "S1 = S2" not in main.script()
    out = tilelang.compile(main, out_idx=[1], target="cpu")(torch.arange(8).float())
    assert out.tolist() == [1.0, 12.0, 16.0, 3.0]


def test_python_values_stay_python_values():
    """``n = 6`` in a body is the Python int 6: Python code computes with it, and a dtype held
    in a string works as one."""

    @T.prim_func
    def main(A: T.Tensor((8,), T.int32)):
        with T.Kernel(1, threads=1) as bx:
            n = 6
            padded = max(tilelang.math.next_power_of_2(n), 4)  # bool(n <= 1): Python only
            idx_dtype = "int32"
            scale = 0.5
            S = T.alloc_shared((padded,), idx_dtype)
            for i in T.serial(padded):
                S[i] = T.Cast(idx_dtype, i * scale * n)
            for i in T.serial(padded):
                A[i] = S[i]

    text = main.script()
    assert "n: T.int32" not in text and "scale: T.float32" not in text
    out = tilelang.compile(main, out_idx=[0], target="cpu")()
    assert out.tolist() == [0, 3, 6, 9, 12, 15, 18, 21]


def test_python_branches_rebind_python_values():
    """Both arms of a compile-time ``if`` assign the name: it stays a Python value."""

    def make(scale=None):
        @T.prim_func
        def main(A: T.Tensor((2,), T.float32)):
            with T.Kernel(1, threads=1) as bx:
                if scale is None:
                    s = 2.0
                else:
                    s = scale * 3
                A[0] = s
                A[1] = tilelang.math.next_power_of_2(int(s) + 1)
        return main

    assert tilelang.compile(make(), out_idx=[0], target="cpu")().tolist() == [2.0, 4.0]
    assert tilelang.compile(make(2.0), out_idx=[0], target="cpu")().tolist() == [6.0, 8.0]


def test_a_name_changed_in_a_nested_block_stays_a_mutable_scalar():
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32), B: T.Tensor((2,), T.float32)):
        with T.Kernel(1, threads=1) as bx:
            acc = 0.0
            for i in T.serial(8):
                acc = acc + A[i]
            cnt = 0
            for i in T.serial(8):
                if A[i] > 3:
                    cnt = cnt + 1
            B[0] = acc
            B[1] = cnt

    out = tilelang.compile(main, out_idx=[1], target="cpu")(torch.arange(8).float())
    assert out.tolist() == [28.0, 4.0]


def test_a_value_the_scalar_s_first_type_would_cut_is_an_error():
    # acc = 0 made an int32 scalar and acc + A[i] (float32) was truncated at every step
    with pytest.raises(DSLError, match=r"acc is a kernel scalar of type int32 \(its first value "
                                       r"0 gave it that type\); the float32 value"):
        @T.prim_func
        def main(A: T.Tensor((8,), T.float32), B: T.Tensor((1,), T.float32)):
            with T.Kernel(1, threads=1) as bx:
                acc = 0
                for i in T.serial(8):
                    acc = acc + A[i]
                B[0] = acc


def test_eager_body_computes_with_python_values():
    """The deepseek_v32 pattern: sizes derived from compile-time arguments feed Python
    helpers before the tensors are declared."""

    @tilelang.jit(target="cpu")
    def kern(A, heads: int = 12, kv_group: int = 3):
        head_kv = heads // kv_group
        padded_H = max(tilelang.math.next_power_of_2(head_kv), 16)
        assert padded_H % 16 == 0, "padded to a multiple of 16"
        A: T.Tensor((padded_H,), T.float32)
        with T.Kernel(1, threads=1) as bx:
            for i in T.serial(padded_H):
                A[i] = head_kv
        return

    a = torch.zeros(16)
    kern(a)
    assert a.tolist() == [4.0] * 16


def test_generator_expressions_run_as_python():
    sizes = [3, 5, 8]

    @T.prim_func
    def main(A: T.Tensor((2,), T.int32)):
        with T.Kernel(1, threads=1) as bx:
            blocks = sum((s + 3) // 4 for s in sizes)
            A[0] = blocks
            A[1] = max(s * 2 for s in sizes)

    assert tilelang.compile(main, out_idx=[0], target="cpu")().tolist() == [5, 16]


def test_assert_on_a_python_condition_is_checked_while_parsing():
    def make(n):
        @T.prim_func
        def main(A: T.Tensor((4,), T.float32)):
            assert n % 2 == 0, f"n must be even, got {n}"
            with T.Kernel(1, threads=1) as bx:
                A[0] = n
        return main

    assert "T.Assert" not in make(4).script()
    with pytest.raises(DSLError, match="n must be even, got 3"):
        make(3)


def test_and_or_not_and_conditional_expressions_on_kernel_values():
    @T.prim_func
    def main(A: T.Tensor((16,), T.int32)):
        with T.Kernel(1, threads=1) as bx:
            for i in T.serial(16):
                A[i] = 0
                if (i > 2 and i < 10) or not (i != 12):
                    A[i] = 1
                A[i] = A[i] + (10 if i % 4 == 0 and True else 0)

    out = tilelang.compile(main, out_idx=[0], target="cpu")().tolist()
    want = [(1 if (2 < i < 10 or i == 12) else 0) + (10 if i % 4 == 0 else 0)
            for i in range(16)]
    assert out == want


def test_one_dimensional_kernel_unpacks_as_a_one_element_tuple():
    @T.prim_func
    def main(A: T.Tensor((8,), T.float32)):
        with T.Kernel(2, threads=8) as (bx,):
            for i in T.Parallel(8):
                if bx == 1:
                    A[i] = A[i] + 1

    kernel = tilelang.compile(main, target="cpu")
    a = torch.zeros(8)
    kernel(a)
    torch.testing.assert_close(a, torch.ones(8))


@pytest.mark.parametrize("use_max", [False, True])
def test_a_function_assigned_in_a_body_stays_that_function(use_max):
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=1):
            S = T.alloc_shared((8,), "float32")
            T.copy(A, S)
            scan = T.cummax if use_max else T.cumsum
            scan(S, dim=0)
            T.copy(S, B)

    a = torch.tensor([3.0, -1.0, 4.0, 1.0, -5.0, 9.0, 2.0, 6.0])
    b = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, torch.cummax(a, 0).values if use_max else torch.cumsum(a, 0))


dtype = "int8"  # a module global that a kernel factory's argument of the same name shadows
rows = 2


def _factory(dtype, rows):
    # `dtype` and `rows` appear only in the parameter annotations: not in the kernel's closure
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((rows, 4), dtype)):
        with T.Kernel(1, threads=1):
            for i in T.serial(4):
                B[0, i] = A[i]

    return main


def test_annotation_names_take_the_factorys_values_not_same_named_globals():
    f = _factory("float32", 1)
    out = tilelang.compile(f, out_idx=[1], target="cpu")(torch.tensor([1.5, 2.5, -3.7, 100.0]))
    assert out.dtype == torch.float32 and tuple(out.shape) == (1, 4)
    torch.testing.assert_close(out[0], torch.tensor([1.5, 2.5, -3.7, 100.0]))


def _remainders(dtype, target):
    @T.prim_func
    def main(A: T.Tensor((8,), dtype), B: T.Tensor((8,), dtype), O: T.Tensor((3, 8), dtype)):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                O[0, i] = A[i] % B[i]
                O[1, i] = A[i] % -2.5
                O[2, i] = 7 % B[i]

    device = "cuda" if target == "cuda" else "cpu"
    a, b = (torch.tensor(v, dtype=getattr(torch, dtype), device=device)
            for v in ([-1.0, 1.0, 5.5, -6.0, 0.0, 7.0, 100.25, -3.0],
                      [3.0, -3.0, 2.0, 3.0, 3.0, -7.0, 0.75, -4.0]))
    out = tilelang.compile(main, out_idx=[2], target=target)(a, b).cpu()
    a, b = a.tolist(), b.tolist()
    want = [[x % y for x, y in zip(a, b)], [x % -2.5 for x in a], [7 % y for y in b]]
    assert out.tolist() == want  # (a zero remainder keeps the dividend's sign, as fmod)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_remainder_takes_the_divisor_sign_as_in_python(dtype):
    # TVM's `%` takes integers only; a float one failed an internal check
    _remainders(dtype, "cpu")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_remainder_and_fmod_compile_for_cuda(dtype):
    # TVM writes a half-precision fmod as hfmod, which CUDA's headers lack (nvcc failed)
    @T.prim_func
    def main(A: T.Tensor((128,), dtype), B: T.Tensor((128,), dtype), O: T.Tensor((128,), dtype)):
        with T.Kernel(1, threads=128):
            for i in T.Parallel(128):
                O[i] = A[i] % B[i] + T.fmod(A[i], B[i])

    k = tilelang.compile(main, target="cuda -arch=sm_90a")
    assert "hfmod" in k.get_kernel_source() and ".target sm_90a" in k.get_ptx()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_float_remainder_on_the_gpu_is_python_s_too(dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    _remainders(dtype, "cuda")


def test_a_remainder_of_mixed_float_types_computes_in_the_wider():
    @T.prim_func
    def main(A: T.Tensor((2,), "float16"), B: T.Tensor((2,), "float32"),
             O: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(2):
                O[i] = A[i] % B[i]

    a, b = torch.tensor([3.0, -3.0], dtype=torch.float16), torch.tensor([0.1, 0.1])
    out = tilelang.compile(main, out_idx=[2], target="cpu")(a, b)
    assert out.tolist() == torch.remainder(a.float(), b).tolist()


def test_an_integer_remainder_by_a_float_is_a_float_as_in_python():
    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), O: T.Tensor((2, 8), "float32")):
        with T.Kernel(1, threads=1):
            for i in T.serial(8):
                O[0, i] = A[i] % 2.5
                O[1, i] = 7.5 % A[i]

    a = torch.tensor([-3, -1, 1, 2, 3, 5, 7, 9], dtype=torch.int32)
    out = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    assert out.tolist() == [[x % 2.5 for x in a.tolist()], [7.5 % x for x in a.tolist()]]
