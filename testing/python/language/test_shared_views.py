"""T.view / T.reshape of a shared tile: the view is the tile's bytes.  Its layout is the tile's
carried over byte for byte (tilelang.language.view.shared_view_layout), a layout given to
either fixes the other, the planner gives the view the tile's offset and keeps the tile live
while either name is used, and InjectThreadSync orders writes through one name before reads
through the other."""

import re

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.language.view import _row_major_offsets, shared_view_layout
from tilelang.layout.layout import Layout
from tilelang.layout.swizzle import (SwizzledLayout, make_gmma_swizzled_layout,
                                     make_swizzled_layout)
from tilelang.transform import plan_shared_memory as psm

SM80 = "cuda -arch=sm_80"
SM90 = "cuda -arch=sm_90a"


def _tile(shape, dtype, name):
    return tirx.decl_buffer(shape, dtype, name=name, scope="shared.dyn")


def _stored_bytes(layout, buf) -> np.ndarray:
    """The stored byte of each byte of ``buf`` in row-major order."""
    eb = tvm.DataType(buf.dtype).bits // 8
    shape = [int(s) for s in buf.shape]
    off = np.arange(int(np.prod(shape))) if layout is None else _row_major_offsets(layout, shape)
    return (off[:, None] * eb + np.arange(eb)).reshape(-1)


def _transposed(shape):
    return Layout(shape, lambda *i: list(i[:-2]) + [i[-1], i[-2]])


# --- the layout of a view: every byte stays where the tile stores it -----------------------
@pytest.mark.parametrize("tile, view", [
    (((64, 64), "float32"), ((64, 128), "bfloat16")),   # narrowing
    (((64, 128), "bfloat16"), ((64, 64), "float32")),   # widening
    (((2, 64, 64), "float16"), ((2, 64, 128), "int8")),
    (((64, 64), "float16"), ((4096,), "float16")),      # reshapes
    (((64, 64), "float16"), ((32, 128), "float16")),
    (((64, 64), "float16"), ((64, 16), "float64")),     # 8-byte elements inside 16-byte chunks
])
@pytest.mark.parametrize("kind", ["sm80", "gmma", "transposed"])
def test_view_layout_keeps_every_byte_in_place(tile, view, kind):
    s, v = _tile(*tile, "S"), _tile(*view, "V")
    shape = [int(x) for x in s.shape]
    layout = {"sm80": lambda: make_swizzled_layout(s),
              "gmma": lambda: make_gmma_swizzled_layout(s, swizzle_bytes=64),
              "transposed": lambda: _transposed(shape)}[kind]()
    if kind == "transposed" and tvm.DataType(v.dtype).bits > tvm.DataType(s.dtype).bits:
        with pytest.raises(LoweringError, match=r"V .* and S .* do(es)? not keep|does not keep"):
            shared_view_layout(layout, s, v)
        return
    lv = shared_view_layout(layout, s, v)
    assert np.array_equal(_stored_bytes(layout, s), _stored_bytes(lv, v))
    # and back: the tile's layout derived from the view's is the tile's own, byte for byte
    assert np.array_equal(_stored_bytes(shared_view_layout(lv, v, s), s),
                          _stored_bytes(layout, s))


def test_a_swizzle_seen_with_the_same_row_bytes_is_the_views_swizzle():
    s, v = _tile((64, 64), "float32", "S"), _tile((64, 128), "bfloat16", "V")
    lv = shared_view_layout(make_gmma_swizzled_layout(s, swizzle_bytes=128), s, v)
    assert isinstance(lv, SwizzledLayout) and lv.swizzle_bytes == 128 and lv.panel == 64
    flat = _tile((4096,), "float32", "F")  # a 1-D tile whose 2-D view is a wgmma operand
    lf = shared_view_layout(make_gmma_swizzled_layout(s, swizzle_bytes=128), s, flat)
    assert shared_view_layout(lf, flat, s).swizzle_bytes == 128


def test_row_major_tiles_have_row_major_views():
    s, v = _tile((64, 64), "float32", "S"), _tile((64, 128), "bfloat16", "V")
    assert shared_view_layout(None, s, v) is None
    assert shared_view_layout(Layout((64, 64), lambda i, j: [i, j]), s, v) is None


# --- programs -------------------------------------------------------------------------------
def reinterpret(shape, dtype, new_shape, new_dtype, layout=None):
    """Write a tile, read it back through a view of another element type."""

    @T.prim_func
    def main(A: T.Tensor(shape, dtype), B: T.Tensor(new_shape, new_dtype)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared(shape, dtype)
            V = T.view(S, new_shape, dtype=new_dtype)
            if layout == "tile":
                T.annotate_layout({S: make_swizzled_layout(S)})
            elif layout == "view":
                T.annotate_layout({V: make_swizzled_layout(V)})
            for i, j in T.Parallel(*shape):
                S[i, j] = A[i, j]
            T.copy(V, B)

    return main


CASES = [((64, 64), "float32", (64, 128), "bfloat16"), ((64, 128), "bfloat16", (64, 64), "float32")]


@pytest.mark.parametrize("case", CASES, ids=["narrowing", "widening"])
def test_reinterpreting_view_on_cpu(case):
    shape, dtype, new_shape, new_dtype = case
    a = torch.randn(64, 128, dtype=torch.bfloat16).view(getattr(torch, dtype))
    b = tilelang.compile(reinterpret(*case, layout="tile"), out_idx=-1, target="cpu")(a)
    assert torch.equal(b.view(torch.int16), a.view(getattr(torch, new_dtype)).view(torch.int16))


def cumsum_through_view(n=128):
    @T.prim_func
    def main(X: T.Tensor((4, n), T.float32)):
        with T.Kernel(4, threads=128) as b:
            S = T.alloc_shared((n,), T.float32)
            T.copy(X[b, :], S)
            T.cumsum(T.view(S, (1, n)), dim=1)
            T.copy(S, X[b, :])

    return main


def test_cumsum_through_a_view_on_cpu():
    x = torch.randn(4, 128)
    want = x.cumsum(1)
    tilelang.compile(cumsum_through_view(), target="cpu")(x)
    torch.testing.assert_close(x, want, rtol=1e-4, atol=1e-4)


def _decls(f) -> dict:
    """name -> (dtype, first byte) of each buffer declared in the arena after planning."""
    out = {}

    def on_decl(d):
        b = d.buffer
        if b.scope() == "shared.dyn" and b.name != "smem":
            out[b.name] = (str(b.dtype), int(b.elem_offset) * tvm.DataType(b.dtype).bits // 8)

    tvm_ffi.structural_walk(f.body, (tirx.DeclBuffer, on_decl))
    return out


def _planned(prog, target=SM90):
    mod = tilelang.lower(prog, target=target, stage="tile")
    return mod[mod.get_global_vars()[0]]


@pytest.mark.parametrize("layout", [None, "tile", "view"])
def test_view_is_declared_on_the_tiles_bytes(layout):
    f = _planned(reinterpret(*CASES[0], layout=layout))
    d = _decls(f)
    assert d["S"][1] == d["V"][1] and d["V"][1] % 128 == 0 and d["V"][0] == "bfloat16"
    assert psm.planned_views(f.body)  # the view is declared over the tile's data


def test_annotation_on_the_view_lays_out_the_tile():
    """make_swizzled_layout(V) on the bf16 view stores S exactly as make_swizzled_layout(S)."""
    src = tilelang.compile(reinterpret(*CASES[0], layout="view"), out_idx=-1,
                           target=SM90).get_kernel_source()
    same = tilelang.compile(reinterpret(*CASES[0], layout="tile"), out_idx=-1,
                            target=SM90).get_kernel_source()
    assert "^" in src and src.split("main_kernel", 1)[1] == same.split("main_kernel", 1)[1]


def test_conflicting_layouts_of_a_tile_and_its_view_are_refused():
    @T.prim_func
    def main(A: T.Tensor((64, 64), T.float32), B: T.Tensor((2, 32, 64), T.float32)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), T.float32)
            V = T.reshape(S, (2, 32, 64))
            T.annotate_layout({S: make_swizzled_layout(S), V: _transposed([2, 32, 64])})
            T.copy(A, S)
            T.copy(V, B)

    with pytest.raises(LoweringError, match="V is a view of the shared tile S"):
        tilelang.lower(main, target=SM90)


def test_widening_view_that_would_split_an_element_is_refused():
    @T.prim_func
    def main(A: T.Tensor((64, 64), T.float16), B: T.Tensor((64, 32), T.float32)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), T.float16)
            T.annotate_layout({S: _transposed([64, 64])})
            T.copy(A, S)
            T.copy(T.view(S, (64, 32), dtype=T.float32), B)

    with pytest.raises(LoweringError, match="does not keep the 2 float16 elements"):
        tilelang.lower(main, target=SM90)


def later_tile_after_view(n=64):
    """S is written first and read last, but only through its view V; U lives in between."""

    @T.prim_func
    def main(A: T.Tensor((n, n), T.float32), B: T.Tensor((n, n), T.float32),
             C: T.Tensor((n * n,), T.float32)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((n, n), T.float32)
            U = T.alloc_shared((n, n), T.float32)
            V = T.reshape(S, (n * n,))
            T.copy(A, S)
            T.copy(A, U)
            T.copy(U, B)
            T.copy(V, C)

    return main


def test_tile_stays_live_while_its_view_is_used():
    d = _decls(_planned(later_tile_after_view(), target=SM80))
    assert d["V"][1] == d["S"][1]
    assert abs(d["U"][1] - d["S"][1]) >= 64 * 64 * 4  # U must not take S's bytes


def test_write_through_the_tile_is_ordered_before_a_read_through_the_view(monkeypatch):
    """Threads write S in the T.Parallel loop and read other threads' elements through V: a
    __syncthreads must separate them (InjectThreadSync sees V as S)."""
    def body(src):
        return src[src.index("main_kernel("):]

    # (plain stores: a TMA store of the tile would bring a barrier of its own)
    cfg = {"tl.disable_tma_lower": True}
    prog = reinterpret(*CASES[1])
    src = body(tilelang.compile(prog, out_idx=-1, target=SM90, pass_configs=cfg)
               .get_kernel_source())
    assert "__syncthreads();" in src
    # without the alias, nothing would order the two
    from tilelang.transform import inject_thread_sync

    monkeypatch.setattr(inject_thread_sync, "planned_views", lambda body: {})
    assert "__syncthreads();" not in body(
        tilelang.compile(reinterpret(*CASES[1]), out_idx=-1, target=SM90, pass_configs=cfg)
        .get_kernel_source())


def gemm_through_reshape(n=64):
    @T.prim_func
    def main(A: T.Tensor((n, n), T.float16), B: T.Tensor((n, n), T.float16),
             C: T.Tensor((n, n), T.float32)):
        with T.Kernel(1, threads=128):
            flat = T.alloc_shared((n * n,), T.float16)
            A_s = T.reshape(flat, (n, n))
            B_s = T.alloc_shared((n, n), T.float16)
            acc = T.alloc_fragment((n, n), T.float32)
            T.clear(acc)
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, acc)
            T.copy(acc, C)

    return main


def test_wgmma_operand_through_a_view_is_aligned_for_its_swizzle():
    f = _planned(gemm_through_reshape())
    d = _decls(f)
    assert d["A_s"][1] == d["flat"][1] and d["flat"][1] % 1024 == 0
    src = tilelang.compile(gemm_through_reshape(), out_idx=-1, target=SM90).get_kernel_source()
    assert "wgmma" in src and src.count("cp_async_bulk_tensor_g2s") >= 2  # TMA into the view


def test_mma_sync_operand_through_a_view_compiles_for_sm80():
    src = tilelang.compile(gemm_through_reshape(), out_idx=-1, target=SM80).get_kernel_source()
    # both operands in the sm80 swizzle: the one reached through the view too
    assert re.search(r"gemm_ss<64, 64, 64, \d+, \d+, false, false, 64, 64, true, true,", src)


@pytest.mark.parametrize("case", CASES, ids=["narrowing", "widening"])
@pytest.mark.parametrize("layout", [None, "tile"])
def test_reinterpreting_views_compile_for_sm90a(case, layout):
    src = tilelang.compile(reinterpret(*case, layout=layout), out_idx=-1,
                           target=SM90).get_kernel_source()
    assert ("^" in src) == (layout == "tile")  # the swizzle reaches the view's reads too


def test_view_of_a_pipelined_tile_is_refused_by_name():
    @T.prim_func
    def main(A: T.Tensor((256, 64), T.float16), B: T.Tensor((256, 64), T.float16)):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), T.float16)
            V = T.reshape(S, (4096,))
            for k in T.Pipelined(4, num_stages=2):
                T.copy(A[k * 64, 0], S)
                for i in T.Parallel(4096):
                    B[k * 64 + i // 64, i % 64] = V[i]

    with pytest.raises(LoweringError, match="V is a T.view/T.reshape of the shared tile S"):
        tilelang.lower(main, target=SM90)


# --- on the GPU -------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("case", CASES, ids=["narrowing", "widening"])
@pytest.mark.parametrize("layout", [None, "tile", "view"])
def test_reinterpreting_view_runs_on_gpu(case, layout):
    shape, dtype, new_shape, new_dtype = case
    a = torch.randn(64, 128, dtype=torch.bfloat16, device="cuda").view(getattr(torch, dtype))
    b = tilelang.compile(reinterpret(*case, layout=layout), out_idx=-1)(a)
    assert torch.equal(b.view(torch.int16), a.view(getattr(torch, new_dtype)).view(torch.int16))


@pytest.mark.gpu
def test_cumsum_through_a_view_runs_on_gpu():
    x = torch.randn(4, 128, device="cuda")
    want = x.cumsum(1)
    tilelang.compile(cumsum_through_view())(x)
    torch.testing.assert_close(x, want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_tile_read_through_its_view_after_another_tile_runs_on_gpu():
    a = torch.randn(64, 64, device="cuda")
    b, c = tilelang.compile(later_tile_after_view(), out_idx=[1, 2])(a)
    assert torch.equal(b, a) and torch.equal(c, a.flatten())


@pytest.mark.gpu
def test_gemm_through_a_reshaped_operand_runs_on_gpu():
    a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
    c = tilelang.compile(gemm_through_reshape(), out_idx=-1)(a, b)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
