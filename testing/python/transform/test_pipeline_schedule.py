"""A pipelined loop = schedule (pipeline_schedule) x protocol (pipeline_protocol)."""

import pytest
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.device import Mechanism, Memory, effect_of
from tilelang.device import sm80 as device
from tilelang.device.thread_group import ThreadGroup
from tilelang.errors import LoweringError
from tilelang.transform.pipeline_protocol import CpAsyncProtocol, Protocol
from tilelang.transform.pipeline_schedule import plan


def gemm(order=None, stage=None, stages=3):
    @T.prim_func
    def main(A: T.Tensor((128, 128), "float16"), B: T.Tensor((128, 128), "float16"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.clear(C_f)
            for k in T.Pipelined(4, num_stages=stages, order=order, stage=stage):
                T.copy(A[by * 64, k * 32], A_s)
                T.copy(B[k * 32, bx * 64], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 64, bx * 64])

    return main


def lower(func):
    return tilelang.lower(func, target="cuda -arch=sm_80")


@pytest.mark.parametrize("order,stage,msg", [
    ([0, 1], None, r"order=\[0, 1\] has 2 entries, but the loop body has 3 statements"),
    ([0, 0, 1], None, r"order=\[0, 0, 1\] is not a permutation of 0..2"),
    (None, [0, 1], r"stage=\[0, 1\] has 2 entries"),
    (None, [0, 0, 5], r"stage 5, outside 0..2 for num_stages=3"),
    (None, [1, 0, 0], r"statement 2 \(stage 0\) reads a tile that statement 0 produces at the "
                      r"later stage 1"),
])
def test_inconsistent_schedules_name_the_loop(order, stage, msg):
    with pytest.raises(LoweringError, match=msg) as err:
        lower(gemm(order, stage))
    assert "test_pipeline_schedule.py" in str(err.value)  # the user's source line


def test_default_schedule_puts_producers_first():
    f = gemm()
    loop = [s for s in _loops(f) if "num_stages" in s.annotations][0]
    stmts = list(loop.body.seq)
    sched = plan(loop, stmts, lambda i: i < 2, lambda i: set(), lambda i: set())
    assert sched.stage == (0, 0, 1) and sched.order == (0, 1, 2) and sched.producers == [0, 1]
    consumer_first = gemm(order=[1, 2, 0])
    loop = [s for s in _loops(consumer_first) if "num_stages" in s.annotations][0]
    sched = plan(loop, list(loop.body.seq), lambda i: i < 2, lambda i: set(), lambda i: set())
    assert sched.order == (2, 0, 1) and sched.last_producer_position == 2


def _loops(f):
    import tvm_ffi

    out = []
    tvm_ffi.structural_walk(f.body, (tirx.For, out.append))
    return out


def test_cp_async_protocol_places_commit_wait_and_group_barrier():
    p = CpAsyncProtocol(3, ThreadGroup(0, 128), 0)
    k = tirx.Var("k", "int32")
    ready = p.ready(k, k % 3)
    assert [effect_of(s).waits for s in ready][:1] == [Mechanism.CP_ASYNC_GROUP]
    assert int(ready[0].value.args[0]) == 1  # at most n - 2 groups stay in flight
    assert device.barrier_group(ready[1].value) == (0, 128)
    assert effect_of(p.produced(k, k)[0]).commits == Mechanism.CP_ASYNC_GROUP
    assert p.acquire(k, k) == [] and p.release(k, k) == []
    drain = p.drain()
    assert int(drain[0].value.args[0]) == 0
    # the same protocol in a warp group uses that group's named barrier
    q = CpAsyncProtocol(2, ThreadGroup(128, 128), 2)
    assert device.barrier_group(q.ready(k, k)[1].value) == (2, 128)
    assert issubclass(CpAsyncProtocol, Protocol)


def test_effect_declarations():
    cp = effect_of(device.cp_async(tirx.const(0, "int32"), tirx.const(0, "int32"), 16,
                                   tirx.const(True, "bool")))
    assert cp.completes_on == Mechanism.CP_ASYNC_GROUP
    assert [(a.args, a.memory, a.write) for a in cp.accesses] == [
        ((0,), Memory.SHARED, True), ((1,), Memory.GLOBAL, False)]
    bar = effect_of(device.barrier(1, 64))
    assert bar.sync is not None and bar.sync.barrier_arg == 0 and bar.sync.count_arg == 1
    gemm_ss = device.GEMM_SS.effect
    assert [a.memory for a in gemm_ss.reads] == [Memory.SHARED, Memory.REGISTER]
    assert not gemm_ss.writes_visible_memory()
    from tilelang.device import atomics

    assert atomics.RMW["add"].effect.writes_visible_memory()
    assert device.ALL_REDUCE_GROUP.effect.sync.at_entry


def test_a_schedule_over_statement_groups_is_not_followed(caplog):
    # the public TileLang's stage numbers of groups stage compute across iterations; read as
    # this pipeline's stages (0: producers issued ahead) they would run the gemm ahead
    import logging

    caplog.set_level(logging.DEBUG, logger="tilelang")

    @T.prim_func
    def main(A: T.Tensor((128, 32), "float16"), C: T.Tensor((32, 32), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((32, 32), "float16")
            C_f = T.alloc_fragment((32, 32), "float32")
            T.clear(C_f)
            for k in T.Pipelined(4, num_stages=2, order=[-1, 0], stage=[-1, 1],
                                 group=[[0], [1]]):
                T.copy(A[k * 32, 0], A_s)
                T.gemm(A_s, A_s, C_f)
            T.copy(C_f, C)

    (loop,) = [x for x in tilelang.ir_utils.find_all(main.body, tirx.For)
               if "num_stages" in x.annotations]
    assert "tl_pipeline_order" not in loop.annotations and "tl_pipeline_group" in loop.annotations
    assert "not followed; the automatic schedule is used" in caplog.text
