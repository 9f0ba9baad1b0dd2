"""Run the pipelined GEMMs (warp-specialized, persistent and warp-specialized, mbarrier ring
without specialization, sm80 path, an epilogue through shared memory reusing the stage ring,
a persistent one storing each tile through one shared tile with TMA, one in clusters of two
blocks multicasting the A tiles they share, one in 2x2 clusters multicasting A along rows and B
along columns), the attention forward (one consumer warp group,
two taking turns at their first gemm: ``PingPongConsumers``, and clusters of two query tiles
multicasting K and V) and the two-thread-group hand-off
(testing/python/cuda/test_cuda_thread_groups.py: warp group 0 writes a shared tile, warp group 1
reads it after a named barrier) once each, for compute-sanitizer:

    compute-sanitizer --tool racecheck python tools/sanitize_kernels.py
    compute-sanitizer --tool memcheck  python tools/sanitize_kernels.py
"""

import os
import sys

import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "testing", "python"))
sys.path.insert(0, os.path.join(ROOT, "testing", "python", "cuda"))
sys.path.insert(0, os.path.join(ROOT, "testing", "python", "transform"))

import tilelang  # noqa: E402
from programs import example, matmul  # noqa: E402


def main():
    gemm = tilelang.compile(matmul(256, 256, 256, 128, 128, 32, num_stages=3), out_idx=[2])
    a = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.float16)
    c = gemm(a, b)
    ragged = tilelang.compile(matmul(200, 136, 96, 64, 64, 32, num_stages=3), out_idx=[2])
    ra, rb = a[:200, :96].contiguous(), b[:96, :136].contiguous()
    rc = ragged(ra, rb)
    sm80 = tilelang.compile(matmul(256, 256, 256, 128, 128, 32, num_stages=3), out_idx=[2],
                            pass_configs={"tl.disable_wgmma": True, "tl.disable_tma_lower": True,
                                          "tl.disable_warp_specialized": True})
    c80 = sm80(a, b)
    # the mbarrier ring without warp specialization, and two consumer warp groups + producer
    ring = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, num_stages=3), out_idx=[2],
                            pass_configs={"tl.disable_warp_specialized": True})
    c_ring = ring(a, b)
    wide = tilelang.compile(matmul(256, 256, 256, 128, 256, 64, threads=256, num_stages=3),
                            out_idx=[2])
    c_wide = wide(a, b)
    # C out through a shared tile that takes the 4-stage ring's bytes after the loop
    staged = tilelang.compile(matmul(256, 256, 256, 128, 256, 64, threads=256, num_stages=4,
                                     shared_epilogue=True), out_idx=[2])
    c_staged = staged(a, b)
    from test_warp_specialize import persistent_gemm

    persistent = tilelang.compile(persistent_gemm(256, 384, 256, blocks=2), out_idx=[2])
    pb = torch.randn(256, 384, device="cuda", dtype=torch.float16)
    c_pers = persistent(a, pb)
    # one shared tile per block, stored with TMA once per tile and written again for the next
    pers_staged = tilelang.compile(persistent_gemm(256, 384, 256, blocks=2,
                                                   shared_epilogue=True), out_idx=[2])
    c_pers_staged = pers_staged(a, pb)
    # clusters of two blocks, each multicasting its band of the A tiles they share
    from test_warp_specialize import cluster_gemm

    clustered = tilelang.compile(cluster_gemm(256, 512, 256), out_idx=[2])
    cb = torch.randn(256, 512, device="cuda", dtype=torch.float16)
    c_cluster = clustered(a, cb)
    quad = tilelang.compile(cluster_gemm(256, 512, 256, cluster=(2, 2)), out_idx=[2])
    c_quad = quad(a, cb)
    src = gemm.get_kernel_source()
    print("default gemm path:", "wgmma" if "wgmma" in src else "mma.sync",
          "+ TMA" if "cp.async.bulk.tensor" in src or "cp_async_bulk_tensor" in src else "")
    fa = example("flash_attention/example_mha_fwd.py")
    attn = tilelang.compile(fa.flashattn(1, 2, 200, 64, True, num_stages=2), out_idx=[3])
    q, k, v = (torch.randn(1, 200, 2, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    o = attn(q, k, v)
    # two consumer warp groups that take turns; 400 keys: 4 iterations of a 3-stage ring
    turns = tilelang.compile(fa.flashattn(1, 2, 400, 64, True, block_M=128, block_N=128,
                                          num_stages=3, threads=256), out_idx=[3])
    tq, tk, tv = (torch.randn(1, 400, 2, 64, device="cuda", dtype=torch.float16)
                  for _ in range(3))
    o_turns = turns(tq, tk, tv)
    # the same in clusters of two query tiles, which share their K and V tiles by multicast
    clustered_attn = tilelang.compile(fa.flashattn(1, 2, 512, 64, False, block_M=128,
                                                   block_N=128, num_stages=3, threads=256,
                                                   cluster=2), out_idx=[3])
    cq, ck, cv = (torch.randn(1, 512, 2, 64, device="cuda", dtype=torch.float16)
                  for _ in range(3))
    o_cluster = clustered_attn(cq, ck, cv)
    from test_cuda_thread_groups import hand_off

    groups = tilelang.compile(hand_off(512, rounds=3), target="cuda")
    ga = torch.randn(512, 64, device="cuda")
    gb = torch.zeros_like(ga)
    groups(ga, gb)
    torch.cuda.synchronize()
    errs = [float((c.float() - (a.float() @ b.float())).abs().max()),
            float((rc.float() - (ra.float() @ rb.float())).abs().max()),
            float((c80.float() - (a.float() @ b.float())).abs().max()),
            float((c_ring.float() - (a.float() @ b.float())).abs().max()),
            float((c_wide.float() - (a.float() @ b.float())).abs().max()),
            float((c_staged.float() - (a.float() @ b.float())).abs().max()),
            float((c_pers - (a.float() @ pb.float())).abs().max()),
            float((c_pers_staged - (a.float() @ pb.float())).abs().max()),
            float((c_cluster - (a.float() @ cb.float())).abs().max()),
            float((c_quad - (a.float() @ cb.float())).abs().max()),
            float((o.float() - fa.reference(q, k, v, True).float()).abs().max()),
            float((o_turns.float() - fa.reference(tq, tk, tv, True).float()).abs().max()),
            float((o_cluster.float() - fa.reference(cq, ck, cv, False).float()).abs().max()),
            float((gb - ga).abs().max())]
    print("max errors (gemm, ragged gemm, sm80-path gemm, mbarrier-ring gemm, 384-thread gemm, "
          "shared-epilogue gemm, persistent gemm, persistent shared-epilogue gemm, "
          "cluster multicast gemm, 2x2 cluster gemm, attention, "
          "attention with turns, attention in clusters, "
          "thread groups):", errs)


if __name__ == "__main__":
    main()
