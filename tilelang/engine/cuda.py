"""The CUDA compile step: TVM's generated source plus tilelang's device headers, compiled with
NVRTC (cuda-python, when present) or nvcc, for the target's architecture.

Both compilers get the same flags (``compile_flags``): C++17, tilelang's headers, the CUDA
headers, and ``--use_fast_math`` only when the pass config ``tl.enable_fast_math`` is on.
NVRTC is given the CUDA headers that ``cuda_include_dirs`` finds; when NVRTC cannot compile a
kernel, nvcc (if on ``PATH``) is tried before the build fails.

TVM calls two process-global hooks while it builds a CUDA module.  tilelang installs its own
for the duration of each ``building(...)`` and restores the previous ones after, so plain TVM
builds in the same process are untouched: ``tvm_callback_cuda_postproc`` adds
``#include "tl_templates/cuda/tl.h"`` after TVM's preamble, ``tvm_callback_cuda_compile``
compiles.  A failed compile raises ``CompileError`` with the compiler's message and the path
where the source was saved.
"""

from __future__ import annotations

import atexit
import contextvars
import functools
import glob
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import subprocess
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any, Callable, Sequence

import tvm
import tvm_ffi
from tvm.target import Target

from ..errors import CompileError

INCLUDE_LINE = '#include "tl_templates/cuda/tl.h"\n'
_captured: contextvars.ContextVar[list | None] = contextvars.ContextVar("tl_cuda_src", default=None)


def template_dir() -> str:
    """The folder holding ``tl_templates/``: the repository's ``src/`` (editable install) or the
    installed package itself (a wheel ships the headers as ``tilelang/tl_templates``)."""
    package = Path(__file__).resolve().parents[1]
    for root in (package.parent / "src", package):
        if (root / "tl_templates" / "cuda" / "tl.h").exists():
            return str(root)
    raise CompileError(f"tilelang's CUDA headers (tl_templates/cuda/tl.h) were not found in "
                       f"{package.parent / 'src'} or {package}; reinstall tilelang")


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


# Where the CUDA headers are -----------------------------------------------------------------

def _toolkit_includes(root: Path) -> list[str]:
    """The include folders of the CUDA toolkit at ``root`` (``include/``,
    ``targets/<triple>/include/`` and their ``cccl/``), or [] when it has no
    ``cuda_runtime.h``."""
    dirs = [root / "include", *map(Path, sorted(glob.glob(str(root / "targets" / "*" / "include"))))]
    dirs = [d for d in dirs if d.is_dir()]
    if not any((d / "cuda_runtime.h").exists() for d in dirs):
        return []
    return [str(x) for d in dirs for x in (d, d / "cccl") if x.is_dir()]


def nvcc_toolkit(nvcc: str) -> Path | None:
    """The toolkit that ``nvcc`` belongs to: its real location's parent (symlinks resolved), or,
    for a wrapper script, the ``TOP`` its dry run reports."""
    real = Path(nvcc).resolve()
    if _toolkit_includes(real.parent.parent):
        return real.parent.parent
    try:
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([nvcc, "--dryrun", "-v", "probe.cu"], capture_output=True,
                                 text=True, timeout=30, cwd=d)
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"^#\$ TOP=(.+)$", out.stdout + out.stderr, re.MULTILINE)
    return Path(found.group(1).strip()).resolve() if found else None


def _pip_includes() -> list[str]:
    """The include folders of the nvidia pip packages (``nvidia/cu13/include``,
    ``nvidia/cuda_runtime/include``, ...), or [] when none has ``cuda_runtime.h``."""
    try:
        spec = importlib.util.find_spec("nvidia")
    except (ImportError, ValueError):
        return []
    dirs: list[Path] = []
    for base in (spec.submodule_search_locations if spec else None) or []:
        for sub in ("cu13", "cu12", "cuda_runtime", "cuda_cccl", "cuda_nvrtc", "cuda_nvcc"):
            d = Path(base) / sub / "include"
            dirs += [x for x in (d, d / "cccl") if x.is_dir()]
    if not any((d / "cuda_runtime.h").exists() for d in dirs):
        return []
    return [str(d) for d in dirs]


def find_cuda_include_dirs() -> tuple[list[str], list[str]]:
    """The CUDA include folders, from the first place that has them: ``CUDA_HOME``,
    ``CUDA_PATH``, the toolkit of the ``nvcc`` on ``PATH``, ``/usr/local/cuda``, the nvidia pip
    packages.  Returns them and the places looked at."""
    looked: list[str] = []
    roots: list[tuple[str, Callable[[], Path | None]]] = [
        ("CUDA_HOME", lambda: Path(os.environ["CUDA_HOME"]) if os.environ.get("CUDA_HOME") else None),
        ("CUDA_PATH", lambda: Path(os.environ["CUDA_PATH"]) if os.environ.get("CUDA_PATH") else None),
        ("nvcc", lambda: nvcc_toolkit(shutil.which("nvcc")) if shutil.which("nvcc") else None),
        ("/usr/local/cuda", lambda: Path("/usr/local/cuda")),
    ]
    for what, root_of in roots:
        root = root_of()
        if root is None:
            continue
        looked.append(f"{root} ({what})")
        dirs = _toolkit_includes(root)
        if dirs:
            return dirs, looked
    looked.append("the nvidia pip packages")
    return _pip_includes(), looked


@functools.lru_cache(maxsize=1)
def cuda_include_dirs() -> tuple[list[str], list[str]]:
    """``find_cuda_include_dirs()``, looked up once per process."""
    return find_cuda_include_dirs()


# Flags -----------------------------------------------------------------------------------------

HALF_MACROS = ("-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
               "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__")


# libcu++ unrolls its type-list metaprograms 16 deep under NVRTC and 10 deep under nvcc; at 16,
# NVRTC spends about a second parsing <cuda/std/type_traits> (which TVM's preamble includes),
# at 10 a tenth of that (CUDA 13.0 headers, 2026-12-05: the README GEMM's NVRTC compile went
# from 1.5 s to 0.5 s).
NVRTC_MACROS = ("-D_CCCL_META_UNROLL_LIMIT=10",)


def fast_math_enabled() -> bool:
    """Whether the pass config in force turns on ``tl.enable_fast_math``."""
    from ..transform import pass_config

    value = pass_config.get(pass_config.PassConfigKey.TL_ENABLE_FAST_MATH, False)
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def compile_flags(compiler: str, arch: str, fmt: str = "cubin", fast_math: bool = False,
                  includes: Sequence[str] = ()) -> list[str]:
    """The flags ``compiler`` ("nvcc" or "nvrtc") gets for ``arch`` and ``fmt`` (cubin or ptx):
    the same language, headers, macros and math mode for both."""
    suffix = arch[3:] if arch.startswith("sm_") else arch
    shared = ["-std=c++17", f"-I{template_dir()}", *(f"-I{d}" for d in includes), *HALF_MACROS,
              "-w", *(["--use_fast_math"] if fast_math else [])]
    if compiler == "nvcc":
        gencode = (["-gencode", f"arch=compute_{suffix},code=sm_{suffix}"] if fmt == "cubin"
                   else [f"-arch=compute_{suffix}"])
        return [f"--{fmt}", "-O3", *gencode, *shared]
    target = f"sm_{suffix}" if fmt == "cubin" else f"compute_{suffix}"
    return [f"--gpu-architecture={target}", "-default-device", *NVRTC_MACROS, *shared]


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


def nvcc_compile(code: str, arch: str, fmt: str = "cubin", options: list | None = None,
                 fast_math: bool = False) -> bytes:
    """Compile with nvcc (``fmt``: cubin or ptx)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError("nvcc was not found on PATH")
    with tempfile.TemporaryDirectory() as d:
        src, out = os.path.join(d, "kernel.cu"), os.path.join(d, f"kernel.{fmt}")
        Path(src).write_text(code)
        cmd = [nvcc, *compile_flags("nvcc", arch, fmt, fast_math), *(options or []), "-o", out,
               src]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            path = save_source(code)
            raise CompileError(f"nvcc failed for {arch} (source saved to {path}):\n"
                               f"{proc.stderr.strip()}")
        return Path(out).read_bytes()


# The CUDA headers that every kernel source includes (TVM's preamble and tl_templates/cuda/tl.h),
# named at the top of the program NVRTC compiles so that they form its precompiled header.
PCH_HEADERS = ("cuda/std/cstdint", "cuda/std/type_traits", "cuda_fp16.h", "cuda_bf16.h",
               "cuda_fp8.h")
PCH_PREFIX = "".join(f"#include <{h}>\n" for h in PCH_HEADERS)


_pch_folders: dict[int, str | None] = {}


def pch_dir() -> str | None:
    """This process's folder for NVRTC's precompiled headers (NVRTC deletes the files it made
    there when the process ends; the empty folder goes then too), or None if none can be made.
    A forked process (the autotuner's compile workers) gets a folder of its own."""
    pid = os.getpid()
    if pid not in _pch_folders:
        try:
            folder = tempfile.mkdtemp(prefix="tilelang-nvrtc-pch-")
            atexit.register(shutil.rmtree, folder, True)
        except OSError:
            folder = None
        _pch_folders[pid] = folder
    return _pch_folders[pid]


def nvrtc_compile(code: str, arch: str, fmt: str = "cubin", fast_math: bool = False) -> bytes:
    """Compile with NVRTC (cuda-python), given the CUDA headers ``cuda_include_dirs`` finds.

    The CUDA headers are precompiled once per process (NVRTC's automatic ``--pch``, in
    ``pch_dir``): the program is the source after ``PCH_PREFIX``, which only includes early what
    the source includes anyway.  Parsing those headers is most of a compile: on the GPU machine
    a process's later compiles of the README GEMM took 0.3 s where its first took 1.4 s.  Should
    that compile fail, the source is compiled as it is, and its errors are the ones reported."""
    from cuda.bindings import nvrtc

    includes, looked = cuda_include_dirs()
    if not includes:
        raise CompileError("NVRTC needs the CUDA headers (cuda_runtime.h) and none were found; "
                           f"looked in: {', '.join(looked)}. Set CUDA_HOME to the CUDA toolkit")
    flags = compile_flags("nvrtc", arch, fmt, fast_math, includes)
    pch = pch_dir()
    if pch is not None:
        try:
            return _nvrtc(nvrtc, PCH_PREFIX + code, [*flags, "--pch", f"--pch-dir={pch}"],
                          arch, fmt, keep_failed=False)
        except CompileError as err:
            logging.getLogger("tilelang").debug(
                "NVRTC with precompiled headers failed, compiling without them: %s",
                " | ".join(str(err).splitlines()[:4]))
    return _nvrtc(nvrtc, code, flags, arch, fmt)


def _nvrtc(nvrtc: Any, code: str, flags: list[str], arch: str, fmt: str,
           keep_failed: bool = True) -> bytes:
    """One NVRTC compile of ``code``; a failure raises ``CompileError`` with NVRTC's log (and,
    when ``keep_failed``, where the source was saved)."""
    opts = [o.encode() for o in flags]

    def check(result, what):
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC {what} failed: {nvrtc.nvrtcGetErrorString(result)[1]}")

    err, prog = nvrtc.nvrtcCreateProgram(code.encode(), b"kernel.cu", 0, [], [])
    check(err, "program creation")
    try:
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            _, size = nvrtc.nvrtcGetProgramLogSize(prog)
            log = b" " * size
            nvrtc.nvrtcGetProgramLog(prog, log)
            path = save_source(code) if keep_failed else "<not saved>"
            raise CompileError(f"NVRTC failed for {arch} (source saved to {path}):\n"
                               f"{log.decode(errors='replace').strip()}")
        get_size, get = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if fmt == "cubin"
                         else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        err, size = get_size(prog)
        check(err, f"reading the {fmt}")
        out = b" " * size
        (err,) = get(prog, out)
        check(err, f"reading the {fmt}")
        return out.rstrip(b"\0") if fmt == "ptx" else out
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def compile_source(code: str, target: Target, fmt: str = "cubin",
                   fast_math: bool | None = None) -> bytes:
    """Compile a complete kernel source (headers already included) for ``target``: NVRTC unless
    it is missing or ``TILELANG_CUDA_COMPILER=nvcc``, then nvcc.  ``fast_math`` defaults to the
    pass config ``tl.enable_fast_math``."""
    arch = arch_of(target)
    fast = fast_math_enabled() if fast_math is None else fast_math
    if os.environ.get("TILELANG_CUDA_COMPILER", "").lower() == "nvcc" or not has_nvrtc():
        return nvcc_compile(code, arch, fmt, fast_math=fast)
    try:
        return nvrtc_compile(code, arch, fmt, fast)
    except (CompileError, ImportError) as nvrtc_err:
        if shutil.which("nvcc") is None:
            raise
        try:
            out = nvcc_compile(code, arch, fmt, fast_math=fast)
        except CompileError as nvcc_err:
            first = str(nvrtc_err).splitlines()[0]
            raise CompileError(f"{nvcc_err}\n(NVRTC had failed first: {first})") from None
        reason = "\n".join(str(nvrtc_err).splitlines()[:6])  # where the source is, the log
        warnings.warn(f"tilelang: NVRTC could not compile the kernel, nvcc did ({reason})")
        return out


# The target and prelude of the build in progress (the hooks have no other way to learn them).
_building: contextvars.ContextVar[Target | None] = contextvars.ContextVar("tl_target", default=None)
_prelude: contextvars.ContextVar[str] = contextvars.ContextVar("tl_prelude", default="")


class building:
    """``with building(target):`` around ``tvm.compile``: installs tilelang's CUDA hooks (and
    restores the previous ones after), lets them see the target and captures the generated
    source."""

    def __init__(self, target: Target, prelude: str = ""):
        self.target = target
        self.prelude = prelude
        self.sources: list[str] = []

    def __enter__(self):
        _install_hooks()
        self._t = _building.set(self.target)
        self._p = _prelude.set(self.prelude)
        self._s = _captured.set(self.sources)
        return self

    def __exit__(self, *exc):
        _building.reset(self._t)
        _prelude.reset(self._p)
        _captured.reset(self._s)
        _restore_hooks()


POSTPROC, COMPILE = "tvm_callback_cuda_postproc", "tvm_callback_cuda_compile"
_previous: dict[str, Any] = {}
_active = [0]
_hooks_lock = threading.Lock()


def _install_hooks() -> None:
    with _hooks_lock:
        if _active[0] == 0:
            for name, hook in ((POSTPROC, _postproc), (COMPILE, _compile)):
                _previous[name] = tvm_ffi.get_global_func(name, allow_missing=True)
                tvm_ffi.register_global_func(name, hook, override=True)
        _active[0] += 1


def _restore_hooks() -> None:
    with _hooks_lock:
        _active[0] -= 1
        if _active[0] == 0:
            for name, previous in _previous.items():
                if previous is None:
                    tvm_ffi.remove_global_func(name)
                else:
                    tvm_ffi.register_global_func(name, previous, override=True)
            _previous.clear()


def _postproc(code, *rest):
    if _building.get() is None:  # another thread's plain TVM build while ours runs
        previous = _previous.get(POSTPROC)
        return previous(code, *rest) if previous is not None else code
    code = add_headers(str(code), _prelude.get())
    sink = _captured.get()
    if sink is not None:
        sink.append(code)
    return code


def _compile(code, *rest):
    target = _building.get()
    if target is None:
        previous = _previous.get(COMPILE)
        if previous is not None:
            return previous(code, *rest)
        target = rest[0] if rest and isinstance(rest[0], Target) else \
            Target({"kind": "cuda", "arch": "sm_80"})
    return bytearray(compile_source(str(code), target, "cubin"))


__all__ = ["add_headers", "building", "compile_flags", "compile_source", "cuda_include_dirs",
           "nvcc_compile", "nvrtc_compile", "template_dir"]
