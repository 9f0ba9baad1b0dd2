"""Just-in-time compilation: ``tilelang.compile`` and ``@tilelang.jit``."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import tvm
from tvm import tirx

from ..engine.target import resolve
from ..errors import TileLangError
from ..language.func_attrs import compile_options
from ..transform import pass_config
from . import cache
from .binding import CallBinding
from .cache import clear_cache, disable_cache, enable_cache
from .kernel import JITKernel, build, normalize_out_idx

EXECUTION_BACKENDS = ("auto", "tvm_ffi", "cython", "ctypes", "dlpack", "torch", "nvrtc")


def compile(
    func: tirx.PrimFunc,
    out_idx: int | Sequence[int] | None = None,
    target: Any = "auto",
    execution_backend: str = "auto",
    target_host: Any = None,
    verbose: bool = False,
    pass_configs: dict | None = None,
    compile_flags: Sequence[str] | None = None,
) -> JITKernel:
    """Compile a tile program for ``target`` (``"auto"``: the visible GPU, else the CPU).
    ``out_idx`` names the parameters the kernel allocates and returns.  Options the kernel
    annotates (``T.annotate_pass_configs``, returned ``T.empty`` outputs) apply too."""
    if not isinstance(func, tirx.PrimFunc):
        raise TileLangError(f"tilelang.compile expects a T.prim_func, got {type(func).__name__}")
    if execution_backend not in EXECUTION_BACKENDS:
        raise TileLangError(f"unknown execution_backend {execution_backend!r}; expected one of "
                            f"{EXECUTION_BACKENDS}")
    out_idx, pass_configs, compile_flags = compile_options(func, out_idx, pass_configs,
                                                           compile_flags)
    tgt = resolve(target)
    if target_host is not None:
        tgt = tgt.with_host(resolve(target_host))
    outs = normalize_out_idx(out_idx, len(func.params))
    configs = pass_config.normalize(pass_configs)
    key = cache.key_of(func, tgt, outs, configs) if cache.is_enabled() else None
    hit = cache.load(key) if key else None
    if hit is not None:
        rt_mod, meta = hit
        kernel = JITKernel(func, rt_mod, tgt, outs, configs, device_source=meta.get("source"))
        kernel.library_path = str(cache.entry(key) / cache.LIBRARY)
        return kernel
    with pass_config.scope(configs), tvm.transform.PassContext(config=pass_config.tvm_config()):
        rt_mod, source = build(func, tgt)
    kernel = JITKernel(func, rt_mod, tgt, outs, configs, device_source=source)
    if key and _storable(tgt):
        cache.store(key, rt_mod, {"source": kernel.get_kernel_source(), "target": str(tgt)})
    if verbose:
        print(kernel.get_kernel_source())
    return kernel


def _storable(target) -> bool:
    """CPU kernels always; CUDA kernels only where they were compiled to binaries (a GPU is
    visible), since elsewhere the module holds source only."""
    from ..engine.target import cuda_available, is_cpu

    return is_cpu(target) or cuda_available()


class _JITFunction:
    """A function returning a ``T.prim_func``, compiled once per distinct compile-time
    arguments (the lazy mode: a call returns the kernel)."""

    mode = "lazy"

    def __init__(self, fn: Callable, options: dict):
        self.fn = fn
        self.options = options
        self.func = CallBinding(fn, mode="lazy")
        self._kernel_cache: dict = {}      # by the canonical key of func.parse_args
        self._call_form_cache: dict = {}   # by the call's own arguments, as written
        functools.update_wrapper(self, fn, updated=())

    def __call__(self, *args: Any, **kwargs: Any) -> JITKernel:
        form = (args, tuple(kwargs.items()))
        try:
            return self._call_form_cache[form]
        except KeyError:
            pass
        except TypeError:
            raise TypeError(f"{self.fn.__name__}(): an unhashable argument in "
                            f"{_call_text(args, kwargs)}; kernels are cached by their "
                            f"arguments, so pass tuples rather than lists or dicts") from None
        key, _ = self.func.parse_args(*args, **kwargs)
        kernel = self._kernel_cache.get(key)
        if kernel is None:
            kernel = compile(self.fn(*args, **kwargs), **self.options)
            self._kernel_cache[key] = kernel
        self._call_form_cache[form] = kernel
        return kernel

    def clear_cache(self) -> None:
        self._kernel_cache.clear()
        self._call_form_cache.clear()

    def compile(self, *args: Any, **kwargs: Any) -> JITKernel:
        """The kernel for these arguments (as calling the function gives it)."""
        return self(*args, **kwargs)

    def get_tir(self, *args: Any, **kwargs: Any) -> tirx.PrimFunc:
        """The ``T.prim_func`` the function builds for these arguments."""
        return self.fn(*args, **kwargs)

    def get_kernel_source(self, *args: Any, **kwargs: Any) -> str:
        return self(*args, **kwargs).get_kernel_source()

    def par_compile(self, configs: Sequence, num_workers: int | None = None,
                    ignore_error: bool = False) -> list:
        """The kernel of each configuration (a dict of keyword arguments or a tuple)."""
        from .par_compile import compile_each

        return compile_each(self, configs, ignore_error)


def _call_text(args: tuple, kwargs: dict) -> str:
    shown = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    return "(" + ", ".join(shown) + ")"


def _jit_function(fn: Callable, options: dict):
    """The eager style (``tilelang/jit/eager.py``) when ``fn`` is written in it, else a
    function returning a ``T.prim_func``."""
    from .eager import EagerJITFunction, is_eager

    if is_eager(fn):
        return functools.update_wrapper(EagerJITFunction(fn, options), fn, updated=())
    return _JITFunction(fn, options)


def jit(
    func: Callable | None = None,
    *,
    out_idx: int | Sequence[int] | None = None,
    target: Any = "auto",
    execution_backend: str = "auto",
    target_host: Any = None,
    verbose: bool = False,
    pass_configs: dict | None = None,
    compile_flags: Sequence[str] | None = None,
    debug_root_path: str | None = None,
):
    """``@tilelang.jit(out_idx=...)`` over a function that builds and returns a
    ``T.prim_func``: calling it returns the compiled ``JITKernel``, reused for equal
    arguments."""
    options = dict(out_idx=out_idx, target=target, execution_backend=execution_backend,
                   target_host=target_host, verbose=verbose, pass_configs=pass_configs,
                   compile_flags=compile_flags)
    if func is not None:
        return _jit_function(func, options)
    return lambda fn: _jit_function(fn, options)


__all__ = ["JITKernel", "clear_cache", "compile", "disable_cache", "enable_cache", "jit"]
