"""Sweep the public TileLang corpus on a CPU-only machine: which example scripts get all
their kernels through our pipeline for ``cuda -arch=sm_90a`` (parse, passes, CUDA source,
nvcc where it runs without a GPU).

    python3 tools/compat_sweep.py /tmp/corpus/corpus                 # the peer-pass list
    python3 tools/compat_sweep.py /tmp/corpus/corpus --only gemm     # paths containing "gemm"
    python3 tools/compat_sweep.py /tmp/corpus/corpus --all           # every script in examples/

Each script runs in its own process as ``__main__`` (in its folder), with three changes:
every ``tilelang.compile`` targets ``cuda -arch=sm_90a``; CUDA tensors are made on the CPU
(``device="cuda"``, ``.cuda()``, ``.to("cuda")``) and ``torch.cuda`` calls are no-ops; a
compiled kernel is not run: calling it returns its outputs allocated (zeros) and the script
goes on, so the kernels compiled after it are reached too; benchmarks return at once.

One line per script:
- ``OK``: the script ended, or stopped after compiling at least one kernel on an
  ``AssertionError`` outside tilelang (its result check, meaningless here since no kernel ran)
  or on a reference package this machine lacks (``STUBBED``: triton, einops ..., replaced by
  stubs that stop the script when used);
- ``FAIL``: the first error otherwise (type, first line, innermost tilelang/script frame);
- ``TIMEOUT``: still running after ``--timeout`` seconds (with the kernels compiled so far).
Kernels are compiled, never run: an OK says nothing about results (the GPU run does).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

TARGET = "cuda -arch=sm_90a"
PEER_LIST = Path(__file__).resolve().parents[1] / ".." / "shared" / "compat" / "examples_peer_pass.txt"


# --- the child: run one script under the hooks -------------------------------------------
class _State:
    compiled = 0
    result_path = ""


# Packages the GPU machine has and this one may not; the scripts use them for references and
# benchmarks.  A stub stands in: using it raises _Unavailable (a stop, not a tilelang error).
STUBBED = ("triton", "einops", "flash_attn", "fla", "vllm", "deep_gemm", "sgl_kernel")


class _Unavailable(Exception):
    pass


def _install_stubs() -> None:
    import importlib.abc
    import importlib.machinery
    import importlib.util
    import types

    class Missing:
        def __init__(self, name):
            self._name = name

        def __getattr__(self, attr):
            return Missing(f"{self._name}.{attr}")

        def __call__(self, *a, **k):
            if a and callable(a[0]) and not k and len(a) == 1:
                return a[0]  # used as a decorator: keep the function
            raise _Unavailable(f"{self._name} is not installed here")

        def __getitem__(self, item):
            return self

        def __mro_entries__(self, bases):
            return (object,)

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in STUBBED and importlib.machinery.PathFinder.find_spec(
                    name.split(".")[0]) is None:
                return importlib.util.spec_from_loader(name, self, is_package=True)
            return None

        def create_module(self, spec):
            mod = types.ModuleType(spec.name)
            mod.__path__ = []
            mod.__getattr__ = lambda attr: Missing(f"{spec.name}.{attr}")
            return mod

        def exec_module(self, module):
            pass

    sys.meta_path.append(Finder())


def _install_hooks() -> None:
    import torch
    from torch.overrides import TorchFunctionMode

    def cpu(device):
        if isinstance(device, int):
            return "cpu"
        if isinstance(device, torch.device) and device.type == "cuda":
            return "cpu"
        if isinstance(device, str) and device.startswith("cuda"):
            return "cpu"
        return device

    class OnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if "device" in kwargs:
                kwargs["device"] = cpu(kwargs["device"])
            name = getattr(func, "__name__", "")
            if name == "to" and args:
                args = tuple(cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
            if name == "cuda":
                return args[0]
            return func(*args, **kwargs)

    OnCpu().__enter__()
    torch.Tensor.cuda = lambda self, *a, **k: self  # type: ignore[method-assign]

    class Event:
        def __init__(self, *a, **k):
            pass

        def record(self, *a, **k):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return 1.0

    for name in ("synchronize", "manual_seed", "manual_seed_all", "empty_cache", "set_device",
                 "reset_peak_memory_stats"):
        setattr(torch.cuda, name, lambda *a, **k: None)
    torch.cuda.Event = Event

    class Stream(Event):  # multi-stream scripts: everything runs in order on the CPU
        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

    torch.cuda.Stream = Stream
    torch.cuda.default_stream = torch.cuda.current_stream = lambda *a, **k: Stream()
    torch.cuda.stream = lambda s=None: s if s is not None else Stream()
    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA H200 (swept on the CPU)"
    torch.cuda.max_memory_allocated = lambda *a, **k: 0
    class Generator(torch.Generator):  # a class still: annotations write `Generator | None`
        def __new__(cls, device="cpu"):
            return torch._C.Generator(cpu(device))

    torch.Generator = Generator

    import tilelang
    import tilelang.jit  # noqa: F401

    jit = sys.modules["tilelang.jit"]  # the package attribute is the decorator
    from tilelang.jit.params import ArgumentBinder

    original = jit.compile

    def compile_for_sm90(func, *args, **kwargs):
        kwargs["target"] = TARGET
        kwargs.pop("target_host", None)
        kernel = original(func, *args, **kwargs)
        _State.compiled += 1
        _report("running")
        return _NotRun(kernel)

    class _NotRun:
        """A compiled kernel whose call allocates its outputs on the CPU and runs nothing."""

        def __init__(self, kernel):
            self._kernel = kernel
            self._binder = ArgumentBinder(kernel.name, kernel.params, kernel.out_idx, "cpu")

        def __getattr__(self, name):
            return getattr(self._kernel, name)

        def __call__(self, *args, **kwargs):
            _, outs, _ = self._binder.bind(args)
            if not outs:
                return None
            return outs[0] if len(outs) == 1 else tuple(outs)

        def get_profiler(self, *a, **k):
            return _Profiler(self)

    class _Profiler:
        def __init__(self, kernel):
            self.kernel = kernel

        def do_bench(self, *a, **k):
            return 1.0

        def assert_allclose(self, *a, **k):
            return None

        def run_once(self, *a, **k):
            return None

        def __getattr__(self, name):
            return lambda *a, **k: None

    jit.compile = compile_for_sm90
    tilelang.compile = compile_for_sm90
    import tilelang.profiler  # noqa: F401

    profiler = sys.modules["tilelang.profiler"]

    profiler.do_bench = lambda *a, **k: 1.0
    if hasattr(profiler, "Profiler"):
        profiler.Profiler.do_bench = lambda self, *a, **k: 1.0


def _report(status: str, detail: str = "") -> None:
    with open(_State.result_path, "w") as f:
        json.dump({"status": status, "detail": detail, "kernels": _State.compiled}, f)


def _where(tb) -> str:
    """The innermost frame in tilelang or in the script (not TVM's parser or torch)."""
    here = Path(__file__).resolve().parents[1] / "tilelang"
    frames = traceback.extract_tb(tb)
    for fr in reversed(frames):
        if str(Path(fr.filename).resolve()).startswith(str(here)) or "/corpus/" in fr.filename:
            return f"{Path(fr.filename).name}:{fr.lineno}"
    return f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"


# tilelang's result-comparison helpers (tilelang.testing.torch_assert_close ...): an assertion
# they raise is the script's result check, not a tilelang failure
RESULT_CHECKS = ("/tilelang/utils/tensor.py", "/tilelang/testing/")


def _in_tilelang(tb) -> bool:
    for fr in traceback.extract_tb(tb):
        p = fr.filename
        if any(r in p for r in RESULT_CHECKS):
            continue
        if "/tilelang/" in p or "/tvm/" in p or "/tvm_ffi/" in p:
            return True
    return False


def run_one(script: str, result_path: str) -> None:
    import runpy

    _State.result_path = result_path
    _report("starting")
    path = Path(script).resolve()
    os.chdir(path.parent)
    sys.path.insert(0, str(path.parent))
    sys.argv = [str(path)]
    try:
        _install_stubs()
        _install_hooks()
        runpy.run_path(str(path), run_name="__main__")
        _report("OK", "ended")
    except SystemExit as e:
        ok = e.code in (None, 0)
        _report("OK" if ok else "FAIL", "" if ok else f"exit {e.code}")
    except BaseException as e:  # noqa: BLE001 - every error is a result here
        msg = (str(e).strip().splitlines() or [""])[0][:160]
        line = f"{type(e).__name__}: {msg} [{_where(e.__traceback__)}]"
        result_check = isinstance(e, _Unavailable) or (
            isinstance(e, AssertionError) and not _in_tilelang(e.__traceback__))
        if result_check and _State.compiled:
            _report("OK", f"stopped at the result check ({line})")
        else:
            _report("FAIL", line)


# --- the parent ---------------------------------------------------------------------------
def sweep(corpus: Path, scripts: list[str], timeout: float) -> dict[str, int]:
    counts = {"OK": 0, "FAIL": 0, "TIMEOUT": 0}
    result = Path(os.environ.get("TMPDIR", "/tmp")) / f"compat_sweep_{os.getpid()}.json"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PYTHONWARNINGS="ignore")
    env.setdefault("TILELANG_CACHE_DIR", "/tmp/tlcache-sweep")
    for rel in scripts:
        t0 = time.time()
        result.unlink(missing_ok=True)
        cmd = [sys.executable, __file__, "--one", str(corpus / rel), str(result)]
        try:
            subprocess.run(cmd, env=env, timeout=timeout, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
        try:
            r = json.loads(result.read_text())
        except (OSError, ValueError):
            r = {"status": "FAIL", "detail": "the process died without a result", "kernels": 0}
        status = "TIMEOUT" if timed_out else r["status"]
        if status not in counts:  # killed while starting / running (crash)
            status, r["detail"] = "FAIL", f"process died ({r['status']})"
        counts[status] += 1
        print(f"{status:7s} {rel} kernels={r['kernels']} {time.time() - t0:.0f}s {r['detail']}",
              flush=True)
    result.unlink(missing_ok=True)
    return counts


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        run_one(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", type=Path, help="the corpus root (holding examples/)")
    ap.add_argument("--list", type=Path, default=PEER_LIST,
                    help="scripts to run, one path per line relative to the corpus root")
    ap.add_argument("--all", action="store_true", help="every script under examples/")
    ap.add_argument("--only", default="", help="only paths containing this text")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per script")
    args = ap.parse_args()
    if args.all:
        scripts = sorted(str(p.relative_to(args.corpus))
                         for p in (args.corpus / "examples").rglob("*.py"))
    else:
        scripts = [s for s in args.list.read_text().split() if s]
    scripts = [s for s in scripts if args.only in s]
    counts = sweep(args.corpus, scripts, args.timeout)
    print(f"# {counts['OK']} OK, {counts['FAIL']} FAIL, {counts['TIMEOUT']} TIMEOUT "
          f"of {len(scripts)} ({TARGET}, kernels compiled, not run)")


if __name__ == "__main__":
    main()
