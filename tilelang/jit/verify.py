"""``kernel.verify(*inputs)``: run a compiled kernel and the same program on the CPU reference
backend on the same inputs, and report the first element where they disagree.

The reference is built from the kernel's own ``T.prim_func`` with one extra ``int64`` "owner"
tensor per tensor parameter: every store the program makes into a parameter also records which
grid block made it (``bx | by << 32 | bz << 48``), so a mismatch names the block whose output
tile holds the wrong element.  Programs the CPU backend cannot run (they read a thread index,
use explicit barriers or split threads into roles) are refused with
:class:`tilelang.errors.ReferenceUnsupportedError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import tvm
from tvm import tirx
from tvm.target import Target
from tvm.tirx.buffer import is_buffer_var
from tvm.tirx import compilation_pipeline as _cp

from ..errors import KernelMismatchError, ReferenceUnsupportedError, TileLangError
from ..ir_utils import StmtMutator, find_all, map_kernels, seq, uses_var
from ..transform.passes import function_pass, original_errors

OWNERS_ATTR = "tl.block_owners"  # PrimFunc attr: owner buffer per parameter buffer (same order)
BARRIER_SCOPES = ("shared.barrier",)
_BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
_SHIFTS = (0, 32, 48)
PIPELINE = "tilelang.verify"


@dataclass
class Mismatch:
    """The first element where the kernel and the CPU reference disagree."""

    param: str
    index: tuple
    got: float
    expected: float
    block: tuple | None  # (bx, by, bz) of the reference's writer, None when no block wrote it
    count: int
    total: int


# -- what the reference cannot run ---------------------------------------------------------

def reference_blockers(func: tirx.PrimFunc) -> list[str]:
    """Why the CPU reference cannot run ``func`` (empty when it can)."""
    reasons = []
    for attr in find_all(func.body, tirx.AttrStmt, lambda a: a.attr_key == "thread_extent"):
        tag = attr.node.thread_tag
        if tag.startswith("threadIdx") and uses_var(attr.body, attr.node.var):
            reasons.append(f"it reads the thread index {attr.node.var.name} "
                           "(T.get_thread_binding); the reference runs a block on one thread")
    barriers = [b for b in _allocated_buffers(func) if b.scope() in BARRIER_SCOPES]
    if barriers:
        reasons.append("it uses explicit barriers (" + ", ".join(b.name for b in barriers) +
                       "), which synchronize threads the reference does not have")
    return reasons


def _allocated_buffers(func: tirx.PrimFunc) -> list:
    found = []
    for node in find_all(func.body, (tirx.AllocBuffer, tirx.DeclBuffer)):
        found.append(node.buffer)
    return found


# -- the instrumented reference ------------------------------------------------------------

def with_owners(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """``func`` with an ``int64`` owner tensor appended for each tensor parameter."""
    owners = []
    for p in func.params:
        if is_buffer_var(p):
            owners.append(tirx.decl_buffer(list(p.shape), "int64", f"{p.name}__owner"))
    params = list(func.params) + owners
    out = tirx.PrimFunc(params, func.body, func.ret_type, func.attrs)
    return out.with_attr(OWNERS_ATTR, owners)


class _RecordOwners(StmtMutator):
    def __init__(self, owner_of: dict):
        self.owner_of = owner_of  # param buffer handle -> owner buffer
        self.block_id = tirx.const(0, "int64")

    def visit_AttrStmt(self, s):
        if s.attr_key == "thread_extent" and s.node.thread_tag in _BLOCK_TAGS:
            shift = _SHIFTS[_BLOCK_TAGS.index(s.node.thread_tag)]
            part = tirx.Cast("int64", s.node.var)
            self.block_id = self.block_id + (part * (1 << shift) if shift else part)
        return self.generic(s)

    def visit_BufferStore(self, s):
        owner = self.owner_of.get(s.buffer.__chandle__())
        if owner is None:
            return s
        return seq([s, tirx.BufferStore(owner, self.block_id, list(s.indices))])


@function_pass("tl.RecordBlockOwners")
def RecordBlockOwners(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """After every store into a tensor parameter, store the writing block's id into that
    parameter's owner tensor (only in functions made by :func:`with_owners`)."""
    owners = func.attrs.get(OWNERS_ATTR) if func.attrs is not None else None
    if owners is None:
        return func
    tensors = [p for p in func.params if is_buffer_var(p)][:len(owners)]
    owner_of = {p.__chandle__(): o for p, o in zip(tensors, owners)}
    # each T.Kernel numbers its own blocks
    return func.with_body(map_kernels(func.body, lambda k: _RecordOwners(owner_of)(k)))


def _verify_pipeline(**_kw):
    from ..engine import pipeline
    from ..transform import LowerKernelLaunch

    @tvm.transform.module_pass(opt_level=0, name="tilelang.verify_pipeline")
    def main(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        passes = pipeline.tile_passes()
        launch = LowerKernelLaunch().info.name
        at = next(i for i, p in enumerate(passes) if p.info.name == launch)
        passes.insert(at, RecordBlockOwners())
        return pipeline.run_passes(mod, passes + pipeline.stock_passes())

    return main, _cp.finalize_host_passes, _cp.finalize_device_passes


_cp.register_tir_pipeline(PIPELINE, _verify_pipeline)


def build_reference(kernel) -> Any:
    """The CPU reference of ``kernel``: a packed function taking the kernel's arguments
    followed by one owner tensor per tensor parameter."""
    from ..transform import pass_config

    cached = getattr(kernel, "_reference", None)
    if cached is not None:
        return cached
    reasons = reference_blockers(kernel.prim_func)
    if reasons:
        raise ReferenceUnsupportedError(
            f"kernel.verify: the CPU reference cannot run {kernel.name}: " + "; ".join(reasons))
    func = with_owners(kernel.prim_func)
    mod = tvm.IRModule({kernel.name: func})
    target = Target({"kind": "llvm"})
    configs = {k: v for k, v in kernel.pass_configs.items()}
    try:
        with pass_config.scope(configs), original_errors(), \
                tvm.transform.PassContext(config=pass_config.tvm_config()):
            rt_mod = tvm.compile(mod, target=target, tir_pipeline=PIPELINE)
    except TileLangError as err:
        raise ReferenceUnsupportedError(
            f"kernel.verify: the CPU reference cannot run {kernel.name}: {err}") from None
    kernel._reference = rt_mod[kernel.name]
    return kernel._reference


# -- running and comparing -----------------------------------------------------------------

def _to_cpu(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu").clone()


def verify(kernel, *inputs: Any, rtol: float = 1e-2, atol: float = 1e-2) -> Any:
    """Run ``kernel(*inputs)`` and the CPU reference on copies of the same inputs; return the
    kernel's outputs when every tensor parameter agrees within ``atol + rtol * |expected|``,
    else raise :class:`KernelMismatchError` describing the first differing element."""
    from .params import TensorParam

    tensor_inputs = [torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else a
                     for a in inputs]
    ref_inputs = [_to_cpu(a) if isinstance(a, torch.Tensor) else a for a in tensor_inputs]
    reference = build_reference(kernel)

    outs = kernel(*tensor_inputs)
    out_list = [] if outs is None else list(outs) if isinstance(outs, tuple) else [outs]
    out_list = [torch.from_numpy(o) if isinstance(o, np.ndarray) else o for o in out_list]

    # The kernel's view of every parameter after the call, in parameter order.
    actual: list = [None] * len(kernel.params)
    it_in, it_out = iter(tensor_inputs), iter(out_list)
    for i in range(len(kernel.params)):
        actual[i] = next(it_out) if i in kernel.out_idx else next(it_in)
    # The reference's arguments: the same inputs (copied), fresh outputs, owner tensors.
    ref_args: list = [None] * len(kernel.params)
    it_ref = iter(ref_inputs)
    for i in range(len(kernel.params)):
        if i in kernel.out_idx:
            ref_args[i] = torch.zeros(tuple(actual[i].shape), dtype=actual[i].dtype)
        else:
            ref_args[i] = next(it_ref)
    tensors = [i for i, p in enumerate(kernel.params) if isinstance(p, TensorParam)]
    owners = [torch.full(tuple(ref_args[i].shape), -1, dtype=torch.int64) for i in tensors]
    reference(*ref_args, *owners)

    for i, owner in zip(tensors, owners):
        bad = first_mismatch(actual[i], ref_args[i], rtol, atol)
        if bad is None:
            continue
        index, count = bad
        got = _to_cpu(actual[i])[index].item()
        expected = ref_args[i][index].item()
        block = _decode_block(int(owner[index]))
        m = Mismatch(kernel.params[i].name, index, got, expected, block, count,
                     max(1, ref_args[i].numel()))
        raise KernelMismatchError(_describe(kernel, m), m)
    return outs


def first_mismatch(got: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float):
    """``(index, count)`` of the first element (row-major order) outside tolerance, or None."""
    a = _to_cpu(got).to(torch.float64)
    b = expected.to(torch.float64)
    same = torch.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
    if bool(same.all()):
        return None
    bad = (~same).nonzero()
    return tuple(int(x) for x in bad[0].tolist()), int(bad.shape[0])


def _decode_block(code: int) -> tuple | None:
    if code < 0:
        return None
    return (code & 0xFFFFFFFF, (code >> 32) & 0xFFFF, (code >> 48) & 0xFFFF)


def _describe(kernel, m: Mismatch) -> str:
    target = kernel.target.kind.name
    where = ("no block of the reference writes it" if m.block is None else
             f"it belongs to the output tile of block (bx={m.block[0]}, by={m.block[1]}, "
             f"bz={m.block[2]})")
    return (f"kernel.verify: {kernel.name} parameter {m.param!r} differs from the CPU reference at "
            f"index {m.index}: got {m.got!r} ({target}), expected {m.expected!r}; {where}; "
            f"{m.count} of {m.total} elements differ")
