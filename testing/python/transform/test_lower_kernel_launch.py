"""LowerKernelLaunch alone (CPU): grid loop, no thread attributes, block-local buffers."""

import tvm
import tvm_ffi
from tvm import tirx

import tilelang.language as T
from tilelang.transform import LowerKernelLaunch, LowerTileOps

from helpers import bind, copy_kernel, loops_of


def attrs_of(node):
    out = []
    tvm_ffi.structural_walk(node, (tirx.AttrStmt, out.append))
    return out


def buffers_of(node):
    from tvm.tirx.buffer import is_buffer_var

    out = {}

    def on_var(v):
        if is_buffer_var(v):
            out[v.name] = v.scope()

    tvm_ffi.structural_walk(node, (tvm.ir.Var, on_var))
    return out


def test_grid_becomes_one_parallel_loop_and_buffers_are_block_local():
    mod = LowerTileOps()(bind(copy_kernel()))
    out = LowerKernelLaunch()(mod)["main"]
    assert not [a for a in attrs_of(out) if a.attr_key == "thread_extent"]
    loops = loops_of(out)
    assert loops[0].kind == tirx.ForKind.PARALLEL and int(loops[0].extent) == 3
    assert all(lp.kind != tirx.ForKind.PARALLEL for lp in loops[1:])
    assert buffers_of(out)["S"] == "global"


def test_2d_grid_is_fused():
    @T.prim_func
    def main(A: T.Tensor((6, 4), "float32")):
        with T.Kernel(4, 6, threads=1) as (bx, by):
            A[by, bx] = T.float32(1)

    out = LowerKernelLaunch()(bind(main))["main"]
    assert int(loops_of(out)[0].extent) == 24
    assert "block % 4" in out.script() and "block // 4 % 6" in out.script()


def test_atomics_serialize_the_grid():
    @T.prim_func
    def main(A: T.Tensor((1,), "float32")):
        with T.Kernel(8, threads=1) as bx:
            T.atomic_add(A[0], 1.0)

    out = LowerKernelLaunch()(LowerTileOps()(bind(main)))["main"]
    assert loops_of(out)[0].kind == tirx.ForKind.SERIAL
