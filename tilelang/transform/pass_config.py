"""Pass configuration: the configuration in force (keys: ``tilelang.PassConfigKey``).

TVM 0.27 accepts only C++-registered keys in its ``PassContext``, so tilelang's own keys
(``tl.*``) travel in a scope of ours that the passes read through :func:`current`; keys TVM
knows are forwarded to TVM's ``PassContext`` by the engine.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from typing import Any, Iterator

from ..pass_config_keys import PassConfigKey

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
