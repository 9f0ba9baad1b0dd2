"""The on-disk kernel cache: a compiled kernel is stored under ``TILELANG_CACHE_DIR`` (default
``~/.tilelang/cache``) keyed by everything that decides its code, so a second process that
compiles the same program gets the library back without lowering or invoking a compiler.

The key hashes the program's TVMScript text (self-describing: layouts are printed in full, see
``tilelang.layout.codec``), the target, the pass configs, ``out_idx``, the TVM version and a
digest of tilelang itself (the paths, sizes and modification times of its Python sources and
device headers), so a changed compiler never serves a kernel that an older one built; for the
CPU, also the user's source lines, which its bounds errors name.  ``tilelang.disable_cache()`` or
``TILELANG_DISABLE_CACHE=1`` turns it off.

A cache never fails a compile.  An entry records its library's size and sha256; one that does
not match, or whose ``meta.json`` is malformed, is deleted with a warning and the kernel is
rebuilt (a truncated or altered library would otherwise crash the process that loads it).  A
cache folder that cannot be written is replaced, with one warning, by a folder in the temp
directory, and caching stops when that cannot be written either.
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


def configured_dir() -> Path:
    """``TILELANG_CACHE_DIR``, or ``~/.tilelang/cache`` when it is unset or empty."""
    value = os.environ.get("TILELANG_CACHE_DIR", "")
    return Path(value).expanduser() if value else Path.home() / ".tilelang" / "cache"


def cache_dir() -> Path | None:
    """The folder kernels (and failed kernel sources) are kept in: the configured one when it
    can be written, else a per-user folder in the temp directory, else None."""
    return _writable(str(configured_dir()))


@functools.lru_cache(maxsize=None)
def _writable(configured: str) -> Path | None:
    """The first of ``configured`` and its temp-directory fallback that a file can be written
    in; warns once when that is not ``configured``."""
    fallback = Path(tempfile.gettempdir()) / f"tilelang-cache-{getattr(os, 'getuid', lambda: 0)()}"
    problem = None
    for folder in (Path(configured), fallback):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=folder):
                pass
        except OSError as err:
            problem = problem or f"{type(err).__name__}: {err}"
            continue
        if problem:
            warnings.warn(f"tilelang: the kernel cache {configured} cannot be written ({problem});"
                          f" caching in {folder} instead")
        return folder
    warnings.warn(f"tilelang: the kernel cache {configured} cannot be written ({problem}), nor "
                  f"can {fallback}; kernels are not cached")
    return None


def clear_cache() -> None:
    root = cache_dir()
    if root is not None:
        shutil.rmtree(root / "kernels", ignore_errors=True)


@functools.lru_cache(maxsize=1)
def compiler_digest() -> str:
    """sha256 over tilelang's Python sources and device headers, computed once per process from
    each file's path, size and modification time (``tree_digest``)."""
    from ..engine.cuda import template_dir

    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [(package, ".py")]
    try:
        trees.append((os.path.join(template_dir(), "tl_templates"), ".h"))
    except Exception:  # headers missing: CUDA compiles will report it
        pass
    return tree_digest(trees)


def tree_digest(trees: list[tuple[str, str]]) -> str:
    """sha256 over the files under each ``(root, suffix)``: the root's absolute path, then each
    file's relative path, size and modification time in nanoseconds.  An edited, replaced or
    reinstalled file changes it, as it makes Python recompile a module's bytecode (which is
    decided from the same size and time); reading the files' contents instead cost a fresh
    process milliseconds on every cache hit."""
    h = hashlib.sha256()
    for root, suffix in trees:
        h.update(os.path.abspath(root).encode() + b"\0")
        for rel in _files(root, suffix):
            st = os.stat(os.path.join(root, rel))
            h.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()


def _files(root: str, suffix: str) -> list[str]:
    """The files under ``root`` whose names end in ``suffix``, as sorted '/'-separated paths
    relative to ``root`` (os.walk: this runs in every process that compiles)."""
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        rel = os.path.relpath(folder, root)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        found += [prefix + n for n in names if n.endswith(suffix)]
    return sorted(found)


def key_of(func, target, out_idx, configs: dict) -> str:
    import tvm

    from .. import __version__

    h = hashlib.sha256()
    for part in (func.script(), str(target), json.dumps(out_idx),
                 json.dumps({k: str(v) for k, v in sorted(configs.items())}), __version__,
                 tvm.__version__, compiler_digest(), _source_lines(func, target)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:32]


def _source_lines(func, target) -> str:
    """The user's source lines a CPU library names in its run-time errors (bounds checks:
    ``at FILE:LINE``), so that the same program written elsewhere gets its own entry; ``""``
    for other targets."""
    import tvm
    import tvm_ffi
    from tvm import tirx

    from ..engine.target import is_cpu

    if not is_cpu(target):
        return ""
    found: set = set()

    def on_node(n):
        span = getattr(n, "span", None)
        spans = getattr(span, "spans", None) or [span]
        for sp in spans:
            name = getattr(getattr(sp, "source_name", None), "name", None)
            if name:
                found.add(f"{name}:{getattr(sp, 'line', 0)}")

    tvm_ffi.structural_walk(func.body, ((tirx.Stmt, tvm.ir.Call), on_node))
    return json.dumps(sorted(found))


LIBRARY = "kernel.so"
META = "meta.json"


def _file_digest(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def library_record(path) -> dict:
    """Size and sha256 of the library at ``path``, checked by :func:`library_damage` before
    loading (a truncated or altered library crashes the process)."""
    return {"size": os.path.getsize(path), "sha256": _file_digest(path)}


def library_damage(path, stored: dict) -> str | None:
    """Why the library at ``path`` is not the one ``stored`` (:func:`library_record`)
    describes, or ``None``."""
    name = os.path.basename(path)
    size = os.path.getsize(path)
    if size != stored.get("size"):
        return f"{name} has {size} bytes, {stored.get('size')} were stored"
    if _file_digest(path) != stored.get("sha256"):
        return f"{name} differs from the stored one (sha256 mismatch)"
    return None


def _damage(folder: Path) -> tuple[dict | None, str | None]:
    """The entry's metadata, or why the entry cannot be trusted."""
    try:
        meta = json.loads((folder / META).read_text())
    except (OSError, ValueError) as err:
        return None, f"{META} is unreadable ({type(err).__name__}: {err})"
    if not isinstance(meta, dict):
        return None, f"{META} holds a {type(meta).__name__}, not an object"
    lib = meta.get("library")
    if not (isinstance(lib, dict) and isinstance(lib.get("size"), int)
            and isinstance(lib.get("sha256"), str)):
        return None, f"{META} records no library size and sha256"
    if not isinstance(meta.get("source"), (str, type(None))):
        return None, f"{META} holds a malformed source"
    try:
        why = library_damage(folder / LIBRARY, lib)
    except OSError as err:
        return None, f"{LIBRARY} is unreadable ({type(err).__name__}: {err})"
    return (None, why) if why else (meta, None)


def _discard(folder: Path, why: str) -> None:
    warnings.warn(f"tilelang: deleting the damaged cache entry {folder} ({why}); the kernel is "
                  f"compiled again")
    shutil.rmtree(folder, ignore_errors=True)


def entry(key: str) -> Path | None:
    """The folder holding the entry ``key``: in the configured cache (looked at without the
    write test that ``cache_dir`` makes, so a hit costs no file creation and a read-only cache
    serves its kernels), else in the folder kernels are stored in; None when neither has it."""
    folder = configured_dir() / "kernels" / key
    if folder.is_dir():
        return folder
    root = cache_dir()
    if root is not None and (root / "kernels" / key).is_dir():
        return root / "kernels" / key
    return None


def load(key: str) -> tuple[Any, dict] | None:
    """The runtime module and metadata stored under ``key``, or None (no entry, or a damaged
    one, which is deleted)."""
    folder = entry(key)
    if folder is None:
        return None
    meta, why = _damage(folder)
    if why is not None:
        _discard(folder, why)
        return None
    try:
        import tvm

        return tvm.runtime.load_module(str(folder / LIBRARY)), meta
    except Exception as err:
        _discard(folder, f"{type(err).__name__}: {err}")
        return None


def store(key: str, rt_mod: Any, meta: dict) -> None:
    """Keep ``rt_mod`` (and ``meta``, with the library's size and sha256) under ``key``."""
    root = cache_dir()
    if root is None:
        return
    folder = root / "kernels" / key
    tmp = None
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=folder.parent))
        rt_mod.export_library(str(tmp / LIBRARY))
        meta = {**meta, "library": library_record(tmp / LIBRARY)}
        (tmp / META).write_text(json.dumps(meta))
        if not folder.exists():
            os.replace(tmp, folder)
    except Exception as err:  # no linker, a module without binaries, a full disk ...
        warnings.warn(f"tilelang: could not cache the kernel ({type(err).__name__}: {err})")
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
