"""The CUDA compile step: TVM's generated source plus tilelang's device headers, compiled with
NVRTC (cuda-python, when present) or nvcc, for the target's architecture.

TVM calls two process-global hooks while it builds a CUDA module; tilelang installs both:
``tvm_callback_cuda_postproc`` adds ``#include "tl_templates/cuda/tl.h"`` after TVM's preamble,
``tvm_callback_cuda_compile`` compiles.  A failed compile raises ``CompileError`` with the
compiler's message and the path where the source was saved.
"""

from __future__ import annotations

import contextvars
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import tvm
import tvm_ffi
from tvm.target import Target

from ..errors import CompileError

INCLUDE_LINE = '#include "tl_templates/cuda/tl.h"\n'
_captured: contextvars.ContextVar[list | None] = contextvars.ContextVar("tl_cuda_src", default=None)


def template_dir() -> str:
    """The folder holding ``tl_templates/`` (the repository's ``src/``)."""
    here = Path(__file__).resolve().parents[2] / "src"
    if (here / "tl_templates" / "cuda" / "tl.h").exists():
        return str(here)
    installed = Path(__file__).resolve().parents[1] / "src"
    if (installed / "tl_templates" / "cuda" / "tl.h").exists():
        return str(installed)
    raise CompileError("tilelang's CUDA headers (src/tl_templates) were not found next to the "
                       "package; install tilelang from its repository (pip install -e .)")


def add_headers(code: str, prelude: str = "") -> str:
    """The kernel source with tilelang's device headers (and the kernel's ``prelude`` text)
    included after TVM's preamble."""
    if INCLUDE_LINE in code:
        return code
    extra = INCLUDE_LINE + (prelude.rstrip("\n") + "\n" if prelude else "")
    marker = code.find('extern "C" __global__')
    if marker < 0:
        return extra + code
    return code[:marker] + extra + code[marker:]


def arch_of(target: Target) -> str:
    return str(target.attrs.get("arch", "sm_80"))


def has_nvrtc() -> bool:
    try:
        return importlib.util.find_spec("cuda.bindings.nvrtc") is not None
    except (ImportError, ValueError):
        return False


def save_source(code: str) -> str:
    """Keep a source that failed to compile (under the kernel cache's ``src/``, else the temp
    directory) and return its path, or a note why it could not be kept; never raises."""
    from ..jit.cache import cache_dir

    name = f"kernel_{hashlib.sha1(code.encode()).hexdigest()[:16]}.cu"
    root = cache_dir()
    problem = ""
    for folder in ([root / "src"] if root else []) + [Path(tempfile.gettempdir())]:
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(code)
            return str(folder / name)
        except OSError as err:
            problem = f"{type(err).__name__}: {err}"
    return f"<not saved: {problem}>"


def nvcc_compile(code: str, arch: str, fmt: str = "cubin", options: list | None = None) -> bytes:
    """Compile with nvcc (``fmt``: cubin or ptx)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError("nvcc was not found on PATH")
    suffix = arch[3:] if arch.startswith("sm_") else arch
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "kernel.cu"), os.path.join(d, f"kernel.{fmt}")
        Path(src).write_text(code)
        gencode = (["-gencode", f"arch=compute_{suffix},code=sm_{suffix}"] if fmt == "cubin"
                   else [f"-arch=compute_{suffix}"])
        cmd = [nvcc, f"--{fmt}", "-O3", "-std=c++17", *gencode, "-I", template_dir(),
               "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__",
               "--use_fast_math", "-w", *(options or []), "-o", out, src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            path = save_source(code)
            raise CompileError(f"nvcc failed for {arch} (source saved to {path}):\n"
                               f"{proc.stderr.strip()}")
        return Path(out).read_bytes()


def nvrtc_compile(code: str, arch: str, fmt: str = "cubin") -> bytes:
    from tvm.support import nvcc as tvm_nvcc

    try:
        return bytes(tvm_nvcc.compile_cuda(code, target_format=fmt, arch=arch,
                                           options=[f"-I{template_dir()}"], compiler="nvrtc"))
    except Exception as err:  # NVRTC reports through RuntimeError
        path = save_source(code)
        raise CompileError(f"NVRTC failed for {arch} (source saved to {path}):\n{err}") from None


def compile_source(code: str, target: Target, fmt: str = "cubin") -> bytes:
    """Compile a complete kernel source (headers already included) for ``target``."""
    arch = arch_of(target)
    if os.environ.get("TILELANG_CUDA_COMPILER", "").lower() != "nvcc" and has_nvrtc():
        return nvrtc_compile(code, arch, fmt)
    return nvcc_compile(code, arch, fmt)


# The target and prelude of the build in progress (the hooks have no other way to learn them).
_building: contextvars.ContextVar[Target | None] = contextvars.ContextVar("tl_target", default=None)
_prelude: contextvars.ContextVar[str] = contextvars.ContextVar("tl_prelude", default="")


class building:
    """``with building(target):`` around ``tvm.compile`` so the hooks see the target and the
    generated source can be read back."""

    def __init__(self, target: Target, prelude: str = ""):
        self.target = target
        self.prelude = prelude
        self.sources: list[str] = []

    def __enter__(self):
        self._t = _building.set(self.target)
        self._p = _prelude.set(self.prelude)
        self._s = _captured.set(self.sources)
        return self

    def __exit__(self, *exc):
        _building.reset(self._t)
        _prelude.reset(self._p)
        _captured.reset(self._s)


@tvm_ffi.register_global_func("tvm_callback_cuda_postproc", override=True)
def _postproc(code, *_rest):
    code = add_headers(str(code), _prelude.get())
    sink = _captured.get()
    if sink is not None:
        sink.append(code)
    return code


@tvm_ffi.register_global_func("tvm_callback_cuda_compile", override=True)
def _compile(code, *rest):
    target = _building.get() or Target.current(allow_none=True) or \
        (rest[0] if rest and isinstance(rest[0], Target) else None)
    if target is None:
        target = Target({"kind": "cuda", "arch": "sm_80"})
    return bytearray(compile_source(str(code), target, "cubin"))


__all__ = ["add_headers", "building", "compile_source", "nvcc_compile", "template_dir", "tvm"]
