"""``@tilelang.autotune``: stacked over ``@tilelang.jit``, a call tunes once per argument
tuple and returns the fastest ``JITKernel`` (with ``.config``, ``.latency``,
``.autotune_failures`` and ``.autotune_result``), or, over an eager function, runs it and
returns the outputs; ``.compile`` returns the kernel in both styles."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

import torch

from ..errors import TileLangError
from ..utils.tensor import TensorSupplyType
from .tuner import AutoTuner, is_eager_function


class AutoTunedFunction:
    """What ``@tilelang.autotune`` returns.  Over a function returning a ``T.prim_func``, a
    call returns the fastest kernel; over an eager ``@tilelang.jit`` function (tensors in,
    ``T.empty`` outputs), a call runs the fastest kernel on its tensors and returns the
    outputs.  ``.compile(...)`` returns the fastest kernel in both styles; a call or
    ``.compile`` that gives a tuned parameter itself compiles exactly what it asks for."""

    def __init__(self, fn: Callable, configs: Iterable[dict] | Callable, profile: dict):
        self.fn = fn
        # a generator or other one-shot iterable is read once, here, for every call
        self.configs = configs if callable(configs) else list(configs)
        self.profile = profile
        self._best: dict = {}
        self.eager = is_eager_function(fn)
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any):
        kernel = self.compile(*args, **kwargs)
        if not self.eager:
            return kernel
        # run the chosen configuration through the eager function (its own kernel cache
        # holds the kernel), which returns the outputs as the function does
        return self.fn(*args, **kwargs, **getattr(kernel, "config", {}))

    def compile(self, *args: Any, **kwargs: Any):
        """The fastest kernel for these arguments (tuned once per distinct arguments; eager
        functions also take sizes by name, as their ``.compile`` does).  The kernel carries
        ``.config``, ``.latency``, ``.autotune_failures`` and ``.autotune_result``."""
        key = _call_key(args, kwargs)
        try:
            if key in self._best:
                return self._best[key]
        except TypeError:  # unhashable arguments: tune every time
            key = None
        tuner = AutoTuner(self.fn, self.configs).bind(*args, **kwargs)
        tuner.set_profile_args(**self.profile)
        tuned = {k for cfg in tuner.candidate_configs() for k in cfg}
        if tuner.bound_names() & tuned:
            # the call fixes a tuned parameter itself: compile exactly what it asks for
            return self._compile_as_given(tuner, args, kwargs)
        result = tuner.run()
        kernel = result.kernel
        kernel.config, kernel.latency = dict(result.config), result.latency
        kernel.autotune_failures = result.failures
        kernel.autotune_result = result
        if key is not None:
            self._best[key] = kernel
        return kernel

    def get_tir(self, *args: Any, **kwargs: Any):
        """The ``T.prim_func`` the wrapped function builds for these arguments (tuned
        parameters at the values given, else the function's defaults)."""
        if hasattr(self.fn, "get_tir"):
            return self.fn.get_tir(*args, **kwargs)
        return self.fn(*args, **kwargs)

    def get_kernel_source(self, *args: Any, **kwargs: Any) -> str:
        """The CUDA/C source of the fastest kernel for these arguments."""
        return self.compile(*args, **kwargs).get_kernel_source()

    def clear_cache(self) -> None:
        """Forget the kernels chosen so far in this process (the on-disk tuning cache
        stays)."""
        self._best.clear()

    def _compile_as_given(self, tuner: AutoTuner, args: tuple, kwargs: dict):
        from ..jit import _JITFunction
        from ..jit import compile as tl_compile

        if isinstance(self.fn, _JITFunction) or self.eager:
            return self.fn.compile(*args, **kwargs)
        return tl_compile(tuner.fn(*args, **kwargs), **tuner.compile_args)


def _call_key(args: tuple, kwargs: dict):
    """What identifies a call for the tuned-kernel cache: tensors by dtype, shape and device
    (any tensors of those fit the chosen kernel), other values as they are."""
    def one(v):
        if isinstance(v, torch.Tensor):
            return ("tensor", str(v.dtype), tuple(v.shape), str(v.device))
        return v

    return (tuple(one(a) for a in args), tuple(sorted((k, one(v)) for k, v in kwargs.items())))


def autotune(configs: Iterable[dict] | Callable | None = None, warmup: float = 25,
             rep: float = 100, timeout: float | None = 100, ref_prog: Callable | None = None,
             supply_type: TensorSupplyType = TensorSupplyType.Auto,
             supply_prog: Callable | None = None, rtol: float = 1e-2, atol: float = 1e-2,
             max_mismatched_ratio: float = 0.01, skip_check: bool = False,
             cache_input_tensors: bool = False, verbose: bool = False):
    """Decorate a ``@tilelang.jit`` function (or a function returning a ``T.prim_func``):
    a call returns the fastest kernel over ``configs``, a list of keyword-argument dicts or a
    function of the call's arguments returning one.  The other arguments are those of
    ``AutoTuner.set_profile_args``; ``timeout`` is per candidate, in seconds."""
    if configs is None:
        raise TileLangError("tilelang.autotune needs configs=[{...}, ...] (or a function "
                            "returning them)")
    profile = dict(warmup=warmup, rep=rep, timeout=timeout, supply_type=supply_type,
                   ref_prog=ref_prog, supply_prog=supply_prog, rtol=rtol, atol=atol,
                   max_mismatched_ratio=max_mismatched_ratio, skip_check=skip_check,
                   cache_input_tensors=cache_input_tensors, verbose=verbose)

    def deco(fn: Callable) -> AutoTunedFunction:
        return AutoTunedFunction(fn, configs, profile)

    return deco


__all__ = ["AutoTunedFunction", "autotune"]
