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


def visit2(m, n, blocks):
    @T.prim_func
    def kernel(Visited: T.Tensor((m, n), T.int32), Owner: T.Tensor((m, n), T.int32)):
        with T.Kernel(blocks, threads=1) as block_id:
            for i, j in T.Persistent([m, n], blocks, block_id):
                Visited[i, j] += 1
                Owner[i, j] = block_id

    return kernel


@pytest.mark.parametrize("m,n,blocks", [(4, 8, 3), (4, 9, 3), (4, 12, 3), (4, 9, 36), (1, 1, 2)])
def test_every_tile_once_in_row_major_waves(m, n, blocks):
    visited = torch.zeros(m, n, dtype=torch.int32)
    owner = torch.full((m, n), -1, dtype=torch.int32)
    tilelang.compile(visit2(m, n, blocks), target="cpu")(visited, owner)
    assert torch.equal(visited, torch.ones_like(visited))
    assert torch.equal(owner.flatten(), torch.arange(m * n, dtype=torch.int32) % blocks)


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
