"""Slice bounds held in kernel scalars (``kv_start = ...; kv_end = ...``): the tile
operators' shape checks read a scalar as the value it is defined with, when it is assigned
only once."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import DSLError


def test_copy_between_scalar_bounds_of_the_tile_size():
    @T.prim_func
    def main(KV: T.Tensor((4, 256, 32), T.float32), O: T.Tensor((4, 256, 32), T.float32)):
        with T.Kernel(4, 4, threads=128) as (bx, b):
            S = T.alloc_shared((64, 32), T.float32)
            kv_start = bx * 64
            kv_end = kv_start + 64
            T.copy(KV[b, kv_start:kv_end, :], S)
            T.copy(S, O[b, kv_start:kv_end, :])

    kernel = tilelang.compile(main, target="cpu")
    kv, out = torch.randn(4, 256, 32), torch.zeros(4, 256, 32)
    kernel(kv, out)
    torch.testing.assert_close(out, kv)


def test_a_reassigned_bound_is_refused():
    with pytest.raises(DSLError, match="kv_end is assigned 2 times"):
        @T.prim_func
        def main(KV: T.Tensor((256, 32), T.float32), O: T.Tensor((256, 32), T.float32)):
            with T.Kernel(4, threads=128) as bx:
                S = T.alloc_shared((64, 32), T.float32)
                kv_start = bx * 64
                kv_end = (bx + 1) * 64
                T.copy(KV[kv_start:kv_end, :], S)
                kv_end = kv_end + 1
                T.copy(S, O[kv_start:kv_start + 64, :])


def test_unequal_scalar_bounds_still_fail_the_shape_check():
    with pytest.raises(DSLError, match="shape"):
        @T.prim_func
        def main(KV: T.Tensor((256, 32), T.float32)):
            with T.Kernel(4, threads=128) as bx:
                S = T.alloc_shared((64, 32), T.float32)
                kv_start = bx * 64
                kv_end = (bx + 1) * 65
                T.copy(KV[kv_start:kv_end, :], S)
