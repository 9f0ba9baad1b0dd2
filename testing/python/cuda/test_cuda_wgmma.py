"""wgmma numerics on an sm_90 GPU, against torch.  Each kernel runs in a subprocess under a
timeout (a wrong barrier or descriptor can hang the GPU)."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] < 9,
    reason="needs an sm_90 GPU (wgmma)")]

HERE = os.path.dirname(__file__)


def run(code: str, timeout: int = 300) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(HERE, ".."), os.path.join(HERE), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


GEMM = """
import torch, tilelang
from programs import matmul
M, N, K, bM, bN, bK = {shape}
tA, tB, dtype, threads, stages = {tA}, {tB}, "{dtype}", {threads}, {stages}
tdt = getattr(torch, dtype)
f = matmul(M, N, K, bM, bN, bK, tA, tB, dtype=dtype, out_dtype="float32", threads=threads,
           num_stages=stages)
k = tilelang.compile(f, out_idx=[2], target="cuda -arch=sm_90a")
assert "wgmma.mma_async" in k.get_ptx()
a = torch.randn((K, M) if tA else (M, K), device="cuda").to(tdt)
b = torch.randn((N, K) if tB else (K, N), device="cuda").to(tdt)
c = k(a, b)
ref = (a.float().T if tA else a.float()) @ (b.float().T if tB else b.float())
err = (c - ref).abs().max().item()
assert err < 1e-2 * max(1.0, ref.abs().max().item()), err
print("OK", err)
"""


@pytest.mark.parametrize("tA,tB", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("shape", [(256, 256, 256, 128, 128, 64), (200, 136, 96, 128, 128, 64)])
def test_gemm_all_transposes(dtype, tA, tB, shape):
    """fp16/bf16 in all four transposes, at tile-multiple and ragged sizes."""
    run(GEMM.format(shape=shape, tA=tA, tB=tB, dtype=dtype, threads=128, stages=2))


PIPELINED_WG_WAIT = """
import torch, tilelang
from programs import matmul
f = matmul(512, 512, 1024, 128, 128, 64, out_dtype="float32", threads=256, num_stages=3,
           wg_wait=1)
k = tilelang.compile(f, out_idx=[2], target="cuda -arch=sm_90a", pass_configs={cfg})
a = torch.randn(512, 1024, device="cuda", dtype=torch.float16)
b = torch.randn(1024, 512, device="cuda", dtype=torch.float16)
ref = a.float() @ b.float()
for _ in range(20):  # a stage overwritten under an in-flight wgmma shows up as a wrong tile
    err = (k(a, b) - ref).abs().max().item()
    assert err < 1e-2 * ref.abs().max().item(), err
print("OK", err)
"""


@pytest.mark.parametrize("cfg", [{}, {"tl.disable_warp_specialized": True},
                                 {"tl.disable_tma_lower": True}],
                         ids=["ws", "tma-ring", "cp-async"])
def test_wg_wait_in_pipelined_loop(cfg):
    """wg_wait=1 inside T.Pipelined, two consumer warp groups: each stage is handed back to
    its producer only after the wgmma group reading it has completed."""
    run(PIPELINED_WG_WAIT.format(cfg=cfg))


@pytest.mark.parametrize("K,stages", [(64, 3), (128, 3), (512, 3)])
def test_trip_counts_and_two_warpgroups(K, stages):
    """trip counts 1 and 2 with 3 stages, two consumer warpgroups splitting M."""
    run(GEMM.format(shape=(256, 256, K, 128, 128, 64), tA=False, tB=False, dtype="float16",
                    threads=256, stages=stages))


def test_fp8_k_major():
    run(GEMM.format(shape=(256, 256, 256, 128, 128, 64), tA=False, tB=True,
                    dtype="float8_e4m3fn", threads=128, stages=2))


CHAIN = """
import torch, tilelang
from test_cuda_wgmma_codegen import chain
k = tilelang.compile(chain(wg_wait={wg_wait}), out_idx=[3], target="cuda -arch=sm_90a")
q, kk, v = (torch.randn(64, 64, device="cuda", dtype=torch.float16) for _ in range(3))
o = k(q, kk, v)
p = (q.float() @ kk.float().T).half().float()
ref = p @ v.float()
err = (o - ref).abs().max().item()
assert err < 2e-2 * max(1.0, ref.abs().max().item()), err
print("OK", err)
"""


@pytest.mark.parametrize("wg_wait", [0, 1])
def test_register_a_chain(wg_wait):
    """gemm -> cast to fp16 -> gemm with A from registers (rs); with wg_wait=1 the first
    gemm's group stays in flight until the cast reads its accumulator."""
    run(CHAIN.format(wg_wait=wg_wait))


WAIT = """
import torch, tilelang
import tilelang.language as T

@T.prim_func
def main(A: T.Tensor((64, 64), "float16"), B: T.Tensor((64, 64), "float16"),
         X: T.Tensor((64, 64), "float32"), C: T.Tensor((64, 64), "float32"),
         Y: T.Tensor((64, 64), "float32")):
    with T.Kernel(1, threads=128) as bx:
        As = T.alloc_shared((64, 64), "float16")
        Bs = T.alloc_shared((64, 64), "float16")
        Cf = T.alloc_fragment((64, 64), "float32")
        Xf = T.alloc_fragment((64, 64), "float32")
        T.copy(A, As)
        T.copy(B, Bs)
        T.copy(X, Xf)
        T.gemm(As, Bs, Cf, clear_accum=True, wg_wait=1)
        for i, j in T.Parallel(64, 64):  # independent of the gemm: overlaps it
            Xf[i, j] = Xf[i, j] * 2.0 + 1.0
        T.copy(Xf, Y)
        T.copy(Cf, C)

with open("/dev/null"):
    pass
"""


def test_wg_wait_then_independent_work(tmp_path):
    src = tmp_path / "wgwait_prog.py"
    src.write_text(WAIT)
    run(f"""
import sys, torch, tilelang
sys.path.insert(0, {str(tmp_path)!r})
from wgwait_prog import main
k = tilelang.compile(main, out_idx=[3, 4], target="cuda -arch=sm_90a")
a, b = (torch.randn(64, 64, device="cuda", dtype=torch.float16) for _ in range(2))
x = torch.randn(64, 64, device="cuda")
c, y = k(a, b, x)
assert torch.allclose(y, x * 2 + 1)
ref = a.float() @ b.float()
err = (c - ref).abs().max().item()
assert err < 1e-2 * ref.abs().max().item(), err
print("OK", err)
""")
