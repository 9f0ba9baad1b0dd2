"""The on-disk tuning cache: the best configuration of a tuning run, stored as JSON under
``$TILELANG_CACHE_DIR/autotune/`` (default ``~/.tilelang/cache/autotune/``), so a later
process with the same function, arguments, candidates, target and device compiles only that
configuration.

The key hashes the function's module, name, source and simple closure values; the call's
arguments (tensors by dtype and shape); the candidate configurations; the compile options
(target, out_idx, pass configs); the correctness settings (``ref_prog``'s source, tolerances,
``skip_check``); the device (GPU name and compute capability, or the CPU model); and the
tilelang and TVM versions.  It is on exactly when the kernel cache is
(``tilelang.disable_cache()``, ``TILELANG_DISABLE_CACHE=1``).  An unreadable entry is ignored.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import platform
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

from .failures import Failure


def enabled() -> bool:
    """Whether tuning results are stored: the kernel cache is on and has a usable folder."""
    from ..jit import cache

    return cache.is_enabled() and folder() is not None


def folder() -> Path | None:
    from ..jit import cache

    root = cache.cache_dir()
    return None if root is None else root / "autotune"


def clear() -> None:
    """Forget every stored tuning result."""
    import shutil

    root = folder()
    if root is not None:
        shutil.rmtree(root, ignore_errors=True)


def jsonable(value: Any) -> Any:
    """``value`` as JSON gives it back (tuples become lists, unknown objects their repr)."""
    return json.loads(json.dumps(value, default=repr, sort_keys=True))


def describe(value: Any) -> Any:
    """A process-independent description of a call argument (tensors by dtype and shape)."""
    if hasattr(value, "dtype") and hasattr(value, "shape") and not isinstance(value, type):
        return ["tensor", str(value.dtype), [int(s) for s in value.shape]]
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    if isinstance(value, dict):
        return {str(k): describe(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def fingerprint(fn: Callable | None) -> str:
    """The module, name, source and simple closure values of a function."""
    if fn is None:
        return "none"
    fn = inspect.unwrap(fn)
    parts = [getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))]
    try:
        parts.append(inspect.getsource(fn))
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        parts.append(code.co_code.hex() + repr(code.co_consts) if code else repr(fn))
    code = getattr(fn, "__code__", None)
    for name, cell in zip(code.co_freevars if code else (), getattr(fn, "__closure__", None) or ()):
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        simple = v is None or isinstance(v, (bool, int, float, str))
        parts.append(f"{name}={v!r}" if simple else f"{name}:{type(v).__qualname__}")
    return "\0".join(parts)


def device_of(target: Any) -> str:
    """The device a target's kernels are timed on: the GPU's name and compute capability, or
    the CPU's model."""
    from ..engine.target import is_cpu

    if not is_cpu(target):
        import torch

        cap = torch.cuda.get_device_capability()
        return f"{torch.cuda.get_device_name()} sm_{cap[0]}{cap[1]}"
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{platform.machine()} {model}".strip()


def key_of(fn: Callable, args: tuple, kwargs: dict, configs: list, target: Any,
           compile_options: dict, check_options: dict, ref_prog: Callable | None) -> str:
    import tvm

    from .. import __version__

    data = {
        "function": fingerprint(fn),
        "args": describe(list(args)),
        "kwargs": describe(kwargs),
        "configs": jsonable(configs),
        "target": str(target),
        "device": device_of(target),
        "compile": jsonable({k: v for k, v in compile_options.items() if k != "target"}),
        "check": jsonable(check_options),
        "ref_prog": fingerprint(ref_prog),
        "versions": [__version__, tvm.__version__],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def path_of(key: str, name: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "kernel"
    return folder() / f"{safe}-{key}.json"


def load(path: Path) -> dict | None:
    """The stored record at ``path``, or None when there is none or it is unreadable."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        if not isinstance(record.get("config"), dict) or not isinstance(
                record.get("latency"), (int, float)):
            raise ValueError("missing config or latency")
        return record
    except Exception as err:
        warnings.warn(f"tilelang.autotune: ignoring unreadable tuning cache entry {path}: {err}")
        return None


def store(path: Path, config: dict, latency: float, failures: list[Failure],
          about: dict) -> None:
    """Write the record atomically; a cache that cannot be written only warns."""
    record = {"config": jsonable(config), "latency": latency,
              "failures": [{"config": jsonable(f.config), "reason": f.reason,
                            "message": f.message} for f in failures], **jsonable(about)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=1)
        os.replace(tmp, path)
    except OSError as err:
        warnings.warn(f"tilelang.autotune: could not store the tuning result in {path}: {err}")


def failures_of(record: dict) -> list[Failure]:
    return [Failure(f["config"], f["reason"], f["message"]) for f in record.get("failures", [])]


__all__ = ["clear", "enabled", "failures_of", "folder", "jsonable", "key_of", "load",
           "path_of", "store"]
