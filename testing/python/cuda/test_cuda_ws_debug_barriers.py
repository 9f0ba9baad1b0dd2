"""``tl.debug_barriers``: every mbarrier wait becomes a bounded try_wait loop that prints the
block, thread, barrier name, stage and expected parity and then traps.

CPU (nvcc): the generated CUDA and PTX hold the bounded loop, the printf and the trap only
with the config on, and the message names each wait's barrier.  GPU (sm_90, in a subprocess
under ``timeout``): a kernel whose barrier expects 16 bytes more than its TMA load brings
must fail with the trap and print the barrier's name (``full``), its stage (1) and the
parity waited for, instead of hanging."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import tilelang
import tilelang.language as T
from tilelang.engine.cuda import nvcc_compile
from tilelang.transform.debug_barriers import DEFAULT_BOUND, bound_of

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from programs import matmul  # noqa: E402
from gpus import has_sm90

SM90 = "cuda -arch=sm_90a"


def wrong_expect_tx():
    """One TMA load of a 64x64 fp16 tile (8192 bytes) onto ``full[1]``, whose phase also
    expects 16 bytes that never come: the wait on ``full[1]`` can never return."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            tx = T.get_thread_binding()
            S = T.alloc_shared((64, 64), "float16")
            full = T.alloc_barrier([1, 1])
            if tx == 0:
                T.mbarrier_expect_tx(full[1], 16)  # the wrong count, on purpose
            T.tma_copy(A[0, 0], S, barrier=full[1])
            if tx == 0:
                T.mbarrier_arrive(full[1])
            T.mbarrier_wait_parity(full[1], 0)
            T.copy(S, B)

    return main


def test_bound_of_config_values():
    assert bound_of(None) is None and bound_of(False) is None
    assert bound_of(True) == DEFAULT_BOUND and bound_of(1000) == 1000
    with pytest.raises(ValueError, match="positive number of tries"):
        bound_of(0)


def _source(prog, **cfg):
    return tilelang.compile(prog, target=SM90, pass_configs=cfg or None).get_kernel_source()


def test_source_has_bounded_wait_only_with_the_config():
    prog = matmul(512, 512, 512, 128, 64, 64, num_stages=3)
    plain = _source(prog)
    assert "tl_debug_mbarrier_wait" not in plain and "trap;" not in plain
    assert "printf" not in plain
    debug = _source(prog, **{"tl.debug_barriers": 4096})
    assert "__noinline__ __device__ void tl_debug_mbarrier_wait" in debug
    assert "trap;" in debug and "mbarrier wait timed out" in debug
    # every wait is the debug one, naming its ring and bounded by the configured tries
    calls = [ln for ln in debug.splitlines() if "tl_debug_mbarrier_wait((" in ln]
    assert calls and all("((uint)4096)" in ln for ln in calls)
    assert any('"k_pipe_full"' in ln for ln in calls)
    assert any('"k_pipe_empty"' in ln for ln in calls)
    assert "mbarrier_wait(" not in debug.replace("tl_debug_mbarrier_wait(", "")


def test_hand_written_wait_names_its_barrier():
    src = _source(wrong_expect_tx(), **{"tl.debug_barriers": True})
    (call,) = [ln for ln in src.splitlines() if "tl_debug_mbarrier_wait((" in ln and
               '"full"' in ln]
    # stage 1, expected parity 0, the default bound
    assert f'"full", 1, ((uint){DEFAULT_BOUND}))' in call.replace(" ", "").replace(
        '"full",1,', '"full", 1, ')


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_ptx_has_bounded_loop_printf_and_trap():
    prog = matmul(512, 512, 512, 128, 64, 64, num_stages=3)
    ptx = nvcc_compile(_source(prog, **{"tl.debug_barriers": True}), "sm_90a", "ptx").decode()
    assert "trap;" in ptx and "vprintf" in ptx and "mbarrier.try_wait.parity" in ptx
    plain = nvcc_compile(_source(prog), "sm_90a", "ptx").decode()
    assert "trap;" not in plain and "vprintf" not in plain


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU (TMA, mbarriers)")
def test_wrong_expect_tx_traps_with_barrier_and_stage(tmp_path):
    script = tmp_path / "wrong_tx.py"
    script.write_text(textwrap.dedent(f"""
        import sys; sys.path.insert(0, {HERE!r}); sys.path.insert(0, {os.path.dirname(HERE)!r})
        import torch, tilelang
        from test_cuda_ws_debug_barriers import wrong_expect_tx
        k = tilelang.compile(wrong_expect_tx(), target="cuda",
                             pass_configs={{"tl.debug_barriers": 1 << 16}})
        a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        b = torch.empty_like(a)
        try:
            k(a, b)
            torch.cuda.synchronize()
        except Exception as err:
            print("LAUNCH FAILED:", type(err).__name__, err, flush=True)
            sys.exit(3)
        print("NO ERROR")
    """))
    try:
        proc = subprocess.run(["timeout", "120", sys.executable, str(script)],
                              capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired:
        pytest.fail("the bounded wait did not end the kernel (hang)")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 124, "hung: the wait was not bounded\n" + out[-3000:]
    assert "NO ERROR" not in out, out[-3000:]
    assert "mbarrier wait timed out: barrier full stage 1, expected parity 0" in out, out[-3000:]
    assert "thread 0" in out and "block (0, 0, 0)" in out
