"""DeferAccumulatorFill: attention's masked fill of the score accumulator before ``S += Q K^T``
becomes a cleared gemm followed by adding the mask; other fills stay as written."""

import os
import sys

import pytest
import tvm
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.engine.target import resolve
from tilelang.ir_utils import find_all, peel_parallel
from tilelang.ops.base import decode
from tilelang.ops.gemm import Gemm
from tilelang.transform.accumulator_fill import DeferAccumulatorFill

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                "flash_attention"))
from example_mha_fwd import flashattn  # noqa: E402

SM90 = resolve("cuda -arch=sm_90a")


def deferred(func, target=SM90):
    mod = tvm.IRModule({"main": func.with_attr("target", target)})
    return DeferAccumulatorFill()(mod)["main"]


def gemms(func):
    return [(s, decode(s)) for s in find_all(func.body, tirx.Evaluate)
            if isinstance(decode(s), Gemm)]


def body_after(func, stmt):
    """The statement after ``stmt`` in its sequence."""
    for sq in find_all(func.body, tirx.SeqStmt):
        items = list(sq.seq)
        for i, s in enumerate(items):
            if s.same_as(stmt):
                return items[i + 1] if i + 1 < len(items) else None
    return None


@pytest.mark.parametrize("causal,S", [(True, 1024), (False, 1000)])
def test_masked_score_fill_moves_after_a_cleared_gemm(causal, S):
    f = deferred(flashattn(2, 4, S, 128, causal, block_M=128, block_N=128, num_stages=2,
                           threads=256))
    (qk, op), (pv, op2) = gemms(f)
    assert op.clear_accum and not op2.clear_accum
    nxt = body_after(f, qk)
    # the mask runs only in the blocks where it is not 0 everywhere: causal, from the diagonal
    # on (bx - k <= 0); ragged, the last key block
    assert isinstance(nxt, tirx.IfThenElse)
    assert not find_all(nxt.condition, tirx.Var, lambda v: v.name in ("i", "j"))
    _, _, store = peel_parallel(nxt.then_case)
    assert store.buffer.name == "acc_s"
    # acc_s[i, j] + if_then_else(mask, 0, -inf): the old value is read and the mask added
    assert isinstance(store.value, tirx.Add)
    loads = find_all(store.value.a, tvm.ir.TensorLoad)
    assert loads and loads[0].source.name == "acc_s"
    assert "if_then_else" in str(store.value.b)


def masked(value, clear=False, order=None, dtype="float16"):
    kw = dict(order=[0, 1, 2], stage=[0, 0, 0]) if order else {}

    @T.prim_func
    def k(A: T.Tensor((64, 64), dtype), B: T.Tensor((64, 64), dtype),
          C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((64, 64), dtype)
            B_s = T.alloc_shared((64, 64), dtype)
            acc = T.alloc_fragment((64, 64), "float32")
            for _ in T.Pipelined(2, num_stages=1, **kw):
                T.copy(A, A_s)
                for i, j in T.Parallel(64, 64):
                    acc[i, j] = value(i, j, acc)
                T.gemm(A_s, B_s, acc, transpose_B=True, clear_accum=clear)
            T.copy(acc, C)

    return k


@pytest.mark.parametrize("why,func", [
    ("a constant fill", masked(lambda i, j, acc: T.float32(0))),
    ("a value other than 0 and +-inf", masked(
        lambda i, j, acc: T.if_then_else(i >= j, T.float32(1), -T.infinity("float32")))),
    ("a fill that reads the accumulator", masked(
        lambda i, j, acc: T.if_then_else(i >= j, acc[i, j], -T.infinity("float32")))),
    ("a gemm that clears anyway", masked(
        lambda i, j, acc: T.if_then_else(i >= j, T.float32(0), -T.infinity("float32")),
        clear=True)),
    ("an explicit schedule", masked(
        lambda i, j, acc: T.if_then_else(i >= j, T.float32(0), -T.infinity("float32")),
        order=True)),
    ("32-bit operands (sums may overflow)", masked(
        lambda i, j, acc: T.if_then_else(i >= j, T.float32(0), -T.infinity("float32")),
        dtype="float32")),
])
def test_other_fills_stay(why, func):
    g = deferred(func)
    assert str(g.body) == str(func.body), why


def test_the_rewrite_applies_to_the_masked_fill_and_not_on_the_cpu():
    func = masked(lambda i, j, acc: T.if_then_else(i >= j, T.float32(0),
                                                   -T.infinity("float32")))
    (_, op), = gemms(deferred(func))
    assert op.clear_accum
    cpu = deferred(func, resolve("llvm"))
    assert str(cpu.body) == str(func.body)


@pytest.mark.parametrize("causal,S", [(True, 200), (False, 200)])
def test_rewritten_attention_computes_the_same_on_the_cpu(causal, S):
    """The rewrite is CUDA-only, but the rewritten program is an ordinary one: run on the CPU
    backend (the reference semantics), it gives the same output as the program as written,
    with the mask skipped on the blocks it leaves unchanged."""
    import torch

    from tilelang.transform.accumulator_fill import _Defer

    f = flashattn(1, 2, S, 64, causal, block_M=64, block_N=64, num_stages=1, threads=128)
    g = f.with_body(_Defer()(f.body))
    assert any(op.clear_accum for _, op in gemms(g))
    assert find_all(g.body, tirx.IfThenElse)  # the mask runs only where it changes anything
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, S, 2, 64, dtype=torch.float16) for _ in range(3))
    want = tilelang.compile(f, out_idx=[3], target="cpu")(q, k, v)
    got = tilelang.compile(g, out_idx=[3], target="cpu")(q, k, v)
    assert torch.equal(got, want)


def test_examples_with_an_index_scalar_are_rewritten_in_the_pipeline():
    """The BHSD and GQA examples hold the key index in a scalar (``key = k * block_N + j``);
    after ScalarBindings the fill is the same pattern."""
    from example_gqa_fwd_bshd import flashattn as gqa
    from example_mha_fwd_bhsd import flashattn as bhsd

    from tilelang.engine import pipeline
    from tilelang.transform import pass_config

    for f in (bhsd(1, 8, 256, 128, True, block_M=128, block_N=128, num_stages=2, threads=256),
              gqa(1, 8, 256, 128, True, groups=4, block_M=128, block_N=128, num_stages=2,
                  threads=256)):
        mod = tvm.IRModule({"main": f})
        with pass_config.scope(None), \
                tvm.transform.PassContext(config=pass_config.tvm_config()):
            mod = tirx.transform.BindTarget(SM90)(mod)
            for p in pipeline.tile_passes():
                mod = p(mod)
                if p.info.name == "tl.DeferAccumulatorFill":
                    break
        assert [op.clear_accum for _, op in gemms(mod["main"])] == [True, False]
