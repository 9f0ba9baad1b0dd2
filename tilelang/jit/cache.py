"""The on-disk kernel cache: a compiled kernel is stored under ``TILELANG_CACHE_DIR`` (default
``~/.tilelang/cache``) keyed by everything that decides its code, so a second process that
compiles the same program gets the library back without lowering or invoking a compiler.

The key hashes the program's TVMScript text (self-describing: layouts are printed in full, see
``tilelang.layout.codec``), the target, the pass configs, ``out_idx``, the TVM version and a
digest of tilelang itself (its Python sources and device headers), so a changed compiler never
serves a kernel that an older one built.  ``tilelang.disable_cache()`` or
``TILELANG_DISABLE_CACHE=1`` turns it off.  A cache that cannot be read or written never fails
a compile: the kernel is built as if there were no cache.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

_enabled = [True]


def disable_cache() -> None:
    _enabled[0] = False


def enable_cache() -> None:
    _enabled[0] = True


def is_enabled() -> bool:
    return _enabled[0] and os.environ.get("TILELANG_DISABLE_CACHE", "0") not in ("1", "true", "True")


def cache_dir() -> Path:
    return Path(os.environ.get("TILELANG_CACHE_DIR", Path.home() / ".tilelang" / "cache"))


def clear_cache() -> None:
    shutil.rmtree(cache_dir() / "kernels", ignore_errors=True)


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """sha256 over tilelang's Python sources and device headers (their paths and contents),
    computed once per process."""
    from ..engine.cuda import template_dir

    package = Path(__file__).resolve().parents[1]
    trees = [(package, "*.py")]
    try:
        trees.append((Path(template_dir()) / "tl_templates", "*.h"))
    except Exception:  # headers missing: CUDA compiles will report it
        pass
    h = hashlib.sha256()
    for root, pattern in trees:
        for p in sorted(root.rglob(pattern)):
            h.update(p.relative_to(root).as_posix().encode() + b"\0")
            h.update(p.read_bytes())
    return h.hexdigest()


def key_of(func, target, out_idx, configs: dict) -> str:
    import tvm

    from .. import __version__

    h = hashlib.sha256()
    for part in (func.script(), str(target), json.dumps(out_idx),
                 json.dumps({k: str(v) for k, v in sorted(configs.items())}), __version__,
                 tvm.__version__, compiler_digest()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def load(key: str) -> tuple[Any, dict] | None:
    """The runtime module and metadata stored under ``key``, or None."""
    folder = cache_dir() / "kernels" / key
    lib, meta = folder / "kernel.so", folder / "meta.json"
    if not (lib.exists() and meta.exists()):
        return None
    try:
        import tvm

        return tvm.runtime.load_module(str(lib)), json.loads(meta.read_text())
    except Exception as err:
        warnings.warn(f"tilelang: ignoring unreadable cache entry {folder}: {err}")
        return None


def store(key: str, rt_mod: Any, meta: dict) -> None:
    folder = cache_dir() / "kernels" / key
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent))
        rt_mod.export_library(str(tmp / "kernel.so"))
        (tmp / "meta.json").write_text(json.dumps(meta))
        if folder.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            return
        os.replace(tmp, folder)
    except Exception as err:  # a read-only home, no linker, a module without binaries ...
        warnings.warn(f"tilelang: could not cache the kernel ({type(err).__name__}: {err})")
