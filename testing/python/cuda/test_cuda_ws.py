"""Warp-specialized kernels (sm_90a).

CPU (nvcc): the default sm_90a GEMM's PTX holds ``setmaxnreg`` (the producer's decrease, the
consumers' increase with two consumer warp groups), none with one consumer warp group (its
threads start with more than they would ask for) and none with ``tl.disable_warp_specialized``;
a GEMM whose result goes out through a shared tile stores it with TMA.  GPU (sm_90, each kernel in a subprocess under ``timeout``,
since a wrong barrier count hangs the GPU): results against torch for the warp-specialized
GEMM (one and two consumer warp groups, trip counts 1 and 2 with 3 stages, a dynamic K), a
Q tile loaded before the loop, two pipelined loops in one kernel, a loop under an ``if`` (both
branches), each checked to be specialized (the launch has the producer warp group); the
three-roles example (384 threads, mbarriers only) checks itself against torch."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import tilelang

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from programs import matmul  # noqa: E402
from gpus import has_sm90

SM90 = "cuda -arch=sm_90a"


def _ptx(prog, **cfg):
    from tilelang.engine.cuda import nvcc_compile

    src = tilelang.compile(prog, target=SM90, pass_configs=cfg or None).get_kernel_source()
    return src, nvcc_compile(src, "sm_90a", "ptx").decode()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_default_sm90a_gemm_ptx_has_setmaxnreg():
    src, ptx = _ptx(matmul(1024, 1024, 1024, 128, 128, 64, num_stages=3, threads=256))
    assert "__launch_bounds__(384)" in src
    assert re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32 \d+", ptx) == [
        "setmaxnreg.inc.sync.aligned.u32 240", "setmaxnreg.dec.sync.aligned.u32 24"]
    _, ptx = _ptx(matmul(1024, 1024, 1024, 128, 64, 64, num_stages=3, threads=128))
    assert "setmaxnreg" not in ptx  # 256 threads: every thread holds 248 registers already
    src, ptx = _ptx(matmul(1024, 1024, 1024, 128, 128, 64, num_stages=3, threads=256),
                    **{"tl.disable_warp_specialized": True})
    assert "setmaxnreg" not in ptx and "__launch_bounds__(256)" in src


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_shared_epilogue_leaves_in_tma_stores():
    # C_s takes the 128-byte TMA swizzle (panels of 64 columns): four boxes of 64 x 128, then
    # the issuing thread waits until they have read C_s
    src, ptx = _ptx(matmul(1024, 1024, 1024, 128, 256, 64, num_stages=3, threads=256,
                           shared_epilogue=True))
    assert ptx.count("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group") == 4
    assert "cp.async.bulk.commit_group" in ptx and "cp.async.bulk.wait_group.read 0" in ptx
    # every consumer thread fences its writes of C_s, then the consumers meet, then one stores
    # (a fence of shared memory only: the unqualified one waits for global memory as well)
    tail = src[src.index("tvm_builtin_ptx_fence_proxy_proxy_async_shared__cta();"):]
    assert tail.index("barrier_sync_count_sync(((uint)4), ((uint)256))") < tail.index("s2g")
    assert "fence.proxy.async.shared::cta;" in ptx and "fence.proxy.async;" not in ptx
    _, ptx = _ptx(matmul(1024, 1024, 1024, 128, 256, 64, num_stages=3, threads=256,
                         shared_epilogue=True), **{"tl.disable_tma_lower": True})
    assert "cp.async.bulk.tensor" not in ptx


gpu = [pytest.mark.gpu, pytest.mark.skipif(not has_sm90(), reason="needs an sm_90 GPU")]


def run(tmp_path, code: str, timeout: int = 240) -> None:
    """Run ``code`` from a file in a fresh interpreter under ``timeout``; fails on a non-zero
    exit or a hang."""
    script = tmp_path / "ws_case.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(HERE)!r})
        sys.path.insert(0, {os.path.join(os.path.dirname(HERE), "transform")!r})
        import torch, tilelang
        import tilelang.language as T
        from programs import matmul
        from test_warp_specialize import (q_then_loop, two_loops, loop_under_if, scaled_loads,
                                          persistent_gemm)

        def specialized(k, threads):
            src = k.get_kernel_source()
            assert f"__launch_bounds__({{threads}})" in src, "expected the producer warp group"
    """) + textwrap.dedent(code))
    try:
        proc = subprocess.run(["timeout", str(timeout), sys.executable, str(script)],
                              capture_output=True, text=True, timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"kernel did not finish within {timeout} s (barrier hang?)")
    out = proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode != 124, f"kernel hung (timeout {timeout} s)\n" + out
    assert proc.returncode == 0, out


GEMM = """
    M, N, K, threads, bn = {M}, {N}, {K}, {threads}, {bn}
    prog = matmul(M, N, K, 128, bn, 64, num_stages=3, threads=threads)
    k = tilelang.compile(prog, out_idx=[2], target="cuda")
    specialized(k, threads + 128)
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    b = torch.randn(K, N, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(k(a, b).float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
"""


@pytest.mark.parametrize("threads,bn", [(128, 64), (256, 128)])
@pytest.mark.parametrize("K", [64, 128, 1024])
def test_ws_gemm(tmp_path, threads, bn, K):
    run(tmp_path, GEMM.format(M=512, N=512, K=K, threads=threads, bn=bn))


def test_ws_gemm_shared_epilogue(tmp_path):
    """C out through a shared tile (stored swizzled): with 4 stages of 128x256x64 the ring and
    C_s together exceed shared memory, so C_s takes the ring's bytes after the loop (the
    consumers' barrier first); ragged sizes, both 16-bit types, and the sm80-class path."""
    run(tmp_path, """
        sm80 = {"tl.disable_tma_lower": True, "tl.disable_wgmma": True,
                "tl.disable_warp_specialized": True}
        for (M, N, K), dtype, stages, cfg in (((512, 512, 512), torch.float16, 4, {}),
                                              ((384, 640, 320), torch.bfloat16, 4, {}),
                                              ((300, 520, 200), torch.float16, 3, {}),
                                              ((512, 512, 512), torch.float16, 3, sm80)):
            name = str(dtype).split(".")[-1]
            prog = matmul(M, N, K, 128, 256, 64, num_stages=stages, threads=256, dtype=name,
                          shared_epilogue=True)
            k = tilelang.compile(prog, out_idx=[2], target="cuda", pass_configs=cfg)
            if not cfg:
                specialized(k, 384)
            a = torch.randn(M, K, device="cuda", dtype=dtype)
            b = torch.randn(K, N, device="cuda", dtype=dtype)
            torch.testing.assert_close(k(a, b).float(), a.float() @ b.float(), rtol=2e-2,
                                       atol=5e-2)
    """)


def test_ws_gemm_dynamic_k(tmp_path):
    run(tmp_path, """
        # A stored (K, M): every row stride is static, so the loads are TMA and the loop with
        # its dynamic trip count is specialized.  A stored (M, K) has the dynamic row stride
        # K * 2 bytes, not provably a multiple of 16: cp.async, not specialized, still correct.
        K = T.dynamic("K")
        for tA in (True, False):
            k = tilelang.compile(matmul(256, 256, K, 128, 64, 64, tA=tA, num_stages=3),
                                 out_idx=[2], target="cuda")
            if tA:
                specialized(k, 256)
            else:
                assert "__launch_bounds__(128)" in k.get_kernel_source()
            for kk in (64, 192, 1024):
                a = torch.randn((kk, 256) if tA else (256, kk), device="cuda",
                                dtype=torch.float16)
                b = torch.randn(kk, 256, device="cuda", dtype=torch.float16)
                ref = (a.T if tA else a).float() @ b.float()
                torch.testing.assert_close(k(a, b).float(), ref, rtol=1e-2, atol=1e-2)
    """)


def test_ws_copy_before_loop(tmp_path):
    run(tmp_path, """
        k = tilelang.compile(q_then_loop(), out_idx=[2], target="cuda")
        specialized(k, 256)
        q = torch.randn(256, 64, device="cuda", dtype=torch.float16)
        kk = torch.randn(256, 64, device="cuda", dtype=torch.float16)
        ref = (q.float() @ kk.float().T).sum(dim=1)
        torch.testing.assert_close(k(q, kk), ref, rtol=1e-2, atol=5e-2)
    """)


def test_ws_two_loops(tmp_path):
    run(tmp_path, """
        k = tilelang.compile(two_loops(), out_idx=[4], target="cuda")
        specialized(k, 256)
        a, a2 = (torch.randn(256, 256, device="cuda", dtype=torch.float16) for _ in range(2))
        b, b2 = (torch.randn(256, 128, device="cuda", dtype=torch.float16) for _ in range(2))
        ref = a.float() @ b.float() + a2.float() @ b2.float()
        torch.testing.assert_close(k(a, b, a2, b2), ref, rtol=1e-2, atol=1e-2)
    """)


def test_ws_loop_under_if(tmp_path):
    run(tmp_path, """
        k = tilelang.compile(loop_under_if(), out_idx=[3], target="cuda")
        specialized(k, 256)
        a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
        f = torch.zeros(2, device="cuda", dtype=torch.int32)
        torch.testing.assert_close(k(a, b, f, 1), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
        assert torch.count_nonzero(k(a, b, f, 0)) == 0
    """)


def test_ws_persistent_gemm(tmp_path):
    """Blocks walking several tiles each (T.Persistent): the ring's phase carries from one
    tile's loop to the next in both roles; tile counts that do and do not divide evenly; a
    shared tile stored with TMA once per tile and written again for the next; rings given
    fewer stages than asked so that they fit next to that tile."""
    run(tmp_path, """
        for (M, N, K, blocks), staged in (((512, 512, 256, 3), False), ((384, 640, 64, 4), False),
                                          ((256, 256, 1024, 132), False),
                                          ((512, 512, 256, 3), True), ((384, 640, 64, 4), True)):
            # staged: each tile goes out through one shared tile in TMA stores
            k = tilelang.compile(persistent_gemm(M, N, K, blocks=blocks, shared_epilogue=staged),
                                 out_idx=[2], target="cuda")
            specialized(k, 384)
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            torch.testing.assert_close(k(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
        # six stages do not fit next to C_s: the rings get five, the kernel stays specialized
        k = tilelang.compile(persistent_gemm(512, 512, 768, blocks=3, stages=6,
                                             shared_epilogue=True), out_idx=[2], target="cuda")
        specialized(k, 384)
        a = torch.randn(512, 768, device="cuda", dtype=torch.float16)
        b = torch.randn(768, 512, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(k(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
    """)


def test_ws_consumers_reading_the_slot(tmp_path):
    """Consumers that read the slot with ordinary loads besides the gemm: each thread arrives
    (no elected release), one iteration late (the gemm's group stays in flight)."""
    run(tmp_path, """
        k = tilelang.compile(scaled_loads(), out_idx=[2, 3], target="cuda")
        specialized(k, 256)
        a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
        b = torch.randn(256, 128, device="cuda", dtype=torch.float16)
        c, s = k(a, b)
        torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-2, atol=1e-2)
        ref = a.float()[:, ::64].sum(dim=1)
        torch.testing.assert_close(s, ref, rtol=1e-3, atol=1e-2)
    """)


def test_ws_cluster_gemm_multicast(tmp_path):
    """Clusters of two blocks sharing A (x) or B (y) tiles through TMA multicast, rasterized
    in panels of 8 and of 1, with trip counts below, at and above the stage count; and a
    cluster whose blocks run different trip counts (not multicast)."""
    run(tmp_path, """
        from test_warp_specialize import cluster_gemm
        cases = [((2, 1), 8, 256, False), ((1, 2), 8, 256, False), ((2, 1), 1, 1024, False),
                 ((1, 2), 1, 64, False), ((2, 1), 8, 128, False), ((2, 1), 8, 256, True)]
        for cluster, panel, K, ragged in cases:
            M, N = 512, 768
            k = tilelang.compile(cluster_gemm(M, N, K, cluster=cluster, panel=panel,
                                              ragged_range=ragged), out_idx=[2], target="cuda")
            src = k.get_kernel_source()
            specialized(k, 384)
            assert ("multicast__cluster" in src) != ragged
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            ref = a.float() @ b.float()
            if ragged:  # the odd columns of blocks skip the last K step
                ref = ref.view(M, N // 128, 128)
                ref[:, 1::2] -= (a[:, -64:].float() @ b[-64:].float()).view(M, N // 128,
                                                                          128)[:, 1::2]
                ref = ref.view(M, N)
            torch.testing.assert_close(k(a, b), ref, rtol=1e-2, atol=1e-2)
            print("ok", cluster, panel, K, ragged)
    """)


def test_ws_cluster_gemm_shapes(tmp_path):
    """Clusters of four blocks along x (A to four blocks) and along y (B to four), 2x2
    clusters (A to each row's pair, B to each column's pair; also over ragged M, N, K and with
    a block-chosen A tile that only B is multicast for), and 2-block clusters over ragged M, N
    and K (boxes clipped at the tensor's end are multicast too)."""
    run(tmp_path, """
        from test_warp_specialize import cluster_gemm
        for cluster, M, N, K in (((4, 1), 512, 1024, 256), ((1, 4), 512, 512, 192),
                                 ((2, 2), 512, 512, 256), ((2, 2), 1000, 760, 200),
                                 ((2, 2, "slot"), 512, 512, 320),
                                 ((2, 1), 500, 760, 200), ((1, 2), 500, 376, 136)):
            slot = cluster[2:] == ("slot",)
            cluster = cluster[:2]
            k = tilelang.compile(cluster_gemm(M, N, K, cluster=cluster, slot_by_block=slot),
                                 out_idx=[2], target="cuda")
            specialized(k, 384)
            assert "multicast__cluster" in k.get_kernel_source()
            a = torch.randn(M, K, device="cuda", dtype=torch.float16)
            b = torch.randn(K, N, device="cuda", dtype=torch.float16)
            torch.testing.assert_close(k(a, b), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
            print("ok", cluster, M, N, K)
    """)


def test_ws_three_roles_example(tmp_path):
    example = os.path.join(HERE, "..", "..", "..", "examples", "warp_specialize",
                           "example_three_roles.py")
    proc = subprocess.run(["timeout", "240", sys.executable, example], capture_output=True,
                          text=True, timeout=270)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "match torch" in proc.stdout


for _name in [n for n in dir() if n.startswith("test_ws_")]:
    for _m in gpu:
        globals()[_name] = _m(globals()[_name])
