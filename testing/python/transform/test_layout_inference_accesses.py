"""A free fragment's layout serves every ``T.Parallel`` access to it: a dim indexed by a
serial loop (around the loop or inside its body) is held in registers, so the thread holding
an element never depends on that loop; an index ``j // c`` shares elements between the
threads that read them; a loop that runs past a fragment's end gives it a padded layout."""

import numpy as np
import pytest
import torch
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.layout import codec
from tilelang.layout.fragment import REG, THREAD
from tilelang.transform import LayoutInference

from cuda_helpers import SM80
from helpers import bind

TARGETS = ["cuda -arch=sm_80", "cuda -arch=sm_90a"]


def layouts(func):
    out = {}

    def on_alloc(a):
        if "tl.layout" in a.annotations:
            out[a.buffer.name] = codec.decode(a.annotations["tl.layout"])

    tvm_ffi.structural_walk(LayoutInference()(bind(func, SM80))["main"].body,
                            (tirx.AllocBuffer, on_alloc))
    return out


def thread_digits(lay, dim):
    return [x for x in lay.dims[dim] if x.kind == THREAD and x.extent > 1]


def rows_by_outer_serial(rows=4, cols=256, threads=128):
    """``for i in T.serial(rows): for k in T.Parallel(cols)`` reading a fragment ``src[i, k]``."""

    @T.prim_func
    def main(A: T.Tensor((rows, cols), T.float32), B: T.Tensor((rows, cols), T.float32)):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((rows, cols), T.float32)
            T.copy(A, src)
            for i in T.serial(rows):
                for k in T.Parallel(cols):
                    B[i, k] = src[i, k] * 2.0 + i

    return main


def rows_by_inner_serial(rows=8, cols=16, threads=128):
    """``for i in T.Parallel(rows): for k in T.serial(cols)`` summing ``src[i, k]``."""

    @T.prim_func
    def main(A: T.Tensor((rows, cols), T.float32), B: T.Tensor((rows,), T.float32)):
        with T.Kernel(1, threads=threads):
            src = T.alloc_fragment((rows, cols), T.float32)
            acc = T.alloc_fragment((rows,), T.float32)
            T.copy(A, src)
            for i in T.Parallel(rows):
                acc[i] = 0.0
                for k in T.serial(cols):
                    acc[i] += src[i, k]
            T.copy(acc, B)

    return main


def unpack_nibbles(M=64, K=64, threads=128):
    """Two 4-bit values a byte: ``out[i, j]`` reads ``packed[i, j // 2]``."""

    @T.prim_func
    def main(P: T.Tensor((M, K // 2), T.uint8), O: T.Tensor((M, K), T.float16)):
        with T.Kernel(1, threads=threads):
            ps = T.alloc_shared((M, K // 2), T.uint8)
            packed = T.alloc_fragment((M, K // 2), T.uint8)
            out = T.alloc_fragment((M, K), T.float16)
            T.copy(P, ps)
            T.copy(ps, packed)
            for i, j in T.Parallel(M, K):
                out[i, j] = T.Cast(T.float16, (packed[i, j // 2] >> T.Cast(T.uint8, 4 * (j % 2)))
                                   & T.uint8(15))
            T.copy(out, O)

    return main


def unpack_ref(p: torch.Tensor) -> torch.Tensor:
    lo, hi = p & 15, p >> 4
    return torch.stack([lo, hi], dim=-1).reshape(p.shape[0], -1).to(torch.float16)


def broadcast_past_the_end(M=64, N=64, heads=32, threads=128):
    """A [heads] fragment written and read by loops over M > heads (each thread's copy of
    ``s[i]`` beyond ``heads`` is padding, as in the public attention-sink examples)."""

    @T.prim_func
    def main(S: T.Tensor((heads,), T.float32), X: T.Tensor((M, N), T.float32),
             O: T.Tensor((heads, M), T.float32)):
        with T.Kernel(heads, threads=threads) as (h,):
            x = T.alloc_fragment((M, N), T.float32)
            r = T.alloc_fragment((M,), T.float32)
            s = T.alloc_fragment((heads,), T.float32)
            T.copy(X, x)
            for i in T.Parallel(M):
                s[i] = S[h]
            T.reduce_sum(x, r, dim=1)
            for i in T.Parallel(M):
                r[i] += s[i]
            T.copy(r, O[h, :])

    return main


def test_a_dim_indexed_by_an_enclosing_serial_loop_is_held_in_registers():
    lay = layouts(rows_by_outer_serial())["src"]
    assert thread_digits(lay, 0) == [] and thread_digits(lay, 1)  # the row never decides


def test_a_dim_indexed_by_a_nested_serial_loop_is_held_in_registers():
    lay = layouts(rows_by_inner_serial())["src"]
    assert thread_digits(lay, 1) == [] and thread_digits(lay, 0)


def test_a_window_of_a_serial_loop_keeps_the_threads_inside_it():
    @T.prim_func
    def main(A: T.Tensor((32, 64), T.float32), B: T.Tensor((32, 4), T.float32)):
        with T.Kernel(1, threads=128):
            x = T.alloc_fragment((32, 64), T.float32)
            part = T.alloc_fragment((32, 4), T.float32)
            T.copy(A, x)
            T.clear(part)
            for kk in T.serial(16):
                for i, j in T.Parallel(32, 4):
                    part[i, j] += x[i, kk * 4 + j]
            T.copy(part, B)

    lay = layouts(main)["x"]
    assert lay.window(1, 4) is not None
    tilelang.lower(main, target="cuda -arch=sm_90a", stage="tile")


def test_an_index_divided_by_a_constant_shares_the_element():
    lays = layouts(unpack_nibbles())
    out, packed = lays["out"], lays["packed"]
    th_out, th_p = out.thread_table(), packed.thread_table()
    np.testing.assert_array_equal(th_out[:, ::2], th_p)
    np.testing.assert_array_equal(th_out[:, 1::2], th_p)


def test_a_loop_past_a_fragments_end_pads_its_layout():
    lay = layouts(broadcast_past_the_end())["s"]
    assert lay.shape == [32] and lay.padded_shape[0] >= 64


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("make", [rows_by_outer_serial, rows_by_inner_serial, unpack_nibbles,
                                  broadcast_past_the_end])
def test_lowers_for_cuda(make, target):
    tilelang.lower(make(), target=target, stage="tile")


def test_cpu_results():
    a = torch.randn(4, 256)
    (b,) = [tilelang.compile(rows_by_outer_serial(), out_idx=[1], target="cpu")(a)]
    torch.testing.assert_close(b, a * 2 + torch.arange(4.0)[:, None])
    a = torch.randn(8, 16)
    b = tilelang.compile(rows_by_inner_serial(), out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(b, a.sum(dim=1), rtol=1e-5, atol=1e-5)
    p = torch.randint(0, 256, (64, 32), dtype=torch.uint8)
    o = tilelang.compile(unpack_nibbles(), out_idx=[1], target="cpu")(p)
    torch.testing.assert_close(o, unpack_ref(p))


@pytest.mark.gpu
def test_gpu_results():
    a = torch.randn(4, 256, device="cuda")
    b = tilelang.compile(rows_by_outer_serial(), out_idx=[1], target="cuda")(a)
    torch.testing.assert_close(b, a * 2 + torch.arange(4.0, device="cuda")[:, None])
    a = torch.randn(8, 16, device="cuda")
    b = tilelang.compile(rows_by_inner_serial(), out_idx=[1], target="cuda")(a)
    torch.testing.assert_close(b, a.sum(dim=1), rtol=1e-5, atol=1e-5)
    p = torch.randint(0, 256, (64, 32), dtype=torch.uint8, device="cuda")
    o = tilelang.compile(unpack_nibbles(), out_idx=[1], target="cuda")(p)
    torch.testing.assert_close(o, unpack_ref(p))
    s, x = torch.randn(32, device="cuda"), torch.randn(64, 64, device="cuda")
    k = tilelang.compile(broadcast_past_the_end(), out_idx=[2], target="cuda")
    torch.testing.assert_close(k(s, x), x.sum(dim=1)[None, :] + s[:, None], rtol=1e-4, atol=1e-4)


def test_a_loop_prefers_a_fragment_of_its_own_shape():
    """``a`` (64 elements) is read first, but the loop over 32 takes ``b``'s layout, the one of
    its shape; a fragment that only covers the loop serves when no such one exists."""
    from tilelang.layout.fragment import elementwise

    def kernel(with_b):
        @T.prim_func
        def main(O: T.Tensor((32,), T.float32)):
            with T.Kernel(1, threads=128):
                a = T.alloc_fragment((64,), T.float32)
                b = T.alloc_fragment((32,), T.float32)
                T.annotate_layout({a: elementwise([64], 128), b: elementwise([32], 32)})
                T.fill(a, 1.0)
                T.fill(b, 2.0)
                for i in T.Parallel(32):
                    O[i] = a[i] + (b[i] if with_b else 0.0)

        return main

    def loop_layout(func):
        out = []
        tvm_ffi.structural_walk(LayoutInference()(bind(func, SM80))["main"].body, (
            tirx.For, lambda f: out.append(codec.decode(f.annotations["tl.loop_layout"]))
            if "tl.loop_layout" in f.annotations and f.extent.value == 32 else None))
        return out[-1]

    assert loop_layout(kernel(True)).same_as(elementwise([32], 32))
    assert loop_layout(kernel(False)).same_as(elementwise([64], 128).resized([32]))
    tilelang.lower(kernel(True), target="cuda -arch=sm_90a", stage="tile")
