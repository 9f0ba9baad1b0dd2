"""SASS of the default sm_90a GEMM: Hopper tensor-core instructions (HGMMA), no local memory.

Needs nvcc (or NVRTC), cuobjdump and the nvdisasm it runs (on PATH, or from the
``nvidia-cuda-cuobjdump`` and ``nvidia-cuda-nvdisasm`` pip packages); skipped where one is
missing.  No GPU needed."""

import glob
import os
import shutil
import site
import subprocess
import sysconfig

import pytest

import tilelang
from programs import matmul


def _tool(name):
    found = shutil.which(name)
    if found:
        return found
    for root in [sysconfig.get_paths()["purelib"], *site.getsitepackages()]:
        hits = glob.glob(os.path.join(root, "nvidia", "*", "bin", name))
        if hits:
            return hits[0]
    return None


@pytest.fixture(scope="module")
def sass(tmp_path_factory):
    tool, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    if tool is None or nvdisasm is None or shutil.which("nvcc") is None:
        pytest.skip("needs nvcc, cuobjdump and nvdisasm "
                    "(pip install nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm)")
    from tilelang.engine.cuda import compile_source

    k = tilelang.compile(matmul(4096, 4096, 4096, 128, 256, 64, num_stages=3, threads=256),
                         out_idx=[2], target="cuda -arch=sm_90a")
    cubin = tmp_path_factory.mktemp("sass") / "gemm.cubin"
    cubin.write_bytes(compile_source(k.get_kernel_source(), k.target, "cubin"))
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(nvdisasm))
    return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True,
                          check=True, env=env).stdout


def test_default_sm90a_gemm_runs_on_hgmma(sass):
    assert "HGMMA" in sass
    assert "HMMA" not in sass.replace("HGMMA", "")  # no mma.sync fallback in the kernel


def test_default_sm90a_gemm_uses_no_local_memory(sass):
    assert not any(op in sass for op in ("LDL", "STL")), "local memory (spills) in the GEMM"


def _attention_sass(tmp_path, causal, seq_len):
    """SASS of the warp-specialized attention example (two consumer warp groups, 3 stages)."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples",
                                    "flash_attention"))
    from example_mha_fwd import flashattn
    from tilelang.engine.cuda import compile_source

    tool, nvdisasm = _tool("cuobjdump"), _tool("nvdisasm")
    if tool is None or nvdisasm is None or shutil.which("nvcc") is None:
        pytest.skip("needs nvcc, cuobjdump and nvdisasm")
    k = tilelang.compile(flashattn(1, 2, seq_len, 128, causal, block_M=128, block_N=128,
                                   num_stages=3, threads=256),
                         out_idx=[3], target="cuda -arch=sm_90a")
    cubin = tmp_path / "attention.cubin"
    cubin.write_bytes(compile_source(k.get_kernel_source(), k.target, "cubin"))
    env = dict(os.environ, NVDISASM_PATH=os.path.dirname(nvdisasm))
    return subprocess.run([tool, "-sass", str(cubin)], capture_output=True, text=True,
                          check=True, env=env).stdout


@pytest.mark.parametrize("causal,seq_len", [(True, 4096), (False, 1000)])
def test_attention_wgmmas_are_not_serialized(tmp_path, causal, seq_len):
    """With a mask (causal, or keys past a ragged end) and a trip count that depends on the
    block, ptxas used to wait after every HGMMA ("wgmma.mma_async instructions are
    serialized"): one WARPGROUP.ARRIVE per instruction.  Now each gemm's wgmmas are issued
    back to back: one arrive per gemm (and the epilogue's)."""
    sass = _attention_sass(tmp_path, causal, seq_len)
    hgmma = sass.count("HGMMA.")
    assert hgmma >= 16
    assert sass.count("WARPGROUP.ARRIVE") <= hgmma // 4, "wgmmas serialized by ptxas"
