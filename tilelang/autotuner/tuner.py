"""``AutoTuner``: compile a kernel function for every candidate configuration (in parallel
worker processes), check and time each working one here, keep the fastest.

    result = (AutoTuner.from_kernel(kernel=matmul, configs=[{"block_M": 64}, ...])
              .set_compile_args(out_idx=[-1], target="auto")
              .set_profile_args(ref_prog=ref, rtol=1e-2, atol=1e-2)
              .run(warmup=25, rep=100, timeout=30))
    result.config, result.latency, result.kernel, result.failures

A candidate that fails (compile error, shared memory exceeded, timeout, wrong result, runtime
error, invalid config) is skipped and listed at the end; a mistake in the caller's own code (a
config key the function does not take, a ``TypeError`` in the function, a failing
``ref_prog``) raises.
"""

from __future__ import annotations

import inspect
import sys
import time
from typing import Any, Callable, Iterable

from ..errors import TileLangError
from ..utils.tensor import TensorSupplyType
from . import tuning_cache
from .failures import (COMPILE_ERROR, INVALID_CONFIG, RUNTIME_ERROR, TIMEOUT, WRONG_RESULT,
                       CandidateRuntimeError, CandidateTimeout, Failure, is_candidate_error,
                       message_of)
from .inputs import current_inputs
from .result import AutotuneResult

_COMPILE_DEFAULTS = dict(out_idx=None, target="auto", execution_backend="auto",
                         target_host=None, verbose=False, pass_configs=None, compile_flags=None)
_PROFILE_DEFAULTS = dict(warmup=25, rep=100, timeout=30, supply_type=TensorSupplyType.Auto,
                         ref_prog=None, supply_prog=None, rtol=1e-2, atol=1e-2,
                         max_mismatched_ratio=0.01, skip_check=False,
                         cache_input_tensors=False, verbose=False)


class AutoTuner:
    """Tunes ``fn`` (a function returning a ``T.prim_func``, or a ``@tilelang.jit`` function,
    whose options become the compile arguments) over ``configs``: keyword-argument dicts, or
    a function of the bound arguments returning them."""

    def __init__(self, fn: Callable, configs: Iterable[dict] | Callable):
        from ..jit import _JITFunction

        self.compile_args = dict(_COMPILE_DEFAULTS)
        self.eager = is_eager_function(fn)  # tensors in, outputs made with T.empty
        if isinstance(fn, _JITFunction) or self.eager:
            self.compile_args.update(fn.options)
        if isinstance(fn, _JITFunction):
            fn = fn.fn
        self.fn = fn
        # a generator or other one-shot iterable is read once, here
        self.configs = configs if callable(configs) or configs is None else list(configs)
        self.profile_args = dict(_PROFILE_DEFAULTS)
        self._args: tuple = ()
        self._kwargs: dict = {}
        self._candidates: list[dict] | None = None

    @classmethod
    def from_kernel(cls, kernel: Callable, configs: Iterable[dict] | Callable) -> "AutoTuner":
        """A tuner for ``kernel(**config)`` over ``configs``."""
        return cls(kernel, configs)

    def set_compile_args(self, out_idx: Any = None, target: Any = None,
                         execution_backend: str | None = None, target_host: Any = None,
                         verbose: bool | None = None, pass_configs: dict | None = None,
                         compile_flags: Any = None) -> "AutoTuner":
        """Arguments of ``tilelang.compile`` for every candidate; None keeps the current value
        (``tilelang.compile``'s defaults, or the ``@tilelang.jit`` options)."""
        given = dict(out_idx=out_idx, target=target, execution_backend=execution_backend,
                     target_host=target_host, verbose=verbose, pass_configs=pass_configs,
                     compile_flags=compile_flags)
        self.compile_args.update({k: v for k, v in given.items() if v is not None})
        return self

    def set_profile_args(self, warmup: float = 25, rep: float = 100, timeout: float | None = 30,
                         supply_type: TensorSupplyType = TensorSupplyType.Auto,
                         ref_prog: Callable | None = None, supply_prog: Callable | None = None,
                         rtol: float = 1e-2, atol: float = 1e-2,
                         max_mismatched_ratio: float = 0.01, skip_check: bool = False,
                         cache_input_tensors: bool = False,
                         verbose: bool = False) -> "AutoTuner":
        """How candidates are checked and timed: ``ref_prog(*inputs)`` gives the expected
        outputs (compared with ``rtol``/``atol``, at most ``max_mismatched_ratio`` of the
        elements may differ) unless ``skip_check``; ``do_bench(warmup, rep)`` milliseconds;
        ``timeout`` seconds per candidate for its compile, and again for its check and timing
        (None: no limit).  Inputs: ``set_autotune_inputs``, else ``supply_prog(params)``,
        else generated as ``supply_type`` says (once for all candidates with
        ``cache_input_tensors``).  ``verbose`` prints each candidate's latency."""
        self.profile_args = dict(warmup=warmup, rep=rep, timeout=timeout,
                                 supply_type=supply_type, ref_prog=ref_prog,
                                 supply_prog=supply_prog, rtol=rtol, atol=atol,
                                 max_mismatched_ratio=max_mismatched_ratio,
                                 skip_check=skip_check, cache_input_tensors=cache_input_tensors,
                                 verbose=verbose)
        return self

    def bind(self, *args: Any, **kwargs: Any) -> "AutoTuner":
        """Arguments every candidate gets besides its configuration (``@tilelang.autotune``
        binds the call's arguments)."""
        self._args, self._kwargs = args, kwargs
        self._candidates = None
        return self

    # ---------------------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def candidate_configs(self) -> list[dict]:
        """The configurations to try, each checked against the function's parameters: a key
        the function does not take raises ``TypeError`` naming it."""
        if self._candidates is None:
            self._candidates = self._checked_configs()
        return self._candidates

    def _checked_configs(self) -> list[dict]:
        configs = self.configs
        if callable(configs):
            configs = configs(*self._args, **self._kwargs)
        if configs is None:
            raise TileLangError(f"autotune {self.name}: configs is None; pass a list of "
                                "keyword-argument dicts (or a function returning one)")
        configs = list(configs)
        if not configs:
            raise TileLangError(f"autotune {self.name}: no configurations to tune")
        sig = _signature(self.fn)
        takes_any = sig is None or any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        names = [] if sig is None else [n for n, p in sig.parameters.items()
                                        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        for cfg in configs:
            if not isinstance(cfg, dict):
                raise TypeError(f"autotune {self.name}: a configuration must be a dict of "
                                f"keyword arguments, got {cfg!r}")
            for key in cfg:
                if not takes_any and key not in names:
                    raise TypeError(f"autotune {self.name}: config {cfg} has the key {key!r}, "
                                    f"which {self.name}() does not take (its parameters: "
                                    f"{', '.join(names) or 'none'})")
        return configs

    def bound_names(self) -> set[str]:
        """The parameters the bound arguments already give."""
        sig = _signature(self.fn)
        if sig is None:
            return set(self._kwargs)
        kwargs = self._kwargs
        if self.eager:  # the other keywords are T.const sizes
            kwargs = {k: v for k, v in kwargs.items() if k in sig.parameters}
        return set(sig.bind_partial(*self._args, **kwargs).arguments)

    def run(self, warmup: float | None = None, rep: float | None = None,
            timeout: float | None = None) -> AutotuneResult:
        """Tune: the best configuration from the on-disk tuning cache when there is one, else
        compile every candidate in parallel, check and time each here, keep the fastest and
        store it.  ``warmup``/``rep``/``timeout`` override ``set_profile_args``."""
        prof = dict(self.profile_args)
        for k, v in (("warmup", warmup), ("rep", rep), ("timeout", timeout)):
            if v is not None:
                prof[k] = v
        configs = self.candidate_configs()
        both = self.bound_names() & {k for cfg in configs for k in cfg}
        if both:
            raise TypeError(f"autotune {self.name}: {sorted(both)} given both as arguments "
                            "and in the configurations")
        options = self._resolved_compile_options()
        given_inputs = current_inputs()

        path = None
        if tuning_cache.enabled():
            check = {k: prof[k] for k in ("rtol", "atol", "max_mismatched_ratio",
                                          "skip_check")}
            check["supply_type"] = str(prof["supply_type"])
            check["supply_prog"] = tuning_cache.fingerprint(prof["supply_prog"])
            check["given_inputs"] = tuning_cache.describe(given_inputs)
            key = tuning_cache.key_of(self.fn, self._args, self._kwargs, configs,
                                      options["target"], options, check, prof["ref_prog"])
            path = tuning_cache.path_of(key, self.name)
            hit = self._from_cache(path, configs, options)
            if hit is not None:
                return hit
        return self._tune(configs, options, prof, given_inputs, path)

    # ---------------------------------------------------------------------------------------
    def _resolved_compile_options(self) -> dict:
        """``tilelang.compile`` keywords with the target resolved here, in the parent, so that
        worker processes never query the GPU."""
        from ..engine.target import cuda_available, is_cpu, resolve

        opts = dict(self.compile_args)
        if self.eager:  # its outputs, and the target its tensors' device gives
            _, eager_opts = self.fn.program(*self._args,
                                            **{**self._kwargs, **self.candidate_configs()[0]})
            opts["out_idx"] = eager_opts["out_idx"]
            if opts["target"] in (None, "auto"):
                opts["target"] = eager_opts["target"]
        target = resolve(opts["target"])
        if opts.get("target_host") is not None:
            target = target.with_host(resolve(opts["target_host"]))
        opts["target"], opts["target_host"] = target, None
        if not is_cpu(target) and not cuda_available():
            raise TileLangError(f"autotune {self.name}: candidates are timed on the device, "
                                f"and target {target} needs a visible GPU")
        return opts

    def _build(self, cfg: dict):
        from tvm import tirx

        if self.eager:
            return self.fn.program(*self._args, **{**self._kwargs, **cfg})[0]
        func = self.fn(*self._args, **{**self._kwargs, **cfg})
        if not isinstance(func, tirx.PrimFunc):
            raise TypeError(f"autotune {self.name}: {self.name}(**{cfg}) returned "
                            f"{type(func).__name__}, expected a T.prim_func")
        return func

    def _from_cache(self, path, configs: list[dict], options: dict) -> AutotuneResult | None:
        from ..jit import compile as tl_compile

        record = tuning_cache.load(path)
        if record is None:
            return None
        cfg = next((c for c in configs if tuning_cache.jsonable(c) == record["config"]), None)
        if cfg is None:
            return None
        func = self._build(cfg)
        try:
            kernel = tl_compile(func, **options)
        except Exception as err:  # the stored best no longer compiles: tune again
            _note(f"autotune {self.name}: cached best config {cfg} no longer compiles "
                  f"({message_of(err).splitlines()[0]}); tuning again")
            return None
        _note(f"autotune {self.name}: best config {cfg} ({record['latency']:.4g} ms) from the "
              f"tuning cache {path}")
        return AutotuneResult(cfg, float(record["latency"]), kernel,
                              tuning_cache.failures_of(record), True, str(path))

    def _tune(self, configs: list[dict], options: dict, prof: dict, given_inputs,
              path) -> AutotuneResult:
        from .measure import Inputs, measure
        from .workers import compile_all

        failures: dict[int, Failure] = {}
        funcs: dict[int, Any] = {}
        bar = _progress(len(configs), f"autotune {self.name}: compiling")
        try:
            for i, cfg in enumerate(configs):
                try:
                    funcs[i] = self._build(cfg)
                except Exception as err:
                    if not is_candidate_error(err):
                        raise
                    reason = COMPILE_ERROR if isinstance(err, TileLangError) else INVALID_CONFIG
                    failures[i] = Failure(cfg, reason, message_of(err))
                    bar.update(1)
            order = sorted(funcs)
            kernels: dict[int, Any] = {}

            def done(j: int, outcome) -> None:
                i = order[j]
                if isinstance(outcome, tuple):
                    failures[i] = Failure(configs[i], outcome[0], outcome[1])
                else:
                    kernels[i] = outcome
                bar.update(1)

            compile_all([funcs[i] for i in order], options, prof["timeout"], done)
        finally:
            bar.close()

        inputs = Inputs(given_inputs, prof["supply_prog"], prof["supply_type"],
                        prof["cache_input_tensors"])
        check = not prof["skip_check"] and prof["ref_prog"] is not None
        best: tuple | None = None
        bar = _progress(len(kernels), f"autotune {self.name}: timing")
        try:
            for i in sorted(kernels):
                cfg, kernel = configs[i], kernels[i]
                deadline = None if prof["timeout"] is None else time.monotonic() + prof["timeout"]
                try:
                    ms = measure(kernel, inputs.for_kernel(kernel), prof["ref_prog"], check,
                                 prof["rtol"], prof["atol"], prof["max_mismatched_ratio"],
                                 prof["warmup"], prof["rep"], deadline)
                except CandidateTimeout as err:
                    failures[i] = Failure(cfg, TIMEOUT, str(err))
                except CandidateRuntimeError as err:
                    failures[i] = Failure(cfg, RUNTIME_ERROR, str(err))
                except AssertionError as err:
                    failures[i] = Failure(cfg, WRONG_RESULT, message_of(err))
                else:
                    if prof["verbose"]:
                        bar.write(f"autotune {self.name} {cfg}: {ms:.4g} ms", file=sys.stderr)
                    if best is None or ms < best[1]:
                        best = (i, ms)
                        bar.set_postfix(best_ms=f"{ms:.4g}")
                bar.update(1)
        finally:
            bar.close()

        listed = [failures[i] for i in sorted(failures)]
        lines = "".join(f"\n  {f.summary}" for f in listed)
        if best is None:
            raise TileLangError(f"autotune {self.name}: no configuration works:{lines}")
        i, ms = best
        _note(f"autotune {self.name}: best config {configs[i]} at {ms:.4g} ms; "
              f"{len(configs) - len(listed)} of {len(configs)} configurations work"
              + (f"; skipped:{lines}" if listed else ""))
        if path is not None:
            tuning_cache.store(path, configs[i], ms, listed,
                               {"function": getattr(self.fn, "__qualname__", self.name),
                                "target": str(options["target"]),
                                "device": tuning_cache.device_of(options["target"])})
        return AutotuneResult(configs[i], ms, kernels[i], listed, False,
                              None if path is None else str(path))


def is_eager_function(fn: Callable) -> bool:
    """Whether ``fn`` is an eager ``@tilelang.jit`` function (called with tensors, returning
    its outputs), whose candidates are built with ``fn.program``."""
    from ..jit.eager import EagerJITFunction

    return isinstance(fn, EagerJITFunction)


def _signature(fn: Callable) -> inspect.Signature | None:
    try:
        return inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: accept any key
        return None


def _note(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


_BAR_CLASS: list = []


def _progress(total: int, desc: str):
    """A tqdm bar on stderr (tqdm is imported only when tuning runs).  It has no monitor
    thread, so the process stays single-threaded for the forked workers."""
    if not _BAR_CLASS:
        from tqdm import tqdm

        class Bar(tqdm):
            monitor_interval = 0

        _BAR_CLASS.append(Bar)
    return _BAR_CLASS[0](total=total, desc=desc, file=sys.stderr, unit="config")


__all__ = ["AutoTuner"]
