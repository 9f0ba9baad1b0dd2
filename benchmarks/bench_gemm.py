"""GEMM: tilelang against cuBLAS (torch.matmul; fp8 e4m3: torch._scaled_mm) and an autotuned
pipelined Triton GEMM, in one run; also the best tiles with and without multi-stage buffering.  ``--path default`` compiles with the compiler's
own choice for the GPU (TMA + WGMMA on sm_90a); ``--path sm80`` forces the sm80-class path
(mma.sync + cp.async) with the pass configs that turn TMA, WGMMA and warp specialization off.

    python benchmarks/bench_gemm.py [--path default|sm80] [--sizes 4096 8192] [--dtypes ...]

Every contender (cuBLAS, each tile configuration, Triton) is timed once per round, in turn, for
``--rounds`` rounds, and its median over the rounds is reported: the GPU's clock drifts as it
warms, and a baseline timed only once, first, on a cool GPU would be favoured.

Prints TFLOP/s and ratios; writes bench_gemm.json next to the script (or under $OUT).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_ms, interleaved_ms, print_table, write_json  # noqa: E402

import tilelang  # noqa: E402
import tilelang.language as T  # noqa: E402
from tilelang.layout.swizzle import make_gmma_swizzled_layout  # noqa: E402

# The pass configs that keep a Hopper GPU on the sm80-class path.
SM80_PATH = {tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
             tilelang.PassConfigKey.TL_DISABLE_WGMMA: True,
             tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}

# (block_M, block_N, block_K, threads, num_stages, epilogue): the epilogue stores C from the
# registers ("r") or through a shared tile ("s"); "pr" and "ps" are the same in a persistent
# kernel (one block per SM walking the tiles in T.Persistent's grouped order), and "pt" is "ps"
# with the store written as T.tma_copy, its wait for the read of C_s deferred to the next
# tile's epilogue (the store overlaps that tile's main loop), and "ph" is "ps" with a shared
# tile half as wide, C going out in two halves (so 4 stages of 128x256x64 fit); "cxr", "cxs",
# "cyr", "cys" in clusters of two blocks along the grid's x (sharing A tiles) or y (sharing
# B tiles), which the compiler multicasts; "cxyr", "cxys" in 2x2 clusters (A multicast to
# each row's pair of blocks, B to each column's pair)
CONFIGS = [(128, 128, 64, 128, 3, "r"), (128, 128, 64, 128, 4, "r"), (128, 256, 32, 256, 3, "r"),
           (128, 256, 64, 256, 3, "r"), (128, 256, 64, 256, 4, "r"), (256, 128, 64, 256, 3, "r"),
           (128, 256, 64, 256, 4, "s")]
# --quick: the fastest of CONFIGS on the H100 (2026-12-06), and the 2x1 cluster that multicasts
# the A tiles (level with the plain kernel there; a candidate where L2 traffic limits)
QUICK = [(128, 256, 64, 256, 4, "r"), (128, 256, 64, 256, 3, "s"), (128, 256, 64, 256, 4, "s"),
         (128, 256, 64, 256, 4, "cxs")]


def matmul(M, N, K, bM, bN, bK, threads, num_stages, dtype, epilogue="r", panel=8,
           out_dtype=None, blocks=None):
    """C = A @ B (A: M x K; B: K x N, or N x K stored K-major for fp8, which wgmma needs);
    ``epilogue`` "s" sends C out through a shared tile, as the public TileLang's examples do;
    "pr"/"ps" make it a persistent kernel of ``blocks`` blocks (default: one per SM), "pt"
    the same with the store's wait for the read of C_s deferred to the next tile, "ph" with C
    sent out in two halves through a shared tile half as wide."""
    k_major = dtype.startswith("float8")
    out_dtype = out_dtype or dtype
    b_shape, bs_shape = ((N, K), (bN, bK)) if k_major else ((K, N), (bK, bN))
    persistent, shared_epilogue = epilogue.startswith("p"), epilogue.endswith(("s", "t", "h"))
    deferred_store, halves = epilogue.endswith("t"), epilogue.endswith("h")
    cs_shape = (bM, bN // 2) if halves else (bM, bN)
    cluster = {"cx": (2, 1, 1), "cy": (1, 2, 1), "cxy": (2, 2, 1)}.get(epilogue[:-1], (1, 1, 1))

    @T.macro
    def tile(A, B, C, A_s, B_s, C_f, C_s, bx, by):
        T.clear(C_f)
        for k in T.Pipelined(T.ceildiv(K, bK), num_stages=num_stages):
            T.copy(A[by * bM, k * bK], A_s)
            if k_major:
                T.copy(B[bx * bN, k * bK], B_s)
            else:
                T.copy(B[k * bK, bx * bN], B_s)
            T.gemm(A_s, B_s, C_f, transpose_B=k_major)
        if halves:
            for h in T.unroll(2):
                for i, j in T.Parallel(bM, bN // 2):
                    C_s[i, j] = C_f[i, h * (bN // 2) + j]
                T.copy(C_s, C[by * bM, bx * bN + h * (bN // 2)])
        elif deferred_store:
            T.tma_store_wait(0)  # the previous tile's store has read C_s
            T.copy(C_f, C_s)
            T.tma_copy(C_s, C[by * bM, bx * bN])
        elif shared_epilogue:
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * bM, bx * bN])
        else:
            T.copy(C_f, C[by * bM, bx * bN])

    if persistent:
        blocks = blocks or torch.cuda.get_device_properties(0).multi_processor_count

        @T.prim_func
        def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
                 C: T.Tensor((M, N), out_dtype)):
            with T.Kernel(blocks, threads=threads) as bid:
                A_s = T.alloc_shared((bM, bK), dtype)
                B_s = T.alloc_shared(bs_shape, dtype)
                C_f = T.alloc_fragment((bM, bN), "float32")
                if shared_epilogue:
                    C_s = T.alloc_shared(cs_shape, out_dtype)
                    if halves:  # the swizzle T.copy's staging tile would get
                        T.annotate_layout({C_s: make_gmma_swizzled_layout(C_s)})
                    for by, bx in T.Persistent([T.ceildiv(M, bM), T.ceildiv(N, bN)], blocks,
                                               bid, group_size=panel):
                        tile(A, B, C, A_s, B_s, C_f, C_s, bx, by)
                    if deferred_store:
                        T.tma_store_wait(0)  # the last tile's store has read C_s
                else:
                    for by, bx in T.Persistent([T.ceildiv(M, bM), T.ceildiv(N, bN)], blocks,
                                               bid, group_size=panel):
                        tile(A, B, C, A_s, B_s, C_f, C_f, bx, by)

        return main

    @T.prim_func
    def main(A: T.Tensor((M, K), dtype), B: T.Tensor(b_shape, dtype),
             C: T.Tensor((M, N), out_dtype)):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads,
                      cluster_dims=cluster) as (bx, by):
            T.use_swizzle(panel)
            A_s = T.alloc_shared((bM, bK), dtype)
            B_s = T.alloc_shared(bs_shape, dtype)
            C_f = T.alloc_fragment((bM, bN), "float32")
            if shared_epilogue:
                C_s = T.alloc_shared((bM, bN), out_dtype)
                tile(A, B, C, A_s, B_s, C_f, C_s, bx, by)
            else:
                tile(A, B, C, A_s, B_s, C_f, C_f, bx, by)  # C_f stands in for the unused C_s

    return main


# Triton's autotuning space (pipelined, like its Hopper GEMM tutorials): the best of these
# per shape is the baseline.
TRITON_CONFIGS = [(128, 256, 64, 8, 3), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3),
                  (128, 128, 64, 4, 4), (128, 128, 64, 8, 3)]


def triton_matmul():
    """An autotuned pipelined Triton GEMM (fp16/bf16), or None without Triton."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    configs = [triton.Config({"BM": bm, "BN": bn, "BK": bk}, num_warps=w, num_stages=st)
               for bm, bn, bk, w, st in TRITON_CONFIGS]

    @triton.autotune(configs=configs, key=["M", "N", "K"])
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
        grid = lambda meta: (M // meta["BM"], N // meta["BN"])  # noqa: E731
        kernel[grid](x, y, out, M, N, K)

    return run


def inputs(n, dtype):
    """(a, b, the baseline's callable, reference C) for an n^3 GEMM of ``dtype``."""
    if dtype.startswith("float8"):
        fp8 = getattr(torch, dtype)
        a = torch.randn(n, n, device="cuda").to(fp8)
        b = torch.randn(n, n, device="cuda").to(fp8)  # (N, K): K-major
        one = torch.ones((), device="cuda")
        base = lambda: torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one,  # noqa: E731
                                        out_dtype=torch.float16)
        ref = (a.float() @ b.float().t()).half()
        return a, b, base, ref
    tdt = getattr(torch, dtype)
    a = torch.randn(n, n, device="cuda", dtype=tdt)
    b = torch.randn(n, n, device="cuda", dtype=tdt)
    return a, b, (lambda: a @ b), (a.float() @ b.float()).to(tdt)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", type=int, nargs="+", default=[4096, 8192])
    p.add_argument("--dtypes", nargs="+", default=["float16", "bfloat16"],
                   help="float16, bfloat16, float8_e4m3fn (against torch._scaled_mm)")
    p.add_argument("--quick", action="store_true",
                   help="the QUICK tile configurations, not CONFIGS")
    p.add_argument("--path", choices=("default", "sm80"), default="default")
    p.add_argument("--configs", nargs="+", metavar="MxNxKxTHREADSxSTAGESxEPILOGUE",
                   help="tile configurations to try instead of the built-in list (K is for "
                        "16-bit types; fp8 tiles take twice the K; epilogue r, s, pr, ps, pt, ph, "
                        "cxr, cxs, cyr, cys, cxyr or cxys)")
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds: each round times every contender once, in turn")
    p.add_argument("--no-stage-study", action="store_true",
                   help="skip the multi-stage against 1-stage comparison")
    args = p.parse_args(argv)
    configs = QUICK if args.quick else CONFIGS
    if args.configs:
        configs = [tuple(int(x) if x.isdigit() else x for x in c.split("x", 5))
                   for c in args.configs]  # the epilogue code may itself hold an "x"
        configs = [c if len(c) == 6 else (*c, "r") for c in configs]
    sm80 = SM80_PATH if args.path == "sm80" else {}
    if sm80:  # no TMA there, so nothing to multicast
        configs = [c for c in configs if not c[5].startswith("c")]
        if not configs:
            raise SystemExit("no configuration left for --path sm80 (clusters multicast with "
                             "TMA, which that path does not use)")
    tri = triton_matmul()
    rows = []
    for dtype in args.dtypes:
        fp8 = dtype.startswith("float8")
        out_dtype = "float16" if fp8 else dtype
        for n in args.sizes:
            a, b, base, ref = inputs(n, dtype)
            flops = 2 * n ** 3
            tf = lambda ms: flops / ms * 1e-9  # noqa: E731
            contenders = {"torch": base}
            compiled = {}
            for cfg in configs:
                cfg = (cfg[0], cfg[1], cfg[2] * 2, *cfg[3:]) if fp8 else cfg
                t0 = time.time()
                try:  # e.g. a cluster that does not divide the grid of this size
                    k = tilelang.compile(matmul(n, n, n, *cfg[:5], dtype, cfg[5],
                                                out_dtype=out_dtype),
                                         out_idx=[2], target="cuda", pass_configs=sm80)
                except tilelang.TileLangError as e:
                    print(f"{dtype} {n} {'x'.join(map(str, cfg))}: skipped: {str(e)[:160]}")
                    continue
                err = float((k(a, b).float() - ref.float()).abs().max())
                compiled[cfg] = (err, time.time() - t0)
                contenders[cfg] = lambda k=k: k(a, b)
            if tri is not None and not fp8:
                out = torch.empty_like(a)
                contenders["triton"] = lambda: tri(a, b, out)
                contenders["triton"]()  # autotune before timing
            ms, runs = interleaved_ms(contenders, args.rounds)
            print(f"{dtype} {n} cuBLAS by round: " + ", ".join(f"{tf(x):.0f}" for x in runs["torch"])
                  + " TFLOP/s", flush=True)
            base_ms = ms["torch"]
            for cfg, (err, compile_s) in compiled.items():
                print(f"{dtype} {n} {'x'.join(map(str, cfg))}: {tf(ms[cfg]):.0f} TFLOP/s "
                      f"({base_ms / ms[cfg]:.2f}x torch; by round "
                      + ", ".join(f"{tf(x):.0f}" for x in runs[cfg]) + f"), max err {err:.3g}, "
                      f"compile {compile_s:.1f} s", flush=True)
            if not compiled:
                print(f"{dtype} {n}: no configuration compiled")
                continue
            cfg = min(compiled, key=lambda c: ms[c])
            err, compile_s = compiled[cfg]
            row = {"dtype": dtype, "size": n, "tiles": "x".join(map(str, cfg[:3])),
                   "threads": cfg[3], "stages": cfg[4], "epilogue": cfg[5], "ours": tf(ms[cfg]), "torch": tf(base_ms),
                   "ours/torch": base_ms / ms[cfg], "max_err": err, "compile_s": compile_s}
            if not args.no_stage_study:  # the best tiles pipelined against one stage (sync)
                k1 = tilelang.compile(matmul(n, n, n, *cfg[:4], 1, dtype, cfg[5],
                                             out_dtype=out_dtype),
                                      out_idx=[2], target="cuda", pass_configs=sm80)
                ms1 = bench_ms(lambda: k1(a, b))
                row["1 stage"] = tf(ms1)
                row["pipelined vs 1 stage"] = ms1 / ms[cfg]
            if "triton" in ms:
                row["triton"] = tf(ms["triton"])
                row["ours/triton"] = row["ours"] / row["triton"]
            rows.append(row)
    write_json(rows, f"bench_gemm_{args.path}.json")
    print("torch: cuBLAS (a @ b), for fp8 torch._scaled_mm; triton: autotuned over",
          ", ".join("x".join(map(str, c)) for c in TRITON_CONFIGS), "(BMxBNxBKxwarpsxstages)")
    print_table(rows, ["dtype", "size", "tiles", "threads", "stages", "epilogue", "ours", "torch",
                       "ours/torch", "triton", "ours/triton", "1 stage",
                       "pipelined vs 1 stage", "max_err", "compile_s"])


if __name__ == "__main__":
    main()
