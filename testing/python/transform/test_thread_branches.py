"""Branches on the thread index (``if tx < 128: ... elif tx >= 256: ...``) run their tile work
on the branch's thread group: gemms, fragments, T.Parallel loops and reductions are spread over
the group's threads (ranks ``tx - offset``), shared hazards inside a branch synchronize on the
group's named barrier, and branches of one chain are never synchronized with each other.

CPU: the IR and layouts, and the CUDA source / PTX (nvcc) for sm_90a.  The GPU runs are in
testing/python/cuda/test_cuda_thread_branches.py."""

import re
import shutil

import numpy as np
import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.device.thread_group import ThreadGroup, group_of
from tilelang.errors import LoweringError
from tilelang.layout import codec
from tilelang.layout.fragment import wgmma_accumulator
from tilelang.ops import decode
from tilelang.ops.gemm import Gemm, WgmmaPlan, decode_plan
from tilelang.transform.layout_inference import LayoutInference
from tilelang.utils.np_eval import np_eval
from tilelang.transform.thread_branches import (BRANCHES_ATTR, ThreadBranches, branch_regions,
                                                derive_thread_groups, threads_taking)

SM90A = "cuda -arch=sm_90a"


def _bind(func):
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})
    return tvm.IRModule({"main": func.with_attr("target", target)})


# --- which threads take a branch ------------------------------------------------------------
def test_threads_taking_reads_the_range_off_the_condition():
    tx = tirx.Var("tx", "int32")
    block = ThreadGroup(0, 384)
    assert threads_taking(tx < 128, tx, block) == ThreadGroup(0, 128)
    assert threads_taking(tirx.And(tx >= 128, tx < 256), tx, block) == ThreadGroup(128, 128)
    assert threads_taking(tx >= 256, tx, block) == ThreadGroup(256, 128)
    assert threads_taking(tirx.EQ(tx // 128, 1), tx, block) == ThreadGroup(128, 128)
    assert threads_taking(tirx.EQ(tx, 5), tx, block) == ThreadGroup(5, 1)
    assert threads_taking(tx >= 256, tx, ThreadGroup(128, 256)) == ThreadGroup(256, 128)
    # not one range of threads: left alone
    assert threads_taking(tx % 2 == 0, tx, block) is None
    assert threads_taking(tirx.Or(tx < 64, tx >= 320), tx, block) is None
    assert threads_taking(tx < 128, tx, ThreadGroup(128, 128)) is None  # no thread takes it


def _chain(flag_test=False):
    @T.prim_func
    def main(A: T.Tensor((384,), "float32"), n: T.int32):
        with T.Kernel(1, threads=384) as bx:
            tx = T.get_thread_binding()
            if flag_test:
                if tx < 128 and n > 0:
                    A[tx] = 1.0
                else:
                    A[tx] = 2.0
            else:
                if tx < 128:
                    A[tx] = 1.0
                elif tx >= 128 and tx < 256:
                    A[tx] = 2.0
                else:
                    A[tx] = 3.0

    return main


def _attrs(stmt, key):
    out = []
    tvm_ffi.structural_walk(stmt, (tirx.AttrStmt, lambda a: out.append(a)
                                   if a.attr_key == key else None))
    return out


def test_an_elif_chain_becomes_one_chain_of_group_regions():
    body = derive_thread_groups(_chain().body)
    chains = _attrs(body, BRANCHES_ATTR)
    assert len(chains) == 1
    groups = [group_of(r) for r in branch_regions(chains[0])]
    assert groups == [ThreadGroup(0, 128), ThreadGroup(128, 128), ThreadGroup(256, 128)]
    # a let-bound thread expression (w = tx // 128) is seen through
    tx, w = tirx.Var("tx", "int32"), tirx.Var("w", "int32")
    let = tirx.SeqStmt([tirx.Bind(w, tx // 128),
                        tirx.IfThenElse(tirx.EQ(w, 2), tirx.Evaluate(0), None)])
    out = ThreadBranches(tx, ThreadGroup(0, 384))(let)
    assert [group_of(r) for r in branch_regions(_attrs(out, BRANCHES_ATTR)[0])] == \
        [ThreadGroup(256, 128)]


def one_warp_branch(threads=96, n=4):
    """The public mHC pre kernel's shape: warp 0 reduces a small fragment (a row softmax),
    the other warps do something else."""
    @T.prim_func
    def main(A: T.Tensor((n, n), "float32"), B: T.Tensor((n, n), "float32"),
             C: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            if T.get_thread_binding() < 32:
                cm = T.alloc_fragment((n, n), "float32")
                row_max = T.alloc_fragment((n,), "float32")
                for j, k in T.Parallel(n, n):
                    cm[j, k] = A[j, k]
                T.reduce_max(cm, row_max, dim=1)
                for j, k in T.Parallel(n, n):
                    B[j, k] = T.exp(cm[j, k] - row_max[j])
            else:
                for j in T.Parallel(n):
                    C[j] = A[j, j] * 2.0

    return main


def test_one_warp_and_whole_warp_branches_of_a_small_block_are_groups():
    """In a 96-thread block, ``tx < 32`` is one warp (its barrier ``__syncwarp``) and its else
    two warps; the fragment reduced in the branch is spread over the warp's 32 threads, not
    over 96 (24 copies of a 4x4 tile, an all-reduce over 24 threads: refused before)."""
    chains = _attrs(derive_thread_groups(one_warp_branch().body), BRANCHES_ATTR)
    assert [group_of(r) for r in branch_regions(chains[0])] == \
        [ThreadGroup(0, 32), ThreadGroup(32, 64)]
    src = tilelang.lower(one_warp_branch(), target=SM90A).kernel_source
    assert "__syncthreads" not in src[src.index("if (((int)threadIdx.x) < 32)"):]


def test_a_branch_that_also_tests_a_value_keeps_its_if():
    # `tx < 128 and n > 0` with an else: the else runs on a varying set of threads
    body = derive_thread_groups(_chain(flag_test=True).body)
    assert not _attrs(body, BRANCHES_ATTR)


# --- layouts and plans follow the branch's group ---------------------------------------------
def two_gemm_groups(M=64, N=64, K=64):
    """Warp group 0 computes 2 A B^T into C, warp group 1 computes A B^T into D."""

    @T.prim_func
    def main(A: T.Tensor((M, K), "float16"), B: T.Tensor((N, K), "float16"),
             C: T.Tensor((M, N), "float32"), D: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256) as bx:
            A_s = T.alloc_shared((M, K), "float16")
            B_s = T.alloc_shared((N, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            acc2 = T.alloc_fragment((M, N), "float32")
            tx = T.get_thread_binding()
            T.copy(A, A_s)
            T.copy(B, B_s)
            if tx < 128:
                T.clear(acc)
                T.gemm(A_s, B_s, acc, transpose_B=True)
                for i, j in T.Parallel(M, N):
                    acc[i, j] = acc[i, j] * 2
                T.copy(acc, C)
            else:
                T.clear(acc2)
                T.gemm(A_s, B_s, acc2, transpose_B=True)
                T.copy(acc2, D)

    return main


def test_a_gemm_in_a_branch_is_planned_for_the_branch_warp_group():
    """Before, the gemm was planned for the block's 2 warp groups (m64n32 each) while only
    one ran it."""
    f = LayoutInference()(_bind(two_gemm_groups()))["main"]
    gemms = []
    tvm_ffi.structural_walk(f.body, (tirx.Evaluate, lambda s: gemms.append(decode(s))))
    plans = [decode_plan(g.plan) for g in gemms if isinstance(g, Gemm)]
    assert len(plans) == 2
    for p in plans:
        assert isinstance(p, WgmmaPlan) and (p.wg_m, p.wg_n, p.n_inst) == (1, 1, 64)
    lays = {}
    tvm_ffi.structural_walk(f.body, (tirx.AllocBuffer, lambda a: lays.__setitem__(
        a.buffer.name, codec.decode(a.annotations["tl.layout"]))
        if "tl.layout" in a.annotations else None))
    for name in ("acc", "acc2"):
        assert lays[name].num_threads == 128
        assert lays[name].same_as(wgmma_accumulator(64, 64, 1, 1))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_two_gemm_groups_sm90a_source_and_ptx():
    from tilelang.engine.cuda import nvcc_compile

    src = tilelang.compile(two_gemm_groups(), target=SM90A).get_kernel_source()
    body = src.split("main_kernel(", 2)[2]
    second = body.split("if (128 <= ((int)threadIdx.x))", 1)[1]
    # group 1 writes D by its rank: row block (tx - 128) / 32, i.e. offsets - 4096 from tx's
    assert "D_ptr + (((((((int)threadIdx.x) >> 5) * 1024)" in second and "- 4096)" in second
    ptx = nvcc_compile(src, "sm_90a", "ptx").decode()
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16", ptx)) == 8
    assert "m64n32k16" not in ptx


def test_a_fragment_used_by_two_groups_is_refused_naming_both_uses():
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            f = T.alloc_fragment((64,), "float32")
            tx = T.get_thread_binding()
            T.copy(A, f)
            if tx >= 128:
                T.copy(f, B)

    with pytest.raises(LoweringError, match=r"fragment f is used by two thread groups: "
                                            r"threads 0..255 in T.copy \(at .*T.copy\(A, f\)\), "
                                            r"and threads 128..255 in T.copy"):
        tilelang.compile(main, target=SM90A)


def test_a_scalar_fragment_update_in_a_branch_runs_on_the_owner_rank():
    """``f[5] += 1`` outside T.Parallel in the branch of threads 128..255 runs on the threads
    holding f[5] under the group's layout (ranks 1, 33, 65, 97: threads 129, 161, 193, 225);
    before, the owner test compared the block's tx with the rank and no thread matched."""

    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), B: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=256) as bx:
            f = T.alloc_fragment((128,), "float32")
            tx = T.get_thread_binding()
            if tx >= 128:
                T.copy(A, f)
                f[5] = f[5] + 1.0
                T.copy(f, B)

    from tilelang.transform import LayoutInference, LowerParallelLoops, LowerTileOps

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80"})
    mod = tvm.IRModule({"main": main.with_attr("target", target)})
    f = LowerParallelLoops()(LowerTileOps()(LayoutInference()(mod)))["main"]
    tx = []
    tvm_ffi.structural_walk(f.body, (tirx.AttrStmt, lambda a: tx.append(a.node.var)
                                     if a.attr_key == "thread_extent" and
                                     a.node.thread_tag == "threadIdx.x" else None))
    guards = []

    def on_if(s):
        stores = []
        tvm_ffi.structural_walk(s.then_case, (tirx.BufferStore, stores.append))
        if any(st.buffer.name == "f" for st in stores) and len(stores) == 1:
            guards.append(s.condition)

    tvm_ffi.structural_walk(f.body, (tirx.IfThenElse, on_if))
    assert guards, "the scalar update has an owner guard"
    ranks = np.arange(256)
    takes = np.asarray(np_eval(guards[-1], {tx[0].__chandle__(): ranks}), dtype=bool)
    assert list(ranks[takes & (ranks >= 128)]) == [129, 161, 193, 225]


# --- a warp-specialized attention step: three groups, mbarrier hand-offs ----------------------
def ws_attention(H=64, N=64, D=128, scale=0.125):
    """Threads 256..383 load K and V, threads 0..127 compute P = exp2((Q K^T - max) scale), the
    row sums and the left half of P V / sum; threads 128..255 the right half.  The groups hand
    data over through mbarriers only."""

    @T.prim_func
    def main(Q: T.Tensor((H, D), "float16"), K: T.Tensor((N, D), "float16"),
             V: T.Tensor((N, D), "float16"), O: T.Tensor((H, D), "float32")):
        with T.Kernel(1, threads=384) as bx:
            Q_s = T.alloc_shared((H, D), "float16")
            K_s = T.alloc_shared((N, D), "float16")
            V_s = T.alloc_shared((N, D), "float16")
            S_s = T.alloc_shared((H, N), "float16")
            l_s = T.alloc_shared((H,), "float32")
            acc_s = T.alloc_fragment((H, N), "float32")
            m = T.alloc_fragment((H,), "float32")
            l = T.alloc_fragment((H,), "float32")
            o_l = T.alloc_fragment((H, D // 2), "float32")
            o_r = T.alloc_fragment((H, D // 2), "float32")
            kv_ready = T.alloc_barrier(arrive_count=128)
            s_ready = T.alloc_barrier(arrive_count=128)
            tx = T.get_thread_binding()
            T.copy(Q, Q_s)
            if tx >= 256:
                T.copy(K, K_s)
                T.copy(V, V_s)
                T.barrier_arrive(kv_ready)
            elif tx < 128:
                T.barrier_wait(kv_ready, 0)
                T.clear(acc_s)
                T.wgmma_gemm(Q_s, K_s, acc_s, transpose_B=True)
                T.wait_wgmma(0)
                T.reduce_max(acc_s, m, dim=1)
                for i, j in T.Parallel(H, N):
                    acc_s[i, j] = T.exp2((acc_s[i, j] - m[i]) * scale)
                T.reduce_sum(acc_s, l, dim=1)
                T.copy(acc_s, S_s)
                T.copy(l, l_s)
                T.barrier_arrive(s_ready)
                T.clear(o_l)
                T.gemm(S_s, V_s[:, 0:D // 2], o_l)
                for i, j in T.Parallel(H, D // 2):
                    o_l[i, j] = o_l[i, j] / l[i]
                T.copy(o_l, O[:, 0:D // 2])
            else:
                T.barrier_wait(kv_ready, 0)
                T.barrier_wait(s_ready, 0)
                T.clear(o_r)
                T.gemm(S_s, V_s[:, D // 2:D], o_r)
                for i, j in T.Parallel(H, D // 2):
                    o_r[i, j] = o_r[i, j] / l_s[i]
                T.copy(o_r, O[:, D // 2:D])

    return main


def _regions(src: str) -> dict:
    """The code of each thread-group region of the kernel, by its guard."""
    body = src.split("main_kernel(", 2)[2]
    guards = {"producer": "if (256 <= ((int)threadIdx.x)) {",
              "scores": "if (((int)threadIdx.x) < 128) {",
              "right": "if ((128 <= ((int)threadIdx.x)) && (((int)threadIdx.x) < 256)) {"}
    pos = sorted((body.index(g), k) for k, g in guards.items())
    out = {}
    for (p, k), nxt in zip(pos, pos[1:] + [(len(body), None)]):
        out[k] = body[p:nxt[0]]
    return out


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_ws_attention_sm90a_groups_barriers_and_ptx():
    from tilelang.engine.cuda import nvcc_compile

    src = tilelang.compile(ws_attention(), target=SM90A).get_kernel_source()
    reg = _regions(src)
    # each consumer gemm is one warp group's m64n64 wgmma; the reductions stay in the group
    # (Q K^T: K = 128, 8 wgmmas; P V: K = 64, 4 wgmmas)
    assert reg["scores"].count("m64n64k16") == 12 and reg["right"].count("m64n64k16") == 4
    assert "tl::all_reduce<tl::MaxOp, 4, 1, 128>" in reg["scores"]
    # S_s written by group 0, then read by its own wgmma: group 0's barrier (id 1, 128 threads)
    scores = reg["scores"]
    last_store = scores.rindex("*(half2*)(((half*)smem_ptr)")
    assert "barrier_sync_count_sync(((uint)1), ((uint)128))" in scores[last_store:]
    # no barrier between the branches: no block barrier inside, no named barrier over two
    # groups (ids 4..6 of a 384-thread block)
    for code in reg.values():
        assert "__syncthreads" not in code
        assert not re.search(r"barrier_sync_count_sync\(\(\(uint\)[4-6]\)", code)
    # group 1 stores its half of O by its rank (tx & 127)
    assert "O_ptr + ((((((((int)threadIdx.x) & 127) >> 5) * 2048)" in reg["right"]
    ptx = nvcc_compile(src, "sm_90a", "ptx").decode()
    assert len(re.findall(r"wgmma\.mma_async\.sync\.aligned\.m64n64k16\.f32\.f16\.f16", ptx)) == 16


def test_ws_kernels_are_refused_on_the_cpu():
    with pytest.raises(LoweringError, match="CPU backend"):
        tilelang.compile(ws_attention(), target="cpu")
    with pytest.raises(LoweringError, match="reads the thread index"):
        tilelang.compile(two_gemm_groups(), target="cpu")


def unrolled_stages(M=64, N=64, K=64):
    """Group 0 stages a fragment into shared memory and multiplies it, twice, in a T.unroll."""

    @T.prim_func
    def main(B: T.Tensor((K, N), "float16"), C: T.Tensor((M, N), "float32")):
        with T.Kernel(1, threads=256) as bx:
            B_s = T.alloc_shared((K, N), "float16")
            S_s = T.alloc_shared((M, K), "float16")
            a = T.alloc_fragment((M, K), "float16")
            acc = T.alloc_fragment((M, N), "float32")
            tx = T.get_thread_binding()
            T.copy(B, B_s)
            if tx < 128:
                T.clear(acc)
                for s in T.unroll(2):
                    for i, j in T.Parallel(M, K):
                        a[i, j] = T.cast(i + j + s, "float16")
                    T.copy(a, S_s)
                    T.gemm(S_s, B_s, acc)
                T.copy(acc, C)

    return main


def test_a_hazard_inside_a_user_unroll_gets_the_group_barrier():
    """T.unroll is the user's loop, not a per-thread one: the write of S_s and the gemm that
    reads it are separated by group 0's barrier in each unrolled iteration (before, the whole
    unrolled loop counted as one statement and only got a barrier before it)."""
    src = tilelang.compile(unrolled_stages(), target=SM90A).get_kernel_source()
    group = src.split("if (((int)threadIdx.x) < 128) {", 1)[1]
    parts = group.split("wgmma_fence_fence_sync_aligned")
    assert len(parts) == 3  # two gemms
    for before in parts[:2]:
        tail = before[before.rindex("*(uint4*)(((half*)smem_ptr)"):] \
            if "*(uint4*)(((half*)smem_ptr)" in before else \
            before[before.rindex("((half*)smem_ptr)"):]
        assert "barrier_sync_count_sync(((uint)1), ((uint)128))" in tail


def consumer_then_producer(n=64):
    """Warp group 0 waits for a tile that warp group 1 (the later branch) writes: the branches
    run at the same time, ordered by the user's mbarrier only."""

    @T.prim_func
    def main(A: T.Tensor((n, n), "float32"), B: T.Tensor((n, n), "float32")):
        with T.Kernel(1, threads=256) as bx:
            S = T.alloc_shared((n, n), "float32")
            ready = T.alloc_barrier(arrive_count=128)
            tx = T.get_thread_binding()
            if tx < 128:
                T.barrier_wait(ready, 0)
                T.copy(S, B)
            else:
                T.copy(A, S)
                T.barrier_arrive(ready)

    return main


def test_branches_of_one_chain_are_not_synchronized_with_each_other():
    """Consecutive T.ws blocks would hand S over with a named barrier over both groups (id 3,
    256 threads) at the end of the first and the start of the second; for the branches of one
    if/else that barrier would deadlock (group 0 waits for the mbarrier group 1 arrives on
    after it).  Inside each branch only its own group synchronizes."""
    src = tilelang.compile(consumer_then_producer(), target=SM90A).get_kernel_source()
    body = src.split("main_kernel(", 2)[2]
    assert "barrier_sync_count_sync(((uint)3)" not in body
    first = body.split("if (((int)threadIdx.x) < 128) {", 1)[1].split(
        "if (128 <= ((int)threadIdx.x)) {", 1)[0]
    assert "__syncthreads" not in first


def test_a_ws_kernel_is_refused_on_the_cpu_naming_its_thread_groups():
    # it never calls T.get_thread_binding: the message names the groups instead
    @T.prim_func
    def hand_off(A: T.Tensor((256, 64), "float32"), B: T.Tensor((256, 64), "float32")):
        with T.Kernel(4, threads=256) as bx:
            S = T.alloc_shared((64, 64), "float32")
            with T.ws(0):
                T.copy(A[bx * 64, 0], S)
            with T.ws(1):
                for i, j in T.Parallel(64, 64):
                    B[bx * 64 + i, j] = S[i, j] * 2.0

    with pytest.raises(LoweringError, match=r"CPU backend .* splits its threads into groups "
                       r"\(T.ws, or an if on the thread index\)"):
        tilelang.compile(hand_off, target="cpu")
