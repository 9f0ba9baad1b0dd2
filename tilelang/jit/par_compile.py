"""Compiling many kernels in one call: ``tilelang.par_compile`` and ``jit_fn.par_compile``."""

from __future__ import annotations

from typing import Any, Callable, Sequence


def compile_each(compile_one: Callable, configs: Sequence, ignore_error: bool = False) -> list:
    """``compile_one`` applied to each configuration (a dict is passed as keyword arguments,
    a tuple or list as positional ones, anything else as the one argument).  Compilation runs
    in this thread, one after the other: TVM's passes hold the interpreter lock, so threads
    would not overlap them.  ``ignore_error`` gives ``None`` for a configuration that fails."""
    out = []
    for cfg in configs:
        try:
            if isinstance(cfg, dict):
                out.append(compile_one(**cfg))
            elif isinstance(cfg, (tuple, list)):
                out.append(compile_one(*cfg))
            else:
                out.append(compile_one(cfg))
        except Exception:
            if not ignore_error:
                raise
            out.append(None)
    return out


def par_compile(funcs: Sequence, out_idx: Any = None, target: Any = "auto",
                execution_backend: str = "auto", target_host: Any = None,
                verbose: bool = False, pass_configs: dict | None = None,
                compile_flags: Sequence[str] | None = None, num_workers: int | None = None,
                ignore_error: bool = False) -> list:
    """``tilelang.compile`` each ``T.prim_func`` of ``funcs`` with the same options."""
    from . import compile as _compile

    def one(func):
        return _compile(func, out_idx=out_idx, target=target,
                        execution_backend=execution_backend, target_host=target_host,
                        verbose=verbose, pass_configs=pass_configs, compile_flags=compile_flags)

    return compile_each(one, [(f,) for f in funcs], ignore_error)
