"""Negative indices count from the end of their dimension (``LegalizeNegativeIndex``): scalar
indices proven negative, and vector lanes proven negative or of unknown sign, in loads and
stores; the CPU runs them, CUDA accesses such a vector lane by lane."""

import re

import pytest
import torch
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.transform import LegalizeNegativeIndex

SM90 = "cuda -arch=sm_90a"


def _legalized(func) -> tirx.Stmt:
    return LegalizeNegativeIndex()(tvm.IRModule({"main": func}))["main"].body


def _indices(body) -> list:
    """(kind, buffer name, indices as text) of every access, in order."""
    out = []

    def on_load(x):
        out.append(("load", x.source.name, [str(i) for i in x.indices]))

    def on_store(s):
        out.append(("store", s.buffer.name, [str(i) for i in s.indices]))

    import tvm_ffi
    tvm_ffi.structural_walk(body, [(tvm.ir.TensorLoad, on_load), (tirx.BufferStore, on_store)])
    return out


def test_constant_and_affine_negative_indices_wrap():
    @T.prim_func
    def f(A: T.Buffer((16,), "float32"), B: T.Buffer((4,), "float32")):
        B[0] = A[-1]
        for i in T.serial(4):
            B[i] = A[-i - 1]
            A[-16 + i] = B[i]

    acc = _indices(_legalized(f))
    assert ("load", "A", ["15"]) in acc
    assert ("load", "A", ["15 - i"]) in acc
    assert ("store", "A", ["i"]) in acc


def test_unknown_sign_scalar_index_is_left_alone():
    @T.prim_func
    def f(shift: T.int32, A: T.Buffer((16,), "float32"), B: T.Buffer((16,), "float32")):
        for i in T.serial(16):
            B[i] = A[shift + i]

    assert _legalized(f).same_as(f.body)


def test_vector_lanes_are_legalized_one_by_one():
    @T.prim_func
    def f(A: T.Buffer((1024,), "float32"), B: T.Buffer((4, 4), "float32")):
        for t in T.serial(4):
            B[t, T.Ramp(0, 1, 4)] = A[T.Ramp(t - 2, 1, 4)]
        B[0, T.Ramp(0, 1, 4)] = A[T.Ramp(-2, 1, 4)]
        B[1, T.Ramp(0, 1, 4)] = A[T.Ramp(4, 1, 4)]

    acc = _indices(_legalized(f))
    loads = [a for a in acc if a[0] == "load"]
    # t - 2 and t - 1 may be negative: chosen at run time; t and t + 1 are not
    assert re.search(r"Select\(t - 2 < 0, t \+ 1022, t - 2\).*Select\(t - 1 < 0, t \+ 1023, "
                     r"t - 1\), t, t \+ 1\]", loads[0][2][0]), loads[0]
    assert "[1022, 1023, 0, 1]" in loads[1][2][0], loads[1]
    assert loads[2][2] == ["T.Ramp(4, 1, 4)"]  # proven non-negative: still one run
    # the stores to B were proven non-negative and keep their ramps
    assert all("Ramp(0, 1, 4)" in a[2][1] for a in acc if a[0] == "store")


def wrapped_load():
    @T.prim_func
    def main(A: T.Tensor((1024,), T.float32), B: T.Tensor((4, 4), T.float32)):
        with T.Kernel(1, threads=1) as _:
            for t in T.serial(4):
                B[t, T.Ramp(0, 1, 4)] = A[T.Ramp(t - 2, 1, 4)]

    return main


def wrapped_store():
    @T.prim_func
    def main(B: T.Tensor((4, 4), T.float32), A: T.Tensor((1024,), T.float32)):
        with T.Kernel(1, threads=1) as _:
            for i in T.serial(1024):
                A[i] = T.float32(-1)
            for t in T.serial(4):
                A[T.Ramp(t - 2, 1, 4)] = B[t, T.Ramp(0, 1, 4)]

    return main


def _expected_load(device):
    a = torch.arange(1024, dtype=torch.float32, device=device)
    return torch.stack([a[torch.arange(t - 2, t + 2, device=device) % 1024] for t in range(4)])


def _expected_store(b):
    a = torch.full((1024,), -1.0, device=b.device)
    for t in range(4):
        for k in range(4):
            a[(t - 2 + k) % 1024] = b[t, k]
    return a


def test_runtime_negative_vector_load_cpu():
    k = tilelang.compile(wrapped_load(), out_idx=[1], target="cpu")
    torch.testing.assert_close(k(torch.arange(1024, dtype=torch.float32)), _expected_load("cpu"))


def test_runtime_negative_vector_store_cpu():
    k = tilelang.compile(wrapped_store(), out_idx=[1], target="cpu")
    b = torch.arange(16, dtype=torch.float32).reshape(4, 4)
    torch.testing.assert_close(k(b), _expected_store(b))


def test_constant_negative_index_cpu():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((2,), "float32")):
        with T.Kernel(1, threads=1) as _:
            B[0] = A[-1]
            B[1] = A[-8]

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.arange(8, dtype=torch.float32)
    torch.testing.assert_close(k(a), torch.tensor([7.0, 0.0]))


@pytest.mark.parametrize("make", [wrapped_load, wrapped_store])
def test_runtime_negative_vector_access_is_per_lane_on_sm90(make):
    src = tilelang.compile(make(), out_idx=[1], target=SM90).get_kernel_source()
    src = src[src.index('extern "C"'):]
    # A is never accessed as one float4 (its offset t - 2 is neither aligned nor in order)
    assert not re.search(r"\(float4\*\)\(A_ptr", src), src
    assert "1022" in src and "1023" in src, src


@pytest.mark.gpu
def test_runtime_negative_vector_access_gpu():
    k = tilelang.compile(wrapped_load(), out_idx=[1], target="cuda")
    a = torch.arange(1024, dtype=torch.float32, device="cuda")
    torch.testing.assert_close(k(a), _expected_load("cuda"))
    k = tilelang.compile(wrapped_store(), out_idx=[1], target="cuda")
    b = torch.arange(16, dtype=torch.float32, device="cuda").reshape(4, 4)
    torch.testing.assert_close(k(b), _expected_store(b))


def _tile_regions(which: str):
    """A tile operator given a region that counts from the end (``A`` has 8 elements)."""

    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=32) as _:
            F = T.alloc_fragment((4,), "float32")
            if which == "element":
                T.copy(A[-4], F)
            elif which == "open slice":
                T.copy(A[-4:], F)
            elif which == "negative stop":
                T.copy(A[-5:-1], F)
            else:
                T.copy(A[-4:8], F)
            T.copy(F, B[-4])

    return main


@pytest.mark.parametrize("which, first", [("element", 4), ("open slice", 4),
                                          ("negative stop", 3), ("stop 8", 4)])
def test_tile_operator_regions_count_from_the_end(which, first):
    # T.copy(A[-4], F) is the region of F's shape starting at A[-4], A[-4:] the last four
    # elements as in Python; the store into B[-4] fills B[4:8]
    k = tilelang.compile(_tile_regions(which), target="cpu")
    a, b = torch.arange(8, dtype=torch.float32), torch.full((8,), -1.0)
    k(a, b)
    torch.testing.assert_close(b, torch.cat([torch.full((4,), -1.0), a[first:first + 4]]))


def test_an_open_slice_of_a_dynamic_size_counts_from_the_end():
    # A[-4:] of an (n,) tensor was refused: n >= 0 was not known, so the slice stayed (n + 4,)
    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32"), O: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=4) as _:
            T.copy(A[-4:], O)

    a = torch.arange(10.0)
    assert torch.equal(tilelang.compile(main, out_idx=[1], target="cpu")(a), a[-4:])


def test_an_empty_slice_from_the_end_is_refused():
    from tilelang.errors import DSLError

    with pytest.raises(DSLError, match=r"T.copy: source .* is empty in dimension 0"):
        @T.prim_func
        def main(A: T.Tensor((8,), "float32"), B: T.Tensor((4,), "float32")):
            with T.Kernel(1, threads=32) as _:
                F = T.alloc_fragment((4,), "float32")
                T.copy(A[-4:2], F)
                T.copy(F, B)


def test_a_scalar_bound_to_a_negative_index_counts_from_the_end():
    @T.prim_func
    def main(A: T.Tensor((8,), "float32"), B: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=1) as _:
            for i in T.serial(4):
                j = i - 4
                B[i] = A[j]

    k = tilelang.compile(main, out_idx=[1], target="cpu")
    a = torch.arange(8, dtype=torch.float32)
    torch.testing.assert_close(k(a), a[4:])
