"""Targets: what users write (``"auto"``, ``"cuda"``, ``"cuda -arch=sm_90a"``, ``"llvm"``,
``"cpu"``, a dict, a ``tvm.target.Target``) resolved to a TVM 0.27 ``Target``."""

from __future__ import annotations

from typing import Any

import tvm_ffi
from tvm.target import Target

from ..errors import TileLangError

CPU_KINDS = ("llvm", "c")


def cuda_available() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch always importable here
        return False


def visible_cuda_arch() -> str:
    """``sm_XY`` of the current CUDA device (``sm_90a`` for Hopper): torch's current device once
    torch has set up CUDA, else device 0 as TVM's runtime reports it.  TVM asks the driver for
    two attributes; torch would first set up its whole CUDA state, about 14 ms of a fresh
    process that only looks a kernel up in the cache."""
    import torch

    if torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability()
    else:
        import tvm

        major, minor = (int(x) for x in tvm.runtime.cuda(0).compute_version.split("."))
    arch = f"sm_{major}{minor}"
    return arch + "a" if major == 9 else arch


def resolve(target: Any = "auto") -> Target:
    """The TVM target for ``target``; ``"auto"`` is the visible GPU, else the CPU."""
    if isinstance(target, Target):
        return target
    if isinstance(target, dict):
        return make(target)
    if target is None or target == "auto":
        return resolve("cuda") if cuda_available() else make({"kind": "llvm"})
    if not isinstance(target, str):
        raise TileLangError(f"target must be a string, dict or tvm.target.Target, got {target!r}")
    words = target.split()
    kind, opts = words[0], words[1:]
    if kind in ("cpu", "llvm", "c"):
        return make({"kind": "llvm"})
    if kind == "cuda":
        cfg: dict[str, Any] = {"kind": "cuda"}
        for o in opts:
            key, _, val = o.lstrip("-").partition("=")
            if key == "arch":
                cfg["arch"] = val
            elif key in ("max_num_threads", "thread_warp_size", "max_shared_memory_per_block"):
                cfg[key] = int(val)
            else:
                raise TileLangError(f"unknown option {o!r} in target {target!r}")
        if "arch" not in cfg:
            cfg["arch"] = visible_cuda_arch() if cuda_available() else "sm_80"
        return make(cfg)
    raise TileLangError(f"unknown target {target!r}; expected 'auto', 'cuda', 'cuda -arch=sm_XX', "
                        "'llvm' or 'cpu'")


def make(config: dict) -> Target:
    """``Target(config)``, given to TVM as an FFI map: TVM's conversion of a Python dict first
    tests it against ``numbers.Number``, an ABC whose first test of a type walks every
    registered number type (about 2 ms, paid by the first compile of a process)."""
    return Target(tvm_ffi.Map(config))


def family(target: Target) -> str:
    """``"cpu"`` or ``"cuda"``: which set of lowerings a target gets."""
    name = target.kind.name
    if name in CPU_KINDS:
        return "cpu"
    if name == "cuda":
        return "cuda"
    raise TileLangError(f"target kind {name!r} is not supported")


def is_cpu(target: Target) -> bool:
    return family(target) == "cpu"
