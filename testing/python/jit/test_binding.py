"""How a @tilelang.jit call becomes its kernel's key: one key for every call form of the same
values, Python's binding errors, hashable values, and the caches of both JIT styles."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.jit.binding import CallBinding, key_value

CALLS = []


@tilelang.jit(target="cpu")
def fill(n: int, value: float = 1.0, block: int = 8, shape=(4,)):
    CALLS.append((n, value, block, shape))

    @T.prim_func
    def main(A: T.Tensor((n,), T.float32)):
        with T.Kernel(T.ceildiv(n, block), threads=1) as bx:
            for i in T.serial(block):
                if bx * block + i < n:
                    A[bx * block + i] = value

    return main


def test_every_call_form_of_the_same_values_has_one_key():
    keys = {fill.func.parse_args(16)[0], fill.func.parse_args(16, 1.0)[0],
            fill.func.parse_args(n=16, block=8)[0],
            fill.func.parse_args(block=8, value=1.0, n=16, shape=[4])[0]}
    assert keys == {((16, 1.0, 8, (4,)), None)}
    assert fill.func.parse_args(16, 2.0)[0] != fill.func.parse_args(16)[0]


def test_binding_errors_are_pythons():
    with pytest.raises(TypeError, match="multiple values"):
        fill.func.parse_args(16, n=16)
    with pytest.raises(TypeError, match="missing a required argument"):
        fill.func.parse_args(value=3.0)


def test_keywords_the_function_does_not_take_are_keyed_by_name():
    key, tensors = fill.func.parse_args(16, K=3, J=[1])
    assert key == ((16, 1.0, 8, (4,), (("J", (1,)), ("K", 3))), None)
    assert tensors == {}


def test_var_keywords_are_flattened_into_the_compile_values():
    def factory(M: int, *, tile: int = 4, **options):
        return None

    binding = CallBinding(factory)
    key, tensors, values = binding._parse_phase1_key(8, b=[1, 2], a={"x": [3]})
    assert values == {"M": 8, "tile": 4, "b": [1, 2], "a": {"x": [3]}}
    assert tensors == {}
    hash(key)
    assert key == binding._parse_phase1_key(8, a={"x": (3,)}, b=(1, 2))[0]
    assert key != binding._parse_phase1_key(8, b=[1, 2])[0]


def test_key_values_are_hashable_or_refused():
    assert key_value({"b": [1], "a": 2}) == key_value({"a": 2, "b": (1,)})
    assert key_value({3, 4}) == frozenset({3, 4})
    assert key_value(T.float16) == "float16"

    class Config:
        __hash__ = None

    with pytest.raises(TypeError, match="unhashable JIT compile-time cache key value"):
        key_value([Config()])


def test_mode_names_are_checked():
    assert fill.mode == "lazy" and fill.func.mode == "lazy"
    fill.func.set_mode("auto")
    fill.func.set_mode("lazy")
    with pytest.raises(ValueError, match="unknown JIT mode 'fast'"):
        fill.func.set_mode("fast")


def test_lazy_calls_of_the_same_values_compile_once():
    fill.clear_cache()
    CALLS.clear()
    first = fill(12, block=4)
    assert fill(n=12, value=1.0, block=4) is first
    assert fill(12, 1.0, 4, (4,)) is first
    assert len(CALLS) == 1
    A = torch.zeros(12)
    first(A)
    assert torch.equal(A, torch.ones(12))
    assert len(fill._call_form_cache) == 3 and len(fill._kernel_cache) == 1


def test_lazy_call_with_unhashable_arguments_is_refused():
    with pytest.raises(TypeError, match="unhashable argument in \\(12, shape=\\[4\\]\\)"):
        fill(12, shape=[4])


@tilelang.jit
def scaled(A, B, alpha: float = 2.0):
    N = T.const("N")
    A: T.Tensor((N,), T.float32)
    B: T.Tensor((N,), T.float32)
    with T.Kernel(1, threads=1):
        for i in T.serial(N):
            B[i] = A[i] * alpha


def test_eager_keys_leave_tensors_out_of_the_compile_values():
    a, b = torch.ones(5), torch.zeros(5)
    p1_key, tensors, values = scaled.func._parse_phase1_key(a, b, alpha=3.0)
    assert p1_key == (3.0,)
    assert tensors == {"A": a, "B": b}
    assert values == {"alpha": 3.0}
    key, tensors = scaled.func.parse_args(a, b)
    assert key[0] == (2.0,) and key[1] == (("A", ((5,), (1,), torch.float32, "cpu")),
                                          ("B", ((5,), (1,), torch.float32, "cpu")))
    assert scaled.mode == "eager"


def test_eager_calls_reuse_the_kernel_across_call_forms():
    scaled.clear_cache()
    a, b = torch.arange(5.0), torch.zeros(5)
    scaled(a, b, alpha=3.0)
    assert torch.equal(b, 3 * a)
    scaled(a, b, 3.0)
    scaled(A=a, B=b, alpha=3.0)
    assert len(scaled._kernel_cache) == 1
