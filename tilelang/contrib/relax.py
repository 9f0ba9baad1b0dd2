"""Tile programs inside TVM Relax graphs.

    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        y = tilelang.contrib.relax.call_kernel(bb, my_prim_func, [x])   # DPS: outputs last
        bb.emit_func_output(y)
    ex = tilelang.contrib.relax.build(bb.get(), target="auto")
    vm = relax.VirtualMachine(ex, dev)

``build`` sends the tile programs of the module (PrimFuncs added by ``call_kernel``, which marks
them with the attribute ``tilelang.tile_program``, or any PrimFunc holding a tile operator)
through tilelang's pipeline, as ``tilelang.compile`` would, and every other PrimFunc (those Relax
legalizes its own operators into) through TVM's default TIR pipeline.
"""

from __future__ import annotations

from typing import Any, Sequence

import tvm
import tvm_ffi
from tvm import relax, tirx
from tvm.tirx import compilation_pipeline as tirx_pipeline
from tvm.tirx.buffer import is_buffer_var

from ..engine import pipeline
from ..engine.target import resolve
from ..errors import TileLangError
from ..transform import pass_config
from ..transform.passes import original_errors

MARKER = "tilelang.tile_program"  # PrimFunc attribute: compile with tilelang's pipeline
PIPELINE = "tilelang.relax"  # the TIR pipeline name ``build`` registers and uses
OPAQUE = 8  # relax's OpPatternKind.kOpaque


def call_kernel(bb: relax.BlockBuilder, func: tirx.PrimFunc, args: Sequence[Any],
                num_outputs: int = 1, name: str | None = None):
    """Add ``func`` to the module ``bb`` builds and emit ``call_tir`` on it: ``args`` are its
    leading parameters, its last ``num_outputs`` parameters are the outputs (their shapes must
    be static).  Returns the emitted output (a tuple for several).  The kernel's symbol is the
    module's unique name for it: ``name``, else ``tile_<its global_symbol>``."""
    params = list(func.params)
    if len(args) + num_outputs != len(params):
        raise TileLangError(f"call_kernel: {name or 'the kernel'} has {len(params)} parameters; "
                            f"got {len(args)} inputs and {num_outputs} outputs")
    outs = []
    for p in params[len(args):]:
        if not is_buffer_var(p) or not all(isinstance(s, tirx.IntImm) for s in p.shape):
            raise TileLangError(f"call_kernel: output {p.name} needs a static tensor shape")
        outs.append(relax.TensorType([int(s) for s in p.shape], p.dtype))
    symbol = str(func.attrs["global_symbol"]) if func.attrs and "global_symbol" in func.attrs \
        else "kernel"
    # Scheduled already (TVM's GPU schedulers leave it alone) and opaque to operator fusion
    # (Relax's FuseOps/FuseTIR never merge it with neighbours, which its pipeline could not lower).
    func = func.with_attr(MARKER, True).with_attr("tirx.is_scheduled", True) \
        .with_attr("op_pattern", OPAQUE)
    gv = bb.add_func(func, name or f"tile_{symbol}")  # a name the module makes unique
    bb.update_func(gv, func.with_attr("global_symbol", gv.name_hint))
    call = relax.call_tir(gv, list(args), outs[0] if len(outs) == 1 else outs)
    if bb.current_block_is_dataflow():
        # bound to a plain variable: Relax's reshape rewriting (RewriteDataflowReshape), which
        # asks of a one-input call inside a dataflow block whether its PrimFunc reshapes, cannot
        # read a tile program (no root block) and fails
        return bb.emit_output(call)
    return bb.emit(call)


def is_tile_program(func: Any) -> bool:
    """Whether ``func`` is a tile program: a PrimFunc marked by ``call_kernel`` or holding a
    tile operator."""
    from ..ops.base import decode

    if not isinstance(func, tirx.PrimFunc):
        return False
    if func.attrs is not None and MARKER in func.attrs:
        return bool(func.attrs[MARKER])
    found = []

    def on_call(c):
        if decode(c) is not None:
            found.append(c)
            return tvm_ffi.WalkResult.SKIP
        return None

    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call), order="pre")
    return bool(found)


def _mixed_pipeline(**_kw):
    """Tile programs through tilelang's passes, all other PrimFuncs through TVM's default
    pipeline (both end in the same host/device finalization)."""
    tile_main, _, _ = tirx_pipeline.get_tir_pipeline(pipeline.NAME)
    stock_main, finalize_host, finalize_device = tirx_pipeline.get_tir_pipeline("default")

    @tvm.transform.module_pass(opt_level=0, name="tilelang.relax.pipeline")
    def main(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        tiles = {gv: f for gv, f in mod.functions.items() if is_tile_program(f)}
        rest = {gv: f for gv, f in mod.functions.items() if gv not in tiles}
        out = {}
        for part, run in ((tiles, tile_main), (rest, stock_main)):
            if part:
                lowered = run(tvm.IRModule(part, attrs=mod.attrs))
                out.update(lowered.functions.items())
        return tvm.IRModule(out, attrs=mod.attrs)

    return main, finalize_host, finalize_device


tirx_pipeline.register_tir_pipeline(PIPELINE, _mixed_pipeline)


def build(mod: tvm.IRModule, target: Any = "auto", pass_configs: dict | None = None):
    """Compile a Relax module (dataflow blocks, Relax operators and tile programs alike) into a
    ``relax.VirtualMachine`` executable."""
    from ..engine import cuda
    from ..jit.kernel import _prelude_of

    tgt = resolve(target)
    preludes = "\n".join(_prelude_of(f) for f in mod.functions.values() if is_tile_program(f))
    with pass_config.scope(pass_configs), original_errors(), cuda.building(tgt, preludes), \
            tvm.transform.PassContext(config=pass_config.tvm_config()):
        return tvm.compile(mod, target=tgt, tir_pipeline=PIPELINE)


__all__ = ["MARKER", "build", "call_kernel", "is_tile_program"]
