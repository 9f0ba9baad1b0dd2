"""``@tilelang.autotune``: compile a kernel for every configuration, keep the fastest.

    @tilelang.autotune(configs=[{"block_M": 64}, {"block_M": 128}])
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=64): ...

    kernel = matmul(1024, 1024, 1024)      # the fastest; kernel.config, kernel.latency

A configuration that fails to compile, or (with ``ref_prog``) gives wrong results, is skipped
and reported; when none works the call raises ``TileLangError`` listing why each failed.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Sequence

from ..errors import TileLangError
from ..utils.tensor import TensorSupplyType


class _AutoTuned:
    def __init__(self, fn: Callable, configs, warmup: float, rep: float, timeout: float | None,
                 ref_prog: Callable | None, supply_type, rtol: float, atol: float,
                 max_mismatched_ratio: float, skip_check: bool, verbose: bool):
        self.fn = fn
        self.configs = configs
        self.warmup, self.rep, self.timeout = warmup, rep, timeout
        self.ref_prog = ref_prog
        self.supply_type = supply_type
        self.rtol, self.atol, self.ratio = rtol, atol, max_mismatched_ratio
        self.skip_check = skip_check
        self.verbose = verbose
        self._best: dict = {}
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any):
        key = (args, tuple(sorted(kwargs.items())))
        try:
            if key in self._best:
                return self._best[key]
        except TypeError:  # unhashable arguments: tune every time, like tilelang.jit
            key = None
        configs = self.configs(*args, **kwargs) if callable(self.configs) else self.configs
        best, failures, start = None, [], time.time()
        for cfg in configs:
            if self.timeout is not None and time.time() - start > self.timeout:
                failures.append((cfg, "skipped: tuning timeout reached"))
                continue
            try:
                kernel = self.fn(*args, **{**kwargs, **cfg})
                prof = kernel.get_profiler(self.supply_type)
                if self.ref_prog is not None and not self.skip_check:
                    prof.assert_allclose(self.ref_prog, atol=self.atol, rtol=self.rtol,
                                         max_mismatched_ratio=self.ratio)
                ms = prof.do_bench(warmup=self.warmup, rep=self.rep)
            except Exception as err:  # a failing configuration is skipped, not fatal
                failures.append((cfg, f"{type(err).__name__}: {str(err).splitlines()[0]}"))
                continue
            if self.verbose:
                print(f"autotune {getattr(self.fn, '__name__', 'kernel')} {cfg}: {ms:.4f} ms")
            if best is None or ms < best[1]:
                best = (kernel, ms, cfg)
        if best is None:
            why = "; ".join(f"{c}: {m}" for c, m in failures) or "no configurations given"
            raise TileLangError(f"autotune found no working configuration ({why})")
        kernel, ms, cfg = best
        kernel.config, kernel.latency = dict(cfg), ms
        kernel.autotune_failures = failures
        if key is not None:
            self._best[key] = kernel
        return kernel


def autotune(configs: Sequence[dict] | Callable | None = None, warmup: float = 25,
             rep: float = 100, timeout: float | None = None, ref_prog: Callable | None = None,
             supply_type: TensorSupplyType = TensorSupplyType.Auto, rtol: float = 1e-2,
             atol: float = 1e-2, max_mismatched_ratio: float = 0.01, skip_check: bool = False,
             cache_input_tensors: bool = False, verbose: bool = False):
    """Stack over ``@tilelang.jit``: the decorated call returns the fastest kernel over
    ``configs`` (a list of keyword-argument dicts, or a function of the call's arguments that
    returns one), timed with ``do_bench(warmup, rep)`` and checked against ``ref_prog``.
    ``cache_input_tensors`` is accepted for compatibility; inputs are made once per config."""
    if configs is None:
        raise TileLangError("tilelang.autotune needs configs=[{...}, ...] (or a function "
                            "returning them)")

    def deco(fn):
        return _AutoTuned(fn, configs, warmup, rep, timeout, ref_prog, supply_type, rtol, atol,
                          max_mismatched_ratio, skip_check, verbose)

    return deco


__all__ = ["autotune"]
