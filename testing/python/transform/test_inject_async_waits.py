"""``InjectAsyncWaits`` at pass level (sm_90a, sm_80): a wgmma group that ``wg_wait`` leaves in
flight is complete before the pipeline stage it reads is handed back to its producer (the
empty-barrier arrival of the mbarrier ring, with and without warp specialization; the end of
a cp.async stage before the group's next barrier); a wait with pending 0 of the gemm itself
is not repeated; cp.async groups are left to the pipeline protocol, which keeps ``n - 2`` of
them in flight."""

import os
import sys

import pytest
import tvm
from tvm import tirx

import tilelang
from tilelang.device.effects import released_buffers
from tilelang.ir_utils import find_all

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import matmul  # noqa: E402

SM90 = "cuda -arch=sm_90a"


def lowered(prog, target=SM90, **cfg):
    mod = tilelang.lower(prog, target=target, stage="tile", pass_configs=cfg or None)
    return mod[mod.get_global_vars()[0]]


def _device_calls(node) -> list:
    """The device-op calls of ``node``, in program order."""
    out = []

    def on_call(c):
        if isinstance(c.op, tvm.ir.Op) and c.op.name.startswith("tl.device."):
            out.append(c)

    import tvm_ffi
    tvm_ffi.structural_walk(node, (tvm.ir.Call, on_call), order="pre")
    return out


def consumer_loop(func) -> list:
    """(op name, call) of the device ops of the loop that issues the wgmmas."""
    loops = [lp for lp in find_all(func.body, tirx.For)
             if any(c.op.name == "tl.device.wgmma_ss" for c in _device_calls(lp.body))
             and not any(isinstance(x, tirx.For) and x is not lp and
                         any(c.op.name == "tl.device.wgmma_ss" for c in _device_calls(x.body))
                         for x in find_all(lp.body, tirx.For))]
    assert len(loops) == 1
    return [(c.op.name.replace("tl.device.", ""), c) for c in _device_calls(loops[0].body)]


def after_commit(calls) -> list:
    """The ops after the loop's wgmma commit, e.g. ['wgmma_wait 1', 'wgmma_wait 0', ...]."""
    names = [n for n, _ in calls]
    i = names.index("wgmma_commit")
    return [f"{n} {int(c.args[0])}" if n.endswith("_wait") and n != "mbarrier_wait" else n
            for n, c in calls[i + 1:] if n != "wgmma_fence_operands"]


@pytest.mark.parametrize("wg_wait", [0, 1])
def test_stage_released_after_the_wgmma_group_that_reads_it(wg_wait):
    """The mbarrier ring without warp specialization: the slot goes back to the producer (the
    same threads) in its own iteration, after a wait that covers the group reading it."""
    f = lowered(matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256,
                       wg_wait=wg_wait), **{"tl.disable_warp_specialized": True})
    calls = consumer_loop(f)
    tail = after_commit(calls)
    print(f"wg_wait={wg_wait}: {tail}")
    expected = ["wgmma_wait 0"] if wg_wait == 0 else ["wgmma_wait 1", "wgmma_wait 0"]
    assert tail[:len(expected)] == expected
    # the empty-barrier arrival comes after the covering wait, and hands over the stage's
    # tiles (declared, not matched by name)
    assert "mbarrier_arrive" in tail[len(expected):]
    arrive = [c for n, c in calls if n == "mbarrier_arrive"][-1]
    assert sorted(b.name for b in released_buffers(arrive)) == ["A_s", "B_s"]
    # one wait with pending 0 per iteration: the gemm's own (wg_wait=0) is not repeated
    assert [n for n, c in calls if n == "wgmma_wait" and int(c.args[0]) == 0] == ["wgmma_wait"]


def _slot_of(call) -> str:
    """The ring slot a release names (the leading index of its first tile)."""
    return str(call.args[1].args[0].indices[0])


@pytest.mark.parametrize("wg_wait", [0, 1])
def test_warp_specialized_gemm_keeps_one_wgmma_group_in_flight(wg_wait):
    """Warp specialization, a GEMM main loop: iteration k issues its wgmmas, waits until only
    they are in flight (pending 1) and hands back slot k - 1 (not its own: its group still
    reads it); after the loop everything completes and the last slot goes back."""
    f = lowered(matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256,
                       wg_wait=wg_wait))
    calls = consumer_loop(f)
    tail = after_commit(calls)
    assert tail == ["wgmma_wait 1", "mbarrier_arrive"], tail
    (arrive,) = [c for n, c in calls if n == "mbarrier_arrive"]
    assert "k - 1" in _slot_of(arrive)
    # the loop starts with no wait: the previous iteration's group stays in flight across
    # the full-barrier wait and the next wgmmas (into the same accumulator)
    names = [n for n, _ in calls]
    assert "wgmma_wait" not in names[:names.index("wgmma_ss")]
    after = _device_calls(f.body)
    waits = [int(c.args[0]) for c in after if c.op.name == "tl.device.wgmma_wait"]
    assert waits[-1] == 0  # before the last slot's arrival and the epilogue


def test_attention_overlaps_its_second_gemm():
    """Attention, with ``P @ V`` of iteration k - 1 issued after ``Q @ K`` of k
    (DeferConsumerGemm): the softmax waits for the scores with ``P @ V`` still in flight
    (pending 1), the cast that overwrites ``P`` waits for it (pending 0), and the slot of
    iteration k - 1 goes back after that."""
    from programs import example

    fa = example("flash_attention/example_mha_fwd.py")
    f = lowered(fa.flashattn(1, 2, 256, 64, False, num_stages=2))
    calls = consumer_loop(f)
    seq = []
    for n, c in calls:
        if n in ("wgmma_ss", "wgmma_rs", "wgmma_commit", "wgmma_wait", "mbarrier_arrive"):
            t = f"{n} {int(c.args[0])}" if n == "wgmma_wait" else n
            if not seq or seq[-1] != t:
                seq.append(t)
    assert seq == ["wgmma_ss", "wgmma_commit", "wgmma_rs", "wgmma_commit", "wgmma_wait 1",
                   "wgmma_wait 0", "mbarrier_arrive"], seq
    (arrive,) = [c for n, c in calls if n == "mbarrier_arrive"]
    assert "k - 1" in _slot_of(arrive)
    waits = [int(c.args[0]) for c in _device_calls(f.body) if c.op.name == "tl.device.wgmma_wait"]
    assert waits[-1] == 0  # after the loop, before the last slot's arrival and the epilogue


@pytest.mark.parametrize("wg_wait", [0, 1])
def test_cp_async_stage_released_before_the_next_barrier(wg_wait):
    """cp.async ring (TMA off), two consumer warp groups: each thread's wgmma group is complete
    before the end of the iteration, i.e. before the barrier after which any warp group's
    cp.async overwrites the stage; and the pipeline keeps one cp.async group in flight (no
    cp.async wait with pending 0 inside the loop)."""
    f = lowered(matmul(512, 512, 512, 128, 128, 64, num_stages=3, threads=256,
                       wg_wait=wg_wait), **{"tl.disable_tma_lower": True})
    calls = consumer_loop(f)
    tail = after_commit(calls)
    print(f"wg_wait={wg_wait}: {tail}")
    expected = ["wgmma_wait 0"] if wg_wait == 0 else ["wgmma_wait 1", "wgmma_wait 0"]
    assert tail == expected + ["release"]
    names = [n for n, _ in calls]
    assert names.index("barrier") < names.index("cp_async")  # the stage is handed over there
    assert [int(c.args[0]) for n, c in calls if n == "cp_async_wait"] == [1]


def test_sm80_pipeline_keeps_cp_async_groups_in_flight():
    """The gemm reads its own stage, which the iteration's ``cp.async.wait_group 1`` has
    completed: no wait for every group (that would serialize the pipeline)."""
    f = lowered(matmul(512, 512, 512, 128, 128, 32, num_stages=3), target="cuda -arch=sm_80")
    loop = [lp for lp in find_all(f.body, tirx.For)
            if any(c.op.name == "tl.device.gemm_ss" for c in _device_calls(lp.body))][0]
    waits = [int(c.args[0]) for c in _device_calls(loop.body)
             if c.op.name == "tl.device.cp_async_wait"]
    assert waits == [1]


def test_release_marker_emits_nothing():
    src = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, num_stages=3),
                           target=SM90, pass_configs={"tl.disable_tma_lower": True}
                           ).get_kernel_source()
    assert "release" not in src and "cp_async_wait_group_async_wait_group_1();" in src


def _no_wait_gemm(explicit_wait: bool):
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((128, 128), "float32"), D: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            D_f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True, wg_wait=-1)
            if explicit_wait:
                T.wait_wgmma(0)
            T.fill(D_f, 1)
            T.copy(D_f, D)
            T.copy(C_f, C)

    return main


@pytest.mark.parametrize("explicit", [False, True])
def test_wg_wait_minus_one_leaves_the_wait_to_its_use_or_to_wait_wgmma(explicit):
    """``wg_wait=-1`` emits no wait: the compiler waits right before the accumulator is read
    (after the independent fill and store of D), unless ``T.wait_wgmma(0)`` came earlier."""
    f = lowered(_no_wait_gemm(explicit))
    names = [c.op.name.replace("tl.device.", "") + (f" {int(c.args[0])}" if
             c.op.name.endswith("wgmma_wait") else "") for c in _device_calls(f.body)]
    assert names.count("wgmma_wait 0") == 1
    assert [n for n in names if n.startswith("wgmma_wait")] == ["wgmma_wait 0"]
    text = f.script()
    wait, fill = text.index("T.device_wgmma_wait(0)"), text.index("D[")
    assert (wait < fill) == explicit


def test_wg_wait_below_minus_one_is_refused():
    import tilelang.language as T
    from tilelang.errors import DSLError

    with pytest.raises(DSLError, match="wg_wait.*got -2"):  # with the user's line
        @T.prim_func
        def main(A: T.Tensor((64, 64), "float16"), C: T.Tensor((64, 64), "float32")):
            with T.Kernel(1, threads=128):
                A_s = T.alloc_shared((64, 64), "float16")
                C_f = T.alloc_fragment((64, 64), "float32")
                T.gemm(A_s, A_s, C_f, wg_wait=-2)


def _wgmma_gemm_kernel():
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.wgmma_gemm(A_s, B_s, C_f, clear_accum=True)
            T.wait_wgmma(0)
            T.copy(C_f, C)

    return main


def test_wgmma_gemm_issues_without_waiting_and_has_no_fallback():
    """``T.wgmma_gemm`` (public name): wgmma with no wait of its own, the user's
    ``T.wait_wgmma(0)`` is the one wait; on sm_80 it is an error, not an mma.sync gemm."""
    from tilelang.errors import LoweringError

    f = lowered(_wgmma_gemm_kernel())
    names = [c.op.name.replace("tl.device.", "") for c in _device_calls(f.body)]
    assert "wgmma_ss" in names and names.count("wgmma_wait") == 1
    assert names.index("wgmma_commit") + 1 == names.index("wgmma_wait")
    with pytest.raises(LoweringError, match="T.wgmma_gemm.*cannot run as wgmma here: it needs sm_90a"):
        lowered(_wgmma_gemm_kernel(), target="cuda -arch=sm_80")


def _stores(wait_at_end: bool):
    """S goes out by two explicit TMA stores, rewritten between them; with ``wait_at_end`` the
    program waits after the second itself."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((2, 128, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            S = T.alloc_shared((128, 64), "float16")
            T.copy(A, S)
            T.tma_copy(S, C[0, 0, 0])
            for i, j in T.Parallel(128, 64):
                S[i, j] = S[i, j] + T.float16(1)
            T.tma_copy(S, C[1, 0, 0])
            if wait_at_end:
                T.tma_store_wait(0)

    return main


@pytest.mark.parametrize("wait_at_end", [False, True])
def test_a_block_does_not_exit_while_a_tma_store_reads_its_tile(wait_at_end):
    # the rewrite waits for the first store; the kernel's end for the second, whether or not
    # the program waits itself (then once, not twice)
    ops = [(c.op.name.replace("tl.device.", ""), c) for c in _device_calls(lowered(
        _stores(wait_at_end)).body)]
    names = [n for n, _ in ops]
    assert names.count("tma_store_wait") == 2
    assert names[-1] == "tma_store_wait" and int(ops[-1][1].args[0]) == 0
    first = names.index("tma_store_wait")
    assert names.index("tma_store") < first < len(names) - 1 - names[::-1].index("tma_store")


def _guarded_waits(guard: str):
    """Two explicit TMA stores of S, rewritten between them; after each the program waits only
    under ``guard``: ``if`` (block 0 only) or ``while`` (a loop that runs ``n`` times, maybe
    none)."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((2, 4, 128, 64), "float16"),
             n: T.int32):
        with T.Kernel(4, threads=128) as bx:
            S = T.alloc_shared((128, 64), "float16")
            i = T.alloc_var("int32")
            T.copy(A, S)
            T.tma_copy(S, C[0, bx, 0, 0])
            if guard == "if":
                if bx == 0:
                    T.tma_store_wait(0)
            else:
                i = 0
                while i < n:
                    T.tma_store_wait(0)
                    i = i + 1
            for r, c in T.Parallel(128, 64):
                S[r, c] = S[r, c] + T.float16(1)
            T.tma_copy(S, C[1, bx, 0, 0])
            if guard == "if":
                if bx == 0:
                    T.tma_store_wait(0)

    return main


@pytest.mark.parametrize("guard", ["if", "while"])
def test_a_wait_that_may_not_run_does_not_count(guard):
    # a wait under an `if` or in a loop that may not run leaves the store in flight on the
    # other path: the rewrite of S still waits, and so does the kernel's end
    body = lowered(_guarded_waits(guard)).body
    unguarded = []

    def walk(s, guarded):
        if isinstance(s, tirx.SeqStmt):
            for x in s.seq:
                walk(x, guarded)
        elif isinstance(s, tirx.IfThenElse):
            walk(s.then_case, True)
            if s.else_case is not None:
                walk(s.else_case, True)
        elif isinstance(s, (tirx.For, tirx.While)):
            walk(s.body, guarded or isinstance(s, tirx.While))
        elif isinstance(s, tirx.AttrStmt):
            walk(s.body, guarded)
        elif isinstance(s, tirx.Evaluate) and isinstance(s.value, tvm.ir.Call) and \
                s.value.op.name == "tl.device.tma_store_wait" and not guarded:
            unguarded.append(int(s.value.args[0]))

    walk(body, False)
    assert unguarded == [0, 0]  # before the rewrite, and at the end


def _two_tiles_stored_in_turn():
    """A loop writes S0 and stores it, then S1 and stores it; the store of S0 of one
    iteration may still read it when the next one writes it again."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((64, 128, 64), "float16"),
             n: T.int32):
        with T.Kernel(1, threads=128):
            S0 = T.alloc_shared((128, 64), "float16")
            S1 = T.alloc_shared((128, 64), "float16")
            for t in T.serial(n):
                for i, j in T.Parallel(128, 64):
                    S0[i, j] = A[i, j] + T.float16(1)
                T.tma_copy(S0, C[2 * t, 0, 0])
                for i, j in T.Parallel(128, 64):
                    S1[i, j] = A[i, j] - T.float16(1)
                T.tma_copy(S1, C[2 * t + 1, 0, 0])

    return main


def test_threads_write_a_tile_only_after_the_wait_for_its_store():
    # the leader waits for the store's read of S0; the other threads may write S0 only after
    # a barrier behind that wait (the barrier between the two stores of the previous
    # iteration came before the read ended)
    src = tilelang.compile(_two_tiles_stored_in_turn(), target=SM90).get_kernel_source()
    body = src[src.index("for (int t = 0"):]
    wait = body.index("wait_group_read")
    first_write = body.index("= (A_ptr[")
    assert wait < first_write and "__syncthreads();" in body[wait:first_write]


def test_a_write_through_a_view_waits_for_the_store_of_its_tile():
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((2, 128, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128, 64), "float16")
            S_v = T.reshape(S, (64, 128))
            T.copy(A, S)
            T.tma_copy(S, C[0, 0, 0])
            for i, j in T.Parallel(64, 128):
                S_v[i, j] = T.float16(7)
            T.tma_copy(S, C[1, 0, 0])

    names = [c.op.name.replace("tl.device.", "") for c in _device_calls(lowered(main).body)]
    first_store = names.index("tma_store")
    second_store = len(names) - 1 - names[::-1].index("tma_store")
    assert "tma_store_wait" in names[first_store:second_store]


def _leaves_early(jump: str):
    """A loop stores S and waits for it at the end of its body, but may leave the iteration
    first (``break`` or ``continue``); S is rewritten after the loop."""
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((8, 128, 64), "float16"),
             m: T.int32):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128, 64), "float16")
            for t in T.serial(8):
                T.copy(A, S)
                T.tma_copy(S, C[t, 0, 0])
                if t == m:
                    if jump == "break":
                        break
                    else:
                        continue
                T.tma_store_wait(0)
            for i, j in T.Parallel(128, 64):
                S[i, j] = T.float16(1)
            T.tma_copy(S, C[0, 0, 0])

    return main


@pytest.mark.parametrize("jump", ["break", "continue"])
def test_a_loop_left_early_still_waits_for_its_store(jump):
    # the path through the jump skips the loop's own wait: the rewrite of S after the loop
    # (and, after a continue, the next iteration's load into S) waits for the store
    calls = _device_calls(lowered(_leaves_early(jump)).body)
    names = [c.op.name.replace("tl.device.", "") for c in calls]
    last_store = len(names) - 1 - names[::-1].index("tma_store")
    loop_store = names.index("tma_store")
    between = names[loop_store:last_store]
    assert between.count("tma_store_wait") >= 2  # the loop's own, and one after the loop
    if jump == "continue":
        assert names.index("tma_store_wait") < names.index("tma_load")  # before the load


def test_only_the_issuing_threads_groups_are_counted():
    # the leader issues both stores; the other threads, which take the other side of
    # `tx == 0` every time, have none in flight: at the top of the next iteration S0's store
    # is the older of the leader's two groups, so one may stay in flight (wait 1, not 0)
    src = tilelang.compile(_two_tiles_stored_in_turn(), target=SM90).get_kernel_source()
    body = src[src.index("for (int t = 0"):]
    loop, end = body[:body.index("\n  }\n")], body[body.index("\n  }\n"):]
    assert loop.count("wait_group_read_1();") == 2 and "wait_group_read_0();" not in loop
    assert "wait_group_read_0();" in end


def test_a_wait_by_the_thread_that_issued_the_store_counts():
    # the program waits for its store in the one thread that issued it: the rewrite of S
    # needs no wait of its own, only a barrier behind the leader's
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((2, 128, 64), "float16")):
        with T.Kernel(1, threads=128):
            S = T.alloc_shared((128, 64), "float16")
            tx = T.get_thread_binding()
            T.copy(A, S)
            T.tma_copy(S, C[0, 0, 0])
            if tx == 0:
                T.tma_store_wait(0)
            for i, j in T.Parallel(128, 64):
                S[i, j] = T.float16(7)
            T.tma_copy(S, C[1, 0, 0])

    src = tilelang.compile(main, target=SM90).get_kernel_source()
    body = src[src.index("__global__ void __launch_bounds__(128) main_kernel(") + 1:]
    body = body[body.index("__global__"):]
    first = body.index("bulk_tensor_s2g")
    between = body[first:body.index("= __float2half_rn(0x1.cp+2f", first)]
    assert between.count("wait_group_read_0();") == 1  # the program's own
    assert "__syncthreads();" in between[between.index("wait_group_read_0();"):]


def test_a_wait_for_more_groups_than_are_in_flight_completes_none():
    # `wait(3)` with two stores in flight waits for nothing: the rewrite of S0 (the older
    # store's tile) still waits, with one group left in flight
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), C: T.Tensor((2, 128, 64), "float16")):
        with T.Kernel(1, threads=128):
            S0 = T.alloc_shared((128, 64), "float16")
            S1 = T.alloc_shared((128, 64), "float16")
            T.copy(A, S0)
            T.copy(A, S1)
            T.tma_copy(S0, C[0, 0, 0])
            T.tma_copy(S1, C[1, 0, 0])
            T.tma_store_wait(3)
            for i, j in T.Parallel(128, 64):
                S0[i, j] = T.float16(7)
            T.tma_copy(S0, C[0, 0, 0])

    calls = _device_calls(lowered(main).body)
    waits = [int(c.args[0]) for c in calls if c.op.name == "tl.device.tma_store_wait"]
    assert waits == [3, 1, 0]


def test_groups_of_every_thread_survive_a_loop_that_branches_on_the_thread_index():
    # a wgmma group in flight before the loop (all threads) meets the loop's leader-only
    # store: the classes of the loop's entry overlap, and the split at `tx == 0` must merge
    # them, not keep one (the read of the accumulator then had no wait)
    import tilelang.language as T

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((8, 128, 128), "float32"), S_out: T.Tensor((8, 128, 64), "float16"),
             n: T.int32):
        with T.Kernel(1, threads=128):
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            S = T.alloc_shared((128, 64), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.copy(A, S)
            T.gemm(A_s, B_s, C_f, clear_accum=True, wg_wait=-1)
            for t in T.serial(n):
                T.tma_copy(S, S_out[t, 0, 0])
                T.copy(C_f, C[t, 0, 0])

    loop = next(lp for lp in find_all(lowered(main).body, tirx.For)
                if any(c.op.name == "tl.device.tma_store" for c in _device_calls(lp.body)))
    names = [c.op.name.replace("tl.device.", "") for c in _device_calls(loop.body)]
    assert "wgmma_wait" in names
