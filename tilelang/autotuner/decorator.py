"""``@tilelang.autotune``: stacked over ``@tilelang.jit``, a call tunes once per argument
tuple and returns the fastest ``JITKernel`` (with ``.config``, ``.latency``,
``.autotune_failures`` and ``.autotune_result``)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Iterable

from ..errors import TileLangError
from ..utils.tensor import TensorSupplyType
from .tuner import AutoTuner


class AutoTunedFunction:
    """What ``@tilelang.autotune`` returns: call it like the function it wraps."""

    def __init__(self, fn: Callable, configs: Iterable[dict] | Callable, profile: dict):
        self.fn = fn
        # a generator or other one-shot iterable is read once, here, for every call
        self.configs = configs if callable(configs) else list(configs)
        self.profile = profile
        self._best: dict = {}
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any):
        key = (args, tuple(sorted(kwargs.items())))
        try:
            if key in self._best:
                return self._best[key]
        except TypeError:  # unhashable arguments: tune every time, like tilelang.jit
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

    def _compile_as_given(self, tuner: AutoTuner, args: tuple, kwargs: dict):
        from ..jit import _JITFunction
        from ..jit import compile as tl_compile

        if isinstance(self.fn, _JITFunction):
            return self.fn(*args, **kwargs)
        return tl_compile(tuner.fn(*args, **kwargs), **tuner.compile_args)


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
