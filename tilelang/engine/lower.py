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
    with pass_config.scope(pass_configs), original_errors(), \
            tvm.transform.PassContext(config=pass_config.tvm_config()):
        mod = tirx.transform.BindTarget(tgt)(mod)
        passes = pipeline.tile_passes()
        if stage == "all":
            passes = passes + pipeline.stock_passes()
        return pipeline.run_passes(mod, passes)
