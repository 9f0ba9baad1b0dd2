"""Async against sync: the same kernel source and tiles compiled two ways, for GEMM and for
attention (``../shared/notes/targets.md``, "What async vs sync means").

- **sync**: one stage (``num_stages=1``) with TMA and warp specialization off: every iteration
  all threads copy global -> shared, synchronize, compute;
- **async**: ``T.Pipelined(num_stages=n)`` with the compiler's choice on the GPU (on sm_90a: a
  TMA producer warp group, wgmma consumer warp groups, an mbarrier ring, register rebalancing).

    python benchmarks/bench_async_vs_sync.py                # every case, a table last
    python benchmarks/bench_async_vs_sync.py --list         # the kernel names
    python benchmarks/bench_async_vs_sync.py --only gemm-async --repeat 5   # for a profiler:
    ncu --clock-control none -k main_kernel --metrics \\
        sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active \\
        python benchmarks/bench_async_vs_sync.py --only gemm-async --repeat 3

The two ways of one case are timed in alternating rounds (``--rounds``; the median of each is
reported), so both see the same clocks.  Prints latency and TFLOP/s of both and the ratio
(async over sync); writes bench_async_vs_sync.json.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "flash_attention"))
import bench_gemm  # noqa: E402
import example_mha_fwd  # noqa: E402
from common import interleaved_ms, print_table, write_json  # noqa: E402

import tilelang  # noqa: E402

SYNC = {tilelang.PassConfigKey.TL_DISABLE_TMA_LOWER: True,
        tilelang.PassConfigKey.TL_DISABLE_WARP_SPECIALIZED: True}


def gemm_case(n: int, stages: int):
    """(program, inputs, reference, FLOPs) of an n^3 fp16 GEMM at the tiles where the async
    build is fastest (``bench_gemm.py``): 128x256x64, 256 threads, C out through shared memory."""
    prog = bench_gemm.matmul(n, n, n, 128, 256, 64, 256, stages, "float16", epilogue="s")
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    return prog, (a, b), lambda: a @ b, 2 * n ** 3


def attention_case(causal: bool, stages: int, B=8, H=16, S=4096, D=128):
    """(program, inputs, reference, FLOPs) of the BSHD fp16 attention example."""
    prog = example_mha_fwd.flashattn(B, H, S, D, causal, block_M=128, block_N=128,
                                     num_stages=stages, threads=256)
    q, k, v = (torch.randn(B, S, H, D, device="cuda", dtype=torch.float16) for _ in range(3))
    flops = 4 * B * H * S * S * D * (0.5 if causal else 1.0)
    return prog, (q, k, v), lambda: example_mha_fwd.reference(q, k, v, causal), flops


# name -> (builder of one way, pipelined stages of the async way)
CASES = {
    "gemm-8192": (lambda st: gemm_case(8192, st), 4),
    "gemm-4096": (lambda st: gemm_case(4096, st), 4),
    "attention": (lambda st: attention_case(False, st), 3),
    "attention-causal": (lambda st: attention_case(True, st), 3),
}


def build(name: str, way: str):
    """(compiled kernel, inputs, reference callable, FLOPs) of one way of one case."""
    make, stages = CASES[name]
    prog, args, ref, flops = make(stages if way == "async" else 1)
    kernel = tilelang.compile(prog, out_idx=[len(args)], target="cuda",
                              pass_configs=SYNC if way == "sync" else None)
    return kernel, args, ref, flops


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", choices=sorted(CASES), default=list(CASES))
    p.add_argument("--list", action="store_true", help="print the kernel names and stop")
    p.add_argument("--only", help="run only this kernel (<case>-sync or <case>-async), "
                                  "--repeat times, for a profiler")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds; each times the sync and the async kernel once")
    args = p.parse_args(argv)
    if args.list:
        print("\n".join(f"{c}-{w}" for c in CASES for w in ("sync", "async")))
        return
    if args.only:
        name, _, way = args.only.rpartition("-")
        if name not in CASES or way not in ("sync", "async"):
            raise SystemExit(f"--only {args.only}: expected one of --list")
        kernel, inputs, _, _ = build(name, way)
        for _ in range(args.repeat):
            kernel(*inputs)
        torch.cuda.synchronize()
        return
    rows = []
    for name in args.cases:
        row = {"case": name}
        calls = {}
        for way in ("sync", "async"):
            kernel, inputs, ref, flops = build(name, way)
            out = kernel(*inputs)
            row[f"{way} max_err"] = float((out.float() - ref().float()).abs().max())
            calls[way] = (lambda k=kernel, a=inputs: k(*a))
        ms, runs = interleaved_ms(calls, args.rounds)
        for way in ("sync", "async"):
            row[f"{way} ms"] = ms[way]
            row[way] = flops / ms[way] * 1e-9
            print(f"{name} {way}: {ms[way]:.3f} ms ({', '.join(f'{r:.3f}' for r in runs[way])}),"
                  f" {row[way]:.0f} TFLOP/s, max err {row[f'{way} max_err']:.3g}", flush=True)
        row["async/sync"] = row["async"] / row["sync"]
        rows.append(row)
    write_json(rows, "bench_async_vs_sync.json")
    print("TFLOP/s; sync = 1 stage, no TMA, no warp specialization; async = the pipelined "
          "default")
    print_table(rows, ["case", "sync ms", "async ms", "sync", "async", "async/sync",
                       "sync max_err", "async max_err"])


if __name__ == "__main__":
    main()
