"""The flash-attention example (``examples/flash_attention/example_mha_fwd.py``) on sm_90a is
warp-specialized, non-causal and causal: its trip count is a kernel scalar
(``loop_range = min(ceildiv(...), ceildiv(...))``) that the producer warp group recomputes.
CPU (nvcc): the PTX has the register rebalancing, the wgmma GEMMs and the TMA loads.  GPU: the
kernel matches torch (in a subprocess under ``timeout``: a wrong barrier count hangs), also with
its two consumer warp groups taking turns (``PingPongConsumers``) over loops of 1 and 2
iterations with 3 stages, with three consumer warp groups, and in clusters of two query tiles
(K and V multicast when not causal)."""

import os
import re
import shutil
import sys

import pytest

import tilelang

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "flash_attention")
sys.path.insert(0, EXAMPLE)
from example_mha_fwd import flashattn  # noqa: E402
from gpus import has_sm90, run_script

SM90 = "cuda -arch=sm_90a"


def attention(causal: bool):
    return flashattn(8, 16, 4096, 128, causal, block_M=128, block_N=128, num_stages=3,
                     threads=256)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_sm90a_ptx_is_warp_specialized(causal):
    from tilelang.engine.cuda import nvcc_compile

    src = tilelang.compile(attention(causal), out_idx=[3], target=SM90).get_kernel_source()
    assert "__launch_bounds__(384)" in src  # 256 consumers + the producer warp group
    ptx = nvcc_compile(src, "sm_90a", "ptx").decode()
    assert re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32 \d+", ptx) == [
        "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.dec.sync.aligned.u32 24"]
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx
    # the consumer warp groups take turns: arrivals before the loop (the first turn) and in it
    assert len(re.findall(r"\bbarrier\.arrive ", ptx)) == 2


def _check(B, H, S, D, causal, **blocks) -> str:
    return (f"import sys; sys.path.insert(0, {EXAMPLE!r})\n"
            "import torch, tilelang\n"
            "from example_mha_fwd import flashattn, reference\n"
            f"k = tilelang.compile(flashattn({B}, {H}, {S}, {D}, {causal}, block_N=128, "
            f"**{blocks!r}), out_idx=[3], target='cuda -arch=sm_90a')\n"
            "src = k.get_kernel_source()\n"
            f"assert '__launch_bounds__({blocks['threads'] + 128})' in src\n"
            # the groups take turns in the key loop; one key tile keeps no loop (DeferConsumerGemm)
            f"assert ('tl::__named_barrier_arrive' in src) == ({S} > 128)\n"
            f"q, kk, v = (torch.randn({B}, {S}, {H}, {D}, device='cuda', dtype=torch.float16) "
            "for _ in range(3))\n"
            f"torch.testing.assert_close(k(q, kk, v), reference(q, kk, v, {causal}), "
            "rtol=1e-2, atol=1e-2)\n")


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_sm90a_matches_torch(causal):
    code = _check(8, 16, 4096, 128, causal, block_M=128, num_stages=3, threads=256)
    run_script("", code, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq_len", [100, 256])
def test_attention_turns_over_loops_shorter_than_the_ring(seq_len, causal):
    """1 and 2 iterations (causal: 1 for the first query block) of a 3-stage ring."""
    code = _check(2, 4, seq_len, 128, causal, block_M=128, num_stages=3, threads=256)
    run_script("", code, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_three_consumer_groups_take_turns(causal):
    code = _check(2, 4, 1000, 64, causal, block_M=192, num_stages=2, threads=384)
    run_script("", code, timeout=300)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_in_clusters_matches_torch(causal):
    """Two query tiles per cluster: K and V multicast (non-causal), each block loading its
    own (causal)."""
    code = _check(2, 4, 2048, 128, causal, block_M=128, num_stages=3, threads=256, cluster=2)
    code += f"assert ('multicast__cluster' in src) != {causal}\n"
    run_script("", code, timeout=300)
