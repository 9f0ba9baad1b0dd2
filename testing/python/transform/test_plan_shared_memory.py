"""PlanSharedMemory places shared tiles whose lifetimes are disjoint on the same arena bytes
(live ranges over the kernel's top-level statements; see tilelang/transform/shared_liveness.py),
never tiles live at the same time, asynchronously written ones until their wait, mbarriers or
warp-specialized tiles; and it puts a block barrier where a tile takes over bytes."""

import re
import shutil

import numpy as np
import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.device import sm80
from tilelang.layout.swizzle import make_gmma_swizzled_layout
from tilelang.transform import plan_shared_memory as psm
from tilelang.transform.shared_liveness import Liveness, LiveRange, kernel_units

SM80 = "cuda -arch=sm_80"
SM90 = "cuda -arch=sm_90a"


# --- helpers ------------------------------------------------------------------------------
def planned(prog, target=SM80, **cfg):
    """The kernel after tilelang's passes (PlanSharedMemory, then InjectThreadSync ...)."""
    mod = tilelang.lower(prog, target=target, stage="tile", pass_configs=cfg or None)
    return mod[mod.get_global_vars()[0]]


def placement(f) -> dict:
    """name -> (first byte, end byte) of each tile's view in the arena."""
    out = {}

    def on_decl(d):
        b = d.buffer
        if b.scope() == "shared.dyn" and b.name != "smem":
            eb = tvm.DataType(b.dtype).bits // 8
            start = int(b.elem_offset) * eb
            out[b.name] = (start, start + int(b.shape[0]) * eb)

    tvm_ffi.structural_walk(f.body, (tirx.DeclBuffer, on_decl))
    return out


def arena_bytes(f) -> int:
    return int(re.search(r'"tirx.dyn_smem_bytes", T.int64\((\d+)\)', f.script()).group(1))


def share(p, a, b) -> bool:
    return p[a][0] < p[b][1] and p[b][0] < p[a][1]


def two_phases(n=64, m=512, dtype="float32", threads=128):
    """X_s is used only in the first half, Y_s only in the second: 128 KB each, together more
    than a block may use on sm_80."""

    @T.prim_func
    def main(X: T.Tensor((m, n), dtype), Y: T.Tensor((m, n), dtype),
             Z: T.Tensor((m, n), dtype)):
        with T.Kernel(1, threads=threads) as bx:
            X_s = T.alloc_shared((m, n), dtype)
            Y_s = T.alloc_shared((m, n), dtype)
            T.copy(X, X_s)
            T.copy(X_s, Z)
            T.copy(Y, Y_s)
            T.copy(Y_s, Z)

    return main


def interleaved(n=64, m=256):
    """X_s is read again after Y_s is written: both are live at once."""

    @T.prim_func
    def main(X: T.Tensor((m, n), "float32"), Z: T.Tensor((m, n), "float32")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((m, n), "float32")
            Y_s = T.alloc_shared((m, n), "float32")
            T.copy(X, X_s)
            T.copy(X, Y_s)
            T.copy(Y_s, Z)
            T.copy(X_s, Z)

    return main


def gemm_bias_epilogue(M=256, N=256, K=256, bM=128, bN=256, bK=64, stages=3, threads=256):
    """A GEMM with a bias tile read before the K loop and a C tile after it, as in the public
    dequantize examples: 144 KB of stage ring + 64 KB bias + 64 KB C = 272 KB, more than a
    block may use on any GPU unless the bias and C tiles reuse the ring's bytes."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             Bias: T.Tensor((M, N), "float16"), C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=threads) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            Bias_s = T.alloc_shared((bM, bN), "float16")
            C_s = T.alloc_shared((bM, bN), "float16")
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.copy(Bias[by * bM, bx * bN], Bias_s)
            T.copy(Bias_s, C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=stages):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * bM, bx * bN])

    return main


def barriers_between(f, first: str, then: str) -> list:
    """Block barriers (``device_barrier(0, ..)``) in the printed kernel between the last line
    that mentions ``first[`` and the first line after it that stores to ``then[``."""
    lines = f.script().splitlines()
    last = max(i for i, ln in enumerate(lines) if f"{first}[" in ln)
    store = next(i for i, ln in enumerate(lines) if i > last and re.match(rf"\s*{then}\[", ln))
    return [ln for ln in lines[last:store] if "T.device_barrier(0," in ln]


# --- placement ----------------------------------------------------------------------------
def test_disjoint_lifetimes_share_bytes():
    f = planned(two_phases())
    p = placement(f)
    assert share(p, "X_s", "Y_s")
    assert arena_bytes(f) == 512 * 64 * 4  # one tile's bytes, not two


def test_overlapping_lifetimes_never_share():
    p = placement(planned(interleaved()))
    assert not share(p, "X_s", "Y_s")


def test_tile_used_in_a_loop_is_live_for_the_whole_loop():
    @T.prim_func
    def main(X: T.Tensor((8, 64, 64), "float32"), Z: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((64, 64), "float32")
            Y_s = T.alloc_shared((64, 64), "float32")
            for k in T.serial(8):
                T.copy(X[k, 0, 0], X_s)  # X_s's accesses all come before Y_s's in the body,
                T.copy(X_s, Z)
                T.copy(X[k, 0, 0], Y_s)  # yet the next iteration reuses X_s after Y_s
                T.copy(Y_s, Z)

    assert not share(placement(planned(main)), "X_s", "Y_s")


def test_unused_tile_takes_no_bytes():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Z: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((64, 64), "float32")
            Unused = T.alloc_shared((256, 256), "float32")  # noqa: F841
            T.copy(X, X_s)
            T.copy(X_s, Z)

    f = planned(main)
    assert "Unused" not in placement(f) and arena_bytes(f) == 64 * 64 * 4


def test_cp_async_ring_is_live_until_its_drain_then_the_epilogue_reuses_it():
    # sm_80: the ring is written by cp.async (its wait_group 0 follows the loop); the bias and
    # C tiles, read before and written after the pipeline, take the ring's bytes
    f = planned(gemm_bias_epilogue())
    p = placement(f)
    assert share(p, "C_s", "A_s") or share(p, "C_s", "B_s")
    assert share(p, "Bias_s", "A_s") or share(p, "Bias_s", "B_s")
    assert not share(p, "A_s", "B_s")
    assert arena_bytes(f) == 3 * (128 * 64 + 64 * 256) * 2  # the ring alone
    assert barriers_between(f, "A_s", "C_s")


def _kernel(tiles: list, stmts: list, threads: int = 128, arch: str = "sm_80"):
    """A one-block CUDA PrimFunc: allocations of ``tiles`` then ``stmts``."""
    tx = tirx.IterVar(tvm.ir.Range(0, threads), tirx.Var("tx", "int32"),
                      tirx.IterVar.ThreadIndex, "threadIdx.x")
    body = tirx.SeqStmt([tirx.AllocBuffer(t) for t in tiles] + stmts)
    body = tirx.AttrStmt(tx, "thread_extent", tirx.const(threads, "int32"), body)
    target = tvm.target.Target({"kind": "cuda", "arch": arch})
    return tirx.PrimFunc([], body).with_attr("target", target).with_attr("global_symbol", "k")


def _addr(buf, i=0):
    return tirx.address_of(tirx.BufferLoad(buf, [tirx.const(i, "int32")]))


def _store(buf, v=1.0):
    return tirx.BufferStore(buf, tirx.const(v, buf.dtype), [tirx.const(0, "int32")])


def test_async_write_keeps_its_tile_live_until_the_wait():
    # A_s's last mention is its cp.async, B_s is used after it: without the wait the copy may
    # land in B_s's bytes while B_s is in use, so they must not share bytes
    G = tirx.decl_buffer([1024], "float32", "G")
    A_s = tirx.decl_buffer([1024], "float32", "A_s", scope="shared.dyn")
    B_s = tirx.decl_buffer([1024], "float32", "B_s", scope="shared.dyn")
    stmts = [tirx.Evaluate(sm80.cp_async(_addr(A_s), _addr(G), 16, tirx.const(True, "bool"))),
             tirx.Evaluate(sm80.cp_async_commit()),
             _store(B_s),
             tirx.Evaluate(sm80.cp_async_wait(0)),
             _store(B_s, 2.0)]
    f = psm.PlanSharedMemory()(tvm.IRModule({"k": _kernel([A_s, B_s], stmts)}))["k"]
    assert not share(placement(f), "A_s", "B_s")
    units = kernel_units(tirx.SeqStmt(stmts))
    live = Liveness(units, {A_s.__chandle__(): A_s, B_s.__chandle__(): B_s}, 128)
    assert live.ranges[A_s.__chandle__()] == LiveRange(0, 3)  # to the wait, not the copy
    # a wait that leaves a group in flight does not end it
    stmts[3] = tirx.Evaluate(sm80.cp_async_wait(1))
    live = Liveness(kernel_units(tirx.SeqStmt(stmts)),
                    {A_s.__chandle__(): A_s, B_s.__chandle__(): B_s}, 128)
    assert live.ranges[A_s.__chandle__()] == LiveRange(0, 4)


def test_async_write_after_the_wait_has_its_own_bytes_but_finished_ones_are_reused():
    # the same, with B_s first used after the wait: now they may share
    G = tirx.decl_buffer([1024], "float32", "G")
    A_s = tirx.decl_buffer([1024], "float32", "A_s", scope="shared.dyn")
    B_s = tirx.decl_buffer([1024], "float32", "B_s", scope="shared.dyn")
    stmts = [tirx.Evaluate(sm80.cp_async(_addr(A_s), _addr(G), 16, tirx.const(True, "bool"))),
             tirx.Evaluate(sm80.cp_async_commit()),
             tirx.Evaluate(sm80.cp_async_wait(0)),
             _store(B_s)]
    f = psm.PlanSharedMemory()(tvm.IRModule({"k": _kernel([A_s, B_s], stmts)}))["k"]
    assert share(placement(f), "A_s", "B_s")
    # ... with a block barrier between the wait and B_s's first store
    text = f.script()
    assert text.index("device_cp_async_wait(0)") < text.index("T.device_barrier(0, 128)") \
        < text.index("B_s[0] =")


def test_sm90a_tma_pipeline_without_specialization_reuses_the_ring_not_the_mbarriers():
    f = planned(gemm_bias_epilogue(), SM90, **{"tl.disable_warp_specialized": True})
    p = placement(f)
    assert share(p, "C_s", "A_s") or share(p, "C_s", "B_s")
    bars = [n for n in p if n.startswith("k_pipe")]
    assert bars and not any(share(p, b, t) for b in bars for t in ("C_s", "Bias_s"))
    assert arena_bytes(f) <= psm.arch_limit("sm_90a")
    # the ring tiles keep their 1024-byte alignment for the 128B swizzle
    assert p["A_s"][0] % 1024 == 0 and p["B_s"][0] % 1024 == 0
    assert barriers_between(f, "A_s", "C_s")


def test_warp_specialized_epilogue_takes_the_ring_bytes_after_the_consumers_barrier():
    # the consumers wait for every load of the producer before their last use of the ring:
    # past that use the ring is dead in both roles, and C_s (the consumers' alone) takes its
    # bytes once every consumer is past it -- the consumers' named barrier, not the block's
    # (the producer never reaches it)
    f = planned(_ws_epilogue(), SM90)
    assert 'T.attr(128, "tl.thread_group"' in f.script()
    p = placement(f)
    assert share(p, "C_s", "A_s") or share(p, "C_s", "B_s")
    assert not share(p, "A_s", "B_s")  # both the producer's, live from the consumers' start
    lines = f.script().splitlines()
    producer = next(j for j, x in enumerate(lines) if '"tl.thread_group", 128)' in x)
    last = max(i for i, ln in enumerate(lines[:producer]) if "A_s[" in ln)
    store = next(i for i, ln in enumerate(lines) if i > last and re.match(r"\s*C_s\[", ln))
    between = [ln.strip() for ln in lines[last:store] if "T.device_barrier(" in ln]
    assert between == ["T.device_barrier(1, 128)"]


def test_warp_specialized_tile_used_before_the_loop_keeps_its_bytes():
    # the producer may run ahead from the consumers' first statement: Q_s (the consumers',
    # before the loop) and the K ring never share
    from test_warp_specialize import q_then_loop

    p = placement(planned(q_then_loop(), SM90))
    assert not share(p, "Q_s", "K_s")


def _ws_epilogue(M=512, N=512, K=512, bM=128, bN=128, bK=64):
    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((K, N), "float16"),
             C: T.Tensor((M, N), "float16")):
        with T.Kernel(T.ceildiv(N, bN), T.ceildiv(M, bM), threads=128) as (bx, by):
            A_s = T.alloc_shared((bM, bK), "float16")
            B_s = T.alloc_shared((bK, bN), "float16")
            C_s = T.alloc_shared((bM, bN), "float16")
            C_f = T.alloc_fragment((bM, bN), "float32")
            T.clear(C_f)
            for k in T.Pipelined(T.ceildiv(K, bK), num_stages=3):
                T.copy(A[by * bM, k * bK], A_s)
                T.copy(B[k * bK, bx * bN], B_s)
                T.gemm(A_s, B_s, C_f)
            T.copy(C_f, C_s)
            T.copy(C_s, C[by * bM, bx * bN])

    return main


def test_tiles_of_concurrent_roles_never_share():
    # two T.ws regions run at the same time on different warps: A_s (the first role's) and
    # B_s (the second's) are live for the whole kernel even though each is used in one unit
    from tilelang.device.thread_group import GROUP_ATTR

    A_s = tirx.decl_buffer([1024], "float32", "A_s", scope="shared.dyn")
    B_s = tirx.decl_buffer([1024], "float32", "B_s", scope="shared.dyn")

    def role(offset, tile):
        return tirx.AttrStmt(tirx.const(64, "int32"), GROUP_ATTR, tirx.const(offset, "int32"),
                             _store(tile))

    f = psm.PlanSharedMemory()(tvm.IRModule({"k": _kernel(
        [A_s, B_s], [role(0, A_s), role(64, B_s)])}))["k"]
    assert not share(placement(f), "A_s", "B_s")


def test_reusing_tile_keeps_its_swizzle_alignment():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), A: T.Tensor((64, 128), "float16"),
             Z: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            small = T.alloc_shared((8,), "float32")
            X_s = T.alloc_shared((64, 64), "float32")
            S = T.alloc_shared((64, 128), "float16")
            T.annotate_layout({S: make_gmma_swizzled_layout(S)})
            T.copy(X[0, 0:8], small)
            T.copy(X, X_s)
            T.copy(X_s, Z)
            T.copy(A, S)
            T.copy(S, A)
            T.copy(small, Z[0, 0:8])

    p = placement(planned(main))
    assert share(p, "S", "X_s") and p["S"][0] % 1024 == 0


# --- the barrier --------------------------------------------------------------------------
def test_reuse_is_separated_by_a_block_barrier():
    f = planned(two_phases())
    assert barriers_between(f, "X_s", "Y_s")


def test_without_the_planners_barrier_nothing_would_order_the_reuse(monkeypatch):
    # InjectThreadSync tracks each tile's own view, so it does not see that Y_s's first
    # write overwrites X_s's bytes: the planner's barrier is the only one there
    monkeypatch.setattr(psm, "_with_reuse_barriers", lambda units, *a: units)
    f = planned(two_phases())
    assert share(placement(f), "X_s", "Y_s")
    assert not barriers_between(f, "X_s", "Y_s")


def test_tma_write_into_reused_bytes_is_preceded_by_a_proxy_fence():
    @T.prim_func
    def main(X: T.Tensor((128, 128), "float16"), Y: T.Tensor((128, 128), "float16"),
             Z: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128) as bx:
            X_s = T.alloc_shared((128, 128), "float16")
            Y_s = T.alloc_shared((128, 128), "float16")
            for i, j in T.Parallel(128, 128):
                X_s[i, j] = X[i, j] * 2.0
            T.copy(X_s, Z)
            T.copy(Y, Y_s)  # a TMA load on sm_90a: async proxy
            T.copy(Y_s, Z)

    f = planned(main, SM90)
    text = f.script()
    assert "device_tma_load(T.address_of(Y_s" in text
    p = placement(f)
    assert share(p, "X_s", "Y_s")
    tma = text.index("device_tma_load(T.address_of(Y_s")
    last_x = text.rindex("X_s[", 0, tma)
    assert re.search(r"T\.device_fence_proxy_async_shared\(\)\n\s*T\.device_barrier\(0, 128\)",
                     text[last_x:tma])


# --- CUDA source --------------------------------------------------------------------------
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_sm90a_kernel_that_only_fits_with_reuse_compiles():
    from tilelang.engine.cuda import nvcc_compile

    prog = gemm_bias_epilogue()
    k = tilelang.compile(prog, out_idx=[3], target=SM90)
    src = k.get_kernel_source()
    assert "wgmma" in src and "__syncthreads" in src
    nvcc_compile(src, "sm_90a", "ptx")
    f = planned(prog, SM90)
    assert arena_bytes(f) <= psm.arch_limit("sm_90a") < 272 * 1024


# --- GPU ----------------------------------------------------------------------------------
@pytest.mark.gpu
def test_kernel_that_only_fits_with_reuse_runs_correctly_on_gpu():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    M = N = K = 512
    k = tilelang.compile(gemm_bias_epilogue(M, N, K), out_idx=[3])
    g = torch.Generator().manual_seed(0)
    a, b, bias = (torch.randn(s, generator=g, dtype=torch.float32).half()
                  for s in ((M, K), (K, N), (M, N)))
    c = k(a.cuda(), b.cuda(), bias.cuda()).cpu().float()
    ref = a.float() @ b.float() + bias.float()
    np.testing.assert_allclose(c.numpy(), ref.numpy(), rtol=2e-2, atol=2e-1)

