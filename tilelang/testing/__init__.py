"""Helpers for tests of tile programs: ``tilelang.testing.main()``, skip decorators keyed on
the visible GPU, seeded randomness, a tolerant tensor comparison and the regression-timing
harness used by example folders."""

from __future__ import annotations

import importlib.util
import inspect
import random
import sys
import time
from typing import Any, Callable

import numpy as np
import pytest
import torch
import tvm.testing  # scripts that import tilelang.testing use tvm.testing.*

from ..utils.tensor import compare

__all__ = [
    "main", "requires_cuda", "requires_cuda_compute_version", "requires_cuda_compute_version_ge",
    "requires_cuda_compute_version_gt", "requires_cuda_compute_version_eq",
    "requires_cuda_compute_version_lt", "requires_cuda_compute_version_le",
    "requires_cuda_or_cdna", "requires_rocm", "requires_metal", "requires_gfx950",
    "requires_package", "set_random_seed", "torch_assert_close", "process_func", "regression",
]


def main() -> None:
    """Run pytest on the file that calls this (``if __name__ == "__main__":
    tilelang.testing.main()``), passing on the command line's arguments; exit with its code."""
    caller = inspect.getsourcefile(sys._getframe(1))
    sys.exit(pytest.main([caller, *sys.argv[1:]]))


# ---- skip decorators ----------------------------------------------------------------------

def _cuda_capability() -> tuple[int, int] | None:
    if not torch.cuda.is_available() or getattr(torch.version, "hip", None):
        return None
    return torch.cuda.get_device_capability()


requires_cuda = pytest.mark.skipif(_cuda_capability() is None, reason="needs a CUDA GPU")
requires_rocm = pytest.mark.skipif(
    not (torch.cuda.is_available() and getattr(torch.version, "hip", None)),
    reason="needs a ROCm GPU")
requires_cuda_or_cdna = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
requires_metal = pytest.mark.skipif(True, reason="this tilelang has no Metal backend")
requires_gfx950 = pytest.mark.skipif(True, reason="needs an AMD gfx950 GPU")

_COMPARE = {
    "ge": (lambda a, b: a >= b, ">="), "gt": (lambda a, b: a > b, ">"),
    "eq": (lambda a, b: a == b, "=="), "lt": (lambda a, b: a < b, "<"),
    "le": (lambda a, b: a <= b, "<="),
}


def requires_cuda_compute_version(major: int, minor: int = 0, mode: str = "ge"):
    """Skip unless a CUDA GPU is visible whose compute capability compares to
    ``major.minor`` as ``mode`` says (``"ge"``, ``"gt"``, ``"eq"``, ``"lt"``, ``"le"``)."""
    if mode not in _COMPARE:
        raise ValueError(f"requires_cuda_compute_version: mode must be one of "
                         f"{sorted(_COMPARE)}, got {mode!r}")
    test, sign = _COMPARE[mode]
    cap = _cuda_capability()
    ok = cap is not None and test(cap, (major, minor))
    return pytest.mark.skipif(not ok, reason=f"needs a CUDA GPU of compute capability "
                                             f"{sign} {major}.{minor}")


def requires_cuda_compute_version_ge(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "ge")


def requires_cuda_compute_version_gt(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "gt")


def requires_cuda_compute_version_eq(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "eq")


def requires_cuda_compute_version_lt(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "lt")


def requires_cuda_compute_version_le(major: int, minor: int = 0):
    return requires_cuda_compute_version(major, minor, "le")


def requires_package(*names: str):
    """Skip unless every Python package in ``names`` is importable."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    return pytest.mark.skipif(bool(missing), reason=f"needs the package(s) {', '.join(missing)}")


if not hasattr(tvm.testing, "requires_package"):  # older TVMs' name, used by public scripts
    tvm.testing.requires_package = requires_package


# ---- randomness and comparison -------------------------------------------------------------

def set_random_seed(seed: int = 42) -> None:
    """Seed Python's, numpy's and torch's (CPU and every GPU) random generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def torch_assert_close(tensor_a: Any, tensor_b: Any, rtol: float = 1e-2, atol: float = 1e-2,
                       max_mismatched_ratio: float = 0.001, verbose: bool = False,
                       equal_nan: bool = True, check_device: bool = True,
                       check_dtype: bool = True, base_name: str = "LHS",
                       compare_name: str = "RHS") -> None:
    """Assert that at most ``max_mismatched_ratio`` of the elements of ``tensor_a`` differ
    from ``tensor_b`` by more than ``atol + rtol * |tensor_b|`` (NaNs match NaNs when
    ``equal_nan``).  The two may live on different devices unless ``check_device``, and have
    different dtypes unless ``check_dtype``; shapes must be equal."""
    a, b = torch.as_tensor(tensor_a), torch.as_tensor(tensor_b)
    if check_device and a.device != b.device:
        raise AssertionError(f"{base_name} is on {a.device}, {compare_name} on {b.device}")
    if check_dtype and a.dtype != b.dtype:
        raise AssertionError(f"{base_name} has dtype {a.dtype}, {compare_name} {b.dtype}")
    if not equal_nan:
        nan = torch.isnan(a.double()) | torch.isnan(b.double())
        if bool(nan.any()):
            raise AssertionError(f"{base_name} or {compare_name} holds NaN "
                                 f"({int(nan.sum())} elements) and equal_nan=False")
    compare(a, b, atol, rtol, max_mismatched_ratio, name=f"{base_name} vs {compare_name}")
    if verbose:
        print(f"{base_name} and {compare_name} agree within atol={atol}, rtol={rtol}")


# ---- regression timing ---------------------------------------------------------------------

_RESULTS: list[tuple[str, float]] = []


def process_func(func: Callable, name: str | None = None, *, repeat: int = 10,
                 warmup: int = 3, **kwargs: Any) -> float:
    """Run ``func(**kwargs)`` ``warmup`` times, then time ``repeat`` runs; record the mean
    milliseconds per run under ``name`` (default: the function's name) for :func:`regression`
    to print, and return it.  A function that returns a number is taken to report its own
    latency in ms, which is recorded instead."""
    result = None
    for _ in range(max(0, warmup)):
        result = func(**kwargs)
    times = []
    for _ in range(max(1, repeat)):
        _sync()
        t0 = time.perf_counter()
        result = func(**kwargs)
        _sync()
        times.append((time.perf_counter() - t0) * 1e3)
    ms = float(result) if isinstance(result, (int, float)) and not isinstance(result, bool) \
        else sum(times) / len(times)
    _RESULTS.append((name or getattr(func, "__qualname__", repr(func)), ms))
    return ms


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def regression(prefix: str = "regression_") -> None:
    """Call every function of the calling module whose name starts with ``prefix`` and print
    the latency each recorded through :func:`process_func`."""
    caller = sys._getframe(1).f_globals
    names = sorted(n for n, f in caller.items() if n.startswith(prefix) and callable(f))
    for name in names:
        start = len(_RESULTS)
        caller[name]()
        for label, ms in _RESULTS[start:]:
            print(f"{name}: {label}: {ms:.4f} ms")
