"""The ordered pass pipeline, registered with TVM as the TIR pipeline ``"tilelang"``.

    SolveAffineSizes -> ApplySafeValues -> CheckHostAssumptions -> ScalarBindings -> LegalizeNegativeIndex ->
    CheckTileViews -> CheckReducerEpochs -> DeferAccumulatorFill -> LayoutInference -> WarpSpecialize -> InjectSoftwarePipeline -> DeferConsumerGemm -> MarkSourceLines -> LowerTileOps ->
    LowerParallelLoops -> VectorizeCastLoops -> InjectAsyncWaits -> LowerAsyncResources -> DebugBarriers -> PlanSharedMemory -> InjectThreadSync -> PingPongConsumers -> ShareDescriptors ->
    AssumeTripCounts -> LowerKernelLaunch -> CheckBounds -> GuardGlobalAccesses -> RoundLowPrecisionStores -> PackSubByteStores ->
    ScalarizeBoolVectors -> PromoteNarrowFloatArith -> LowerCPUMath -> ExactFloat8Casts -> LegalizeLoops -> TVM's "tirx" pipeline

(``MarkSourceLines`` and ``CheckBounds`` act on CPU targets only: bounds checks;
``GuardGlobalAccesses`` and ``ScalarizeBoolVectors`` on GPU targets only.)

``tvm.compile(mod, target, tir_pipeline="tilelang")`` runs it; ``tilelang.lower`` runs the same
passes and returns the module.  With ``TILELANG_DUMP_IR=dir`` (or the pass config
``tl.dump_ir_dir``) the IR after every pass is written to ``dir/NN_<pass>.py``.
"""

from __future__ import annotations

import os

import tvm
from tvm.tirx import compilation_pipeline as _cp

from .. import transform as tl_transform
from ..transform import (accumulator_fill, affine_sizes, bool_vectors, check_bounds, cpu_math,
                         consumer_pingpong, debug_barriers, defer_consumer_gemm, float8_casts,
                         legal_loops, narrow_float_arith, pass_config, round_storage,
                         safe_global_access, safe_values, scalar_bindings, share_descriptors,
                         subbyte_access, trip_counts, vector_casts, warp_specialize)

NAME = "tilelang"


def tile_passes() -> list[tvm.transform.Pass]:
    """tilelang's own passes, in order."""
    from ..language.view import CheckTileViews
    from ..language.reducer import CheckReducerEpochs
    from ..transform.host_assumptions import CheckHostAssumptions

    return [
        affine_sizes.SolveAffineSizes(),
        safe_values.ApplySafeValues(),
        CheckHostAssumptions(),
        scalar_bindings.ScalarBindings(),
        tl_transform.LegalizeNegativeIndex(),
        CheckTileViews(),
        CheckReducerEpochs(),
        accumulator_fill.DeferAccumulatorFill(),
        tl_transform.LayoutInference(),
        warp_specialize.WarpSpecialize(),
        tl_transform.InjectSoftwarePipeline(),
        defer_consumer_gemm.DeferConsumerGemm(),
        check_bounds.MarkSourceLines(),
        tl_transform.LowerTileOps(),
        tl_transform.LowerParallelLoops(),
        vector_casts.VectorizeCastLoops(),
        tl_transform.InjectAsyncWaits(),
        tl_transform.LowerAsyncResources(),
        tl_transform.ElideProxyFences(),
        debug_barriers.DebugBarriers(),
        tl_transform.PlanSharedMemory(),
        tl_transform.InjectThreadSync(),
        consumer_pingpong.PingPongConsumers(),
        share_descriptors.ShareDescriptors(),
        trip_counts.AssumeTripCounts(),
        tl_transform.LowerKernelLaunch(),
        check_bounds.CheckBounds(),
        safe_global_access.GuardGlobalAccesses(),
        round_storage.RoundLowPrecisionStores(),
        subbyte_access.PackSubByteStores(),
        bool_vectors.ScalarizeBoolVectors(),
        narrow_float_arith.PromoteNarrowFloatArith(),
        cpu_math.LowerCPUMath(),
        float8_casts.ExactFloat8Casts(),
        legal_loops.LegalizeLoops(),
    ]


def stock_passes() -> list[tvm.transform.Pass]:
    """TVM's ``tirx`` pipeline after our passes (flattening, vectorizing, host/device split,
    packed API)."""
    from tvm import s_tir, tirx
    from tvm.backend.cuda import transforms as cuda_transforms

    from ..transform import constant_conversions, param_alignment, vector_alignment

    config = tvm.transform.PassContext.current().config
    passes = [
        tirx.transform.LowerTIRx(),
        s_tir.transform.UnifyThreadBinding(),
        constant_conversions.FoldConstantConversions(),
        tirx.transform.StmtSimplify(),
        tirx.transform.LowerTIRxOpaque(),
        tirx.transform.FlattenBuffer(),
        tirx.transform.BF16ComputeLegalize(),
        tirx.transform.NarrowDataType(32),
        tirx.transform.VectorizeLoop(not bool(config.get("tirx.disable_vectorize", False))),
        tirx.transform.UnrollLoop(),
        constant_conversions.FoldConstantConversions(),  # unrolled indices are constants
        tirx.transform.StmtSimplify(),
        # a wide access at an offset not proven aligned to its width would fault on the GPU
        vector_alignment.ScalarizeUnalignedVectors(),
        # T.assume facts have served the simplifier; no backend emits them
        tirx.transform.RemoveAssume(),
    ]
    if not bool(config.get("tirx.disable_cse_tir", False)):
        passes.append(tirx.transform.CommonSubexprElim())
    passes += [
        tirx.transform.FP8ComputeLegalize(),
        vector_casts.LowerVectorCasts(),  # vector casts -> paired conversions (CUDA)
        tirx.transform.VerifyMemory(),
        tirx.transform.AnnotateEntryFunc(),
        # a raw ``T.tvm_thread_allreduce`` (under its ``reduce_scope`` comm_reducer) becomes
        # warp shuffles plus a shared scratch across warps; it needs flat buffers and the
        # kernel's thread extents, and runs before the host/device split as in TVM's s_tir
        s_tir.transform.LowerThreadAllreduce(),
        tirx.transform.SplitHostDevice(),
        cuda_transforms.LowerIket(),
        tirx.transform.MakePackedAPI(),
        # the host code assumes element alignment only, not the packed API's 64 bytes
        param_alignment.RelaxParamAlignment(),
        tirx.transform.FP8StorageLegalize(),
        tirx.transform.BF16StorageLegalize(),
    ]
    return passes


def run_passes(mod: tvm.IRModule, passes: list[tvm.transform.Pass]) -> tvm.IRModule:
    """Run ``passes`` in order, writing the IR after each when a dump folder is configured."""
    dump = pass_config.dump_dir()
    if dump:
        os.makedirs(dump, exist_ok=True)
        _write(dump, 0, "input", mod)
    for n, p in enumerate(passes, 1):
        mod = p(mod)
        if dump:
            _write(dump, n, p.info.name, mod)
    return mod


def _write(folder: str, n: int, name: str, mod: tvm.IRModule) -> None:
    safe = name.replace(".", "_").replace("/", "_")
    with open(os.path.join(folder, f"{n:02d}_{safe}.py"), "w") as f:
        f.write(mod.script())


def _pipeline(**_kw):
    @tvm.transform.module_pass(opt_level=0, name="tilelang.pipeline")
    def main(mod: tvm.IRModule, _ctx) -> tvm.IRModule:
        return run_passes(mod, tile_passes() + stock_passes())

    return main, _cp.finalize_host_passes, _cp.finalize_device_passes


_cp.register_tir_pipeline(NAME, _pipeline)
