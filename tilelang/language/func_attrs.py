"""Compile options written inside a kernel: ``T.annotate_pass_configs`` and
``T.annotate_compile_flags`` record them as attributes of the ``PrimFunc``, and
``tilelang.compile`` applies them as if they had been passed to it (options passed to
``compile`` win over annotated ones of the same key).  The outputs a kernel makes with
``T.empty`` and returns are recorded the same way (:data:`OUT_IDX`)."""

from __future__ import annotations

from typing import Any, Sequence

from tvm.script.ir_builder import tirx as _builder

from ..errors import DSLError

PASS_CONFIGS = "tilelang_pass_configs"
COMPILE_FLAGS = "tilelang_compile_flags"
OUT_IDX = "tilelang_out_idx"


def annotate_pass_configs(configs: dict) -> None:
    """Pass configurations of this kernel (``{PassConfigKey.TL_ENABLE_FAST_MATH: True}``),
    merged under those given to ``tilelang.compile(pass_configs=...)``."""
    from ..transform import pass_config

    if not isinstance(configs, dict):
        raise DSLError(f"T.annotate_pass_configs takes a dict of pass configs, got "
                       f"{type(configs).__name__}")
    try:
        configs = pass_config.normalize(configs)
    except KeyError as err:
        raise DSLError(f"T.annotate_pass_configs: {err.args[0]}") from None
    _builder.func_attr({PASS_CONFIGS: configs})


def annotate_compile_flags(flags: Sequence[str] | str) -> None:
    """Device-compiler flags of this kernel (``["--use_fast_math"]``), appended to those given
    to ``tilelang.compile(compile_flags=...)``."""
    flags = [flags] if isinstance(flags, str) else list(flags)
    bad = [f for f in flags if not isinstance(f, str)]
    if bad:
        raise DSLError(f"T.annotate_compile_flags takes strings, got {bad!r}")
    _builder.func_attr({COMPILE_FLAGS: flags})


def compile_options(func: Any, out_idx: Any, pass_configs: dict | None,
                    compile_flags: Sequence[str] | None) -> tuple:
    """``(out_idx, pass_configs, compile_flags)`` for ``tilelang.compile``: the arguments
    merged with what ``func``'s attributes record.  Output indices both annotated (a returned
    ``T.empty``) and passed raise ``ValueError``: the kernel already says which they are."""
    attrs = func.attrs or {}
    if OUT_IDX in attrs:
        annotated = [int(i) for i in attrs[OUT_IDX]]
        if out_idx is not None:
            raise ValueError(f"Out index conflict: {getattr(func, '__name__', 'the kernel')} "
                             f"returns the T.empty outputs at parameter indices {annotated}, "
                             f"and out_idx={out_idx!r} was passed too; drop out_idx")
        out_idx = annotated
    if PASS_CONFIGS in attrs:
        pass_configs = {**{str(k): _plain(v) for k, v in attrs[PASS_CONFIGS].items()},
                        **(pass_configs or {})}
    if COMPILE_FLAGS in attrs:
        compile_flags = [*(compile_flags or []), *(str(f) for f in attrs[COMPILE_FLAGS])]
    return out_idx, pass_configs, compile_flags


def _plain(v: Any) -> Any:
    """A pass-config value read back from the IR as the Python value it was given as."""
    if hasattr(v, "value") and not isinstance(v, (bool, int, float, str)):
        v = v.value
    return v


__all__ = ["annotate_compile_flags", "annotate_pass_configs", "compile_options"]
