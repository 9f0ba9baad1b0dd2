"""Checking and timing compiled kernels: ``kernel.get_profiler()``."""

from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import KernelArgumentError
from ..utils.tensor import TensorSupplyType, as_list, compare, make_tensor, reference_outputs
from .timing import bench, do_bench


class Profiler:
    """Generates inputs for a kernel, compares it to a reference and times it."""

    def __init__(self, kernel, supply: TensorSupplyType = TensorSupplyType.Auto):
        self.kernel = kernel
        self.supply = supply

    @property
    def func(self) -> Callable:
        """The kernel as a callable (``profiler.func(*tensors)``), as in the public TileLang."""
        return self.kernel

    @property
    def device(self) -> torch.device:
        from ..engine.target import is_cpu

        return torch.device("cpu" if is_cpu(self.kernel.target) else "cuda")

    def _inputs(self, sizes: dict | None = None, how: str | None = None) -> list:
        """Generated inputs; ``how``: what the caller can give instead of a missing size."""
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
                    raise KernelArgumentError(
                        f"{self.kernel.name}: size {s!r} of parameter {p.name!r} is "
                        f"symbolic, so no input can be generated for it without its value: "
                        f"{how or f'pass sizes={{{s!r}: ...}} to the profiler'}")
            out.append(make_tensor(dims, p.dtype, p.torch_dtype, self.device, self.supply))
        return out

    def assert_allclose(self, reference_program: Callable, input_tensors: list | None = None,
                        atol: float = 1e-2, rtol: float = 1e-2,
                        max_mismatched_ratio: float = 0.01,
                        sizes: dict | None = None) -> None:
        """Run the kernel and ``reference_program`` on the same inputs (``input_tensors``, or
        generated ones) and compare every output."""
        ins = list(input_tensors) if input_tensors is not None else self._inputs(sizes)
        refs = reference_outputs(reference_program, self.kernel, ins)  # before the kernel writes any input
        outs = as_list(self.kernel(*ins))
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
                 return_mode: str = "mean",
                 dynamic_symbolic_constraints: dict | None = None) -> float | list:
        """Milliseconds per call of ``func`` (default: the kernel) on generated inputs (or
        ``input_tensors``), timed by :func:`do_bench` with ``backend`` on the GPU and with
        ``perf_counter`` on the CPU; ``quantiles`` returns those quantiles instead.  Generated
        inputs take their symbolic sizes from ``dynamic_symbolic_constraints`` (name -> int)."""
        ins = (input_tensors if input_tensors is not None
               else self._inputs(dynamic_symbolic_constraints))
        fn = func or self.kernel
        call = lambda: fn(*ins)  # noqa: E731
        if self.device.type == "cuda":
            return do_bench(call, warmup, rep, quantiles=quantiles, backend=backend,
                            return_mode=return_mode)
        return bench(call, warmup, rep, quantiles=quantiles, return_mode=return_mode)


__all__ = ["Profiler", "bench", "do_bench"]
