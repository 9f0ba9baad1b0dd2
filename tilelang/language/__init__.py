"""The tile language: ``import tilelang.language as T``.

Everything in TVMScript's ``tvm.script.tirx`` namespace is here (``T.serial``, ``T.exp2``,
``T.max``, ``T.if_then_else``, ``T.infinity``, ``T.ceildiv``, dtype constructors ...), plus the
tile-level surface: ``T.Kernel``, allocations, tile operators and loop kinds.
"""

# ruff: noqa: F401, F403
from tvm.script.tirx import *
from tvm.script.tirx import macro

from ..utils import tvm_compat

tvm_compat.install()  # expr.dtype, as programs for the public TileLang read it

from .dtypes import *  # T.float16 ... as dtype objects (str subclasses), T.dtype
from .eager import const, empty
from .func_attrs import annotate_compile_flags, annotate_pass_configs
from .intrinsics import *  # T.clamp, T.sync_threads, T.__exp ...

from ..layout import Fragment, Layout  # the tile layouts, not TVM's tirx.Layout
from ..ops.annotate import (annotate_l2_hit_ratio, annotate_layout, annotate_min_blocks_per_sm,
                            annotate_safe_value, use_swizzle)
from .atomic import atomic_add, atomic_max, atomic_min
from .atomic import atomic_addx2, atomic_addx4, atomic_load, atomic_store
from .atomic import atomic_or, atomic_and, atomic_xor
from .reducer import alloc_reducer, finalize_reducer
from .reducer import reducer_init, reducer_update
from ..ops.copy import copy
from ..ops.scan import cummax, cumsum
from ..ops.transpose import transpose
from ..ops.im2col import im2col
from ..ops.fill import clear, fill
from ..ops.gemm import GemmWarpPolicy, gemm, wgmma_gemm
from ..ops.reduce import reduce_absmax, reduce_abssum, reduce_max, reduce_min, reduce_sum
from .async_copy import (async_copy, cp_async_barrier_noinc, ptx_commit_group, ptx_cp_async,
                         ptx_wait_group, tma_store_wait)
from .barrier import (
    alloc_barrier,
    barrier_arrive,
    barrier_wait,
    fence_proxy_async,
    mbarrier_arrive,
    mbarrier_expect_tx,
    mbarrier_wait_parity,
    tma_copy,
)
from .allocate import alloc_fragment, alloc_global, alloc_local, alloc_shared, alloc_var
from .kernel import (
    ClusterKernel,
    Kernel,
    get_block_binding,
    get_block_bindings,
    get_thread_binding,
    get_thread_bindings,
    launch_thread,
)
from .cluster import (alloc_cluster_barrier, block_rank_in_cluster, clc_get_first_ctaid_x,
                      clc_get_first_ctaid_y, clc_get_first_ctaid_z, clc_is_canceled,
                      clc_try_cancel, clc_try_cancel_multicast, cluster_arrive,
                      cluster_arrive_relaxed, cluster_sync, cluster_wait)
from .loop import Parallel, Persistent, Pipelined, serial, unroll, vectorized
from .parser import prim_func
from .pointer import make_tensor, ptr
from .print_op import print
from .random import rng_init, rng_rand, rng_rand_float
from .launch import pdl_sync, pdl_trigger
from .proxy import Buffer, FragmentBuffer, SharedBuffer, StridedTensor, Tensor
from .registers import (annotate_consumer_reg_alloc, annotate_producer_reg_dealloc,
                        disable_warp_group_reg_alloc, set_max_nreg)
from .symbolic import dynamic, symbolic
from .let import let
from .view import reshape, view
from .warpgroup import wait_wgmma, ws
from .warp import (__ffs, __fns, activemask, all_sync, any_sync, ballot, ballot_sync,
                   get_lane_idx, get_warp_group_idx, get_warp_idx, get_warp_idx_sync,
                   match_all_sync, match_any_sync, shfl_down, shfl_sync, shfl_up, shfl_xor,
                   shuffle_elect, sync_warp, syncthreads_and, syncthreads_count,
                   syncthreads_or, warp_reduce_bitand, warp_reduce_bitor, warp_reduce_max,
                   warp_reduce_min, warp_reduce_sum)
from .logical import all_of, any_of
from .memory_access import (__ldg, ldg32, ldg64, ldg128, ldg256, lds32, lds64, lds128, stg32,
                            stg64, stg128, stg256, sts32, sts64, sts128)
