"""ElideProxyFences: a wgmma's proxy fence stays only where threads write its shared operands
through the generic proxy (PTX checked on any machine with nvcc)."""

import shutil

import pytest
import tvm

import tilelang
import tilelang.language as T

from programs import matmul

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")

FENCE, SHARED_FENCE = "fence.proxy.async;", "fence.proxy.async.shared::cta;"


def ptx(func, **cfg):
    return tilelang.compile(func, out_idx=[2], target="cuda -arch=sm_90a",
                            pass_configs=cfg or None).get_ptx()


def test_tma_operands_need_no_fence():
    """TMA writes through the async proxy and the full barrier orders it: no fence per k."""
    text = ptx(matmul(256, 256, 256, 128, 128, 64, num_stages=3))
    assert "cp.async.bulk.tensor" in text and "wgmma.mma_async" in text
    assert "fence.proxy.async" not in text


def test_cp_async_operands_keep_a_shared_fence():
    text = ptx(matmul(256, 256, 256, 128, 128, 64, num_stages=3),
               **{"tl.disable_tma_lower": True})
    assert "cp.async.cg.shared.global" in text and "wgmma.mma_async" in text
    assert SHARED_FENCE in text and FENCE not in text
    assert text.index(SHARED_FENCE) < text.index("wgmma.mma_async")


def scaled_a(M=128, N=128, K=64):
    """A's tile written by the threads (scaled by 2) before the gemm reads it."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((K, N), "float16")
            C_f = T.alloc_fragment((M, N), "float32")
            T.copy(B, B_s)
            for i, j in T.Parallel(M, K):
                A_s[i, j] = A[i, j] * T.float16(2)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)

    return main


def test_thread_written_operand_keeps_the_fence():
    text = ptx(scaled_a())
    assert "wgmma.mma_async" in text
    assert SHARED_FENCE in text and text.index(SHARED_FENCE) < text.index("wgmma.mma_async")


def test_user_fence_stays():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32"),
             C: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            S = T.alloc_shared((128,), "float32")
            for i in T.Parallel(128):
                S[i] = A[i] + B[i]
            T.fence_proxy_async()
            for i in T.Parallel(128):
                C[i] = S[127 - i]

    assert FENCE in ptx(main)


def test_tma_store_fences_shared_memory_only():
    """Before a TMA store the threads order their writes of the tile, in shared memory: the
    fence without a state space would also wait for global memory (MEMBAR.ALL.GPU)."""

    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((64, 64), "float16")
            for i, j in T.Parallel(64, 64):
                S[i, j] = A[i, j] * T.float16(2)
            T.copy(S, C)

    text = tilelang.compile(main, out_idx=[1], target="cuda -arch=sm_90a").get_ptx()
    store = text.index("cp.async.bulk.tensor.2d.global.shared")
    assert SHARED_FENCE in text and text.index(SHARED_FENCE) < store
    assert FENCE not in text


def test_a_write_through_a_view_keeps_the_fence():
    """Pass level: a store into a view of the tile counts as a write of the tile."""
    from tvm import tirx

    from tilelang.device import sm80
    from tilelang.transform.elide_proxy_fences import ElideProxyFences

    tile = tirx.decl_buffer((64,), "float16", "tile", scope="shared.dyn")
    view = tirx.decl_buffer((8, 8), "float16", "view", scope="shared.dyn", data=tile.data)
    fence = tirx.Evaluate(sm80.fence_proxy_async(
        tirx.address_of(tirx.BufferLoad(tile, [0]))))

    def kept(*writes):
        body = tirx.SeqStmt([tirx.AllocBuffer(tile), tirx.DeclBuffer(view, data=tile.data),
                             *writes, fence])
        f = tirx.PrimFunc([], body).with_attr(
            "target", tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
        out = ElideProxyFences()(tvm.IRModule({"main": f}))["main"]
        return "fence_proxy_async" in out.script()

    assert kept(tirx.BufferStore(view, tirx.const(1, "float16"), [0, 0]))
    assert kept(tirx.BufferStore(tile, tirx.const(1, "float16"), [3]))
    assert not kept(tirx.Evaluate(0))
