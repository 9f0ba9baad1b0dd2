"""Compiling candidates in parallel: one forked worker process per candidate, at most one per
CPU at a time.

Forking means the user's function never has to be pickled: the parent builds every
candidate's ``T.prim_func`` and resolves the target (touching CUDA only there), and a forked
child only runs ``tilelang.compile`` on the program it inherited, exports the library to a
scratch folder and reports back through a pipe.  The parent loads the library.  A child that
runs past ``timeout`` is killed; one that crashes is reported with its signal.  Where fork is
not available (not Linux) the candidates are compiled one after another in this process, and
``timeout`` is not enforced on compiles.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from typing import Any, Callable, Sequence

from .failures import COMPILE_ERROR, TIMEOUT, compile_reason, message_of

Outcome = Any  # a JITKernel, or a (reason, message) pair


def cpu_count() -> int:
    """CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def can_fork() -> bool:
    """Whether candidates compile in forked workers (Linux) rather than in this process."""
    import multiprocessing

    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def compile_all(funcs: Sequence[Any], options: dict, timeout: float | None,
                on_done: Callable[[int, Outcome], None], workers: int | None = None) -> None:
    """Compile every program in ``funcs`` with ``tilelang.compile(func, **options)`` (the
    target in ``options`` already resolved) and call ``on_done(i, kernel_or_(reason, msg))``
    for each as it finishes, in completion order."""
    if not funcs:
        return
    if can_fork():
        _compile_forked(funcs, options, timeout, on_done,
                        min(len(funcs), workers or cpu_count()))
    else:
        _compile_here(funcs, options, on_done)


def _compile_here(funcs, options, on_done) -> None:
    from ..jit import compile as tl_compile

    for i, func in enumerate(funcs):
        try:
            kernel = tl_compile(func, **options)
        except Exception as err:  # a candidate that does not compile is skipped
            on_done(i, (compile_reason(err), message_of(err)))
            continue
        on_done(i, kernel)


def _child(conn, func, options: dict, lib_path: str) -> None:
    """Runs in the forked worker: compile, export, report."""
    try:
        from ..jit import compile as tl_compile

        kernel = tl_compile(func, **options)
        kernel.export_library(lib_path)
        conn.send(("ok", kernel.get_kernel_source()))
    except BaseException as err:  # everything is reported, nothing propagates out of a child
        conn.send(("failed", compile_reason(err), message_of(err)))
    finally:
        conn.close()


def _compile_forked(funcs, options, timeout, on_done, workers: int) -> None:
    import multiprocessing
    import shutil
    import tempfile
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("fork")
    scratch = tempfile.mkdtemp(prefix="tilelang-autotune-")
    pending = list(range(len(funcs)))
    running: dict = {}  # reader -> (index, process, start time)
    try:
        while pending or running:
            while pending and len(running) < workers:
                i = pending.pop(0)
                reader, writer = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_child, daemon=True,
                                   args=(writer, funcs[i], options, _lib_path(scratch, i)))
                with warnings.catch_warnings():
                    # Python 3.12+ warns on any fork of a process with threads (torch's and
                    # TVM's pools are idle here).  The child takes no lock those threads use:
                    # it only lowers and compiles, never touches CUDA, and is killed at
                    # ``timeout`` if it hangs anyway.
                    warnings.filterwarnings("ignore", message=".*multi-threaded.*fork",
                                            category=DeprecationWarning)
                    proc.start()
                writer.close()
                running[reader] = (i, proc, time.monotonic())
            wait_s = 0.5
            if timeout is not None:
                now = time.monotonic()
                wait_s = max(0.0, min([wait_s] + [start + timeout - now
                                                  for _, _, start in running.values()]))
            for reader in wait(list(running), timeout=wait_s):
                i, proc, _ = running.pop(reader)
                try:
                    msg = reader.recv()
                except (EOFError, OSError):
                    msg = None
                reader.close()
                proc.join()
                on_done(i, _outcome(msg, proc, funcs[i], options, _lib_path(scratch, i)))
            if timeout is not None:
                now = time.monotonic()
                for reader, (i, proc, start) in list(running.items()):
                    if now - start > timeout:
                        proc.kill()
                        proc.join()
                        reader.close()
                        del running[reader]
                        on_done(i, (TIMEOUT, f"compiling took longer than {timeout:g} s"))
    finally:
        for reader, (_, proc, _) in running.items():
            proc.kill()
            proc.join()
            reader.close()
        shutil.rmtree(scratch, ignore_errors=True)


def _lib_path(scratch: str, i: int) -> str:
    return os.path.join(scratch, f"candidate{i}.so")


def _outcome(msg, proc, func, options: dict, lib_path: str) -> Outcome:
    if msg is None:
        code = proc.exitcode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return (COMPILE_ERROR, f"the compiling worker died ({how}) without a result")
    if msg[0] == "failed":
        return (msg[1], msg[2])
    try:
        return load_kernel(func, lib_path, msg[1], options)
    except Exception as err:
        return (COMPILE_ERROR, f"could not load the compiled library: {message_of(err)}")


def load_kernel(func, lib_path: str, source: str | None, options: dict):
    """The ``JITKernel`` for ``func`` from a library a worker exported (the same construction
    as a kernel-cache hit in ``tilelang.compile``)."""
    import tvm

    from ..jit.kernel import JITKernel, normalize_out_idx
    from ..transform import pass_config

    rt_mod = tvm.runtime.load_module(lib_path)
    outs = normalize_out_idx(options.get("out_idx"), len(func.params))
    return JITKernel(func, rt_mod, options["target"], outs,
                     pass_config.normalize(options.get("pass_configs")), device_source=source)


__all__ = ["can_fork", "compile_all", "cpu_count", "load_kernel"]
