"""GPU (sm_90): kernels that branch on the thread index (``if tx < 128: ... else: ...``) give
the right numbers, each branch's gemms, reductions and T.Parallel loops running on its own
warp group.  The programs are those of testing/python/transform/test_thread_branches.py; each
runs in a subprocess under a timeout, since a wrong barrier hangs the GPU."""

import os
import textwrap

import pytest
from gpus import has_sm90, run_script

HERE = os.path.dirname(os.path.abspath(__file__))

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU (wgmma, mbarriers)")]


def run(code: str, timeout: int = 240) -> None:
    prelude = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {os.path.join(os.path.dirname(HERE), "transform")!r})
        import torch, tilelang
        from test_thread_branches import (consumer_then_producer, one_warp_branch,
                                          two_gemm_groups, unrolled_stages, ws_attention)
        torch.manual_seed(0)
    """)
    run_script(prelude, code, timeout)


@pytest.mark.parametrize("wgmma", [True, False])
def test_two_gemm_groups(wgmma):
    """Warp group 0: C = 2 A B^T, warp group 1: D = A B^T (wgmma, or mma.sync on the group's
    4 warps)."""
    run(f"""
        cfg = {{}} if {wgmma} else {{"tl.disable_wgmma": True}}
        k = tilelang.compile(two_gemm_groups(), target="cuda", pass_configs=cfg)
        a = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        c = torch.zeros(64, 64, device="cuda")
        d = torch.zeros(64, 64, device="cuda")
        k(a, b, c, d)
        torch.cuda.synchronize()
        ref = a.float() @ b.float().T
        torch.testing.assert_close(d, ref, rtol=1e-2, atol=1e-2)
        torch.testing.assert_close(c, 2 * ref, rtol=1e-2, atol=1e-2)
    """)


def test_ws_attention_three_groups():
    """Producer group loads K and V; group 0 computes softmax scores, row sums and the left
    half of P V; group 1 the right half from the shared scores and sums."""
    run("""
        H, N, D, scale = 64, 64, 128, 0.125
        k = tilelang.compile(ws_attention(H, N, D, scale), target="cuda")
        q = torch.randn(H, D, device="cuda", dtype=torch.float16)
        kk = torch.randn(N, D, device="cuda", dtype=torch.float16)
        v = torch.randn(N, D, device="cuda", dtype=torch.float16)
        o = torch.zeros(H, D, device="cuda")
        k(q, kk, v, o)
        torch.cuda.synchronize()
        s = q.float() @ kk.float().T
        p = torch.exp2((s - s.max(dim=1, keepdim=True).values) * scale)
        ref = (p.half().float() @ v.float()) / p.sum(dim=1, keepdim=True)
        torch.testing.assert_close(o, ref, rtol=2e-2, atol=2e-2)
    """)


def test_consumer_branch_before_producer_branch():
    """Group 0 waits on an mbarrier that group 1 (the later branch) arrives on: no barrier
    between the branches may make group 1 wait for group 0 (it would hang)."""
    run("""
        k = tilelang.compile(consumer_then_producer(64), target="cuda")
        a = torch.randn(64, 64, device="cuda")
        b = torch.zeros_like(a)
        k(a, b)
        torch.cuda.synchronize()
        torch.testing.assert_close(b, a)
    """, timeout=120)


def test_unrolled_stages_in_a_branch():
    """Group 0 writes a shared tile and multiplies it, twice, in a T.unroll."""
    run("""
        k = tilelang.compile(unrolled_stages(), target="cuda")
        b = torch.randn(64, 64, device="cuda", dtype=torch.float16)
        c = torch.zeros(64, 64, device="cuda")
        k(b, c)
        torch.cuda.synchronize()
        i = torch.arange(64, device="cuda")
        ref = sum((i[:, None] + i[None, :] + s).half().float() @ b.float() for s in range(2))
        torch.testing.assert_close(c, ref, rtol=1e-2, atol=1e-1)
    """)


def test_one_warp_branch_of_a_small_block():
    """96 threads: warp 0 takes a row softmax numerator of A (its reduction over the warp's
    32 threads, synchronized by __syncwarp), warps 1-2 write twice A's diagonal."""
    run("""
        k = tilelang.compile(one_warp_branch(), target="cuda")
        a = torch.randn(4, 4, device="cuda")
        b = torch.zeros(4, 4, device="cuda")
        c = torch.zeros(4, device="cuda")
        k(a, b, c)
        torch.cuda.synchronize()
        torch.testing.assert_close(b, torch.exp(a - a.max(dim=1, keepdim=True).values))
        torch.testing.assert_close(c, 2 * torch.diagonal(a))
    """)
