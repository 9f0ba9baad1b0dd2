"""Autotuning: compile a kernel function for every candidate configuration, keep the fastest.

    @tilelang.autotune(configs=[{"block_M": 64}, {"block_M": 128}], ref_prog=ref)
    @tilelang.jit(out_idx=[-1])
    def matmul(M, N, K, block_M=64): ...

    kernel = matmul(1024, 1024, 1024)      # the fastest; kernel.config, kernel.latency

Candidates compile in parallel worker processes (``workers``), are checked and timed one at a
time in this process (``measure``) with a progress bar on stderr; failing ones are skipped and
listed with their reason (``failures``); the best configuration is stored on disk
(``tuning_cache``).  ``AutoTuner`` (``tuner``) is the programmatic form; see docs/autotune.md.
"""

from __future__ import annotations

from .decorator import AutoTunedFunction, autotune
from .failures import REASONS, Failure
from .inputs import set_autotune_inputs
from .result import AutotuneResult
from .tuner import AutoTuner
from .tuning_cache import clear as clear_cache

__all__ = ["AutoTunedFunction", "AutoTuner", "AutotuneResult", "Failure", "REASONS",
           "autotune", "clear_cache", "set_autotune_inputs"]
