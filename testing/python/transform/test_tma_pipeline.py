"""TMA copies and the mbarrier ring of ``T.Pipelined`` on sm_90a, at pass level: barrier
counts, arrive counts and expect_tx bytes per stage, tensor maps, fallbacks with reasons."""

import logging
import sys
import os

import pytest
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.device import effects
from tilelang.ir_utils import find_all

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import matmul  # noqa: E402
from tma_programs import stacked_slices_sum  # noqa: E402

SM90 = "cuda -arch=sm_90a"


def calls(func, name):
    return find_all(func.body, tvm.ir.Call,
                    lambda c: isinstance(c.op, tvm.ir.Op) and c.op.name == f"tl.device.{name}")


def lowered(prog, target=SM90, **cfg):
    # the non-specialized ring (warp specialization: test_warp_specialize.py)
    cfg = {"tl.disable_warp_specialized": True, **cfg}
    mod = tilelang.lower(prog, target=target, stage="tile", pass_configs=cfg)
    return mod[mod.get_global_vars()[0]]


def ring_summary(func):
    """Printed per stage: the barriers' arrive counts and the bytes each stage expects."""
    inits = [int(c.args[1]) for c in calls(func, "mbarrier_init")]
    tx = sorted({int(c.args[1]) for c in calls(func, "mbarrier_arrive_expect_tx")})
    maps = find_all(func.body, tvm.ir.Call,
                    lambda c: isinstance(c.op, tvm.ir.Op) and
                    c.op.name == "tirx.tensormap_encode_tiled")
    print(f"barriers: {len(inits)}, arrive counts {inits}, expect_tx bytes {tx}, "
          f"tensor maps {len(maps)}")
    return inits, tx, maps


def test_gemm_ring_barriers_arrive_counts_and_expect_tx():
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3))
    inits, tx, maps = ring_summary(f)
    # 3 full barriers (one arrival: the issuing thread's arrive.expect_tx) and 3 empty
    # barriers (the 128 consumer threads)
    assert inits == [1, 1, 1, 128, 128, 128]
    # every stage brings a 128x64 and a 64x64 fp16 tile
    assert tx == [(128 * 64 + 64 * 64) * 2]
    # A and B: one tensor map each, 128-byte swizzle (the tiles' 128-byte rows), box = tile
    assert len(maps) == 2
    assert all(m.attrs.swizzle == 3 for m in maps)
    boxes = sorted(tuple(int(x) for x in m.args[5:7]) for m in maps)
    assert boxes == [(64, 64), (64, 128)]
    assert not calls(f, "cp_async") and len(calls(f, "tma_load")) == 6
    # consumers wait on full, release on empty; the issuing thread waits on empty
    assert len(calls(f, "mbarrier_arrive")) == 1 and len(calls(f, "mbarrier_wait")) == 4


def test_ring_parities_and_guards():
    text = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3)).script()
    # slot and parity of iteration g = base + k: consumers wait on (g // 3) & 1, the producer on
    # the previous round's parity of its slot
    assert "T.device_mbarrier_wait(T.address_of(k_pipe_full[(k_pipe_base + k) % 3]), " \
           "(k_pipe_base + k) // 3 & 1)" in text
    assert "k_pipe_empty[(k_pipe_base + (k + 2)) % 3]), (k_pipe_base + (k + 2)) // 3 & 1 ^ 1)" \
        in text
    assert "if k + 2 < 8:" in text and "k_pipe_base = k_pipe_base + 8" in text


@pytest.mark.parametrize("K", [64, 128])
def test_trip_counts_smaller_than_stages(K):
    f = lowered(matmul(256, 256, K, 128, 64, 64, num_stages=3))
    inits, tx, _ = ring_summary(f)
    assert inits == [1, 1, 1, 128, 128, 128] and tx == [24576]
    text = f.script()
    trip = K // 64
    assert f"for k in range({trip}):" in text
    # the prologue issues the iterations that exist (of the 2 it could), then the loop its own
    assert text.count("device_mbarrier_arrive_expect_tx(") == min(trip, 2) + 1
    assert "T.bool(False)" not in text  # a prologue step for no iteration is not kept


def test_dynamic_trip_count_uses_tma():
    K = T.dynamic("K")
    f = lowered(matmul(256, 256, K, 64, 64, 64, tA=True, num_stages=3))
    inits, tx, maps = ring_summary(f)
    assert inits == [1, 1, 1, 128, 128, 128] and tx == [2 * 64 * 64 * 2]
    assert "T.ceildiv(K, 64)" in f.script() or "K + 63" in f.script()


def test_fallbacks_say_why(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    # rows of 8 bytes: a TMA box row must be a multiple of 16 bytes
    @T.prim_func
    def narrow(A: T.Tensor((64, 8), "float16"), B: T.Tensor((8, 4), "float32")):
        with T.Kernel(1, threads=32):
            S = T.alloc_shared((8, 4), "float16")
            F = T.alloc_fragment((8, 4), "float32")
            T.clear(F)
            for i in T.Pipelined(8, num_stages=2):
                T.copy(A[i * 8, 0], S)
                for r, c in T.Parallel(8, 4):
                    F[r, c] += S[r, c]
            T.copy(F, B)

    f = lowered(narrow)
    assert calls(f, "cp_async") and not calls(f, "tma_load")
    assert "the tile's rows are 8 bytes, not a multiple of 16" in caplog.text
    # a row stride that is not a multiple of 16 bytes
    caplog.clear()
    f = lowered(matmul(512, 512, 100, 128, 64, 64, num_stages=3))
    assert not calls(f, "tma_load") and "not a proven multiple of 16 bytes" in caplog.text


@pytest.mark.parametrize("shape, tile", [((48, 192), (12, 24)), ((1056,), (264,))])
def test_tiles_whose_boxes_would_start_off_128_bytes_fall_back(caplog, shape, tile):
    # a 576-byte tile's second stage started at byte 576 (64 mod 128); a 264-element run was
    # cut into boxes at 176-byte steps: TMA's shared-memory addresses must be 128-byte aligned
    caplog.set_level(logging.DEBUG, logger="tilelang")

    @T.prim_func
    def main(A: T.Tensor(shape, "float16"), B: T.Tensor(tile, "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared(tile, "float16")
            F = T.alloc_fragment(tile, "float32")
            T.clear(F)
            for k in T.Pipelined(4, num_stages=3):
                if len(tile) == 2:
                    T.copy(A[0, k * tile[1]], S)
                else:
                    T.copy(A[k * tile[0]], S)
                T.copy(S, F)
            T.copy(F, B)

    f = lowered(main)
    assert calls(f, "cp_async") and not calls(f, "tma_load")
    assert "do not start at multiples of 128 bytes" in caplog.text or \
        "box [264] has a dimension above 256" in caplog.text  # no 128-byte multiple cut


def test_stacked_slices_of_several_panels_fall_back(caplog):
    """A box lands contiguously, slice after slice, but the swizzled layout keeps each 2-D
    slice's panels together: a tile of 2 slices of 2 panels cannot be one box per panel."""
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(stacked_slices_sum(128, swizzled=True))
    assert not calls(f, "tma_load") and calls(f, "cp_async")
    assert "several 2-D slices of several swizzle panels" in caplog.text


def test_disable_tma():
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3), **{"tl.disable_tma_lower": True})
    assert calls(f, "cp_async") and not calls(f, "tma_load") and not calls(f, "mbarrier_init")
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3), target="cuda -arch=sm_80")
    assert calls(f, "cp_async") and not calls(f, "tma_load")

    @T.prim_func
    def k(A: T.Tensor((256, 64), "float16"), B: T.Tensor((256, 64), "float16")):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[bx * 64, 0], S, disable_tma=True)
            T.copy(S, B[bx * 64, 0])

    assert not calls(lowered(k), "tma_load")


def test_copy_outside_pipeline_is_synchronous_tma():
    @T.prim_func
    def k(A: T.Tensor((200, 64), "float16"), B: T.Tensor((200, 64), "float16")):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[bx * 64, 0], S)
            T.copy(S, B[bx * 64, 0])

    f = lowered(k)
    inits, tx, maps = ring_summary(f)
    assert inits == [1] and tx == [64 * 64 * 2] and len(maps) == 2  # A's, and B's for the store
    # the ragged last block reads rows 192..255 of 200: the hardware zero-fills, no guard
    (load,) = calls(f, "tma_load")
    (wait,) = calls(f, "mbarrier_wait")
    assert "S_tma_phase = S_tma_phase ^ 1" in f.script()
    assert effects.effect_of(load).completes_on == effects.Mechanism.MBARRIER


def _tile_through_shared(then=None, **copy_kw):
    @T.prim_func
    def k(A: T.Tensor((200, 64), "float16"), B: T.Tensor((200, 64), "float16")):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((64, 64), "float16")
            T.copy(A[bx * 64, 0], S)
            for i, j in T.Parallel(64, 64):
                S[i, j] = S[i, j] * T.float16(2)
            T.copy(S, B[bx * 64, 0], **copy_kw)
            if then == "read back":
                A[bx * 64, 0] = B[bx * 64, 1]
            if then == "write again":
                B[bx * 64, 0] = T.float16(0)

    return k


def test_copy_of_a_tile_to_global_is_a_tma_store():
    f = lowered(_tile_through_shared())
    # the ragged last block writes rows 192..255 of 200: the hardware clips the box, no guard
    assert len(calls(f, "tma_store")) == 1 and len(calls(f, "tma_store_commit")) == 1
    (wait,) = calls(f, "tma_store_wait")
    assert len(wait.args) == 1  # .read: until the stores have read S
    text = f.script()
    # every thread fences its writes of S (async proxy), the block meets, thread 0 stores
    fence = text.index("T.device_fence_proxy_async_shared()")
    bar = text.index("T.device_barrier(0, 128)", fence)
    assert fence < bar < text.index("if tx == 0:", bar) < text.index("T.device_tma_store(", bar)
    # the others: after the mbarrier's init, and the load's (earlier readers of S are done)
    assert text.count("T.device_barrier(") == 3


@pytest.mark.parametrize("case", ["read back", "write again", "disable_tma",
                                  "disable_tma_lower", "sm_80"])
def test_tile_stores_without_tma(case):
    # the store's writes land asynchronously: not when the kernel touches B otherwise
    prog = _tile_through_shared(then=case,
                                **({"disable_tma": True} if case == "disable_tma" else {}))
    cfg = {"tl.disable_tma_lower": True} if case == "disable_tma_lower" else {}
    f = lowered(prog, target="cuda -arch=sm_80" if case == "sm_80" else SM90, **cfg)
    assert not calls(f, "tma_store") and not calls(f, "tma_store_wait")


def test_an_empty_range_does_not_move_the_ring_back():
    # the ring base was advanced by hi - lo: a run over an empty range (lo > hi) left the next
    # run's consumers waiting on parities of phases that never completed
    @T.prim_func
    def main(A: T.Tensor((128, 256), "float16"), O: T.Tensor((128, 32), "float16"),
             lo: T.int32, hi: T.int32):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 32), "float16")
            for k in T.Pipelined(lo, hi, num_stages=3):
                T.copy(A[0, k * 32], A_s)
                T.copy(A_s, O)

    text = lowered(main).script()
    assert "k_pipe_base = k_pipe_base + T.max(hi - lo, 0)" in text
