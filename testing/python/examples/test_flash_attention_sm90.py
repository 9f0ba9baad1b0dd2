"""The flash-attention examples (BSHD, BHSD, GQA) on sm_90a: each is warp-specialized (a TMA
producer warp group, WGMMA consumers with rebalanced registers) for fp16 and bf16, causal and
not, D=64 and 128. CPU (nvcc): the PTX holds setmaxnreg, wgmma.mma_async and TMA loads. GPU: the
kernels match torch (in a subprocess under ``timeout``: a wrong barrier count hangs)."""

import os
import re
import shutil
import subprocess
import sys

import pytest

import tilelang
from programs import EXAMPLES, example
from gpus import has_sm90

SM90 = "cuda -arch=sm_90a"
FLASH_ATTENTION = os.path.join(EXAMPLES, "flash_attention")
# The benchmark's largest block configuration: block_M, block_N, num_stages, threads.
BLOCKS = dict(block_M=128, block_N=128, num_stages=3, threads=256)


def program(name: str, causal: bool, dim: int, dtype: str, batch=8, heads=16, seq_len=4096):
    """The example's kernel; GQA with 4 K/V heads (groups = heads // 4)."""
    mod = example(f"flash_attention/{name}")
    extra = {"groups": heads // 4} if "gqa" in name else {}
    return mod.flashattn(batch, heads, seq_len, dim, causal, **extra, **BLOCKS, dtype=dtype)


VARIANTS = ["example_mha_fwd.py", "example_mha_fwd_bhsd.py", "example_gqa_fwd_bshd.py"]
# Two cases per variant cover every dtype, causal and dim value (nvcc takes ~1 s a kernel).
CASES = [(False, 128, "float16"), (True, 64, "bfloat16")]


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("causal,dim,dtype", CASES)
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attention_sm90a_is_warp_specialized(name, causal, dim, dtype):
    from tilelang.engine.cuda import nvcc_compile

    src = tilelang.compile(program(name, causal, dim, dtype), out_idx=[3],
                           target=SM90).get_kernel_source()
    assert "__launch_bounds__(384)" in src  # 256 consumers + the producer warp group
    ptx = nvcc_compile(src, "sm_90a", "ptx").decode()
    assert re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32 \d+", ptx) == [
        "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.dec.sync.aligned.u32 24"]
    assert "wgmma.mma_async" in ptx
    assert "cp.async.bulk.tensor" in ptx


def _run(code: str) -> None:
    proc = subprocess.run(["timeout", "300", sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=330)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# Key tiles of 176 rows (FlashAttention-3's non-causal choice for D=128; slower than 128 here,
# docs/benchmarks.md): a 2-stage ring, a block_N that is no power of two, a partial last tile.
WIDE = dict(block_M=128, block_N=176, num_stages=2, threads=256)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dim,dtype", [(128, "float16"), (64, "bfloat16"), (128, "bfloat16")])
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attention_sm90a_matches_torch(name, dim, dtype, causal):
    """The benchmark's block configuration at B=2, H=8 (2 K/V heads for GQA), S=1000 (the last
    query and key tiles are partial) against the example's torch reference."""
    _check(name, dim, dtype, causal, BLOCKS)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attention_sm90a_wide_key_tiles_match_torch(name, causal):
    """Key tiles of 176 rows, 2 stages, fp16 D=128, at S=1000 against the torch reference."""
    _check(name, 128, "float16", causal, WIDE)


def _check(name: str, dim: int, dtype: str, causal: bool, blocks: dict) -> None:
    gqa = "gqa" in name
    q_shape = [2, 8, 1000, dim] if "bhsd" in name else [2, 1000, 8, dim]
    kv_shape = [2, 1000, 2, dim] if gqa else q_shape
    code = (f"import sys; sys.path.insert(0, {FLASH_ATTENTION!r})\n"
            "import torch, tilelang\n"
            f"from {name[:-3]} import flashattn, reference, TOLERANCE\n"
            f"k = tilelang.compile(flashattn(2, 8, 1000, {dim}, {causal}, "
            f"{'groups=4, ' if gqa else ''}**{blocks!r}, dtype={dtype!r}), out_idx=[3], "
            f"target={SM90!r})\n"
            "assert '__launch_bounds__(384)' in k.get_kernel_source()\n"
            f"q = torch.randn({q_shape}, device='cuda', dtype=torch.{dtype})\n"
            f"kk, v = (torch.randn({kv_shape}, device='cuda', dtype=torch.{dtype}) "
            "for _ in range(2))\n"
            f"tol = TOLERANCE[{dtype!r}]\n"
            f"torch.testing.assert_close(k(q, kk, v), reference(q, kk, v, {causal}), "
            "rtol=tol, atol=tol)\n")
    _run(code)


@pytest.mark.gpu
@pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")
@pytest.mark.parametrize("name", VARIANTS)
def test_flash_attention_example_main_on_gpu(name):
    """The example's own main() at its GPU defaults (B=8, H=16, S=4096), bf16, causal."""
    code = (f"import sys; sys.path.insert(0, {FLASH_ATTENTION!r})\n"
            f"import {name[:-3]} as m\n"
            "m.main(['--dtype', 'bfloat16', '--dim', '128', '--causal'])\n")
    _run(code)
