"""PingPongConsumers at pass level: the consumer warp groups of a warp-specialized attention
loop take turns issuing their first gemm, through named barriers whose use is balanced and
cannot deadlock for any trip count (checked by running the turn protocol of the lowered IR on
a model of PTX named barriers, for every query block of a dynamic sequence length); loops with one gemm, one consumer group or a barrier inside get
no turns.  The GPU runs of these kernels are in testing/python/cuda/test_cuda_ws_attention.py."""

import os
import sys

import pytest
import tvm
import tvm_ffi
from tvm import tirx
from tvm.sym import Analyzer

import tilelang
import tilelang.language as T
from tilelang.device.effects import device_op_of
from tilelang.device.sync import NAMED_BARRIER_ARRIVE, SYNC_NAMED, SYNC_PARTIAL
from tilelang.device.thread_group import CONSUMER_BODY_ATTR, ThreadGroup
from tilelang.ir_utils import find_all, substitute
from tilelang.transform.consumer_pingpong import PAIR, turn_barriers

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                "flash_attention"))
from example_mha_fwd import flashattn  # noqa: E402
from programs import matmul  # noqa: E402

SM90 = "cuda -arch=sm_90a"


def lowered(prog):
    mod = tilelang.lower(prog, target=SM90, stage="tile")
    return mod[mod.get_global_vars()[0]]


def consumer_body(func):
    (attr,) = find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == CONSUMER_BODY_ATTR)
    return attr.body


def turn_calls(node):
    return find_all(node, tvm.ir.Call, lambda c: device_op_of(c) in (
        SYNC_PARTIAL, SYNC_NAMED, NAMED_BARRIER_ARRIVE) and int(c.args[1]) == PAIR)


# --- running the turn protocol ------------------------------------------------------------
def events(body, values: dict) -> list:
    """The turn-barrier operations one thread performs, in order: ("sync" | "arrive", barrier
    id), with ``values`` giving the variables by name (the thread index ``tx``, block indices,
    size variables); loops run their trip count, each iteration with its own loop variable."""
    ana = Analyzer()
    env = {}

    def on_var(v):
        if v.name in values:
            env[v] = tirx.const(values[v.name], v.dtype)

    tvm_ffi.structural_walk(body, (tvm.ir.Var, on_var))

    def value(e) -> int:
        v = ana.simplify(substitute(e, env))
        assert isinstance(v, tirx.IntImm), f"{e} is not known from {sorted(values)}"
        return int(v)

    out = []

    def run(s):
        if not turn_calls(s):
            return
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                run(x)
        elif isinstance(s, tirx.For):
            lo = value(s.min)
            for i in range(value(s.extent)):
                env[s.loop_var] = tirx.const(lo + i, s.loop_var.dtype)
                run(s.body)
        elif isinstance(s, tirx.IfThenElse):
            if value(s.condition):
                run(s.then_case)
            elif s.else_case is not None:
                run(s.else_case)
        elif isinstance(s, tirx.Evaluate):
            kind = "arrive" if device_op_of(s) is NAMED_BARRIER_ARRIVE else "sync"
            out.append((kind, value(s.value.args[0])))
        else:
            run(s.body)

    run(body)
    return out


def run_turns(programs: list) -> None:
    """Runs each warp group's operations on PTX named barriers of two warp groups' threads (a
    barrier's phase completes when two groups have reached it; ``barrier.sync`` blocks until
    then); raises on a deadlock, on a group reaching one phase twice (which would complete it
    without its partner) and on arrivals left over at the end."""
    pos = [0] * len(programs)
    phase: dict = {}  # barrier id -> groups in its current phase
    waiting: dict = {}  # group -> barrier it is blocked on
    while True:
        moved = False
        for g, prog in enumerate(programs):
            if g in waiting or pos[g] == len(prog):
                continue
            kind, bar = prog[pos[g]]
            members = phase.setdefault(bar, [])
            assert g not in members, f"group {g} reaches barrier {bar} twice in one phase"
            members.append(g)
            if len(members) == 2:
                for other in members:
                    if waiting.get(other) == bar:
                        del waiting[other]
                        pos[other] += 1
                phase[bar] = []
                if kind == "arrive" or g not in waiting:
                    pos[g] += 1
            elif kind == "sync":
                waiting[g] = bar
            else:
                pos[g] += 1
            moved = True
        if all(p == len(prog) for p, prog in zip(pos, programs)):
            break
        assert moved, f"deadlock: groups wait on {waiting}"
    assert all(not m for m in phase.values()), f"arrivals left over: {phase}"


# --- tests -------------------------------------------------------------------------------
def attention(causal=False, block_M=128, threads=256, stages=3, S=1024):
    return flashattn(2, 4, S, 128, causal, block_M=block_M, block_N=128, num_stages=stages,
                     threads=threads)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_groups_take_turns_at_the_first_gemm(causal):
    f = lowered(attention(causal))
    body = consumer_body(f)
    (loop,) = [x for x in find_all(body, tirx.For) if turn_calls(x.body)]
    # (the descriptors ShareDescriptors binds before a run of wgmmas compute no turn)
    stmts = [s for s in loop.body.seq if not isinstance(s, tirx.Bind)]
    ops = [device_op_of(s) for s in stmts]
    names = [d.name if d is not None else None for d in ops]
    wait = names.index("tl.device.sync_threads_partial")
    (signal,) = [i for i, x in enumerate(stmts) if isinstance(x, tirx.IfThenElse) and
                 turn_calls(x)]
    first_mma, first_commit = names.index("tl.device.wgmma_ss"), \
        names.index("tl.device.wgmma_commit")
    # the turn holds exactly the first group's wgmmas and its commit
    assert wait == first_mma - 1 and signal == first_commit + 1
    assert set(names[wait + 1:first_commit]) == {"tl.device.wgmma_ss"}
    assert names.count("tl.device.wgmma_commit") == 2  # the P V group is not in a turn
    # warp group i waits on 15 - i and passes the turn to 15 - (i + 1) % 2; in the last
    # iteration (8 for 1024 keys) warp group 1 keeps it
    at = dict(k=0, bx=7, by=0, bz=0)
    assert events(loop.body, dict(at, tx=0)) == [("sync", 15), ("arrive", 14)]
    assert events(loop.body, dict(at, tx=128)) == [("sync", 14), ("arrive", 15)]
    assert events(loop.body, dict(at, tx=128, k=7)) == [("sync", 14)]


@pytest.mark.parametrize("seq_len", [0, 100, 256, 640])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("groups", [2, 3])
def test_turns_are_balanced_and_never_deadlock(groups, causal, seq_len):
    """A dynamic sequence length: 0, 1, 2 and 5 key tiles (causal: 1 .. 5 for the query block
    at bx), for every query block.  The first key tile's S = Q K^T is issued before the loop
    (DeferConsumerGemm), so the loop, and the turns, run for the tiles after it."""
    S = T.dynamic("S")
    bm = 64 * groups
    f = lowered(attention(causal, block_M=bm, threads=128 * groups, stages=2, S=S))
    body = consumer_body(f)
    ids = turn_barriers(ThreadGroup(0, 128 * (groups + 1)), groups)
    for bx in range(max(1, -(-seq_len // bm))):
        tiles = -(-seq_len // 128)
        if causal:
            tiles = min(tiles, -(-(bx + 1) * bm // 128))
        at = dict(S=seq_len, bx=bx, by=0, bz=0)
        programs = [events(body, dict(at, tx=128 * g)) for g in range(groups)]
        used = {b for p in programs for _, b in p}
        assert used == (set(ids) if tiles >= 2 else set())
        run_turns(programs)


def test_the_model_catches_an_unbalanced_protocol():
    """The checker itself: a turn passed without the first-turn arrival deadlocks, and a
    group that arrives twice before its partner's wait would complete a phase alone."""
    with pytest.raises(AssertionError, match="deadlock"):
        run_turns([[("sync", 15), ("arrive", 14)], [("sync", 14), ("arrive", 15)]])
    with pytest.raises(AssertionError, match="twice"):
        run_turns([[("arrive", 15), ("arrive", 15)], [("sync", 14), ("sync", 15)]])
    with pytest.raises(AssertionError, match="left over"):
        run_turns([[("arrive", 15)], []])
    run_turns([[("sync", 15), ("arrive", 14)], [("arrive", 15), ("sync", 14)]])


def test_a_gemm_loop_with_one_group_gets_no_turns():
    f = lowered(matmul(512, 512, 512, 128, 256, 64, num_stages=3, threads=256))
    assert find_all(f.body, tirx.AttrStmt, lambda a: a.attr_key == CONSUMER_BODY_ATTR)
    assert not turn_calls(f.body)


def test_one_consumer_group_gets_no_turns():
    f = lowered(attention(block_M=64, threads=128))
    assert find_all(f.body, tirx.AttrStmt, lambda a: a.attr_key == CONSUMER_BODY_ATTR)
    assert not turn_calls(f.body)


def shared_p_attention(S=512, D=64, bm=128, bn=64, threads=256):
    """Attention-shaped, with P staged through shared memory: the consumers' barrier between
    the copy of P and the second gemm lies inside the loop."""

    @T.prim_func
    def main(Q: T.Tensor((S, D), "float16"), K: T.Tensor((S, D), "float16"),
             V: T.Tensor((S, D), "float16"), O: T.Tensor((S, D), "float16")):
        with T.Kernel(S // bm, threads=threads) as bx:
            Q_s = T.alloc_shared((bm, D), "float16")
            K_s = T.alloc_shared((bn, D), "float16")
            V_s = T.alloc_shared((bn, D), "float16")
            P_s = T.alloc_shared((bm, bn), "float16")
            s = T.alloc_fragment((bm, bn), "float32")
            o = T.alloc_fragment((bm, D), "float32")
            T.copy(Q[bx * bm, 0], Q_s)
            T.clear(o)
            for k in T.Pipelined(S // bn, num_stages=2):
                T.copy(K[k * bn, 0], K_s)
                T.copy(V[k * bn, 0], V_s)
                T.clear(s)
                T.gemm(Q_s, K_s, s, transpose_B=True)
                T.copy(s, P_s)
                T.gemm(P_s, V_s, o)
            T.copy(o, O[bx * bm, 0])

    return main


def test_a_barrier_inside_the_loop_keeps_the_groups_out_of_turns():
    f = lowered(shared_p_attention())
    body = consumer_body(f)
    (loop,) = [x for x in find_all(body, tirx.For) if x.loop_var.name == "k"]
    assert find_all(loop.body, tvm.ir.Call, lambda c: device_op_of(c) is not None and
                    device_op_of(c).effect.sync is not None)
    assert not turn_calls(f.body)


def test_turn_barrier_ids_stay_above_the_groups_ids():
    assert turn_barriers(ThreadGroup(0, 384), 2) == [15, 14]  # group ids 1..6
    assert turn_barriers(ThreadGroup(0, 512), 3) == [15, 14, 13]  # group ids 1..10
    assert turn_barriers(ThreadGroup(0, 640), 4) is None  # group ids 1..15
