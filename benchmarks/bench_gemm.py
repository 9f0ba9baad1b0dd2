"""GEMM: tilelang against cuBLAS (torch.matmul) and a Triton kernel, in one run; also the same
tiles with and without multi-stage buffering.  ``--path default`` compiles with the compiler's
own choice for the GPU (TMA + WGMMA on sm_90a); ``--path sm80`` forces the sm80-class path
(mma.sync + cp.async) with the pass configs that turn TMA, WGMMA and warp specialization off.

    python benchmarks/bench_gemm.py [--path default|sm80] [--sizes 4096 8192] [--dtypes ...]

Prints TFLOP/s and ratios; writes bench_gemm.json next to the script (or under $OUT).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_ms, print_table, write_json  # noqa: E402

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402

# The pass configs that keep a Hopper GPU on the sm80-class path.
SM80_PATH = {tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
             tilelang.PassConfigKey.TL_DISABLE_WGMMA: True,
             tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}

# (block_M, block_N, block_K, threads, num_stages)
CONFIGS = [(128, 128, 32, 128, 3), (128, 128, 32, 128, 4), (128, 128, 64, 128, 3),
           (128, 256, 32, 256, 3), (128, 256, 64, 256, 3), (256, 128, 32, 256, 3)]


def matmul(M, N, K, bM, bN, bK, threads, num_stages, dtype, panel=8):
    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            T.use_swizzle(panel)
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared((bK, bN), dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=num_stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C[by * bM, bx * bN])

    return main


def triton_matmul():
    """A plain Triton GEMM (one program per 128x128 tile), or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(a, b, c, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
        pm, pn = tl.program_id(0), tl.program_id(1)
        rm = pm * BM + tl.arange(0, BM)
        rn = pn * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(0, K, BK):
            x = tl.load(a + rm[:, None] * K + (k + rk)[None, :])
            y = tl.load(b + (k + rk)[:, None] * N + rn[None, :])
            acc += tl.dot(x, y)
        tl.store(c + rm[:, None] * N + rn[None, :], acc.to(c.dtype.element_ty))

    def run(x, y, out):
        M, K = x.shape
        N = y.shape[1]
        kernel[(M // 128, N // 128)](x, y, out, M, N, K, BM=128, BN=128, BK=64, num_warps=8,
                                     num_stages=3)

    return run


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"])
    p.add_argument("--quick", action="store_true", help="two tile configurations, not six")
    p.add_argument("--path", choices=("default", "sm80"), default="default")
    p.add_argument("--configs", nargs="+", metavar="MxNxKxTHREADSxSTAGES",
                   help="tile configurations to try instead of the built-in list")
    p.add_argument("--no-stage-study", action="store_true",
                   help="skip the 3-stage against 1-stage comparison")
    args = p.parse_args(argv)
    configs = [(128, 128, 64, 128, 3), (128, 256, 32, 256, 3)] if args.quick else CONFIGS
    if args.configs:
        configs = [tuple(int(x) for x in c.split("x")) for c in args.configs]
    sm80 = SM80_PATH if args.path == "sm80" else {}
    tri = triton_matmul()
    rows = []
    for dtype in args.dtypes:
        tdt = getattr(torch, dtype)
        for n in args.sizes:
            a = torch.randn(n, n, device="cuda", dtype=tdt)
            b = torch.randn(n, n, device="cuda", dtype=tdt)
            flops = 2 * n ** 3
            tf = lambda ms: flops / ms * 1e-9  # noqa: E731
            cublas = bench_ms(lambda: a @ b)
            ref = (a.float() @ b.float()).to(tdt)
            best = None
            for cfg in configs:
                t0 = time.time()
                k = tilelang.compile(matmul(n, n, n, *cfg, dtype), out_idx=[2], target="cuda",
                                     pass_configs=sm80)
                compile_s = time.time() - t0
                c = k(a, b)
                err = float((c.float() - ref.float()).abs().max())
                ms = bench_ms(lambda: k(a, b))
                print(f"{dtype} {n} {'x'.join(map(str, cfg))}: {tf(ms):.0f} TFLOP/s "
                      f"({cublas / ms:.2f}x cuBLAS), max err {err:.3g}, compile {compile_s:.1f} s",
                      flush=True)
                if best is None or ms < best[1]:
                    best = (cfg, ms, err, compile_s)
            cfg, ms, err, compile_s = best
            row = {"dtype": dtype, "size": n, "tiles": "x".join(map(str, cfg[:3])),
                   "threads": cfg[3], "stages": cfg[4], "ours": tf(ms), "cublas": tf(cublas),
                   "ours/cublas": cublas / ms, "max_err": err, "compile_s": compile_s}
            # the same tiles with 3 stages (async) and with 1 (sync: no cp.async, no
            # pipelining), for the best tiles and for 128x256x32
            study = () if args.no_stage_study else \
                (("best", cfg[:4]), ("128x256x32", (128, 256, 32, 256)))
            for tag, tiles in study:
                k3 = tilelang.compile(matmul(n, n, n, *tiles, 3, dtype), out_idx=[2],
                                      target="cuda", pass_configs=sm80)
                k1 = tilelang.compile(matmul(n, n, n, *tiles, 1, dtype), out_idx=[2],
                                      target="cuda", pass_configs=sm80)
                ms3, ms1 = bench_ms(lambda: k3(a, b)), bench_ms(lambda: k1(a, b))
                row[f"{tag}: 3 stages"] = tf(ms3)
                row[f"{tag}: 1 stage"] = tf(ms1)
                row[f"{tag}: 3 vs 1"] = ms1 / ms3
            if tri is not None and dtype == "float16":
                out = torch.empty_like(a)
                row["triton"] = tf(bench_ms(lambda: tri(a, b, out)))
                row["ours/triton"] = row["ours"] / row["triton"]
            rows.append(row)
    write_json(rows, f"bench_gemm_{args.path}.json")
    print_table(rows, ["dtype", "size", "tiles", "threads", "stages", "ours", "cublas",
                       "ours/cublas", "triton", "ours/triton", "max_err", "compile_s"])
    print()
    print_table(rows, ["dtype", "size", "tiles", "best: 3 stages", "best: 1 stage",
                       "best: 3 vs 1", "128x256x32: 3 stages", "128x256x32: 1 stage",
                       "128x256x32: 3 vs 1"])


if __name__ == "__main__":
    main()
