"""Automatic warp specialization (sm_90a) at pass level: the producer/consumer split, the
ring's arrive counts, the register numbers, and the fallbacks with their reasons.  The
programs here are also run on the GPU by ``testing/python/cuda/test_cuda_ws.py``."""

import logging
import os
import sys

import pytest
import torch
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.device.thread_group import GROUP_ATTR, group_of
from tilelang.ir_utils import find_all

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import example as example_module, matmul  # noqa: E402
from tma_programs import (in_place_double, recurrence, stacked_slices_sum,  # noqa: E402
                          write_then_stream)

SM90 = "cuda -arch=sm_90a"


# programs ---------------------------------------------------------------------------------
def q_then_loop(S=256, D=64, bm=64, bn=64, stages=2, threads=128):
    """Attention-shaped: a Q tile loaded before the loop, K tiles streamed by the loop,
    O = sum over the K tiles of Q @ K^T row sums (a plain reduction, checked against torch)."""

    @T.prim_func
    def main(Q: T.Tensor((S, D), "float16"), K: T.Tensor((S, D), "float16"),
             O: T.Tensor((S,), "float32")):
        with T.Kernel(S // bm, threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            row = T.alloc_fragment((bm,), "float32")
            tot = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(tot)
            for k in T.Pipelined(S // bn, num_stages=stages):
                T.copy(K[k * bn, 0], K_s)
                T.clear(acc)
                T.gemm(Q_s, K_s, acc, transpose_B=True)
                T.reduce_sum(acc, row, dim=1)
                for i in T.Parallel(bm):
                    tot[i] += row[i]
            T.copy(tot, O[bx * bm])

    return main


def two_loops(M=256, N=128, K=256, bm=128, bn=128, bk=64, threads=128):
    """C = A @ B + A2 @ B2 as two pipelined loops into one accumulator."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             A2: T.Tensor((M, K), "float16"), B2: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            A2_s = T.alloc_shared((bm, bk), "float16")
            B2_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // bk, num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
            for j in T.Pipelined(K // bk, num_stages=2):
                T.copy(A2[by * bm, j * bk], A2_s)
                T.copy(B2[j * bk, bx * bn], B2_s)
                T.gemm(A2_s, B2_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def loop_under_if(M=256, N=128, K=256, bm=128, bn=128, bk=64, threads=128, from_memory=False):
    """C = A @ B for the blocks whose ``flag`` (a scalar argument, or ``F[by]`` when
    ``from_memory``) is non-zero; C = 0 elsewhere."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             F: T.Tensor((M // bm,), "int32"), C: T.Tensor((M, N), "float32"), flag: T.int32):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            T.clear(C_f)
            if (F[by] if from_memory else flag) != 0:
                for k in T.Pipelined(K // bk, num_stages=3):
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


def stream_sum(M=512, threads=128):
    """Y[r, c] = sum over the 64-row tiles of A: one TMA producer, a T.Parallel consumer."""

    @T.prim_func
    def main(A: T.Tensor((M, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=threads):
            S = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float32")
            T.clear(F)
            for k in T.Pipelined(M // 64, num_stages=2):
                T.copy(A[k * 64, 0], S)
                for r, c in T.Parallel(64, 64):
                    F[r, c] += S[r, c]
            T.copy(F, Y)

    return main


def persistent_gemm(M=512, N=512, K=256, bm=128, bn=128, bk=64, blocks=3, threads=256,
                    stages=3, shared_epilogue=False):
    """C = A @ B by ``blocks`` persistent blocks, each walking its tiles (``T.Persistent``)
    with a pipelined loop per tile: the producer runs ahead into the next tile.
    ``shared_epilogue``: each tile goes out through one shared tile, written again per tile."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(blocks, threads=threads) as bid:
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            C_s = T.alloc_shared((bm, bn), "float32")
            for by, bx in T.Persistent([T.ceildiv(M, bm), T.ceildiv(N, bn)], blocks, bid):
                T.clear(C_f)
                for k in T.Pipelined(T.ceildiv(K, bk), num_stages=stages):
                    T.copy(A[by * bm, k * bk], A_s)
                    T.copy(B[k * bk, bx * bn], B_s)
                    T.gemm(A_s, B_s, C_f)
                if shared_epilogue:
                    T.copy(C_f, C_s)
                    T.copy(C_s, C[by * bm, bx * bn])
                else:
                    T.copy(C_f, C[by * bm, bx * bn])

    return main


def cluster_gemm(M=512, N=512, K=256, bm=128, bn=128, bk=64, threads=256, stages=3,
                 cluster=(2, 1), panel=8, ragged_range=False, slot_by_block=False):
    """C = A @ B in clusters of ``cluster`` blocks (rasterized in panels of ``panel``): the
    blocks of a (2, 1) cluster share their A tiles, those of a (1, 2) cluster their B tiles.
    ``ragged_range``: the K loop of odd columns of blocks is one step shorter (the blocks of
    a cluster run different iterations: nothing can be multicast).  ``slot_by_block``: A
    lands in one of two shared tiles chosen by the block's x index (the blocks of a (2, 1)
    cluster load the same box to different tiles: it cannot be multicast)."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.ClusterKernel(T.ceildiv(N, bn), T.ceildiv(M, bm), threads=threads,
                             cluster_dims=(*cluster, 1)) as (bx, by):
            T.use_swizzle(panel)
            A_s = T.alloc_shared((2 if slot_by_block else 1, bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            slot = bx % 2 if slot_by_block else 0
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bk) - (bx % 2 if ragged_range else 0),
                                 num_stages=stages):
                T.copy(A[by * bm, k * bk], A_s[slot, :, :])
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s[slot, :, :], B_s, C_f)
            T.copy(C_f, C[by * bm, bx * bn])

    return main


# helpers ----------------------------------------------------------------------------------
def lowered(prog, **cfg):
    mod = tilelang.lower(prog, target=SM90, stage="tile", pass_configs=cfg or None)
    return mod[mod.get_global_vars()[0]]


def dev_calls(node, name):
    return find_all(node, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
                    c.op.name == f"tl.device.{name}")


def block_threads(func) -> int:
    (a,) = find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == "thread_extent" and
                    a.node.thread_tag == "threadIdx.x")
    return int(a.value)


def regions(func) -> dict:
    """(offset, count) -> the region's body, for each thread-group region."""
    return {(g.offset, g.count): a.body for a in
            find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == GROUP_ATTR)
            for g in [group_of(a)]}


def assert_loads_each_block_itself(func):
    """A cluster GEMM without multicast: no multicast load, no arrive on another block's
    barrier, and the empty barriers count the block's own two consumer warp groups."""
    assert split_summary(func)["arrive_counts"] == [1, 1, 1, 2, 2, 2]
    assert not dev_calls(func.body, "tma_load_multicast")
    assert not dev_calls(func.body, "mbarrier_arrive_remote_cta")


def split_summary(func):
    """Printed: block size, each region with its TMA loads, waits, arrivals and setmaxnreg."""
    out = {"threads": block_threads(func)}
    for (off, cnt), body in sorted(regions(func).items()):
        regs = [(int(c.args[0]), bool(c.args[1])) for c in dev_calls(body, "setmaxnreg")]
        out[(off, cnt)] = dict(tma=len(dev_calls(body, "tma_load")),
                               wait=len(dev_calls(body, "mbarrier_wait")),
                               arrive=len(dev_calls(body, "mbarrier_arrive")),
                               arm=len(dev_calls(body, "mbarrier_arrive_expect_tx")),
                               regs=regs)
    out["arrive_counts"] = [int(c.args[1]) for c in dev_calls(func.body, "mbarrier_init")]
    print(out)
    return out


# the split ---------------------------------------------------------------------------------
def test_gemm_two_consumer_groups_split_and_registers():
    f = lowered(matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256))
    s = split_summary(f)
    assert s["threads"] == 384  # 256 user threads + a producer warp group after them
    # consumers wait on full, arrive on empty (for the previous slot, once this iteration's
    # wgmmas are issued, and for the last slot after the loop), raise their registers; no TMA
    assert s[(0, 256)] == dict(tma=0, wait=1, arrive=2, arm=0, regs=[(240, True)])
    # the producer waits on empty, arms full with expect_tx, issues the loads (A; B's 256-byte
    # rows as two 128-byte-swizzled panels), gives registers back
    assert s[(256, 128)] == dict(tma=3, wait=1, arrive=0, arm=1, regs=[(24, False)])
    # full: one arrival (the producer's arrive.expect_tx); empty: one per consumer warp group
    # (they read the slot only through wgmma, complete after the group's wait)
    assert s["arrive_counts"] == [1, 1, 1, 2, 2, 2]
    (arm,) = dev_calls(f.body, "mbarrier_arrive_expect_tx")
    assert int(arm.args[1]) == (128 * 64 + 64 * 128) * 2
    text = f.script()
    # only the producer group's first thread issues; consumers keep tx as the user wrote it
    assert "if tx - 256 == 0:" in text and "if tx < 256:" in text and "if tx >= 256:" in text


def test_gemm_one_consumer_group_keeps_its_registers():
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3, threads=128))
    s = split_summary(f)
    assert s["threads"] == 256 and s["arrive_counts"] == [1, 1, 1, 1, 1, 1]
    # a 256-thread block starts with 248 registers per thread, more than the 240 asked for:
    # no increase, so no decrease either (nobody would take them; ptxas ignores it)
    assert s[(0, 128)]["regs"] == [] and s[(128, 128)]["regs"] == []
    # given explicitly, the producer's decrease stays
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3, threads=128),
                **{"tl.ws_producer_max_nreg": 40})
    assert split_summary(f)[(128, 128)]["regs"] == [(40, False)]


def test_disable_warp_specialized():
    f = lowered(matmul(512, 512, 512, 128, 64, 64, num_stages=3),
                **{"tl.disable_warp_specialized": True})
    assert block_threads(f) == 128 and not regions(f) and not dev_calls(f.body, "setmaxnreg")


def test_register_numbers_from_configs_and_the_pool_check():
    prog = matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256)
    s = split_summary(lowered(prog, **{"tl.ws_producer_max_nreg": 40,
                                       "tl.ws_consumer_max_nreg": 232}))
    assert s[(0, 256)]["regs"] == [(232, True)] and s[(256, 128)]["regs"] == [(40, False)]
    # 128 x (24 + 2 x 248) = 66560 > 64512 (384 threads x 168): would wait forever
    with pytest.raises(tilelang.LoweringError, match="exceed the 64512 a block of 384 threads"):
        lowered(prog, **{"tl.ws_consumer_max_nreg": 248})
    with pytest.raises(tilelang.LoweringError, match="multiple of 8 in 24..256"):
        lowered(prog, **{"tl.ws_producer_max_nreg": 20})


def test_default_registers_are_lowered_to_fit_three_consumer_groups():
    f = lowered(matmul(512, 384, 512, 192, 128, 64, num_stages=2, threads=384))
    s = split_summary(f)
    assert s["threads"] == 512
    # pool 65536 = 128 x 512: 24 + 3 x 160 = 504 fits, 24 + 3 x 240 would not
    assert s[(0, 384)]["regs"] == [(160, True)] and s[(384, 128)]["regs"] == [(24, False)]


def test_copy_before_the_loop_stays_with_the_consumers():
    f = lowered(q_then_loop())
    s = split_summary(f)
    body = regions(f)
    # the Q tile: a synchronous TMA load by the consumers (arm, load, wait on its barrier)
    assert s[(0, 128)]["tma"] == 1 and s[(0, 128)]["arm"] == 1
    assert s[(128, 128)]["tma"] == 1  # the K tiles
    # full x2, empty x2 (one consumer warp group), and the Q tile's own barrier
    assert sorted(s["arrive_counts"]) == [1, 1, 1, 1, 1]
    assert "Q_s" not in body[(128, 128)].script()


def test_two_pipelined_loops_get_two_rings():
    f = lowered(two_loops())
    s = split_summary(f)
    assert s["arrive_counts"] == [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    assert s[(128, 128)]["tma"] == 6 and s[(128, 128)]["wait"] == 2
    # two GEMM loops, each releasing its previous slot in the loop and its last one after it
    assert s[(0, 128)]["wait"] == 2 and s[(0, 128)]["arrive"] == 4
    for role in regions(f).values():
        text = role.script()
        assert "k_pipe_base = k_pipe_base + 4" in text and "j_pipe_base = j_pipe_base + 4" in text


def test_loop_under_if_is_reached_by_the_producer():
    f = lowered(loop_under_if())
    prod = regions(f)[(128, 128)].script()
    assert "if flag != 0:" in prod and len(dev_calls(regions(f)[(128, 128)], "tma_load")) == 3


def test_fallbacks_say_why(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(loop_under_if(from_memory=True))  # the producer cannot evaluate F[by]
    assert block_threads(f) == 128 and not regions(f)
    assert "its control flow reads memory" in caplog.text
    caplog.clear()
    f = lowered(matmul(512, 512, 100, 128, 64, 64, num_stages=3))  # rows not 16-byte aligned
    assert block_threads(f) == 128 and "not all TMA copies" in caplog.text
    caplog.clear()
    f = lowered(stream_sum(threads=96))
    assert block_threads(f) == 96 and "not whole warp groups of 128" in caplog.text
    caplog.clear()
    f = lowered(stream_sum(threads=1024))
    assert block_threads(f) == 1024 and "1152 threads (max 1024)" in caplog.text


def test_loop_streaming_a_tensor_the_kernel_writes_is_not_specialized(caplog):
    # a producer would load W without waiting for the threads that write it, and TMA reads
    # through the async proxy: cp.async after a block barrier instead
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(write_then_stream())
    assert block_threads(f) == 128 and not regions(f) and not dev_calls(f.body, "tma_load")
    assert "the kernel also writes W" in caplog.text
    text = f.script()
    assert text.index("W[") < text.index("T.device_barrier(0, 128)") < \
        text.index("device_cp_async")


def test_copy_of_a_tensor_the_loop_writes_is_not_issued_ahead(caplog):
    # iteration k writes the tile iteration k + 1 reads: a copy issued ahead would read it
    # before the write
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(recurrence())
    assert not dev_calls(f.body, "tma_load") and not dev_calls(f.body, "cp_async")
    assert "is not issued ahead (the loop writes W)" in caplog.text


@pytest.mark.parametrize("by_tile", [True, False])
def test_in_place_update_of_the_tile_read_is_still_issued_ahead(by_tile):
    f = lowered(in_place_double(by_tile))
    assert dev_calls(f.body, "cp_async") and not dev_calls(f.body, "tma_load")
    x = torch.randn(512, 64).half()
    ref = x * 2
    tilelang.compile(in_place_double(by_tile), target="cpu")(x)
    assert torch.equal(x, ref)


def barrier_then_stream(barrier):
    """stream_sum with the user's ``barrier()`` after clearing the accumulator."""

    @T.prim_func
    def main(A: T.Tensor((512, 64), "float16"), Y: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float32")
            T.clear(F)
            barrier()
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[k * 64, 0], S)
                for i, j in T.Parallel(64, 64):
                    F[i, j] += S[i, j]
            T.copy(F, Y)

    return main


def test_the_user_s_block_barrier_becomes_the_consumer_group_s(caplog):
    # it stayed __syncthreads in the consumers' code, which the producer never reaches: a hang
    for barrier in (lambda: T.sync_threads(), lambda: T.sync_threads(0)):
        f = lowered(barrier_then_stream(barrier))
        bars = dev_calls(regions(f)[(0, 128)], "barrier")
        assert block_threads(f) == 256 and bars
        assert all((int(b.args[0]), int(b.args[1])) == (1, 128) for b in bars)
    caplog.set_level(logging.DEBUG, logger="tilelang")  # a named one may be the group's id
    f = lowered(barrier_then_stream(lambda: T.sync_threads(1, 64)))
    assert block_threads(f) == 128 and "named or grid barriers" in caplog.text


@pytest.mark.parametrize("K", [64, 128])
def test_trip_counts_smaller_than_stages(K):
    f = lowered(matmul(256, 256, K, 128, 64, 64, num_stages=3))
    text = f.script()
    # no prologue: both roles run the same trip count; the ring handles 1 or 2 iterations
    assert text.count(f"for k in range({K // 64}):") == 2
    assert split_summary(f)[(128, 128)]["tma"] == 2


def test_dynamic_trip_count():
    K = T.dynamic("K")
    f = lowered(matmul(256, 256, K, 64, 64, 64, tA=True, num_stages=3))
    s = split_summary(f)
    assert s["threads"] == 256 and s[(128, 128)]["tma"] == 2
    assert "k_pipe_base = k_pipe_base + T.max((K + 63) // 64, 0)" in regions(f)[(128, 128)].script()


# a loop bound held in a kernel scalar ------------------------------------------------------
def scalar_bound(S=256, D=64, bm=64, bn=64, threads=128, bound="blocks"):
    """Attention-shaped (a Q tile before the loop), with the trip count in kernel scalars:
    ``blocks``: ``n = min(ceildiv(S, bn), ceildiv((bx + 1) bm, bn))`` (a causal attention's
    bound, from the block index and constants) and ``m = n`` (a scalar defined by another);
    ``memory``: ``n = L[bx]``, read from a tensor.  O[r] = sum over the first ``m`` K tiles of
    the rows of Q K^T."""

    @T.prim_func
    def main(Q: T.Tensor((S, D), "float16"), K: T.Tensor((S, D), "float16"),
             L: T.Tensor((S // bm,), "int32"), O: T.Tensor((S,), "float32")):
        with T.Kernel(S // bm, threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            acc = T.alloc_fragment((bm, bn), "float32")
            row = T.alloc_fragment((bm,), "float32")
            tot = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(tot)
            if bound == "memory":
                n = L[bx]
            else:
                n = T.min(T.ceildiv(S, bn), T.ceildiv((bx + 1) * bm, bn))
            m = T.alloc_var("int32")
            m = n
            for k in T.Pipelined(m, num_stages=2):
                T.copy(K[k * bn, 0], K_s)
                T.clear(acc)
                T.gemm(Q_s, K_s, acc, transpose_B=True)
                T.reduce_sum(acc, row, dim=1)
                for i in T.Parallel(bm):
                    tot[i] += row[i]
            T.copy(tot, O[bx * bm])

    return main


def test_loop_bound_in_scalars_is_recomputed_by_the_producer(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(scalar_bound())
    assert "warp specialization off" not in caplog.text
    s = split_summary(f)
    assert s["threads"] == 256 and s[(128, 128)]["tma"] == 1 and s[(0, 128)]["tma"] == 1
    prod = regions(f)[(128, 128)]
    # the producer binds the variable's value itself and reads no per-thread memory (``n``,
    # assigned once, is already its expression: ScalarBindings)
    binds = {b.var.name: b.value for b in find_all(prod, tirx.Bind)}
    assert "m" in binds and "n" not in binds, prod.script()
    assert "bx" in str(binds["m"]) and not find_all(
        prod, tvm.ir.TensorLoad, lambda ld: ld.source.name in ("n", "m"))
    (loop,) = [x for x in find_all(prod, tirx.For) if x.loop_var.name == "k"]
    assert loop.extent.same_as(find_all(prod, tirx.Bind, lambda b: b.var.name == "m")[0].var)
    # the consumers keep the user's scalars
    cons = regions(f)[(0, 128)]
    assert find_all(cons, tirx.BufferStore, lambda st: st.buffer.name == "m")
    assert "Q_s" not in prod.script()


def test_loop_bound_read_from_a_tensor_falls_back(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(scalar_bound(bound="memory"))
    assert block_threads(f) == 128 and not regions(f)
    assert "loop over k: its control flow reads memory (m; m = n; n = L[bx])" in caplog.text



@pytest.mark.parametrize("causal", [False, True])
def test_attention_example_is_specialized_q_stays_with_the_consumers(causal):
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                    "flash_attention"))
    from example_mha_fwd import flashattn

    f = lowered(flashattn(8, 16, 4096, 128, causal, block_M=128, block_N=128, num_stages=2,
                          threads=256))
    s = split_summary(f)
    # Q (two 128-byte panels) loaded by the consumers; K and V (two panels each) by the producer
    assert s["threads"] == 384 and s[(0, 256)]["tma"] == 2 and s[(256, 128)]["tma"] == 4
    prod = regions(f)[(256, 128)]
    assert "Q_shared" not in prod.script()
    # the trip count (a constant, or causal an expression of bx assigned once) needs no
    # per-thread scalar the producer would have to recompute
    assert not find_all(prod, tirx.Bind)


def scaled_loads(M=256, N=128, K=256, bm=128, bn=128, bk=64, threads=128):
    """A pipelined loop whose consumers also read A's tile with ordinary loads."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32"), S: T.Tensor((M,), "float32")):
        with T.Kernel(N // bn, M // bm, threads=threads) as (bx, by):
            A_s = T.alloc_shared((bm, bk), "float16")
            B_s = T.alloc_shared((bk, bn), "float16")
            C_f = T.alloc_fragment((bm, bn), "float32")
            r = T.alloc_fragment((bm,), "float32")
            T.clear(C_f)
            T.clear(r)
            for k in T.Pipelined(K // bk, num_stages=3):
                T.copy(A[by * bm, k * bk], A_s)
                T.copy(B[k * bk, bx * bn], B_s)
                T.gemm(A_s, B_s, C_f)
                for i in T.Parallel(bm):
                    r[i] += A_s[i, 0]
            T.copy(C_f, C[by * bm, bx * bn])
            T.copy(r, S[by * bm])

    return main


def test_threads_reading_the_slot_each_arrive():
    """A consumer that reads the slot with ordinary loads: every consumer thread arrives on
    the empty barrier (its own reads end when it arrives); the accumulator is the gemm's own,
    so the release is still deferred (two arrival sites: in the loop and after it)."""
    f = lowered(scaled_loads())
    s = split_summary(f)
    assert s["threads"] == 256 and s["arrive_counts"] == [1, 1, 1, 128, 128, 128]
    assert s[(0, 128)]["arrive"] == 2


# a persistent kernel: the pipelined loop inside the loop over tiles -----------------------------
def test_persistent_kernel_is_specialized_with_its_own_loop_variables():
    """The producer walks the same tiles as the consumers, in loops of its own: sharing the
    consumers' loop variables made TVM reject the kernel ("Duplicate loop variable")."""
    f = lowered(persistent_gemm())
    s = split_summary(f)
    assert s["threads"] == 384 and s[(256, 128)]["tma"] > 0 and s[(0, 256)]["tma"] == 0
    loops = {(off, cnt): [x.loop_var for x in find_all(body, tirx.For)]
             for (off, cnt), body in regions(f).items()}
    consumer, producer = loops[(0, 256)], loops[(256, 128)]
    assert len(producer) == 2  # the loop over tiles and the pipelined loop
    assert not {v.__chandle__() for v in producer} & {v.__chandle__() for v in consumer}
    src = tilelang.compile(persistent_gemm(), out_idx=[2], target=SM90).get_kernel_source()
    assert src.count("setmaxnreg") >= 2 and "__launch_bounds__(384)" in src


def test_persistent_shared_epilogue_waits_for_its_store_before_the_next_tile():
    """C_s goes out in TMA stores once per tile: the issuing thread waits until they have read
    it, and the consumers' barrier comes before the next tile's writes of C_s."""
    f = lowered(persistent_gemm(shared_epilogue=True))
    (consumer,) = [body for (off, cnt), body in regions(f).items() if off == 0]
    tiles = find_all(consumer, tirx.For)[0]  # the outermost: the loop over tiles
    text = tiles.script()
    assert len(dev_calls(tiles, "tma_store")) == 4  # 128 float32 columns: four 128-byte panels
    store = text.index("T.device_tma_store(")
    assert text.index("T.device_tma_store_wait(0)") > store
    # in each tile: the consumers' barrier, then C_s written, then fence, barrier, stores
    first_write = text.index("C_s[")
    assert text.rindex("T.device_barrier(4, 256)", 0, first_write) < first_write < \
        text.index("T.device_fence_proxy_async_shared()") < store


def ring_depths(func, tiles: dict) -> dict:
    """Tile name -> stages of its ring: the elements of the flat shared buffer of that name
    over the elements of one tile (``tiles``: name -> elements)."""
    return {d.buffer.name: int(d.buffer.shape[0]) // tiles[d.buffer.name]
            for d in find_all(func.body, tirx.DeclBuffer) if d.buffer.name in tiles}


def test_rings_that_do_not_fit_get_fewer_stages_and_stay_specialized(caplog):
    """The persistent kernel's C_s is live across its loop, so its rings cannot take those
    bytes: 6 stages of 32 KiB next to a 64 KiB C_s do not fit, fewer do, and the kernel keeps
    its producer warp group (it used to fall back to the plain pipeline).  When not even two
    stages fit, specialization is off and says why."""
    caplog.set_level(logging.DEBUG, logger="tilelang")
    f = lowered(persistent_gemm(stages=6, shared_epilogue=True))
    (fit,) = [r for r in caplog.records if "stages do not fit" in r.getMessage()]
    depth = int(fit.getMessage().rsplit("; ", 1)[1].split()[0])
    assert "warp specialization of main: loop over k: 6 stages" in fit.getMessage()
    assert 2 <= depth < 6 and ring_depths(f, {"A_s": 128 * 64, "B_s": 64 * 128}) == \
        {"A_s": depth, "B_s": depth}
    assert block_threads(f) == 384
    assert split_summary(f)["arrive_counts"] == [1] * depth + [2] * depth  # two consumer groups
    caplog.clear()
    f = lowered(persistent_gemm(bn=256, bk=128, shared_epilogue=True))  # 2 x 96 + 128 KiB
    assert block_threads(f) == 256 and not regions(f)
    assert "with two stages each), more than the 232448 allowed" in caplog.text


# clusters: TMA multicast of the tiles the blocks of a cluster share ---------------------------
@pytest.mark.parametrize("cluster,shared", [((2, 1), "A_s"), ((1, 2), "B_s")])
def test_cluster_shares_its_tile_by_multicast(cluster, shared):
    """The tile every block of the cluster loads alike (A along a cluster of the grid's x, B
    along y) is multicast, each block issuing its share of the boxes (a tile of one box is cut
    into bands of rows); the consumers of each block arrive on the empty barrier of every
    block of the cluster (counts doubled), and the kernel ends at a cluster barrier."""
    f = lowered(cluster_gemm(cluster=cluster))
    s = split_summary(f)
    assert s["arrive_counts"] == [1, 1, 1, 4, 4, 4]  # empty: 2 warp groups x 2 blocks
    (producer,) = [v for k, v in regions(f).items() if k[0] == 256]
    multicast = dev_calls(producer, "tma_load_multicast")
    # A: 128-byte rows, cut into two bands of 64 rows; B: 256-byte rows, two boxes side by side
    assert len(multicast) == 2
    assert all(int(c.args[3]) == 0b11 and shared in str(c.args[0]) for c in multicast)
    dim = 1 if shared == "A_s" else 0
    offset = tvm.sym.Analyzer().simplify(multicast[1].args[4 + dim] - multicast[0].args[4 + dim])
    assert int(offset) == 64
    issuers = [i for i in find_all(producer, tirx.IfThenElse)
               if dev_calls(i.then_case, "tma_load_multicast") and "block_rank" in str(i.condition)]
    assert sorted(str(i.condition)[-1] for i in issuers) == ["0", "1"]  # one box each
    (consumer,) = [v for k, v in regions(f).items() if k[0] == 0]
    # a release at CTA scope: the cluster-scope one is a GPU-wide memory barrier per arrive
    assert not dev_calls(consumer, "mbarrier_arrive_remote")
    remote = dev_calls(consumer, "mbarrier_arrive_remote_cta")
    assert sorted(int(c.args[1]) for c in remote) == [0, 0, 1, 1]  # in the loop and after
    src = tilelang.compile(cluster_gemm(cluster=cluster), out_idx=[2], target=SM90) \
        .get_kernel_source()
    assert "multicast__cluster" in src
    assert "tl::mbarrier_arrive_remote_cta(" in src and "tl::mbarrier_arrive_remote(" not in src
    # every block's barriers exist before any multicast; no block leaves before the others'
    # last arrivals on its barriers
    assert src.count("tl::cluster_sync();") == 2
    assert src.rstrip().removesuffix("}").rstrip().endswith("tl::cluster_sync();")


def test_cluster_tile_of_stacked_slices_is_not_cut_into_bands():
    """A box of several 2-D slices lands slice after slice: halving its rows would put the
    second slice's rows into the first slice.  Such a tile is multicast whole, by rank 0."""
    f = lowered(stacked_slices_sum(64, blocks=2))
    assert len(dev_calls(f.body, "tma_load_multicast")) == 1
    (enc,) = find_all(f.body, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
                      c.op.name == "tirx.tensormap_encode_tiled")
    assert [int(b) for b in enc.args[7:10]] == [64, 64, 2]  # the box: whole slices


def test_cluster_tile_of_a_4d_tensor_is_cut_into_bands_along_its_rows():
    """A BSHD tile (the box's dim 1 is the unit head dim): the bands cut the sequence rows."""

    @T.prim_func
    def main(K: T.Tensor((1, 1024, 2, 64), "float16"), Y: T.Tensor((2, 64, 64), "float32")):
        with T.ClusterKernel(2, threads=128, cluster_dims=(2, 1, 1)) as bx:
            K_s = T.alloc_shared((64, 64), "float16")
            F = T.alloc_fragment((64, 64), "float32")
            T.clear(F)
            for k in T.Pipelined(16, num_stages=2):
                T.copy(K[0, k * 64:(k + 1) * 64, 1, :], K_s)
                for r, c in T.Parallel(64, 64):
                    F[r, c] += K_s[r, c]
            T.copy(F, Y[bx, :, :])

    f = lowered(main)
    first, second = dev_calls(f.body, "tma_load_multicast")
    assert int(tvm.sym.Analyzer().simplify(second.args[6] - first.args[6])) == 32  # seq rows
    (enc,) = find_all(f.body, tvm.ir.Call, lambda c: isinstance(c.op, tvm.ir.Op) and
                      c.op.name == "tirx.tensormap_encode_tiled")
    assert [int(b) for b in enc.args[9:13]] == [64, 1, 32, 1]


def test_cluster_whose_blocks_run_different_iterations_is_not_multicast(caplog):
    with caplog.at_level(logging.DEBUG, logger="tilelang"):
        f = lowered(cluster_gemm(ragged_range=True))
    assert "no TMA multicast for loop 0: its range" in caplog.text
    assert_loads_each_block_itself(f)


def test_tile_shared_by_a_part_of_the_cluster_is_multicast_within_it():
    """In a 2x2 cluster the A tile is alike along x only (the blocks of ranks 0, 1 load one A
    tile, those of ranks 2, 3 another) and the B tile along y only (ranks 0, 2 and 1, 3): each
    is multicast within its pairs, every block issuing one band of each; the consumers arrive
    on the empty barriers of all four blocks."""
    f = lowered(cluster_gemm(cluster=(2, 2)))
    assert split_summary(f)["arrive_counts"] == [1, 1, 1, 8, 8, 8]  # 2 warp groups x 4 blocks
    (producer,) = [v for k, v in regions(f).items() if k[0] == 256]
    issuers = {}
    for branch in find_all(producer, tirx.IfThenElse, lambda i: "block_rank" in str(i.condition)
                           and dev_calls(i.then_case, "tma_load_multicast")):
        for c in dev_calls(branch.then_case, "tma_load_multicast"):
            tile = "A" if "A_s" in str(c.args[0]) else "B"
            issuers.setdefault((tile, int(c.args[3])), []).append(int(str(branch.condition)[-1]))
    assert {k: sorted(v) for k, v in issuers.items()} == {
        ("A", 0b0011): [0, 1], ("A", 0b1100): [2, 3], ("B", 0b0101): [0, 2], ("B", 0b1010): [1, 3]}
    (consumer,) = [v for k, v in regions(f).items() if k[0] == 0]
    remote = dev_calls(consumer, "mbarrier_arrive_remote_cta")
    assert sorted({int(c.args[1]) for c in remote}) == [0, 1, 2, 3]
    src = tilelang.compile(cluster_gemm(cluster=(2, 2)), out_idx=[2], target=SM90) \
        .get_kernel_source()
    assert src.count("multicast__cluster(tvm_builtin_cuda_cvta") == 8  # 2 tiles x 4 issuers
    assert "tl::cluster_sync();" in src


def test_cluster_tile_alike_along_no_cluster_axis_is_not_multicast(caplog):
    """A 2x2 cluster whose A tile lands in a tile chosen by the block's x index: A depends on
    y by its box and on x by its tile, so no two blocks load it alike; B is still multicast
    along y, and the debug log names the A copy."""
    with caplog.at_level(logging.DEBUG, logger="tilelang"):
        f = lowered(cluster_gemm(cluster=(2, 2), slot_by_block=True))
    tiles = {str(c.args[0]).split("[")[0].split("(")[-1]
             for c in dev_calls(f.body, "tma_load_multicast")}
    assert tiles == {"B_s"}, tiles
    assert "-> A_s" in caplog.text and "its source box and destination tile may differ " \
        "between any two blocks" in caplog.text


def test_cluster_tile_whose_box_reads_the_block_rank_is_not_multicast():
    """A box built from ``T.block_rank_in_cluster()`` (a device op, not a pure function)
    may differ between blocks whose block indices agree: that copy is loaded by each block,
    the others are still multicast."""
    M = N = K = 256

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.ClusterKernel(N // 128, M // 128, threads=256, cluster_dims=(2, 2, 1)) as (bx, by):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(K // 64, num_stages=2):
                T.copy(A[(by + T.block_rank_in_cluster()) % 2 * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    tiles = {str(c.args[0]).split("[")[0].split("(")[-1]
             for c in dev_calls(lowered(main).body, "tma_load_multicast")}
    assert tiles == {"B_s"}, tiles


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("example", ["example_mha_fwd", "example_mha_fwd_bhsd",
                                     "example_gqa_fwd_bshd"])
def test_attention_cluster_multicasts_k_and_v_not_q(example, causal):
    """The attention examples in clusters of two query tiles: the K and V tiles of the key
    loop are alike in both blocks and multicast; the Q tile (one per block) is not.  Causal:
    the key loop's length depends on the query tile, so nothing is multicast."""
    flashattn = example_module(f"flash_attention/{example}.py").flashattn
    f = lowered(flashattn(2, 4, 1024, 128, causal, block_M=128, block_N=128, num_stages=3,
                          threads=256, cluster=2))
    multicast = dev_calls(f.body, "tma_load_multicast")
    tiles = sorted({str(c.args[0]).split("[")[0].split("(")[-1] for c in multicast})
    assert tiles == ([] if causal else ["K_shared", "V_shared"]), tiles
    assert bool(dev_calls(f.body, "mbarrier_arrive_remote_cta")) != causal


def test_cluster_tile_whose_destination_differs_between_blocks_is_not_multicast(caplog):
    """A multicast writes the issuer's destination in every block: a copy of the same box to
    a tile chosen by the block index is loaded by each block itself."""
    with caplog.at_level(logging.DEBUG, logger="tilelang"):
        f = lowered(cluster_gemm(slot_by_block=True))
    assert "its destination tile may differ between any two blocks" in caplog.text
    assert_loads_each_block_itself(f)
