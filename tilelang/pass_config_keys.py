"""``tilelang.PassConfigKey``: the names of the pass configuration options.

A module of its own, below the tile operators and the passes, which both read the
configuration (``tilelang.transform.pass_config`` holds the configuration in force)."""

from __future__ import annotations

from enum import Enum


class PassConfigKey(str, Enum):
    TL_ENABLE_FAST_MATH = "tl.enable_fast_math"
    TL_DISABLE_WARP_SPECIALIZED = "tl.disable_warp_specialized"
    TL_DISABLE_TMA_LOWER = "tl.disable_tma_lower"
    TL_DISABLE_WGMMA = "tl.disable_wgmma"
    TL_DISABLE_SAFE_MEMORY_ACCESS = "tl.disable_safe_memory_access"
    TL_ENABLE_DUMP_IR = "tl.enable_dump_ir"
    TL_DUMP_IR_DIR = "tl.dump_ir_dir"
    TL_DISABLE_VECTORIZE = "tirx.disable_vectorize"
    TL_CONFIG_INDEX_BITWIDTH = "tl.config_index_bitwidth"
    TL_DISABLE_BOUNDS_CHECK = "tl.disable_bounds_check"  # CPU: no OutOfBoundsError checks
    # CUDA: every mbarrier wait gives up after a bounded number of tries, prints block, thread,
    # barrier, stage and parity, and traps (True: 2**20 tries; an int: that many)
    TL_DEBUG_BARRIERS = "tl.debug_barriers"
    # sm_90a warp specialization: setmaxnreg targets of the producer warpgroup and of each
    # consumer warpgroup (registers per thread; multiples of 8 in 24..256)
    TL_WS_PRODUCER_REGS = "tl.ws_producer_max_nreg"
    TL_WS_CONSUMER_REGS = "tl.ws_consumer_max_nreg"
    # Public TileLang keys accepted with no effect here (docs/compatibility.md says why):
    TL_DISABLE_FAST_MATH = "tl.disable_fast_math"  # fast math is already off by default
    TL_DISABLE_THREAD_STORAGE_SYNC = "tl.disable_thread_storage_sync"  # syncs stay (safe)
    TL_DISABLE_DATA_RACE_CHECK = "tl.disable_data_race_check"  # no such check here
    TL_ENABLE_ASYNC_COPY = "tl.enable_async_copy"  # cp.async is chosen by the pipeline
    TL_DISABLE_VECTORIZE_256 = "tl.disable_vectorize_256"
    TL_ENABLE_AGGRESSIVE_SHARED_MEMORY_MERGE = "tl.enable_aggressive_shared_memory_merge"
    TL_ENABLE_VECTORIZE_PLANNER_VERBOSE = "tl.enable_vectorize_planner_verbose"
    TL_REDUCER_FORCE_BASELINE = "tl.reducer_force_baseline"
    TL_PTXAS_REGISTER_USAGE_LEVEL = "tl.ptxas_register_usage_level"
    TL_DEVICE_COMPILE_FLAGS = "tl.device_compile_flags"
    TL_ENABLE_PTXAS_VERBOSE_OUTPUT = "tl.enable_ptxas_verbose_output"

    def __str__(self) -> str:
        return self.value
