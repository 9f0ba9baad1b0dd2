"""Checking and timing compiled kernels: ``kernel.get_profiler()``."""

from __future__ import annotations

import time
from typing import Any, Callable

import torch

from ..utils.tensor import TensorSupplyType, as_list, compare, make_tensor


class Profiler:
    """Generates inputs for a kernel, compares it to a reference and times it."""

    def __init__(self, kernel, supply: TensorSupplyType = TensorSupplyType.Auto):
        self.kernel = kernel
        self.supply = supply

    @property
    def device(self) -> torch.device:
        from ..engine.target import is_cpu

        return torch.device("cpu" if is_cpu(self.kernel.target) else "cuda")

    def _inputs(self, sizes: dict | None = None) -> list:
        sizes = sizes or {}
        out = []
        for p in self.kernel.input_params:
            shape = getattr(p, "shape", None)
            if shape is None:  # scalar parameter
                out.append(sizes.get(p.name, 1))
                continue
            dims = []
            for s in shape:
                if isinstance(s, int):
                    dims.append(s)
                elif s in sizes:
                    dims.append(sizes[s])
                else:
                    raise ValueError(f"size {s!r} of parameter {p.name!r} is symbolic: pass "
                                     f"sizes={{'{s}': ...}} to the profiler")
            out.append(make_tensor(dims, p.dtype, p.torch_dtype, self.device, self.supply))
        return out

    def assert_allclose(self, reference_program: Callable, atol: float = 1e-2,
                        rtol: float = 1e-2, max_mismatched_ratio: float = 0.01,
                        sizes: dict | None = None) -> None:
        """Run the kernel and ``reference_program`` on the same random inputs and compare
        every output."""
        ins = self._inputs(sizes)
        outs = as_list(self.kernel(*ins))
        refs = as_list(reference_program(*ins))
        if len(outs) != len(refs):
            raise AssertionError(f"the kernel returned {len(outs)} outputs, the reference "
                                 f"{len(refs)}")
        for k, (o, r) in enumerate(zip(outs, refs)):
            compare(o, r, atol, rtol, max_mismatched_ratio, name=f"output {k}")

    def run_once(self, func: Callable | None = None) -> Any:
        ins = self._inputs()
        return (func or self.kernel)(*ins)

    def do_bench(self, func: Callable | None = None, warmup: float = 25, rep: float = 100,
                 n_warmup: int = 1, n_repeat: int = 1, backend: str = "event",
                 quantiles: list | None = None, input_tensors: list | None = None,
                 return_mode: str = "mean") -> float | list:
        """Milliseconds per call of ``func`` (default: the kernel), measured for about ``rep``
        ms after ``warmup`` ms; ``quantiles`` returns those quantiles instead."""
        ins = input_tensors if input_tensors is not None else self._inputs()
        fn = func or self.kernel
        return bench(lambda: fn(*ins), warmup=warmup, rep=rep, quantiles=quantiles,
                     cuda=self.device.type == "cuda", return_mode=return_mode)


def bench(fn: Callable[[], Any], warmup: float = 25, rep: float = 100,
          quantiles: list | None = None, cuda: bool = False, return_mode: str = "mean"):
    """Time ``fn``: CUDA events on the GPU, ``perf_counter`` on the CPU; milliseconds."""
    if cuda:
        return _bench_cuda(fn, warmup, rep, quantiles, return_mode)
    fn()
    t0 = time.perf_counter()
    fn()
    est = max(1e-6, time.perf_counter() - t0) * 1e3
    for _ in range(max(1, int(warmup / est))):
        fn()
    times = []
    for _ in range(max(1, int(rep / est))):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return _summary(times, quantiles, return_mode)


def _bench_cuda(fn, warmup, rep, quantiles, return_mode):
    fn()
    torch.cuda.synchronize()
    cache = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        cache.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(1e-4, start.elapsed_time(end) / 5)
    n_warm, n_rep = max(1, int(warmup / est)), max(1, int(rep / est))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n_rep)]
    for _ in range(n_warm):
        fn()
    for i in range(n_rep):
        cache.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    return _summary([s.elapsed_time(e) for s, e in zip(starts, ends)], quantiles, return_mode)


def _summary(times: list, quantiles, return_mode: str):
    t = torch.tensor(times, dtype=torch.float64)
    if quantiles is not None:
        q = torch.quantile(t, torch.tensor(quantiles, dtype=torch.float64)).tolist()
        return q[0] if len(q) == 1 else q
    if return_mode == "median":
        return float(t.median())
    if return_mode == "min":
        return float(t.min())
    return float(t.mean())


__all__ = ["Profiler", "bench"]
