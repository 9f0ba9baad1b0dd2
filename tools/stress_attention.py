"""Hunt the intermittent ``unspecified launch failure`` of the attention forward (fifteenth
stop, docs/benchmarks.md): the fp16 D=128 non-causal build at 64x64x2x128 failed at its first
timing inside ``bench_attention.py`` in two of three runs, after the D=64 cases, and never in a
process of its own running 300 plain calls.

Each trial runs one sequence in a fresh process (a launch failure poisons the CUDA context) and
prints its exit status and last steps:

    alone         build the suspect, check it against torch, time it 4 times
    after-d64     the same, after timing the D=64 build of the same configuration
    after-causal  the same, after timing the D=64 causal 128x128x3x256 build
    cold-loop     the suspect alone, 2000 calls each after zeroing 256 MB (do_bench's cold L2),
                  every output compared bit for bit with the first
    bench         bench_attention.py's own order up to the failure (the D=64 cases, causal and
                  not, then D=128 non-causal: every configuration, cuDNN, flash and Triton),
                  naming each contender as it is timed and synchronizing after it (with
                  --pass-config, every build of the sequence gets it)

    python tools/stress_attention.py [--trials 3] [--config 64x64x2x128] [--memcheck]
                                     [--blocking] [--pass-config tl.disable_warp_specialized=1]

``--memcheck`` runs each sequence under ``compute-sanitizer --tool memcheck`` restricted to the
tilelang kernels (``main_kernel``), which names the faulting access if the kernel makes one;
``--blocking`` sets ``CUDA_LAUNCH_BLOCKING=1``, so that an error is raised by the launch that
caused it and not by a later synchronize; ``--pass-config KEY=VALUE`` (repeatable) compiles the
suspect with that pass config, e.g. without warp specialization, to split the hypotheses.
"""

from __future__ import annotations

import argparse
import functools
import os
import subprocess
import sys
import time
from unittest import mock

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "benchmarks"))

SEQUENCES = ("alone", "after-d64", "after-causal", "cold-loop", "bench")
SHAPE = (8, 16, 4, 4096)  # batch, heads, kv heads, sequence: bench_attention's defaults

PASS_CONFIGS: dict = {}  # the child's --pass-config settings: the suspect build, all of "bench"


def _build(dim: int, cfg: str, causal: bool, configs: dict | None = None):
    """(kernel, inputs, torch reference) of bench_attention's BSHD fp16 case."""
    import bench_attention as ba
    import tilelang

    case, shape = ba.Case("bshd", "float16", dim), ba.Shape(*SHAPE)
    q, k, v = ba.inputs(case, shape)
    kern = tilelang.compile(ba.program(case, shape, causal, ba.config(cfg)), out_idx=[3],
                            target="cuda", pass_configs=configs or None)
    return kern, (q, k, v), ba.example_mha_fwd.reference(q, k, v, causal)


def run_bench_order() -> None:
    """bench_attention's cases in its order until D=128 non-causal, each contender named."""
    import bench_attention as ba
    import common
    import torch

    def traced(contenders: dict, rounds: int):
        """common.interleaved_ms, naming each contender before its timing and synchronizing
        after it."""
        name_of = {id(fn): name for name, fn in contenders.items()}
        bench_ms = common.bench_ms

        def named_bench_ms(fn):
            print(f"timing {name_of[id(fn)]}", flush=True)
            ms = bench_ms(fn)
            torch.cuda.synchronize()
            return ms

        with mock.patch.object(common, "bench_ms", named_bench_ms):
            return common.interleaved_ms(contenders, rounds)

    ba.interleaved_ms = traced
    shape, tri = ba.Shape(*SHAPE), ba.triton_attention()
    # with --pass-config, every build of the sequence gets it
    with mock.patch.object(ba.tilelang, "compile",
                           functools.partial(ba.tilelang.compile, pass_configs=PASS_CONFIGS)):
        for dim, causal in ((64, False), (64, True), (128, False)):
            print(f"case D={dim} causal={causal}", flush=True)
            ba.bench_case(ba.Case("bshd", "float16", dim), shape, causal, tri)
    print("OK")


def run_sequence(name: str, cfg: str) -> None:
    import torch
    from common import bench_ms

    if name == "bench":
        return run_bench_order()
    if name == "cold-loop":
        kern, args, _ = _build(128, cfg, False, PASS_CONFIGS)
        first, cache = kern(*args), torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
        differ = 0
        for _ in range(2000):
            cache.zero_()
            differ += not torch.equal(kern(*args), first)
        torch.cuda.synchronize()
        print(f"timed: 2000 cold calls, {differ} outputs differ from the first", flush=True)
        print("OK")
        return
    before = {"after-d64": (64, cfg, False), "after-causal": (64, "128x128x3x256", True)}
    if name in before:
        kern, args, _ = _build(*before[name])
        for _ in range(3):
            bench_ms(lambda: kern(*args))
        torch.cuda.synchronize()
        print("timed the build before", flush=True)
    kern, args, ref = _build(128, cfg, False, PASS_CONFIGS)
    out = kern(*args)
    torch.cuda.synchronize()
    print(f"checked: max error {float((out.float() - ref.float()).abs().max()):.3g}", flush=True)
    for i in range(4):
        bench_ms(lambda: kern(*args))
        torch.cuda.synchronize()
        print(f"timed {i}", flush=True)
    print("OK")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--config", default="64x64x2x128")
    p.add_argument("--sequences", nargs="+", choices=SEQUENCES,
                   default=["alone", "after-d64", "after-causal", "bench"])
    p.add_argument("--memcheck", action="store_true")
    p.add_argument("--blocking", action="store_true")
    p.add_argument("--pass-config", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--run", choices=SEQUENCES, help=argparse.SUPPRESS)  # the child's side
    args = p.parse_args(argv)
    for item in args.pass_config:
        key, _, value = item.partition("=")
        PASS_CONFIGS[key] = int(value) if value.lstrip("-").isdigit() else value
    if args.run:
        run_sequence(args.run, args.config)
        return 0
    failed = 0
    for trial in range(args.trials):
        for seq in args.sequences:
            cmd = [sys.executable, os.path.abspath(__file__), "--run", seq, "--config",
                   args.config] + [f"--pass-config={c}" for c in args.pass_config]
            if args.memcheck:
                cmd = ["compute-sanitizer", "--tool", "memcheck", "--kernel-name",
                       "kns=main_kernel", "--print-limit", "5"] + cmd
            t0 = time.time()
            try:
                env = dict(os.environ, **({"CUDA_LAUNCH_BLOCKING": "1"} if args.blocking else {}))
                p_ = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
                rc, text = p_.returncode, p_.stdout + p_.stderr
            except subprocess.TimeoutExpired as e:
                rc, text = "timeout", (e.stdout or b"").decode() + (e.stderr or b"").decode()
            lines = [ln for ln in text.splitlines() if "CUDAEvent" not in ln]
            keep = [ln.strip() for ln in lines
                    if ln.startswith(("checked", "timed", "OK", "=========", "case")) or
                    "Error" in ln]
            if rc != 0:  # the contender being timed when it failed
                keep += [ln for ln in lines if ln.startswith("timing")][-1:]
            failed += rc != 0
            print(f"trial {trial} {seq:13s} rc={rc} {time.time() - t0:.0f}s: "
                  + " | ".join(keep)[-600:], flush=True)
    print(f"{failed} of {args.trials * len(args.sequences)} sequences failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
