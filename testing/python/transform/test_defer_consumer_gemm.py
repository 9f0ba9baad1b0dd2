"""DeferConsumerGemm at pass level: in the warp-specialized attention loop, ``P V`` of
iteration k - 1 is issued after ``Q K^T`` of iteration k (first tile's ``Q K^T`` before the
loop, the last ``P V`` after it), both without a wait of their own; loops where that would
change a value are left alone.  GPU runs: testing/python/cuda/test_cuda_ws_attention.py and
testing/python/examples/test_flash_attention_sm90.py."""

import logging
import os
import sys

import pytest
import tvm
from tvm import tirx

import tilelang.language as T
from tilelang.device.thread_group import CONSUMER_BODY_ATTR
from tilelang.engine import pipeline
from tilelang.ir_utils import find_all
from tilelang.ops.base import decode
from tilelang.ops.gemm import Gemm

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                "flash_attention"))
from example_mha_fwd import flashattn  # noqa: E402
from programs import matmul  # noqa: E402

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def deferred(prog):
    """The kernel just after DeferConsumerGemm."""
    mod = tvm.tirx.transform.BindTarget(SM90)(tvm.IRModule({"main": prog}))
    for p in pipeline.tile_passes():
        mod = p(mod)
        if p.info.name == "tl.DeferConsumerGemm":
            return mod["main"]
    raise AssertionError("DeferConsumerGemm is not in the pipeline")


def consumer_body(func):
    (attr,) = find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == CONSUMER_BODY_ATTR)
    return attr.body


def gemms(node) -> list:
    return [op for op in (decode(e) for e in find_all(node, tirx.Evaluate))
            if isinstance(op, Gemm)]


def operand(op, name) -> str:
    return str(getattr(op, name).source.name)


def slot(op, name) -> str:
    return str(getattr(op, name).region[0].min)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_issues_p_v_one_iteration_late(causal):
    body = consumer_body(deferred(flashattn(2, 4, 1024, 128, causal, block_M=128,
                                            block_N=128, num_stages=3, threads=256)))
    (loop,) = [x for x in find_all(body, tirx.For) if gemms(x.body)]
    assert int(loop.min) == 1  # iteration 0 without P V runs before the loop
    g1, g2 = gemms(loop.body)
    assert operand(g1, "B") == "K_shared" and operand(g2, "B") == "V_shared"
    k = loop.loop_var.name
    assert slot(g1, "B") == f"(k_pipe_base + {k}) % 3"
    assert slot(g2, "B") == f"(k_pipe_base + ({k} - 1)) % 3"  # the previous iteration's V
    assert int(g1.wg_wait) == int(g2.wg_wait) == -1  # waits go where the results are used
    # the rescale of O moves with P V: it sits between the two gemms
    stmts = list(loop.body.seq)
    pos = [i for i, s in enumerate(stmts) if isinstance(decode(s), Gemm)]
    between = stmts[pos[0] + 1:pos[1]]
    assert [s for s in between if "acc_o" in s.script()]
    outside = gemms(body)
    assert len(outside) == 4  # Q K^T of the first tile, the loop's two, P V of the last tile
    assert operand(outside[0], "B") == "K_shared" and operand(outside[-1], "B") == "V_shared"
    # a causal trip count is not provably positive here: the three parts run under n > 0
    guarded = find_all(body, tirx.IfThenElse, lambda s: bool(gemms(s.then_case)))
    assert bool(guarded) == causal


def test_a_dynamic_trip_count_runs_the_parts_only_when_the_loop_runs():
    S = T.dynamic("S")
    body = consumer_body(deferred(flashattn(2, 4, S, 64, False, block_M=128, block_N=128,
                                            num_stages=2, threads=256)))
    (guard,) = find_all(body, tirx.IfThenElse, lambda s: bool(gemms(s.then_case)))
    assert len(gemms(guard.then_case)) == 4 and "S" in str(guard.condition)


def test_a_gemm_loop_is_left_alone():
    f = deferred(matmul(512, 512, 512, 128, 256, 64, num_stages=3, threads=256))
    (loop,) = [x for x in find_all(consumer_body(f), tirx.For) if gemms(x.body)]
    assert int(loop.min) == 0 and len(gemms(consumer_body(f))) == 1


def o_read_in_the_loop(S=512, D=64, bm=128, bn=64):
    """Attention-shaped, but each iteration also reads O after P V (a running row maximum of
    O): deferring P V would change what that read sees."""

    @T.prim_func
    def main(Q: T.Tensor((S, D), "float16"), K: T.Tensor((S, D), "float16"),
             V: T.Tensor((S, D), "float16"), O: T.Tensor((S, D), "float32"),
             M: T.Tensor((S,), "float32")):
        with T.Kernel(S // bm, threads=256) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            p = T.alloc_fragment((bm, bn), "float16")
            o = T.alloc_fragment((bm, D), "float32")
            m = T.alloc_fragment((bm,), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(o)
            T.fill(m, -T.infinity("float32"))
            for k in T.Pipelined(S // bn, num_stages=2):
                T.copy(K[k * bn, 0], K_s)
                T.copy(V[k * bn, 0], V_s)
                T.clear(s)
                T.gemm(Q_s, K_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(s, p)
                T.gemm(p, V_s, o, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_max(o, m, dim=1, clear=False)
            T.copy(o, O[bx * bm, 0])
            T.copy(m, M[bx * bm])

    return main


def test_a_later_read_of_the_accumulator_keeps_the_order(caplog):
    with caplog.at_level(logging.DEBUG, logger="tilelang"):
        body = consumer_body(deferred(o_read_in_the_loop()))
    (loop,) = [x for x in find_all(body, tirx.For) if gemms(x.body)]
    assert int(loop.min) == 0 and len(gemms(body)) == 2
    assert "would move past a statement that uses what it reads or writes" in caplog.text
