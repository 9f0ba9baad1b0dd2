"""Manual control of warp specialization: ``T.set_max_nreg``, ``T.annotate_producer_reg_dealloc``
/ ``T.annotate_consumer_reg_alloc``, and the three-roles example (hand-written ``T.ws``
groups synchronized by mbarriers: no named barrier across its concurrently running groups)."""

import os
import subprocess
import sys

import pytest
import tvm

import tilelang
import tilelang.language as T
from tilelang.ir_utils import find_all

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from programs import example, matmul  # noqa: E402
from test_warp_specialize import dev_calls, lowered, split_summary  # noqa: E402

EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "warp_specialize",
                       "example_three_roles.py")


def annotated_gemm(p, c, M=512, threads=256):
    @T.prim_func
    def main(A: T.Tensor((M, M), "float16"), B: T.Tensor((M, M), "float16"),
             C: T.Tensor((M, M), "float16")):
        with T.Kernel(M // 128, M // 128, threads=threads) as (bx, by):
            T.annotate_producer_reg_dealloc(p)
            T.annotate_consumer_reg_alloc(c)
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(M // 64, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    return main


def test_annotations_choose_the_register_numbers():
    s = split_summary(lowered(annotated_gemm(40, 232)))
    assert s[(0, 256)]["regs"] == [(232, True)] and s[(256, 128)]["regs"] == [(40, False)]
    # the annotations win over the pass configs, and disappear from the IR
    f = lowered(annotated_gemm(32, 224), **{"tl.ws_consumer_max_nreg": 240})
    assert "ws_register_hint" not in f.script()
    assert split_summary(f)[(0, 256)]["regs"] == [(224, True)]
    with pytest.raises(tilelang.LoweringError, match="setmaxnreg.inc would wait forever"):
        lowered(annotated_gemm(24, 256))
    # with warp specialization off they are dropped
    f = lowered(annotated_gemm(40, 232), **{"tl.disable_warp_specialized": True})
    assert "ws_register_hint" not in f.script() and not dev_calls(f.body, "setmaxnreg")


def test_disable_warp_group_reg_alloc():
    """Still specialized (the producer warp group is there), with no setmaxnreg anywhere."""

    @T.prim_func
    def main(A: T.Tensor((512, 512), "float16"), B: T.Tensor((512, 512), "float16"),
             C: T.Tensor((512, 512), "float16")):
        with T.Kernel(4, 4, threads=256) as (bx, by):
            T.disable_warp_group_reg_alloc()
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.clear(C_f)
            for k in T.Pipelined(8, num_stages=3):
                T.copy(A[by * 128, k * 64], A_s)
                T.copy(B[k * 64, bx * 128], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * 128, bx * 128])

    f = lowered(main)
    s = split_summary(f)
    assert s["threads"] == 384 and s[(0, 256)]["regs"] == [] and s[(256, 128)]["regs"] == []
    assert not dev_calls(f.body, "setmaxnreg") and "ws_register_hint" not in f.script()


def test_set_max_nreg_checks_its_arguments():
    with pytest.raises(tilelang.DSLError, match="multiple of 8 in 24..256"):
        T.set_max_nreg(100, 1)
    with pytest.raises(tilelang.DSLError, match="is_inc is 0/1"):
        T.set_max_nreg(240, 2)
    with pytest.raises(tilelang.DSLError, match="multiple of 8 in 24..256"):
        T.annotate_consumer_reg_alloc(300)


def test_three_roles_groups_and_barriers():
    mod = example("warp_specialize/example_three_roles.py")
    f = lowered(mod.three_roles(256))
    regs = [(int(c.args[0]), bool(c.args[1])) for c in dev_calls(f.body, "setmaxnreg")]
    assert regs == [(24, False), (240, True), (240, True)]
    # the groups hand tiles over through mbarriers only: no barrier over two warp groups
    # (one would deadlock the concurrently running loops), only the consumer's own one
    bars = [(int(c.args[0]), int(c.args[1])) for c in dev_calls(f.body, "barrier")]
    assert all(count != 256 for _, count in bars), bars
    counts = sorted(int(c.args[1]) for c in dev_calls(f.body, "mbarrier_init"))
    assert counts == [128] * 6  # full: the TMA bytes plus the producer's 128 arrivals
    # and the generated user kernel does not get an automatic producer (manual control)
    (tx,) = find_all(f.body, tvm.tirx.AttrStmt, lambda a: a.attr_key == "thread_extent" and
                     a.node.thread_tag == "threadIdx.x")
    assert int(tx.value) == 384


def test_three_roles_example_without_gpu_says_so():
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the GPU test runs the example")
    proc = subprocess.run([sys.executable, EXAMPLE, "--M", "256"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "needs an sm_90 GPU" in proc.stdout and "nothing was run" in proc.stdout
