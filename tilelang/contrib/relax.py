"""Tile programs inside TVM Relax graphs.

    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        y = tilelang.contrib.relax.call_kernel(bb, my_prim_func, [x])   # DPS: outputs last
        bb.emit_func_output(y)
    ex = tilelang.contrib.relax.build(bb.get(), target="auto")
    vm = relax.VirtualMachine(ex, dev)

``build`` compiles every PrimFunc of the module with the tilelang pipeline, so tile operators
are lowered for the target like ``tilelang.compile`` does.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
from tvm import relax, tirx
from tvm.tirx.buffer import is_buffer_var

from ..engine.target import resolve
from ..errors import TileLangError
from ..transform import pass_config
from ..transform.passes import original_errors


def call_kernel(bb: relax.BlockBuilder, func: tirx.PrimFunc, args: Sequence[Any],
                num_outputs: int = 1, name: str | None = None):
    """Add ``func`` to the module ``bb`` builds and emit ``call_tir`` on it: ``args`` are its
    leading parameters, its last ``num_outputs`` parameters are the outputs (their shapes must
    be static).  Returns the emitted output (a tuple for several)."""
    params = list(func.params)
    if len(args) + num_outputs != len(params):
        raise TileLangError(f"call_kernel: {name or 'the kernel'} has {len(params)} parameters; "
                            f"got {len(args)} inputs and {num_outputs} outputs")
    outs = []
    for p in params[len(args):]:
        if not is_buffer_var(p) or not all(isinstance(s, tirx.IntImm) for s in p.shape):
            raise TileLangError(f"call_kernel: output {p.name} needs a static tensor shape")
        outs.append(relax.TensorType([int(s) for s in p.shape], p.dtype))
    fname = name or str(func.attrs["global_symbol"] if "global_symbol" in func.attrs else "kernel")
    gv = bb.add_func(func.with_attr("global_symbol", fname), fname)
    return bb.emit(relax.call_tir(gv, list(args), outs[0] if len(outs) == 1 else outs))


def build(mod: tvm.IRModule, target: Any = "auto", pass_configs: dict | None = None):
    """Compile a Relax module whose PrimFuncs may be tile programs."""
    tgt = resolve(target)
    with pass_config.scope(pass_configs), original_errors(), \
            tvm.transform.PassContext(config=pass_config.tvm_config()):
        return tvm.compile(mod, target=tgt, tir_pipeline="tilelang")


__all__ = ["build", "call_kernel"]
