"""Checking and timing one compiled candidate in this process, within a deadline."""

from __future__ import annotations

import time
from typing import Any, Callable

from .failures import CandidateRuntimeError, CandidateTimeout


class Inputs:
    """Where a candidate's input tensors come from, in this order: the tensors of
    ``set_autotune_inputs``, ``supply_prog(kernel.input_params)``, else tensors generated
    for the kernel's parameters as ``supply_type`` says.  With ``reuse`` the generated tensors
    of one candidate are kept for the next whose inputs have the same shapes and dtypes."""

    def __init__(self, given: list | None, supply_prog: Callable | None, supply_type: Any,
                 reuse: bool):
        self.given, self.supply_prog = given, supply_prog
        self.supply_type, self.reuse = supply_type, reuse
        self._kept: list | None = None

    def for_kernel(self, kernel) -> list:
        if self.given is not None:
            return _given_inputs(self.given, kernel)
        if self.supply_prog is not None:
            return list(self.supply_prog(kernel.input_params))
        if self.reuse and self._kept is not None and _fits(self._kept, kernel):
            return self._kept
        from ..profiler import Profiler

        made = Profiler(kernel, self.supply_type)._inputs(
            how="give the tensors to tune on with set_autotune_inputs(...) or supply_prog")
        if self.reuse:
            self._kept = made
        return made


def _given_inputs(tensors: list, kernel) -> list:
    n_in, n_all = len(kernel.input_params), len(kernel.params)
    if len(tensors) == n_in:
        return tensors
    if len(tensors) == n_all:
        return [t for i, t in enumerate(tensors) if i not in kernel.out_idx]
    names = ", ".join(p.name for p in kernel.input_params)
    raise TypeError(f"set_autotune_inputs got {len(tensors)} tensors; kernel {kernel.name} "
                    f"takes {n_in} inputs ({names}) or all {n_all} parameters")


def _fits(tensors: list, kernel) -> bool:
    params = kernel.input_params
    if len(tensors) != len(params):
        return False
    for t, p in zip(tensors, params):
        shape = getattr(p, "shape", None)
        if shape is None:
            continue
        if getattr(t, "dtype", None) != p.torch_dtype or tuple(t.shape) != tuple(
                s if isinstance(s, int) else t.shape[k] for k, s in enumerate(shape)):
            return False
    return True


def measure(kernel, inputs: list, ref_prog: Callable | None, check: bool, rtol: float,
            atol: float, max_mismatched_ratio: float, warmup: float, rep: float,
            deadline: float | None) -> float:
    """Milliseconds per call of ``kernel(*inputs)`` after checking its outputs against
    ``ref_prog(*inputs)`` (when ``check``).  Raises ``AssertionError`` on a wrong result and
    ``CandidateTimeout`` when a kernel call would start after ``deadline``
    (``time.monotonic()``; a call already running is not interrupted), and
    ``CandidateRuntimeError`` when the kernel itself raises.  Bad ``inputs``
    (``KernelArgumentError``) and errors of ``ref_prog`` other than ``AssertionError``
    propagate: they are the caller's mistakes, not the candidate's."""
    from ..engine.target import is_cpu
    from ..errors import KernelArgumentError
    from ..profiler import bench
    from ..utils.tensor import as_list, compare, reference_outputs

    def call():
        if deadline is not None and time.monotonic() > deadline:
            raise CandidateTimeout("checking and timing took longer than the timeout")
        try:
            return kernel(*inputs)
        except KernelArgumentError:
            raise
        except Exception as err:
            raise CandidateRuntimeError(f"{type(err).__name__}: {err}") from err

    if check and ref_prog is not None:
        refs = reference_outputs(ref_prog, kernel, inputs)  # before the kernel changes any input
        outs = as_list(call())
        if len(outs) != len(refs):
            raise AssertionError(f"the kernel returned {len(outs)} outputs, the reference "
                                 f"{len(refs)}")
        for k, (o, r) in enumerate(zip(outs, refs)):
            compare(o, r, atol, rtol, max_mismatched_ratio, name=f"output {k}")
    return float(bench(call, warmup=warmup, rep=rep, cuda=not is_cpu(kernel.target)))


__all__ = ["Inputs", "measure"]
