"""Timing and reporting shared by the benchmark scripts."""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Callable

import torch


def bench_ms(fn: Callable[[], object]) -> float:
    """Median milliseconds per call: triton.testing.do_bench (50 ms warm-up, 200 ms of
    repeats) when Triton is installed, else tilelang's CUDA-event timer."""
    try:
        import triton.testing

        return float(triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median"))
    except ImportError:
        from tilelang.profiler import bench

        return float(bench(fn, warmup=50, rep=200, cuda=True, return_mode="median"))


def interleaved_ms(contenders: dict, rounds: int) -> tuple[dict, dict]:
    """Median milliseconds per call of each of ``contenders`` (name -> callable), over
    ``rounds`` rounds that each time every contender once with :func:`bench_ms`, in turn, so
    that all of them run under the same clocks and temperatures; and each one's runs.  Each
    round starts one contender later than the one before, so that over as many rounds as
    there are contenders each takes every place in the order: a GPU at its power limit slows
    down as a round goes on, which would otherwise favour the contenders timed first."""
    names = list(contenders)
    runs: dict = {name: [] for name in names}
    for r in range(max(1, rounds)):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(bench_ms(contenders[name]))
    return {name: float(statistics.median(ms)) for name, ms in runs.items()}, runs


def write_json(rows: list[dict], name: str) -> None:
    out = os.environ.get("OUT") or os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(out, name), "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(0), "rows": rows}, f, indent=1)


def print_table(rows: list[dict], cols: list[str]) -> None:
    widths = {c: max(len(c), *(len(_fmt(r.get(c))) for r in rows)) for c in cols}
    print(" | ".join(c.ljust(widths[c]) for c in cols))
    print("-+-".join("-" * widths[c] for c in cols))
    for r in rows:
        print(" | ".join(_fmt(r.get(c)).ljust(widths[c]) for c in cols))
    sys.stdout.flush()


def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)
