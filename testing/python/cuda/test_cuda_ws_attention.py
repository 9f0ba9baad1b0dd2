"""The flash-attention example (``examples/flash_attention/example_mha_fwd.py``) on sm_90a is
warp-specialized, non-causal and causal: its trip count is a kernel scalar
(``loop_range = min(ceildiv(...), ceildiv(...))``) that the producer warp group recomputes.
CPU (nvcc): the PTX has the register rebalancing, the wgmma GEMMs and the TMA loads.  GPU: the
kernel matches torch (in a subprocess under ``timeout``: a wrong barrier count hangs)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import tilelang

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "flash_attention")
sys.path.insert(0, EXAMPLE)
from example_mha_fwd import flashattn  # noqa: E402
from gpus import has_sm90

SM90 = "cuda -arch=sm_90a"


def attention(causal: bool):
    return flashattn(8, 16, 4096, 128, causal, block_M=128, block_N=128, num_stages=2,
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


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
def test_attention_sm90a_matches_torch(causal):
    code = (f"import sys; sys.path.insert(0, {EXAMPLE!r})\n"
            "import torch, tilelang\n"
            "from example_mha_fwd import flashattn, reference\n"
            f"k = tilelang.compile(flashattn(8, 16, 4096, 128, {causal}, block_M=128, "
            "block_N=128, num_stages=2, threads=256), out_idx=[3], target='cuda -arch=sm_90a')\n"
            "assert '__launch_bounds__(384)' in k.get_kernel_source()\n"
            "q, kk, v = (torch.randn(8, 4096, 16, 128, device='cuda', dtype=torch.float16) "
            "for _ in range(3))\n"
            f"torch.testing.assert_close(k(q, kk, v), reference(q, kk, v, {causal}), "
            "rtol=1e-2, atol=1e-2)\n")
    proc = subprocess.run(["timeout", "300", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=330)
    assert proc.returncode == 0, proc.stdout + proc.stderr
