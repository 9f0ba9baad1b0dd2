"""T.Persistent: a fixed number of blocks walks every tile of a grid exactly once."""

import shutil

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def visit(domain, blocks):
    @T.prim_func
    def kernel(Visited: T.Tensor(tuple(domain), T.int32), Owner: T.Tensor(tuple(domain), T.int32)):
        with T.Kernel(blocks, threads=1) as block_id:
            for tile in T.Persistent(list(domain), blocks, block_id):
                Visited[tile] += 1
                Owner[tile] = block_id

    return kernel


def visit2(m, n, blocks, group_size=8):
    @T.prim_func
    def kernel(Visited: T.Tensor((m, n), T.int32), Owner: T.Tensor((m, n), T.int32)):
        with T.Kernel(blocks, threads=1) as block_id:
            for i, j in T.Persistent([m, n], blocks, block_id, group_size=group_size):
                Visited[i, j] += 1
                Owner[i, j] = block_id

    return kernel


def grouped_order(m, n, group_size):
    """The tiles of an m x n grid in visiting order: column groups of ``group_size`` (the last
    one narrower), each walked row by row."""
    order = []
    for first in range(0, n, group_size):
        cols = range(first, min(first + group_size, n))
        order += [(i, j) for i in range(m) for j in cols]
    return order


@pytest.mark.parametrize("m,n,blocks,group_size", [
    (4, 8, 3, 8), (4, 9, 3, 8), (4, 12, 3, 8), (4, 9, 36, 8), (1, 1, 2, 8), (5, 12, 7, 4),
    (3, 20, 4, 8), (6, 7, 5, 1), (4, 9, 3, 100)])
def test_every_tile_once_in_grouped_waves(m, n, blocks, group_size):
    visited = torch.zeros(m, n, dtype=torch.int32)
    owner = torch.full((m, n), -1, dtype=torch.int32)
    tilelang.compile(visit2(m, n, blocks, group_size), target="cpu")(visited, owner)
    assert torch.equal(visited, torch.ones_like(visited))
    expected = torch.full((m, n), -1, dtype=torch.int32)
    for t, (i, j) in enumerate(grouped_order(m, n, group_size)):
        expected[i, j] = t % blocks
    assert torch.equal(owner, expected)


def test_a_group_as_wide_as_the_grid_is_row_major():
    visited, owner = torch.zeros(4, 9, dtype=torch.int32), torch.zeros(4, 9, dtype=torch.int32)
    tilelang.compile(visit2(4, 9, 5, group_size=9), target="cpu")(visited, owner)
    assert torch.equal(owner.flatten(), torch.arange(36, dtype=torch.int32) % 5)


def test_one_dimensional_domain():
    visited, owner = torch.zeros(10, dtype=torch.int32), torch.zeros(10, dtype=torch.int32)
    tilelang.compile(visit([10], 4), target="cpu")(visited, owner)
    assert visited.tolist() == [1] * 10 and owner.tolist() == [i % 4 for i in range(10)]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_compiles_for_cuda():
    tilelang.compile(visit2(4, 9, 3), target="cuda -arch=sm_90a").get_ptx()


def test_bad_group_size():
    with pytest.raises(DSLError, match="group_size must be a positive int"):
        T.Persistent([4, 4], 2, 0, group_size=0)


@pytest.mark.gpu
def test_every_tile_once_on_the_gpu():
    for m, n, blocks in ((4, 9, 3), (4, 12, 132), (7, 5, 3)):
        visited = torch.zeros(m, n, dtype=torch.int32, device="cuda")
        owner = torch.zeros(m, n, dtype=torch.int32, device="cuda")
        tilelang.compile(visit2(m, n, blocks), target="cuda")(visited, owner)
        assert torch.equal(visited, torch.ones_like(visited))
