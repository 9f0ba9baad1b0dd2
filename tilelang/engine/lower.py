"""``tilelang.lower``: run the pass pipeline and return the lowered module."""

from __future__ import annotations

from typing import Any

import tvm
from tvm import tirx

from ..transform import pass_config
from ..transform.passes import original_errors
from . import pipeline
from .target import resolve


def lower(func: tirx.PrimFunc | tvm.IRModule, target: Any = "auto",
          target_host: Any = None, pass_configs: dict | None = None,
          stage: str = "all") -> tvm.IRModule:
    """The module after tilelang's passes (``stage="tile"``) or after the whole main pipeline
    including TVM's (``stage="all"``), ready for codegen."""
    if stage not in ("tile", "all"):
        raise ValueError(f"stage must be 'tile' or 'all', got {stage!r}")
    tgt = resolve(target)
    if target_host is not None:
        tgt = tgt.with_host(resolve(target_host))
    elif tgt.host is None:
        tgt = tgt.with_host(tvm.target.Target({"kind": "llvm"}))
    if isinstance(func, tirx.PrimFunc):
        name = str(func.attrs["global_symbol"]) if "global_symbol" in func.attrs else "main"
        mod = tvm.IRModule({name: func})
    else:
        mod = func
    source_of = mod
    with pass_config.scope(pass_configs), original_errors(), \
            tvm.transform.PassContext(config=pass_config.tvm_config()):
        mod = tirx.transform.BindTarget(tgt)(mod)
        passes = pipeline.tile_passes()
        if stage == "all":
            passes = passes + pipeline.stock_passes()
        return LoweredModule.wrap(pipeline.run_passes(mod, passes), source_of, tgt,
                                  pass_configs)


class LoweredModule(tvm.IRModule):
    """The module :func:`lower` returns: an ordinary ``IRModule`` that also gives the device
    code it compiles to, ``.kernel_source`` (CUDA C, or LLVM IR for the CPU; generated on first
    use)."""

    __slots__ = ("_input", "_target", "_configs", "_source")

    @classmethod
    def wrap(cls, mod: tvm.IRModule, source_of: tvm.IRModule, target, configs) -> "LoweredModule":
        out = cls.__new__(cls)
        out.__move_handle_from__(mod)
        out._input, out._target, out._configs, out._source = source_of, target, configs, None
        return out

    @property
    def kernel_source(self) -> str:
        if self._source is None:
            from ..jit import compile as _compile

            (func,) = self._input.functions.values()
            kernel = _compile(func, target=self._target, pass_configs=self._configs)
            self._source = kernel.get_kernel_source()
        return self._source
