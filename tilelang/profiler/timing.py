"""Timing a callable: ``do_bench`` (the public TileLang/Triton signature) and ``bench``.

On the GPU a call is timed with CUDA events, and the L2 cache is flushed before every timed call
by zeroing a buffer larger than it (256 MB), so that each call reads its inputs from memory as
it would in a model; ``backend="cudagraph"`` instead captures many calls in one CUDA graph and
times its replays (no per-call launch cost, and no flush: L2 stays warm between calls);
``backend="cupti"`` sums the durations of the GPU kernels that each call launches, as CUPTI
(through ``torch.profiler``) records them: launch cost and idle gaps are left out, and so is the
flush.  Where no GPU is visible ``do_bench`` times with ``time.perf_counter``.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import torch

FLUSH_BYTES = 256 * 1024 * 1024  # larger than the L2 cache of any current GPU (H200: 50 MB)
BACKENDS = ("event", "cudagraph", "cupti")
FLUSH_RANGE = "tilelang.do_bench.flush"  # the profiler range around each L2 flush (cupti)
RETURN_MODES = ("mean", "median", "min", "max")


def do_bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100, _n_warmup: int = 0,
             _n_repeat: int = 0, quantiles: Sequence[float] | None = None,
             fast_flush: bool = True, backend: str = "event",
             return_mode: str = "mean") -> float | list[float]:
    """Milliseconds per call of ``fn``: warmed up for about ``warmup`` ms, then timed over
    about ``rep`` ms of calls (``_n_warmup`` / ``_n_repeat``, when positive, set the counts
    instead).  Returns the ``return_mode`` of the per-call times, or their ``quantiles``;
    ``backend="cupti"`` returns the mean kernel time per call (``quantiles`` and
    ``return_mode`` do not apply).  ``fast_flush`` flushes L2 with one memset of an int32
    buffer (else a byte buffer)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if return_mode not in RETURN_MODES:
        raise ValueError(f"return_mode must be one of {RETURN_MODES}, got {return_mode!r}")
    if not torch.cuda.is_available():
        return _bench_cpu(fn, warmup, rep, _n_warmup, _n_repeat, quantiles, return_mode)
    if backend == "cudagraph":
        return _bench_cudagraph(fn, rep, _n_repeat, quantiles, return_mode)
    if backend == "cupti":
        return _bench_cupti(fn, warmup, rep, _n_warmup, _n_repeat, fast_flush)
    return _bench_event(fn, warmup, rep, _n_warmup, _n_repeat, quantiles, fast_flush,
                        return_mode)


def bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
          quantiles: Sequence[float] | None = None, cuda: bool = False,
          return_mode: str = "mean") -> float | list[float]:
    """Time ``fn`` on the device it runs on: ``do_bench`` (CUDA events, L2 flushed) when
    ``cuda``, else ``perf_counter``; milliseconds."""
    if cuda:
        return do_bench(fn, warmup, rep, quantiles=quantiles, return_mode=return_mode)
    return _bench_cpu(fn, warmup, rep, 0, 0, quantiles, return_mode)


def counts(estimate_ms: float, warmup: float, rep: float, n_warmup: int = 0,
           n_repeat: int = 0) -> tuple[int, int]:
    """How many warm-up and timed calls fill ``warmup`` and ``rep`` ms at ``estimate_ms`` per
    call (at least one each); positive ``n_warmup`` / ``n_repeat`` take precedence."""
    est = max(estimate_ms, 1e-6)
    return (n_warmup if n_warmup > 0 else max(1, int(warmup / est)),
            n_repeat if n_repeat > 0 else max(1, int(rep / est)))


def summarize(times: Sequence[float], quantiles: Sequence[float] | None = None,
              return_mode: str = "mean") -> float | list[float]:
    """The ``quantiles`` of ``times`` (one float for one quantile), else their
    ``return_mode``."""
    t = torch.tensor(list(times), dtype=torch.float64)
    if quantiles is not None:
        q = torch.quantile(t, torch.tensor(list(quantiles), dtype=torch.float64)).tolist()
        return q[0] if len(q) == 1 else q
    return float(getattr(t, return_mode)())


def _bench_cpu(fn, warmup, rep, n_warmup, n_repeat, quantiles, return_mode):
    fn()
    t0 = time.perf_counter()
    fn()
    n_warm, n_rep = counts((time.perf_counter() - t0) * 1e3, warmup, rep, n_warmup, n_repeat)
    for _ in range(n_warm):
        fn()
    times = []
    for _ in range(n_rep):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return summarize(times, quantiles, return_mode)


def _calibrated(fn, warmup, rep, n_warmup, n_repeat, fast_flush):
    """The L2 flush buffer and the warm-up and timed call counts, from five flushed calls;
    the warm-up calls have run when this returns."""
    fn()
    torch.cuda.synchronize()
    flush = torch.empty(FLUSH_BYTES // (4 if fast_flush else 1),
                        dtype=torch.int32 if fast_flush else torch.int8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    n_warm, n_rep = counts(start.elapsed_time(end) / 5, warmup, rep, n_warmup, n_repeat)
    for _ in range(n_warm):
        fn()
    return flush, n_rep


def _bench_event(fn, warmup, rep, n_warmup, n_repeat, quantiles, fast_flush, return_mode):
    flush, n_rep = _calibrated(fn, warmup, rep, n_warmup, n_repeat, fast_flush)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for i in range(n_rep):
        flush.zero_()  # the flush runs before the start event: it is not timed
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return summarize([s.elapsed_time(e) for s, e in zip(starts, ends)], quantiles, return_mode)


CUPTI_MAX_CALLS = 1000  # profiled calls at most: each leaves a few events to post-process


def _bench_cupti(fn, warmup, rep, n_warmup, n_repeat, fast_flush):
    """Mean GPU time per call: the durations of all device activities (kernels, copies) that
    the profiler records over the timed calls, less those of the flushes, over the calls.  The
    flushes are recognised by the profiler range around them, whose device-side span holds
    their activities, not by kernel names (``fn`` may launch the same fill kernel)."""
    from torch.profiler import ProfilerActivity, profile, record_function

    flush, n_rep = _calibrated(fn, warmup, rep, n_warmup, n_repeat, fast_flush)
    n_rep = min(n_rep, CUPTI_MAX_CALLS)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n_rep):
            with record_function(FLUSH_RANGE):
                flush.zero_()
            fn()
        torch.cuda.synchronize()
    device_us, flush_us = device_time_us(prof.events(), FLUSH_RANGE)
    if device_us - flush_us <= 0:
        raise RuntimeError("do_bench(backend='cupti'): the profiler recorded no GPU activity of "
                           "the timed function (does it run on the GPU? is CUPTI usable here?); "
                           "use backend='event'")
    return (device_us - flush_us) / 1e3 / n_rep


def device_time_us(events, excluded_range: str) -> tuple[float, float]:
    """Total duration of the device activities (kernels, copies, memsets) among the profiler's
    ``events``, and the part that ran inside the device-side span of the ranges named
    ``excluded_range`` (microseconds).  The profiler mirrors each ``record_function`` range
    on the device as a user annotation spanning the activities launched inside it; those
    annotations are spans, not work, and are not counted."""
    from torch.autograd import DeviceType

    device = [e for e in events if e.device_type != DeviceType.CPU]
    spans = [e.time_range for e in device if e.is_user_annotation and e.name == excluded_range]
    work = [e.time_range for e in device if not e.is_user_annotation]
    total = sum(t.elapsed_us() for t in work)
    excluded = sum(t.elapsed_us() for t in work
                   if any(s.start <= t.start and t.end <= s.end for s in spans))
    return total, excluded


def _bench_cudagraph(fn, rep, n_repeat, quantiles, return_mode, replays: int = 10):
    """``n`` calls captured in one graph (``n`` from ``rep`` or ``n_repeat``), replayed
    ``replays`` times; each replay gives one per-call time, its duration over ``n``."""
    with torch.cuda.stream(torch.cuda.Stream()):
        fn()  # outside the capture: lazy initialization, allocator warm-up
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        _, n = counts(start.elapsed_time(end) / 5, 0, rep, 0, n_repeat)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(n):
                fn()
        torch.cuda.synchronize()
        graph.replay()  # warm-up replay
        times = []
        for _ in range(replays):
            start.record()
            graph.replay()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / n)
    return summarize(times, quantiles, return_mode)


__all__ = ["bench", "counts", "do_bench", "summarize"]
