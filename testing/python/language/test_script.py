"""The tile program as IR: tile ops are registered tl.* calls that print readably."""

import pytest
import tvm
import tvm_ffi

import tilelang
import tilelang.language as T
from tilelang.ops import TILE_OPS, decode
from programs import matmul as _matmul


def matmul():
    return _matmul(256, 256, 256, 128, 128, 32)


def test_script_shows_tile_structure():
    text = matmul().script()
    assert "T.copy(A[by * 128:by * 128 + 128, k * 32:k * 32 + 32], A_s" in text
    assert "T.gemm(A_s[0:128, 0:32], B_s[0:32, 0:128], C_f[0:128, 0:128]" in text
    assert '"num_stages": 3' in text
    assert "T.fill(C_f" in text
    assert 'scope="shared.dyn"' in text and 'scope="local.fragment"' in text


def test_tile_ops_are_registered_tl_ops():
    assert {"tl.copy", "tl.gemm", "tl.fill", "tl.reduce", "tl.cumsum", "tl.atomic"} <= set(TILE_OPS)
    for name in TILE_OPS:
        assert tvm.ir.Op.get(name).name == name


def test_calls_decode_to_their_arguments():
    found = []
    tvm_ffi.structural_walk(matmul().body, (tvm.ir.Call, lambda c: found.append(decode(c))))
    ops = [op for op in found if op is not None]
    names = [type(op).__name__ for op in ops]
    assert names == ["Fill", "Copy", "Copy", "Gemm", "Copy"]
    gemm = ops[3]
    assert gemm.mnk() == (128, 128, 32) and not gemm.transpose_B and not gemm.clear_accum


def test_parallel_loops_have_parallel_kind():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i, j in T.Parallel(4, 8):
                A[i, j] = 0.0

    loops = []
    tvm_ffi.structural_walk(main.body, (tvm.tirx.For, loops.append))
    assert [int(x.kind) for x in loops] == [int(tvm.tirx.ForKind.PARALLEL)] * 2


def test_pipelined_keeps_schedule_annotations():
    @T.prim_func
    def main(A: T.Tensor((4, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for k in T.Pipelined(2, 6, num_stages=2, order=[1, 0], stage=[0, 1]):
                A[0, k] = 0.0
                A[1, k] = 1.0

    loop = []
    tvm_ffi.structural_walk(main.body, (tvm.tirx.For, loop.append))
    ann = loop[0].annotations
    assert int(ann["num_stages"]) == 2
    assert [int(x) for x in ann["tl_pipeline_order"]] == [1, 0]
    assert [int(x) for x in ann["tl_pipeline_stage"]] == [0, 1]
    assert int(loop[0].min) == 2 and int(loop[0].extent) == 4


def test_macro_and_alloc_var():
    @T.macro
    def twice(buf, i):
        buf[i] = buf[i] * 2

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((1,), "int32")):
        with T.Kernel(1, threads=32) as bx:
            n = T.alloc_var("int32", init=0)
            for i in T.serial(8):
                twice(A, i)
                n = n + 1
            B[0] = n

    k = tilelang.compile(main, target="cpu")
    import torch

    a, b = torch.ones(8), torch.zeros(1, dtype=torch.int32)
    k(a, b)
    assert torch.all(a == 2) and int(b[0]) == 8


def test_math_builtins_are_reexported():
    for name in ("exp2", "exp", "log", "log2", "sqrt", "rsqrt", "abs", "max", "min",
                 "if_then_else", "cast", "infinity", "max_value", "min_value", "ceildiv",
                 "floordiv", "truncdiv", "Select", "float16", "float32", "serial", "unroll",
                 "vectorized", "macro", "Tensor", "Buffer", "dynamic", "symbolic"):
        assert hasattr(T, name), name


def test_print_on_cpu(capfd):
    @T.prim_func
    def main(A: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=1) as bx:
            T.print(A[1], msg="second:")

    k = tilelang.compile(main, target="cpu")
    import torch

    k(torch.tensor([1.0, 2.5]))
    assert "second: 2.5" in capfd.readouterr().out


def test_alloc_var_initializer_takes_the_variable_dtype():
    """A Python number initializes in the variable's dtype: a float64 keeps 1e300 (and runs on
    the CPU), a float32 refuses it as out of range."""
    import torch

    @T.prim_func
    def wide(A: T.Tensor((1,), "float64")):
        with T.Kernel(1):
            value = T.alloc_var("float64", init=1e300)
            A[0] = value

    a = torch.zeros(1, dtype=torch.float64)
    tilelang.compile(wide, target="cpu")(a)
    assert a.item() == 1e300
    with pytest.raises(ValueError, match="exceeds maximum of float32"):
        @T.prim_func
        def narrow(A: T.Tensor((1,), "float32")):
            with T.Kernel(1):
                value = T.alloc_var("float32", init=1e300)
                A[0] = value
