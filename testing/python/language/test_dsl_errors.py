"""DSL misuse raises DSLError naming the op, the buffers/shapes and the user's source line."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_copy_shape_mismatch_names_op_buffers_and_line():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((32, 16), "float16")
                B_s = T.alloc_shared((16, 32), "float16")
                T.copy(A_s, B_s)  # the offending line

    msg = str(info.value)
    assert "T.copy" in msg and "A_s" in msg and "B_s" in msg
    assert "(32, 16)" in msg and "(16, 32)" in msg
    assert "the offending line" in msg and __file__.split("/")[-1] in msg


def test_copy_unit_dims_are_ignored():
    @T.prim_func
    def main(A: T.Tensor((4, 1, 32), "float16")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((32,), "float16")
            T.copy(A[1, 0, :], S)

    assert "T.copy" in main.script()


def test_gemm_k_mismatch():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((16, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_f)

    msg = str(info.value)
    assert "T.gemm" in msg and "K" in msg and "A_s" in msg and "B_s" in msg
    assert "T.gemm(A_s, B_s, C_f)" in msg


def test_gemm_mn_mismatch():
    with pytest.raises(DSLError, match=r"T\.gemm: C must be \(M, N\)"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_f = T.alloc_fragment((64, 32), "float32")
                T.gemm(A_s, B_s, C_f)


def test_gemm_accumulator_must_be_fragment():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "float16")
                C_s = T.alloc_shared((64, 64), "float32")
                T.gemm(A_s, B_s, C_s)

    msg = str(info.value)
    assert "T.gemm" in msg and "C_s" in msg and "fragment" in msg


def test_reduce_missing_dim():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                y = T.alloc_fragment((16,), "float32")
                T.reduce_max(x, y, dim=2)

    msg = str(info.value)
    assert "T.reduce_max" in msg and "dim=2" in msg and "x" in msg and "(16, 32)" in msg


def test_reduce_wrong_destination_shape():
    with pytest.raises(DSLError, match=r"T\.reduce_sum.*dim 0.*destination y"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_fragment((16, 32), "float32")
                y = T.alloc_fragment((16,), "float32")
                T.reduce_sum(x, y, dim=0)


def test_unknown_dtype_in_allocation():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                x = T.alloc_shared((16,), "float17")

    msg = str(info.value)
    assert "T.alloc_shared" in msg and "float17" in msg and "T.alloc_shared((16,)" in msg


def test_unknown_dtype_in_tensor_annotation():
    with pytest.raises(DSLError, match="T.Tensor.*unknown dtype 'floatx'"):

        @T.prim_func
        def main(A: T.Tensor((64,), "floatx")):
            with T.Kernel(1, threads=128) as bx:
                T.evaluate(0)



def test_kernel_grid_arity():
    with pytest.raises(DSLError, match="T.Kernel takes at most 3 grid dimensions"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, 1, 1, 1, threads=128) as (a, b, c, d):
                T.evaluate(0)


def test_thread_binding_outside_kernel():
    with pytest.raises(DSLError, match="T.get_thread_binding is only valid inside a T.Kernel"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            tx = T.get_thread_binding()


def test_gemm_operand_dtypes_must_match():
    with pytest.raises(DSLError, match=r"T\.gemm: A = A_s is float16 but B = B_s is bfloat16"):

        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16")):
            with T.Kernel(1, threads=128) as bx:
                A_s = T.alloc_shared((64, 32), "float16")
                B_s = T.alloc_shared((32, 64), "bfloat16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, B_s, C_f)


# --- misuse of launch sizes, allocation sizes, constant indices and values -------------------

from tilelang.errors import DSLTypeError, LoweringError  # noqa: E402

_FILE = __file__.split("/")[-1]


def _assert_names(err, op, line):
    msg = str(err)
    assert op in msg, msg
    assert line in msg and _FILE in msg, msg


@pytest.mark.parametrize("grid", [0, -2])
def test_kernel_grid_must_be_positive(grid):
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(grid, threads=128) as bx:  # <- bad grid
                A[0] = 1.0

    assert isinstance(info.value, ValueError) and not isinstance(info.value, TypeError)
    _assert_names(info.value, "T.Kernel", "<- bad grid")
    assert f"got {grid}" in str(info.value)


@pytest.mark.parametrize("grid, threads, what", [
    (1, 1.5, "threads"),
    (1, (32, "4"), "threads[1]"),
    (1, True, "threads"),
    (2.0, 128, "grid dimension 0"),
    ("a", 128, "grid dimension 0"),
])
def test_kernel_sizes_must_be_integers(grid, threads, what):
    with pytest.raises(DSLTypeError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(grid, threads=threads) as bx:  # <- bad launch
                A[0] = 1.0

    assert isinstance(info.value, TypeError) and isinstance(info.value, DSLError)
    _assert_names(info.value, "T.Kernel", "<- bad launch")
    assert f"{what} must be an integer" in str(info.value)


def test_kernel_float_expression_grid_is_a_type_error():
    with pytest.raises(DSLTypeError, match="T.Kernel: grid dimension 1 must be an integer"):

        @T.prim_func
        def main(A: T.Tensor((64,), "float32"), f: T.float32):
            with T.Kernel(1, f, threads=128) as (bx, by):
                A[0] = 1.0


def test_symbolic_sizes_are_accepted():
    @T.prim_func
    def main(A: T.Tensor((64,), "float16"), n: T.int32):
        with T.Kernel(n, T.ceildiv(n, 2), threads=(32, 4)) as (bx, by):
            S = T.alloc_shared((n, 2), "float16")
            A[63] = S[n - 1, 1]

    assert "shared" in main.script()


@pytest.mark.parametrize("scope", ["shared", "fragment", "local", "global"])
@pytest.mark.parametrize("size", [0, -3])
def test_allocation_sizes_must_be_positive(scope, size):
    alloc = getattr(T, "alloc_" + scope)
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                S = alloc((4, size), "float32")  # <- bad allocation
                A[0] = 1.0

    assert isinstance(info.value, ValueError)
    _assert_names(info.value, f"T.alloc_{scope}", "<- bad allocation")
    assert f"dimension 1 of shape (4, {size}) must be positive" in str(info.value)


def test_allocation_size_must_be_an_integer():
    with pytest.raises(DSLTypeError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                S = T.alloc_fragment((16, 2.5), "float32")  # <- float size
                A[0] = 1.0

    _assert_names(info.value, "T.alloc_fragment", "<- float size")


@pytest.mark.parametrize("index", [64, -65])  # -1 is legal: the last element
def test_constant_store_outside_a_tensor(index):
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((4, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                for i in T.serial(4):
                    A[i, index] = 1.0  # <- bad store

    _assert_names(info.value, "store to A[i, " + str(index) + "]", "<- bad store")
    assert f"index {index} is out of bounds for dimension 1 of A with shape (4, 64)" \
        in str(info.value)


@pytest.mark.parametrize("scope", ["shared", "fragment", "local", "global"])
def test_constant_store_outside_an_allocation(scope):
    alloc = getattr(T, "alloc_" + scope)
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((4, 64), "float32")):
            with T.Kernel(1, threads=128) as bx:
                S = alloc((4, 8), "float32")
                for i in T.serial(4):
                    S[i, 8] = 1.0  # <- bad store
                A[0, 0] = S[0, 0]

    _assert_names(info.value, "store to S[i, 8]", "<- bad store")
    assert "dimension 1 of S with shape (4, 8) (valid: -8 to 7)" in str(info.value)


@pytest.mark.parametrize("scope", ["tensor", "shared", "fragment", "local"])
def test_constant_load_outside_a_buffer(scope):
    alloc = getattr(T, "alloc_" + scope, None)
    with pytest.raises(DSLError) as info:
        if alloc is None:
            @T.prim_func
            def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    B[0] = A[1] + A[100]  # <- bad load
        else:
            @T.prim_func
            def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
                with T.Kernel(1, threads=128) as bx:
                    S = alloc((16,), "float32")
                    T.copy(A[0:16], S)
                    B[0] = S[1] + S[16]  # <- bad load

    name, n = ("A", 100) if alloc is None else ("S", 16)
    _assert_names(info.value, f"load of {name}[{n}]", "<- bad load")


def test_constant_indices_inside_the_buffer_are_accepted():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_local((8,), "float32")
            S[7] = A[3, 63]
            A[0, 0] = S[7]

    assert "S[7]" in main.script()


def test_fill_value_must_be_a_number():
    with pytest.raises(DSLTypeError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=128) as bx:
                T.fill(A, "x")  # <- bad fill

    assert isinstance(info.value, TypeError)
    _assert_names(info.value, "T.fill", "<- bad fill")
    assert "'x' (str)" in str(info.value)


def test_fill_value_must_fit_the_dtype():
    with pytest.raises(DSLError) as info:

        @T.prim_func
        def main(A: T.Tensor((64,), "int8")):
            with T.Kernel(1, threads=128) as bx:
                T.fill(A, 1000)  # <- too large

    assert not isinstance(info.value, TypeError)
    _assert_names(info.value, "T.fill", "<- too large")
    assert "does not fit A's dtype int8" in str(info.value)


def test_exception_types_derive_from_the_builtin_ones():
    import tilelang.errors as E

    assert issubclass(E.DSLError, ValueError)
    assert issubclass(E.DSLTypeError, E.DSLError) and issubclass(E.DSLTypeError, TypeError)
    assert issubclass(E.LoweringError, RuntimeError) and issubclass(E.CompileError, RuntimeError)
    assert issubclass(E.KernelArgumentTypeError, E.KernelArgumentError)
    assert issubclass(E.KernelArgumentTypeError, TypeError)


@pytest.mark.parametrize("jump", ["break", "continue"])
def test_a_jump_out_of_a_parallel_loop_is_refused_with_its_line(jump):
    with pytest.raises(DSLError, match=rf"T.Parallel: `{jump}` cannot leave a T.Parallel loop"
                       r"(.|\n)*the jump"):

        @T.prim_func
        def main(A: T.Tensor((16,), "float32"), B: T.Tensor((16,), "float32")):
            with T.Kernel(1, threads=16):
                for i, j in T.Parallel(4, 4):
                    if A[i * 4 + j] < 0:
                        if jump == "break":
                            break  # the jump
                        else:
                            continue  # the jump
                    B[i * 4 + j] = A[i * 4 + j]


def test_a_jump_of_a_loop_inside_a_parallel_loop_is_fine():
    @T.prim_func
    def main(A: T.Tensor((16,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                B[i] = 0.0
                for k in T.serial(4):
                    if A[i * 4 + k] < 0:
                        break
                    B[i] = B[i] + A[i * 4 + k]


def test_a_float_function_of_an_integer_names_the_function_and_line():
    # TVM built an integer exp that no backend lowers ("TVM failed an internal check")
    from tilelang.errors import DSLTypeError

    with pytest.raises(DSLTypeError, match=r"T.exp only supports floating-point inputs, but got "
                       r"int32(.|\n)*the call"):
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = T.exp(A[i])  # the call


def test_a_cast_to_a_dtype_that_does_not_exist_names_t_cast_and_the_line():
    with pytest.raises(DSLError, match=r"T.cast: unknown dtype 'float17'(.|\n)*the cast"):
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = T.cast(T.cast(A[i], "float17"), "int32")  # the cast


@pytest.mark.parametrize("init, message", [(300, r"T.alloc_var: init 300 does not fit int8 "
                                                  r"\(-128 to 127\)"),
                                           ("x", r"T.alloc_var: init must be a number or a "
                                                 r"kernel expression, got str 'x'")])
def test_a_bad_alloc_var_init_names_the_op(init, message):
    with pytest.raises(DSLError, match=message):
        @T.prim_func
        def main(B: T.Tensor((1,), "int8")):
            with T.Kernel(1, threads=1):
                v = T.alloc_var("int8", init=init)
                B[0] = v


def test_a_reinterpret_between_widths_names_both_types_and_the_line():
    # TVM's own check only quoted its C++ condition
    from tilelang.errors import DSLTypeError

    with pytest.raises(DSLTypeError, match=r"T.reinterpret\(float32 value, int16\).*32 bits and "
                       r"int16 16(.|\n)*the bits"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "int16")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = T.reinterpret(A[i], "int16")  # the bits


def test_a_reinterpret_of_a_bool_is_refused():
    # LLVM failed on the i8 -> i1 bit cast
    from tilelang.errors import DSLTypeError

    with pytest.raises(DSLTypeError, match=r"a bool has no bit pattern"):
        @T.prim_func
        def main(A: T.Tensor((4,), "uint8"), B: T.Tensor((4,), "bool")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = T.reinterpret(A[i], "bool")


@pytest.mark.parametrize("amount, message", [(32, r"`<< 32`: int32 values shift by 0 to "
                                                     r"31 bits"),
                                              (-1, r"`<< -1`: int32 values"),
                                              (2.0, r"`<<` needs integer operands")])
def test_a_shift_no_type_can_do_names_the_operator_and_line(amount, message):
    with pytest.raises(DSLError, match=message + r"(.|\n)*the shift"):
        @T.prim_func
        def main(A: T.Tensor((4,), "int32"), B: T.Tensor((4,), "int32")):
            with T.Kernel(1, threads=1):
                for i in T.serial(4):
                    B[i] = A[i] << amount  # the shift


def test_a_shift_by_a_wider_constant_promotes_the_value():
    @T.prim_func
    def main(A: T.Tensor((2,), "int32"), B: T.Tensor((2,), "int64")):
        with T.Kernel(1, threads=1):
            for i in T.serial(2):
                B[i] = A[i] << T.int64(40)

    a = torch.tensor([1, -3], dtype=torch.int32)
    out = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    assert out.tolist() == [1 << 40, -3 << 40]


@pytest.mark.parametrize("loop", [lambda: T.serial(2.5), lambda: T.Parallel(4, 4.7),
                                  lambda: T.unroll(0, 3.0), lambda: T.Pipelined(2.5)])
def test_a_float_loop_bound_is_an_error(loop):
    # T.serial(2.5) ran 2 iterations, T.Parallel(4.7) 4
    with pytest.raises(DSLError, match=r"T\.\w+: [\d.]+ is not an integer"):
        loop()


@pytest.mark.parametrize("shape, bad", [((4.5,), "4.5"), ((8, -4), "-4")])
def test_a_tensor_size_that_is_not_a_count_is_an_error(shape, bad):
    with pytest.raises(DSLError, match=rf"T.Tensor: dimension \d is {bad}; sizes are integers"):
        T.Tensor(shape, "float32")


def test_a_float_index_names_the_access_and_the_line():
    # it reached LLVM and came back as "TVM failed an internal check ... a tilelang bug"
    with pytest.raises(DSLError, match=r"A\[Idx\[i\]\]: index Idx\[i\] is float32; indices are "
                                       r"integers(.|\n)*test_dsl_errors.py"):
        @T.prim_func
        def gather(Idx: T.Tensor((4,), "float32"), A: T.Tensor((8,), "float32"),
                   O: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                for i in T.Parallel(4):
                    O[i] = A[Idx[i]]


def test_nested_kernels_are_an_error():
    with pytest.raises(DSLError, match="T.Kernel inside a T.Kernel: kernels do not nest"):
        @T.prim_func
        def main(A: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=4):
                with T.Kernel(2, threads=4):
                    for i in T.Parallel(4):
                        A[i] = 1.0


@pytest.mark.parametrize("out_idx", ["1", True, [0, 1.0]])
def test_out_idx_must_be_parameter_positions(out_idx):
    @T.prim_func
    def main(A: T.Tensor((4,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=4):
            for i in T.Parallel(4):
                B[i] = A[i]

    with pytest.raises(TypeError, match="out_idx: .* give parameter positions"):
        tilelang.compile(main, out_idx=out_idx, target="cpu")
