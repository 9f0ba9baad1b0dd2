"""A layout given to a shared tile with ``T.annotate_layout`` must store every element in its own
slot: a many-to-one map is a ``ValueError`` naming the buffer and two clashing elements; an
injective map (also one whose stored positions spread past the tile) compiles and runs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError
from tilelang.layout import Layout

N = 128


def roundtrip(fwd, shape=(N,)):
    @T.prim_func
    def main(A: T.Tensor(shape, "int32"), Out: T.Tensor(shape, "int32")):
        with T.Kernel(1, threads=128):
            tile = T.alloc_shared(shape, "int32")
            T.annotate_layout({tile: Layout(shape, fwd)})
            T.copy(A, tile)
            T.copy(tile, Out)

    return main


@pytest.mark.parametrize("fwd, a, b, slot", [
    (lambda i: i % 64, (0,), (64,), (0,)),
    (lambda i: i // 2, (0,), (1,), (0,)),
    (lambda i: (i % 32) * 8, (0,), (32,), (0,)),  # spread past the tile, still 4-to-1
])
def test_many_to_one_shared_layout_is_rejected(fwd, a, b, slot):
    with pytest.raises(ValueError) as info:
        roundtrip(fwd)
    msg = str(info.value)
    assert isinstance(info.value, DSLError)  # with the user's line
    assert "shared buffer `tile`" in msg and "must be injective" in msg, msg
    assert f"elements {a} and {b} both map to physical coordinates {slot}" in msg, msg


def test_two_dim_clash_names_both_elements():
    with pytest.raises(ValueError, match=r"elements \(0, 1\) and \(1, 0\) both map to physical "
                                         r"coordinates \(1,\)"):
        roundtrip(lambda i, j: i + j, shape=(16, 8))


def test_layout_collision_and_extent():
    assert Layout((N,), lambda i: i ^ 1).collision() is None
    assert Layout((N,), lambda i: i ^ 1).output_shape == [N]
    assert Layout((N,), lambda i: i + 10).output_shape == [N + 10]
    assert Layout((N,), lambda i: i * 0).collision()[3] == N - 1


@pytest.mark.parametrize("fwd", [lambda i: i, lambda i: i ^ 1, lambda i: i * 2,
                                 lambda i: i + 10])
@pytest.mark.parametrize("target", ["cpu", "cuda -arch=sm_90a"])
def test_injective_shared_layouts_compile(fwd, target):
    k = tilelang.compile(roundtrip(fwd), out_idx=[1], target=target)
    if target == "cpu":
        a = torch.arange(N, dtype=torch.int32)
        torch.testing.assert_close(k(a), a)


@pytest.mark.gpu
@pytest.mark.parametrize("fwd", [lambda i: i ^ 1, lambda i: i + 10])
def test_injective_shared_layouts_gpu(fwd):
    k = tilelang.compile(roundtrip(fwd), out_idx=[1], target="cuda")
    a = torch.arange(N, dtype=torch.int32, device="cuda")
    torch.testing.assert_close(k(a), a)
