"""Hopper TMA and mbarrier device ops reach PTX for sm_90a on any machine with nvcc: a
hand-written kernel built from the ops of ``tilelang.device.tma`` (host-encoded tensor map
passed as a ``__grid_constant__ CUtensorMap``) compiles, and its PTX holds each instruction."""

import shutil

import pytest
import tvm
from tvm.script import tirx as T

import tilelang  # noqa: F401  (registers the device ops' lowerings)
from tilelang.device import tma
from tilelang.engine.cuda import nvcc_compile

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

tm = T.Var("A_tensormap", ty=T.handle("tensormap").ty)


@T.prim_func
def hand_tma(A: T.Buffer((256, 256), "float16"), B: T.Buffer((256, 256), "float16")):
    T.Bind(T.tvm_stack_alloca("tensormap", 1), var=tm)
    T.tensormap_encode_tiled(tm, A.data, 256, 256, 512, 64, 64, 1, 1,
                             descriptor_dtype="float16", rank=2, interleave=0, swizzle=0,
                             l2_promotion=0, oob_fill=0, force_cu_dtype=-1)
    bx = T.launch_thread("blockIdx.x", 4)
    tx = T.launch_thread("threadIdx.x", 128)
    smem = T.alloc_buffer((8192 + 64,), "uint8", scope="shared.dyn")
    S = T.decl_buffer((64, 64), "float16", data=smem.data)
    bar = T.decl_buffer((1,), "uint64", data=smem.data, elem_offset=1024)
    if tx == 0:
        T.evaluate(tma.mbarrier_init(T.address_of(bar[0]), 1))
        T.evaluate(tma.fence_mbarrier_init())
    T.tvm_storage_sync("shared")
    if tx == 0:
        T.evaluate(tma.mbarrier_arrive_expect_tx(T.address_of(bar[0]), 8192))
        T.evaluate(tma.mbarrier_expect_tx(T.address_of(bar[0]), 0))
        T.evaluate(tma.tma_load(T.address_of(S[0, 0]), T.address_of(tm), T.address_of(bar[0]),
                                [0, bx * 64]))
    T.evaluate(tma.mbarrier_wait(T.address_of(bar[0]), 0))
    T.evaluate(tma.mbarrier_arrive(T.address_of(bar[0])))
    if tx == 0:
        T.evaluate(tma.tma_store(T.address_of(tm), T.address_of(S[0, 0]), [0, bx * 64]))
        T.evaluate(tma.tma_store_commit())
        T.evaluate(tma.tma_store_wait(0))


def test_tma_and_mbarrier_ops_reach_ptx():
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    lib = tvm.compile(tvm.IRModule({"main": hand_tma.with_attr("global_symbol", "main")}),
                      target=target, tir_pipeline="tirx")
    src = lib.mod.imports[0].inspect_source()
    assert "const __grid_constant__ CUtensorMap A_tensormap" in src
    ptx = nvcc_compile(src, "sm_90a", "ptx").decode()
    for instr in ["mbarrier.init.shared.b64", "fence.mbarrier_init.release.cluster",
                  "mbarrier.arrive.expect_tx.shared.b64", "mbarrier.expect_tx.shared.b64",
                  "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
                  "mbarrier.try_wait.parity", "mbarrier.arrive.shared.b64",
                  "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group",
                  "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read 0"]:
        assert instr in ptx, instr


def test_tma_effects():
    from tvm import tirx

    from tilelang.device import Mechanism, Memory, Proxy, effect_of

    z = tirx.const(0, "int32")
    load = effect_of(tma.tma_load(z, z, z, [z, z]))
    assert load.completes_on == Mechanism.MBARRIER and load.proxy == Proxy.ASYNC
    assert [(a.args, a.memory, a.write) for a in load.accesses] == [((0,), Memory.SHARED, True)]
    store = effect_of(tma.tma_store(z, z, [z]))
    assert store.completes_on == Mechanism.BULK_GROUP and not store.writes
    assert effect_of(tma.mbarrier_wait(z, 0)).waits == Mechanism.MBARRIER
    assert effect_of(tma.mbarrier_arrive(z)).commits == Mechanism.MBARRIER
    assert effect_of(tma.tma_store_wait(1)).pending_arg == 0


def test_pipelined_gemm_uses_tma_and_mbarrier_ring():
    import os
    import sys

    import tilelang

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
    from programs import matmul

    k = tilelang.compile(matmul(512, 512, 512, 128, 64, 64, num_stages=3), out_idx=[2],
                         target="cuda -arch=sm_90a")
    src = k.get_kernel_source()
    assert "const __grid_constant__ CUtensorMap A_tensormap, const __grid_constant__ CUtensorMap B_tensormap" in src
    ptx = k.get_ptx()  # the default compiler choice
    assert "cp.async.bulk.tensor.2d.shared::cluster.global" in ptx
    assert "mbarrier.try_wait.parity" in ptx and "mbarrier.arrive.expect_tx" in ptx
    assert "cp.async.cg" not in ptx and ".local" not in ptx
    # with TMA lowering off, the same program is the sm80-class cp.async pipeline
    k = tilelang.compile(matmul(512, 512, 512, 128, 64, 64, num_stages=3), out_idx=[2],
                         target="cuda -arch=sm_90a", pass_configs={"tl.disable_tma_lower": True})
    ptx = k.get_ptx()
    assert "cp.async.cg" in ptx and "cp.async.bulk" not in ptx and "mbarrier" not in ptx


def test_mbarrier_wait_loop_lets_the_warp_reconverge():
    """The try_wait loop exits per lane; its branch must not be ``bra.uni`` (which told the
    compiler the warp was uniform: synccheck found warps reaching ``bar.sync`` diverged)."""
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    lib = tvm.compile(tvm.IRModule({"main": hand_tma.with_attr("global_symbol", "main")}),
                      target=target, tir_pipeline="tirx")
    ptx = nvcc_compile(lib.mod.imports[0].inspect_source(), "sm_90a", "ptx").decode()
    lines = ptx.splitlines()
    waits = [i for i, line in enumerate(lines) if "mbarrier.try_wait" in line]
    assert waits
    for i in waits:
        branch = next(line for line in lines[i:] if "bra" in line.split("//")[0])
        assert "bra.uni" not in branch, branch
