"""``RelaxParamAlignment``: the host code LLVM generates (the whole kernel, on the CPU) assumes
no more of a tensor parameter's address than the alignment of its element type.

TVM's packed API declares every tensor parameter 64-byte aligned (its buffers' default
``data_alignment``), and LLVM turns that into aligned vector loads and stores.  A torch view at
a storage offset (``x[1:]``) or a numpy array (16-byte aligned) breaks the promise, and the
aligned access faults: the process dies.  This pass lowers the ``storage_alignment`` the packed
API attaches to each parameter's buffer to the size of one element, which every tensor
of the right dtype satisfies; unaligned vector accesses cost nothing measurable on the CPUs the
reference backend runs on.  The host side of a GPU kernel never dereferences its parameters;
the device code keeps its alignment, which the call checks instead (see
``tilelang/jit/params.py``), since wide loads, ``cp.async`` and TMA need it in hardware.
"""

from __future__ import annotations

from tvm import tirx
from tvm.tirx.buffer import is_buffer_var

from ..ir_utils import map_nodes
from ..ops.loops import elem_bytes
from .passes import function_pass

STORAGE_ALIGNMENT = "storage_alignment"


@function_pass("tl.RelaxParamAlignment")
def RelaxParamAlignment(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """Each ``storage_alignment`` attribute on a buffer becomes the size of its element type."""
    if func.body is None:
        return func

    def relax(s: tirx.AttrStmt) -> tirx.AttrStmt:
        if s.attr_key != STORAGE_ALIGNMENT or not is_buffer_var(s.node):
            return s
        nbytes = elem_bytes(str(s.node.dtype))
        if int(s.value) <= nbytes:
            return s
        return tirx.AttrStmt(s.node, s.attr_key, tirx.IntImm("int32", nbytes), s.body,
                             span=s.span)

    body = map_nodes(func.body, (tirx.AttrStmt, relax))
    return func if body.same_as(func.body) else func.with_body(body)


__all__ = ["RelaxParamAlignment"]
