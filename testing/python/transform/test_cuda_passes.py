"""The CUDA passes one at a time, on small inputs."""

import re

import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilelang
from tilelang.errors import LoweringError, TileOpError
from tilelang.ir_utils import find_all, substitute
from tvm.sym import Analyzer
from tilelang.layout import codec
from tilelang.transform import (InjectSoftwarePipeline, InjectThreadSync, LayoutInference,
                                LowerKernelLaunch, LowerParallelLoops, LowerTileOps,
                                PlanSharedMemory)
import tilelang.language as T

from cuda_helpers import SM80, gemm_kernel, row_max_kernel
from helpers import bind, loops_of


def allocs(func):
    out = {}
    def on_alloc(a):
        out.setdefault(a.buffer.name, a)

    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, on_alloc))
    return out


def externs(func):
    out = []

    def on_call(c):
        if c.args and isinstance(c.args[0], tvm.ir.StringImm):
            out.append(str(c.args[0].value))

    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call), order="pre")
    return out


def device_calls(func):
    """(device op name without ``tl.device.``, first argument as text) of every device op."""
    from tilelang.device.effects import device_op_of

    out = []

    def on_call(c):
        d = device_op_of(c)
        if d is not None:
            first = c.args[0].value if c.args and hasattr(c.args[0], "value") else None
            out.append((d.name[len("tl.device."):], first))

    tvm_ffi.structural_walk(func.body, (tvm.ir.Call, on_call), order="pre")
    return out


def through(func, *passes):
    mod = bind(func, SM80)
    for p in passes:
        mod = p()(mod)
    return mod["main"]


def test_layout_inference_gives_gemm_accumulator_and_swizzles_operands():
    f = through(gemm_kernel(), LayoutInference)
    a = allocs(f)
    lay = codec.decode(a["C_f"].annotations["tl.layout"])
    assert lay.num_threads == 128 and lay.num_regs == 128
    assert "tl.swizzle" in a["A_s"].annotations and "tl.swizzle" in a["B_s"].annotations


def test_layout_inference_propagates_through_reductions_and_loops():
    f = through(row_max_kernel(), LayoutInference)
    a = allocs(f)
    x = codec.decode(a["x"].annotations["tl.layout"])
    m = codec.decode(a["m"].annotations["tl.layout"])
    assert m.same_as(x.reduce(1))
    loops = [lp for lp in loops_of(f) if "tl.loop_layout" in lp.annotations]
    assert len(loops) == 2


def test_layout_conflict_names_both_sides():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((64, 32), "float16")
            B_s = T.alloc_shared((32, 64), "float16")
            C1 = T.alloc_fragment((64, 64), "float32")
            T.gemm(A_s, B_s, C1, policy=T.GemmWarpPolicy.FullRow)
            T.gemm(A_s, B_s, C1, policy=T.GemmWarpPolicy.FullCol)

    with pytest.raises(Exception, match=r"layout conflict on fragment C1.*T.gemm accumulator"):
        through(main, LayoutInference)


def test_pipeline_stages_tiles_and_places_waits():
    f = through(gemm_kernel(stages=3), LayoutInference, InjectSoftwarePipeline)
    a = allocs(f)
    assert [int(s) for s in a["A_s"].buffer.shape] == [3, 128, 32]
    calls = device_calls(f)
    assert [c for c, _ in calls].count("cp_async_commit") == 3  # two prologue + one per iteration
    assert ("cp_async_wait", 1) in calls and ("cp_async_wait", 0) in calls
    assert ("barrier", 0) in calls  # the block's barrier (id 0) publishes each stage
    text = f.script()
    assert "tl.async_copy" in text and "% 3" in text


def test_pipeline_leaves_single_stage_loops_alone():
    f = through(gemm_kernel(stages=1), LayoutInference, InjectSoftwarePipeline)
    assert [int(s) for s in allocs(f)["A_s"].buffer.shape] == [128, 32]
    assert not device_calls(f)


def test_lower_tile_ops_emits_cp_async_and_mma_gemm():
    f = through(gemm_kernel(), LayoutInference, InjectSoftwarePipeline, LowerTileOps)
    calls = device_calls(f)
    assert any(c == "cp_async" for c, _ in calls)
    assert any(c == "gemm_ss" and a.startswith("128, 128, 32, 2, 2, false, false, 32, 128, true, true")
               for c, a in calls)


def test_parallel_loops_become_register_loops_over_local_arrays():
    f = through(row_max_kernel(), LayoutInference, LowerTileOps, LowerParallelLoops)
    a = allocs(f)
    assert a["x"].buffer.scope() == "local" and [int(s) for s in a["x"].buffer.shape] == [32]
    assert not [lp for lp in loops_of(f) if lp.kind == tirx.ForKind.PARALLEL]
    assert any(c.startswith("all_reduce") and a.startswith("tl::MaxOp") for c, a in device_calls(f))


def test_shared_memory_plan_is_one_aligned_arena():
    f = through(gemm_kernel(), LayoutInference, InjectSoftwarePipeline, LowerTileOps,
                LowerParallelLoops, PlanSharedMemory)
    text = f.script()
    assert text.count('scope="shared.dyn"') == 3  # the arena and two views
    assert 'A_shared' not in text or True
    m = re.search(r'"tirx.dyn_smem_bytes", T.int64\((\d+)\)', text)
    assert int(m.group(1)) == 3 * 2 * 128 * 32 * 2
    offsets = [int(x) for x in re.findall(r"elem_offset=(\d+)", text)]
    assert all(o * 2 % 128 == 0 for o in offsets)


def test_shared_memory_over_the_limit_is_an_error():
    # tiles that do not fit even once (more stages than fit just get fewer)
    with pytest.raises(Exception, match="bytes of shared memory"):
        through(gemm_kernel(stages=1, M=512, bM=512, bK=256), LayoutInference,
                InjectSoftwarePipeline, LowerTileOps, LowerParallelLoops, PlanSharedMemory)


def test_thread_sync_separates_shared_write_and_read():
    f = through(row_max_kernel(), LayoutInference, LowerTileOps, LowerParallelLoops,
                PlanSharedMemory, InjectThreadSync)
    text = f.script()
    write = text.index("s[")
    sync = text.index("T.device_barrier(0, 128)", write)
    read = text.index("Y[", write)
    assert write < sync < read


def _global_hand_off(read_back: bool, atomic: bool = False, view: bool = False):
    """Each thread writes W[t] (through a view of W with ``view``; atomically, scattered, with
    ``atomic``); with ``read_back`` the block then reads it back at another thread's element,
    else ``atomic`` adds into W again, or each thread overwrites its own."""

    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), W: T.Tensor((128,), "float32"),
             Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            Wv = T.reshape(W, (2, 64))
            for i in T.Parallel(128):
                if atomic:
                    T.atomic_add(W[i * 7 % 128], A[i])
                elif view:
                    Wv[i // 64, i % 64] = A[i] * 2.0
                else:
                    W[i] = A[i] * 2.0
            for i in T.Parallel(128):
                if read_back:
                    Y[i] = W[(i + 1) % 128]
                elif atomic:
                    T.atomic_add(W[i], A[i])
                else:
                    W[i] = A[i]

    return main


def test_thread_sync_orders_a_global_tensor_the_block_writes_and_reads():
    # a thread reads what its neighbour wrote: a race without a barrier between the loops
    passes = (LayoutInference, LowerTileOps, LowerParallelLoops, PlanSharedMemory,
              InjectThreadSync)
    for prog in (_global_hand_off(True), _global_hand_off(True, view=True),
                 _global_hand_off(True, atomic=True)):
        text = through(prog, *passes).script()
        write = text.index("A[")  # the first loop's
        assert write < text.index("T.device_barrier(0, 128)", write) < text.index("Y[", write)
    # only written (an output), or only added into atomically: nothing to order
    for prog in (_global_hand_off(False), _global_hand_off(False, atomic=True)):
        assert "device_barrier" not in through(prog, *passes).script()


def test_thread_sync_sees_two_tensors_over_one_pointer_as_one():
    @T.prim_func
    def main(A: T.Tensor((128,), "float32"), p: T.ptr, Y: T.Tensor((128,), "float32")):
        with T.Kernel(1, threads=128) as _:
            W1 = T.make_tensor(p, (128,), "float32")
            W2 = T.make_tensor(p, (128,), "float32")
            for i in T.Parallel(128):
                W1[i] = A[i] * 2.0
            for i in T.Parallel(128):
                Y[i] = W2[(i + 1) % 128]

    src = tilelang.compile(main, target="cuda -arch=sm_80").get_kernel_source()
    assert src.index("__syncthreads()") < src.index("Y_ptr[")


def test_thread_sync_counts_every_thread_dimension():
    # threads=(1, 64): one thread along x, yet 64 threads hand S over to each other
    @T.prim_func
    def main(A: T.Tensor((64,), "float32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=(1, 64)) as _:
            S = T.alloc_shared((64,), "float32")
            ty = T.get_thread_binding(1)
            S[ty] = A[ty]
            B[ty] = S[63 - ty]

    src = tilelang.compile(main, target="cuda -arch=sm_90a").get_kernel_source()
    assert src.index("__syncthreads()") < src.index("B_ptr[")


def test_rasterization_remaps_block_indices():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32")):
        with T.Kernel(8, 8, threads=32) as (bx, by):
            T.use_swizzle(4)
            for i in T.Parallel(8):
                A[by * 8 + i, bx * 8] = 1.0

    f = through(main, LayoutInference, LowerTileOps, LowerParallelLoops, LowerKernelLaunch)
    assert "(by * 8 + bx) // 32" in f.script()


def test_min_blocks_per_sm_becomes_the_kernels_launch_bounds():
    def prog(first, second=None):
        @T.prim_func
        def main(A: T.Tensor((64,), "float32")):
            with T.Kernel(8, threads=32) as bx:
                T.annotate_min_blocks_per_sm(first)
                if second is not None:
                    T.annotate_min_blocks_per_sm(second)
                for i in T.Parallel(8):
                    A[bx * 8 + i] = 1.0

        return main

    f = through(prog(3), LayoutInference, LowerTileOps, LowerParallelLoops, LowerKernelLaunch)
    marks = []
    tvm_ffi.structural_walk(f.body, (tirx.AttrStmt, lambda a: marks.append(a) if a.attr_key
                                     == "tirx.launch_bounds_min_blocks_per_sm" else None))
    assert [int(a.value) for a in marks] == [3] and "tl.min_blocks" not in f.script()
    src = tilelang.compile(prog(3), target="cuda -arch=sm_90a").get_kernel_source()
    assert "__launch_bounds__(32, 3)" in src
    with pytest.raises(LoweringError, match=r"asks for \[2, 3\] blocks per SM"):
        tilelang.lower(prog(2, 3), target="cuda -arch=sm_80")
    with pytest.raises(TileOpError, match="count must be a positive int"):
        T.annotate_min_blocks_per_sm(0)


def test_annotated_shared_layout_is_applied():
    from tilelang.layout import Layout

    @T.prim_func
    def main(A: T.Tensor((16, 16), "float32")):
        with T.Kernel(1, threads=64) as bx:
            S = T.alloc_shared((16, 16), "float32")
            T.annotate_layout({S: Layout((16, 16), lambda i, j: [j, i])})
            T.copy(A, S)
            T.copy(S, A)

    f = through(main, LayoutInference, LowerTileOps, LowerParallelLoops, PlanSharedMemory)
    assert "tl.shared_layout" not in f.script()
    stores = []
    tvm_ffi.structural_walk(f.body, (tirx.BufferStore, stores.append))
    s_store = [s for s in stores if s.buffer.name == "S"][0]
    assert "* 16" in str(s_store.indices[0])  # transposed: column index scaled by the row length


def test_block_level_fragment_read_runs_on_the_owner():
    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            T.copy(X, x)
            Y[0] = x[5, 7]

    f = through(main, LayoutInference, LowerTileOps, LowerParallelLoops)
    stores = []
    tvm_ffi.structural_walk(f.body, (tirx.IfThenElse, stores.append))
    assert any("Y" in str(s.then_case) and "tx" in str(s.condition) for s in stores)


def test_element_atomics_inside_parallel_are_not_single_threaded():
    @T.prim_func
    def main(X: T.Tensor((128,), "int32"), H: T.Tensor((16,), "int32")):
        with T.Kernel(1, threads=128) as bx:
            for i in T.Parallel(128):
                T.atomic_add(H[X[i] % 16], 1)

    f = through(main, LayoutInference, LowerTileOps, LowerParallelLoops)
    assert "tx == 0" not in f.script() and ("atomic_add", None) in device_calls(f)


def test_multi_dim_thread_blocks_are_rejected_on_cuda():
    @T.prim_func
    def main(X: T.Tensor((64,), "float32")):
        with T.Kernel(1, threads=(32, 2)) as bx:
            for i in T.Parallel(64):
                X[i] = 0.0

    with pytest.raises(LoweringError, match="numbers along a 1-D block"):
        import tilelang

        tilelang.lower(main, target="cuda -arch=sm_80")


def test_ownership_error_keeps_its_type():
    import tilelang

    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            x = T.alloc_fragment((64, 64), "float32")
            T.copy(X, x)
            for i, j in T.Parallel(64, 64):
                X[i, j] = x[63 - i, j]

    with pytest.raises(LoweringError, match="threads that do not hold"):
        tilelang.lower(main, target="cuda -arch=sm_80")


def test_swizzle_only_for_whole_chunk_groups():
    from tilelang.layout.swizzle import can_swizzle

    assert can_swizzle(32, "float16") and can_swizzle(64, "float16") and can_swizzle(128, "float16")
    assert not can_swizzle(96, "float16") and not can_swizzle(48, "float16")


def test_gemm_operand_checks():
    import tilelang

    @T.prim_func
    def main(A: T.Tensor((64, 32), "float16"), C: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            B_s = T.alloc_shared((32, 64), "float16")
            C_f = T.alloc_fragment((64, 64), "float32")
            T.gemm(A, B_s, C_f)
            T.copy(C_f, C)

    with pytest.raises(LoweringError, match="needs A .A. in shared memory or a fragment"):
        tilelang.lower(main, target="cuda -arch=sm_80")


def test_data_dependent_fragment_index_is_rejected():
    import tilelang

    @T.prim_func
    def main(X: T.Tensor((64,), "float32"), I: T.Tensor((64,), "int32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((64,), "float32")
            T.copy(X, x)
            for i in T.Parallel(64):
                X[i] = x[I[i]]

    with pytest.raises(LoweringError, match="may only depend on the loop's own variables"):
        tilelang.lower(main, target="cuda -arch=sm_80")


def test_serial_loop_inside_parallel_is_checked_over_its_range():
    import tilelang

    def kernel(rows_per_thread):
        @T.prim_func
        def main(X: T.Tensor((64, 8), "float32"), S: T.Tensor((64,), "float32")):
            with T.Kernel(1, threads=64) as bx:
                x = T.alloc_fragment((64, 8), "float32")
                s = T.alloc_fragment((64,), "float32")
                T.annotate_layout({x: rows_per_thread})
                T.copy(X, x)
                for i in T.Parallel(64):
                    s[i] = 0.0
                    for k in T.serial(8):
                        s[i] = s[i] + x[i, k]
                T.copy(s, S)

        return main

    from tilelang.layout.fragment import REG, THREAD, Factor, Fragment

    whole_rows = Fragment.from_factors([64, 8], [[Factor(0, 64, THREAD, 1)], [Factor(1, 8, REG, 1)]])
    tilelang.lower(kernel(whole_rows), target="cuda -arch=sm_80")  # each thread owns its row
    split_rows = Fragment.from_factors([64, 8], [[Factor(0, 64, REG, 1)], [Factor(1, 8, THREAD, 8)]],
                                       [Factor(-1, 8, THREAD, 1)])
    with pytest.raises(LoweringError, match="live in different threads"):
        tilelang.lower(kernel(split_rows), target="cuda -arch=sm_80")


def test_block_level_mixed_owners_and_conditions_are_rejected():
    import tilelang

    @T.prim_func
    def mixed(X: T.Tensor((64,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((64,), "float32")
            T.copy(X, x)
            Y[0] = x[0] + x[63]

    with pytest.raises(LoweringError, match="held by different threads"):
        tilelang.lower(mixed, target="cuda -arch=sm_80")

    from tilelang.layout.fragment import elementwise

    @T.prim_func
    def cond(X: T.Tensor((64,), "float32"), Y: T.Tensor((1,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            x = T.alloc_fragment((64,), "float32")
            T.annotate_layout({x: elementwise([64], 64)})  # one element per thread
            T.copy(X, x)
            if x[5] > 0:
                Y[0] = 1.0

    # a free fragment read in a condition is replicated (testing/python/layout/
    # test_replicated_fragments.py); one whose layout is fixed otherwise is not
    with pytest.raises(LoweringError, match="only its owner thread holds"):
        tilelang.lower(cond, target="cuda -arch=sm_80")


@pytest.mark.parametrize("arch,kib", [("sm_80", 163), ("sm_86", 99), ("sm_90a", 227),
                                      ("sm_100a", 227), ("sm_120", 99)])
def test_shared_memory_limits_by_arch(arch, kib):
    from tilelang.transform.plan_shared_memory import smem_limit

    assert smem_limit(tvm.target.Target({"kind": "cuda", "arch": arch}))[0] == kib * 1024
    small = tvm.target.Target({"kind": "cuda", "arch": arch, "max_shared_memory_per_block": 1024})
    assert smem_limit(small) == (1024, "the target's max_shared_memory_per_block")


def test_symbolic_tile_shapes_are_rejected_on_cuda():
    import tilelang

    n = T.dynamic("n")

    @T.prim_func
    def main(A: T.Tensor((n,), "float32")):
        with T.Kernel(1, threads=64) as bx:
            S = T.alloc_shared((n,), "float32")
            T.copy(A, S)
            T.copy(S, A)

    with pytest.raises(LoweringError, match="static shape|constant shapes"):
        tilelang.lower(main, target="cuda -arch=sm_80")


def test_a_serial_sum_over_a_distributed_fragment_points_to_the_reductions():
    @T.prim_func
    def main(Q: T.Tensor((64, 64), T.float16), K: T.Tensor((64, 64), T.float16),
             out: T.Tensor((64,), T.float32)):
        with T.Kernel(1, threads=128):
            Qs = T.alloc_shared((64, 64), T.float16)
            Ks = T.alloc_shared((64, 64), T.float16)
            acc = T.alloc_fragment((64, 64), T.float32)
            s = T.alloc_fragment((64,), T.float32)
            T.copy(Q, Qs)
            T.copy(K, Ks)
            T.gemm(Qs, Ks, acc, transpose_B=True, clear_accum=True)
            T.fill(s, 0.0)
            for i in T.Parallel(64):
                for j in T.serial(64):
                    s[i] += acc[i, j]
            T.copy(s, out)

    with pytest.raises(LoweringError, match=r"across j .*thread-distributed fragment.*T.reduce_sum"):
        tilelang.lower(main, target="cuda -arch=sm_80")


def _staged_epilogue(extra=None):
    """A gemm whose result goes out through a shared tile (``extra`` touches the tile)."""

    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            C_s = T.alloc_shared((128, 128), "float16")
            T.copy(A, A_s)
            T.copy(B, B_s)
            T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C_s)
            if extra == "loop":
                for i, j in T.Parallel(128, 128):
                    C_s[i, j] = C_s[i, j] * T.float16(2)
            if extra == "address":
                T.evaluate(T.address_of(C_s[0, 0]))
            if extra == "tma_store":
                T.tma_copy(C_s, C)
                T.tma_store_wait(0)
            else:
                T.copy(C_s, C)

    return main


def test_a_tile_staging_a_fragment_is_stored_swizzled():
    # the fragment's rows land 8 at a time on one column: row-major 256-byte rows would put
    # them on the same banks
    a = allocs(through(_staged_epilogue(), LayoutInference))
    assert "tl.swizzle" in a["C_s"].annotations


@pytest.mark.parametrize("extra", ["loop", "address"])
def test_a_staging_tile_touched_by_more_than_copies_keeps_rows(extra):
    a = allocs(through(_staged_epilogue(extra), LayoutInference))
    assert "tl.swizzle" not in a["C_s"].annotations
    assert "tl.shared_layout" not in a["C_s"].annotations


def test_a_staging_tile_stored_by_tma_copy_takes_the_tma_swizzle():
    # an explicit TMA store reads the tile as T.copy's would: the TMA swizzle, not rows with
    # 8-way bank conflicts on the fragment's writes
    mod = bind(_staged_epilogue("tma_store"),
               tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    a = allocs(LayoutInference()(mod)["main"])
    assert "tl.shared_layout" in a["C_s"].annotations
    src = tilelang.compile(_staged_epilogue("tma_store"),
                           target="cuda -arch=sm_90a").get_kernel_source()
    body = src.split("main_kernel(")[-1]
    assert len(re.findall(r"cp_async_bulk_tensor_s2g\w*\(", body)) == 2  # two 64-column boxes


def test_a_tma_copy_store_of_part_of_a_tile_names_the_shared_side():
    @T.prim_func
    def main(C: T.Tensor((128, 128), "float16")):
        with T.Kernel(1, threads=128) as bx:
            C_s = T.alloc_shared((128, 128), "float16")
            T.fill(C_s, 1.0)
            T.tma_copy(C_s[0:64, :], C[0:64, :])
            T.tma_store_wait(0)

    with pytest.raises(LoweringError, match=r"T.tma_copy C_s\[0:64, 0:128\] -> C.*the shared "
                                            r"side is a part of C_s, not the whole tile"):
        tilelang.compile(main, target="cuda -arch=sm_90a")


def test_a_staging_tile_stored_by_tma_copy_keeps_rows_without_tma():
    # no sm80 swizzle for it: TMA could not read that one
    a = allocs(through(_staged_epilogue("tma_store"), LayoutInference))
    assert "tl.swizzle" not in a["C_s"].annotations
    assert "tl.shared_layout" not in a["C_s"].annotations


@pytest.mark.parametrize("grid,cluster,panel,order", [
    ((8, 6), (2, 1), 4, "row"), ((8, 6), (1, 2), 4, "row"), ((6, 10), (2, 1), 3, "row"),
    ((4, 8), (2, 2), 8, "row"), ((8, 12), (2, 2), 3, "row"), ((8, 12), (4, 2), 2, "col"),
    ((6, 8), (2, 4), 3, "col"), ((8, 6), (2, 1), 4, "col")])
def test_rasterization_of_clusters_keeps_each_block_in_its_cluster(grid, cluster, panel, order):
    """With clusters the panels walk the grid of clusters: still every tile once, and each
    block keeps its place inside its cluster, so two blocks of a cluster that differ only
    along x keep the same row index and two that differ only along y the same column index
    (what TMA multicast within a cluster's rows and columns relies on)."""
    gx, gy = grid

    @T.prim_func
    def main(Owner: T.Tensor((gy, gx), "int32")):
        with T.ClusterKernel(gx, gy, threads=32, cluster_dims=(*cluster, 1)) as (bx, by):
            T.use_swizzle(panel, order=order)
            Owner[by, bx] = 1

    mod = bind(main, tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}))
    for p in (LayoutInference, LowerTileOps, LowerParallelLoops, LowerKernelLaunch):
        mod = p()(mod)
    f = mod["main"]
    (store,) = find_all(f.body, tirx.BufferStore, lambda s: s.buffer.name == "Owner")
    blocks = {a.node.thread_tag: a.node.var for a in find_all(
        f.body, tirx.AttrStmt, lambda a: a.attr_key == "thread_extent")}
    ana = Analyzer()
    seen = {}
    for x in range(gx):
        for y in range(gy):
            vmap = {blocks["blockIdx.x"]: tirx.const(x, "int32"),
                    blocks["blockIdx.y"]: tirx.const(y, "int32")}
            seen[(x, y)] = tuple(int(ana.simplify(substitute(i, vmap)))
                                 for i in store.indices)
    assert sorted(seen.values()) == [(r, c) for r in range(gy) for c in range(gx)]
    cx, cy = cluster
    for (x, y), (r, c) in seen.items():
        assert (c % cx, r % cy) == (x % cx, y % cy)  # its place inside the cluster
        row_mate = seen[(x - x % cx, y)]  # the block of the cluster's first column, same row
        col_mate = seen[(x, y - y % cy)]  # the block of the cluster's first row, same column
        assert r == row_mate[0] and c == col_mate[1]
