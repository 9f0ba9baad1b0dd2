"""Tiles with unit dims: an element index stands for the region of the other side's shape,
dimension by dimension when the ranks agree (``T.copy(A[2, 3], S)`` with ``S`` of shape
``(4, 1)`` is ``A[2:6, 3:4]``), and reductions reduce the named dim, unit or not.  CPU
results against torch, the CUDA lowering compiled without a GPU, GPU numerics marked ``gpu``.
"""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.ops.region import fit_extents

CUDA = "cuda -arch=sm_80"


@pytest.mark.parametrize("shape,ndim,want", [
    ((4, 1), 2, [4, 1]),          # ranks agree: dim by dim
    ((1, 4), 2, [1, 4]),
    ((4,), 2, [1, 4]),            # fewer dims: trailing alignment
    ((4, 1), 3, [1, 4, 1]),
    ((1, 4, 1), 2, [4, 1]),       # more dims: leading unit dims dropped first
    ((4, 1, 8), 2, [4, 8]),
    ((1, 1), 1, [1]),
    ((4, 8), 1, None),            # cannot fit
])
def test_fit_extents(shape, ndim, want):
    assert fit_extents(shape, ndim) == want


def load_tile(tile, at):
    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), O: T.Tensor(tile, "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment(tile, "float32")
            T.copy(A[at[0], at[1]], S)
            T.copy(S, O)

    return main


def store_tile(tile, at, atomic=False):
    @T.prim_func
    def main(A: T.Tensor(tile, "float32"), O: T.Tensor((8, 8), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment(tile, "float32")
            T.copy(A, S)
            if atomic:
                T.atomic_add(O[at[0], at[1]], S)
            else:
                T.copy(S, O[at[0], at[1]])

    return main


TILES = [(4, 1), (1, 4), (1, 1), (3, 2)]


@pytest.mark.parametrize("tile", TILES)
def test_element_index_load_keeps_tile_shape(tile):
    a = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    out = tilelang.compile(load_tile(tile, (2, 3)), out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(out, a[2:2 + tile[0], 3:3 + tile[1]])


@pytest.mark.parametrize("atomic", [False, True])
@pytest.mark.parametrize("tile", TILES)
def test_element_index_store_keeps_tile_shape(tile, atomic):
    src = torch.arange(1, 1 + tile[0] * tile[1], dtype=torch.float32).reshape(tile)
    out = torch.ones(8, 8)
    tilelang.compile(store_tile(tile, (2, 3), atomic), target="cpu")(src, out)
    ref = torch.ones(8, 8)
    if atomic:
        ref[2:2 + tile[0], 3:3 + tile[1]] += src
    else:
        ref[2:2 + tile[0], 3:3 + tile[1]] = src
    torch.testing.assert_close(out, ref)


def test_lower_rank_tile_aligns_with_trailing_dims():
    @T.prim_func
    def main(A: T.Tensor((2, 8, 8), "float32"), O: T.Tensor((4, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_fragment((4, 1), "float32")
            T.copy(A[1, 2, 3], S)  # A[1, 2:6, 3:4]
            T.copy(S, O)

    a = torch.randn(2, 8, 8)
    out = tilelang.compile(main, out_idx=[1], target="cpu")(a)
    torch.testing.assert_close(out, a[1, 2:6, 3:4])


def row_scaled_gemm(M, N, K, bM=64, bN=64, bK=32):
    """``C = (A @ B) * Sc`` with the per-row scale copied into a ``(bM, 1)`` fragment."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             Sc: T.Tensor((M, 1), "float32"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_f = T.alloc_fragment((bM, bN), "float32")
            s = T.alloc_fragment((bM, 1), "float32")
            T.clear(C_f)
            T.copy(Sc[by * bM, 0], s)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=2):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            for i, j in T.Parallel(bM, bN):
                C_f[i, j] = C_f[i, j] * s[i, 0]
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def test_row_scale_tile_cpu():
    M, N, K = 130, 70, 64
    a, b, sc = torch.randn(M, K).half(), torch.randn(K, N).half(), torch.randn(M, 1)
    out = tilelang.compile(row_scaled_gemm(M, N, K), out_idx=[3], target="cpu")(a, b, sc)
    torch.testing.assert_close(out, (a.float() @ b.float()) * sc, rtol=1e-3, atol=1e-3)


def test_row_scale_tile_compiles_for_cuda():
    src = tilelang.compile(row_scaled_gemm(128, 128, 64), out_idx=[3],
                           target=CUDA).get_kernel_source()
    assert "tl::gemm_ss" in src


def unit_reduce(kind, shape, dim, out_shape, dtype="float32", threads=32):
    red = getattr(T, f"reduce_{kind}")

    @T.prim_func
    def main(X: T.Tensor(shape, dtype), Y: T.Tensor(out_shape, dtype)):
        with T.Kernel(1, threads=threads) as bx:
            x = T.alloc_fragment(shape, dtype)
            y = T.alloc_fragment(out_shape, dtype)
            T.copy(X, x)
            red(x, y, dim=dim)
            T.copy(y, Y)

    return main


REDUCE_CASES = [
    ((8, 1), 0, (1,)), ((8, 1), 0, (1, 1)), ((8, 1), 1, (8,)), ((8, 1), 1, (8, 1)),
    ((1, 8), 0, (8,)), ((1, 8), 1, (1,)), ((1, 1), 0, (1,)),
]
TORCH_REDUCE = {"sum": lambda x, d: x.sum(d), "max": lambda x, d: x.amax(d)}


@pytest.mark.parametrize("kind", list(TORCH_REDUCE))
@pytest.mark.parametrize("shape,dim,out_shape", REDUCE_CASES)
def test_reduce_over_unit_shaped_tiles(kind, shape, dim, out_shape):
    x = torch.randn(shape)
    y = tilelang.compile(unit_reduce(kind, shape, dim, out_shape), out_idx=[1], target="cpu")(x)
    torch.testing.assert_close(y, TORCH_REDUCE[kind](x, dim).reshape(out_shape))


def test_reduce_over_unit_tile_loaded_by_element_index():
    """The reported case: an ``(8, 1)`` column read with an element index, summed over dim 0."""

    @T.prim_func
    def main(X: T.Tensor((8, 4), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            x = T.alloc_fragment((8, 1), "float32")
            y = T.alloc_fragment((1,), "float32")
            T.copy(X[0, 2], x)
            T.reduce_sum(x, y, dim=0)
            T.copy(y, Y)

    x = torch.randn(8, 4)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[1], target="cpu")(x),
                               x[:, 2].sum().reshape(1))


@pytest.mark.parametrize("shape,dim,out_shape", REDUCE_CASES)
def test_unit_reduce_compiles_for_cuda(shape, dim, out_shape):
    tilelang.compile(unit_reduce("sum", shape, dim, out_shape), out_idx=[1], target=CUDA)


@pytest.mark.parametrize("tile", TILES)
def test_unit_tile_copies_compile_for_cuda(tile):
    tilelang.compile(load_tile(tile, (2, 3)), out_idx=[1], target=CUDA)
    tilelang.compile(store_tile(tile, (2, 3)), target=CUDA)
    tilelang.compile(store_tile(tile, (2, 3), atomic=True), target=CUDA)


# GPU numerics --------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("tile", TILES)
def test_unit_tiles_gpu(tile):
    a = torch.arange(64, dtype=torch.float32, device="cuda").reshape(8, 8)
    out = tilelang.compile(load_tile(tile, (2, 3)), out_idx=[1], target="cuda")(a)
    torch.testing.assert_close(out, a[2:2 + tile[0], 3:3 + tile[1]])
    for atomic in (False, True):
        src = torch.randn(tile, device="cuda")
        o = torch.ones(8, 8, device="cuda")
        tilelang.compile(store_tile(tile, (2, 3), atomic), target="cuda")(src, o)
        ref = torch.ones(8, 8, device="cuda")
        if atomic:
            ref[2:2 + tile[0], 3:3 + tile[1]] += src
        else:
            ref[2:2 + tile[0], 3:3 + tile[1]] = src
        torch.testing.assert_close(o, ref)


@pytest.mark.gpu
def test_row_scale_tile_gpu():
    M, N, K = 130, 70, 64
    a = torch.randn(M, K, device="cuda").half()
    b = torch.randn(K, N, device="cuda").half()
    sc = torch.randn(M, 1, device="cuda")
    out = tilelang.compile(row_scaled_gemm(M, N, K), out_idx=[3], target="cuda")(a, b, sc)
    torch.testing.assert_close(out, (a.float() @ b.float()) * sc, rtol=1e-2, atol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("kind", list(TORCH_REDUCE))
@pytest.mark.parametrize("shape,dim,out_shape", REDUCE_CASES)
def test_reduce_over_unit_shaped_tiles_gpu(kind, shape, dim, out_shape):
    x = torch.randn(shape, device="cuda")
    y = tilelang.compile(unit_reduce(kind, shape, dim, out_shape), out_idx=[1], target="cuda")(x)
    torch.testing.assert_close(y, TORCH_REDUCE[kind](x, dim).reshape(out_shape))


@pytest.mark.parametrize("pipelined", [False, True])
def test_single_element_shared_tile_compiles_for_cuda(pipelined):
    """A (1, 1) shared tile: the copy's nest has no non-unit dim (its layout used to fail)."""

    @T.prim_func
    def main(A: T.Tensor((8, 8), "float32"), O: T.Tensor((4, 1, 1), "float32")):
        with T.Kernel(1, threads=32) as bx:
            S = T.alloc_shared((1, 1), "float32")
            if pipelined:
                for k in T.Pipelined(4, num_stages=2):
                    T.copy(A[k, 3], S)
                    T.copy(S, O[k, 0, 0])
            else:
                for k in T.serial(4):
                    T.copy(A[k, 3], S)
                    T.copy(S, O[k, 0, 0])

    tilelang.compile(main, out_idx=[1], target=CUDA)
    a = torch.randn(8, 8)
    torch.testing.assert_close(tilelang.compile(main, out_idx=[1], target="cpu")(a),
                               a[:4, 3].reshape(4, 1, 1))


def fill_unit_fragment():
    @T.prim_func
    def main(O: T.Tensor((64, 1), "float32")):
        with T.Kernel(1, threads=128) as bx:
            s = T.alloc_fragment((64, 1), "float32")
            T.fill(s, 2.0)
            T.copy(s, O)

    return main


def test_fill_of_unit_dim_fragment():
    """The fill's nest runs over the non-unit dims; the fragment's layout is used without its
    unit dims (was: 'T.Parallel loop over [64] got a layout of shape [64, 1]')."""
    tilelang.compile(fill_unit_fragment(), out_idx=[0], target=CUDA)
    assert torch.all(tilelang.compile(fill_unit_fragment(), out_idx=[0], target="cpu")() == 2)


@pytest.mark.gpu
def test_fill_of_unit_dim_fragment_gpu():
    assert torch.all(tilelang.compile(fill_unit_fragment(), out_idx=[0], target="cuda")() == 2)
