"""Pass configuration: ``tilelang.PassConfigKey`` and the configuration in force.

TVM 0.27 accepts only C++-registered keys in its ``PassContext``, so tilelang's own keys
(``tl.*``) travel in a scope of ours that the passes read through :func:`current`; keys TVM
knows are forwarded to TVM's ``PassContext`` by the engine.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from enum import Enum
from typing import Any, Iterator


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


KNOWN = {k.value for k in PassConfigKey}

_current: contextvars.ContextVar[dict] = contextvars.ContextVar("tl_pass_config", default={})


def normalize(configs: dict | None) -> dict[str, Any]:
    """String keys for a user's ``pass_configs`` (keys may be ``PassConfigKey`` members)."""
    out: dict[str, Any] = {}
    for k, v in (configs or {}).items():
        key = k.value if isinstance(k, PassConfigKey) else str(k)
        if key.startswith("tl.") and key not in KNOWN:
            raise KeyError(f"unknown pass config {key!r}; known: {sorted(KNOWN)}")
        out[key] = v
    return out


@contextlib.contextmanager
def scope(configs: dict | None) -> Iterator[dict]:
    token = _current.set(normalize(configs))
    try:
        yield _current.get()
    finally:
        _current.reset(token)


def current() -> dict[str, Any]:
    return _current.get()


def get(key: str | PassConfigKey, default: Any = None) -> Any:
    key = key.value if isinstance(key, PassConfigKey) else key
    return current().get(key, default)


def dump_dir() -> str | None:
    """Where to write the IR after each pass: ``TILELANG_DUMP_IR`` or the pass configs."""
    d = os.environ.get("TILELANG_DUMP_IR") or get(PassConfigKey.TL_DUMP_IR_DIR)
    if d:
        return str(d)
    if get(PassConfigKey.TL_ENABLE_DUMP_IR):
        return os.path.join(os.getcwd(), "tilelang_ir")
    return None


def tvm_config() -> dict[str, Any]:
    """The keys of the current configuration that belong to TVM's PassContext."""
    return {k: v for k, v in current().items() if not k.startswith("tl.")}
