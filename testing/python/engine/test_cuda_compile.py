"""The CUDA compile step: where failed sources go, how the CUDA headers are found, which
flags each compiler gets, and that TVM's process-wide hooks serve tilelang's builds only."""

import os
import shutil
import subprocess

import pytest

from tilelang.errors import CompileError
from folders import read_only

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
BAD = 'extern "C" __global__ void k() { this is not cuda; }'




@needs_nvcc
def test_read_only_cache_keeps_the_compile_error(tmp_path, monkeypatch):
    """Saving the failed source into a read-only cache raised OSError, hiding nvcc's message."""
    import tempfile

    from tilelang.engine.cuda import nvcc_compile

    cache, tmp = tmp_path / "cache", tmp_path / "tmp"
    tmp.mkdir()
    (cache / "src").mkdir(parents=True)
    undo_src, undo = read_only(cache / "src"), read_only(cache)
    try:
        monkeypatch.setenv("TILELANG_CACHE_DIR", str(cache))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        with pytest.warns(UserWarning, match="cannot be written"):
            with pytest.raises(CompileError) as info:
                nvcc_compile(BAD, "sm_80")
        msg = str(info.value)
        assert "error" in msg and str(tmp) in msg
    finally:
        undo()
        undo_src()


# CUDA headers --------------------------------------------------------------------------------

def real_toolkit():
    from tilelang.engine.cuda import nvcc_toolkit

    nvcc = shutil.which("nvcc")
    root = nvcc_toolkit(nvcc) if nvcc else None
    if root is None or not (root / "bin" / "nvcc").exists():
        pytest.skip("needs a CUDA toolkit with nvcc")
    return root


@pytest.fixture
def no_cuda_env(monkeypatch):
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)


def test_wrapper_nvcc_on_path_leads_to_the_headers(tmp_path, monkeypatch, no_cuda_env):
    """An ``nvcc`` that is a wrapper script in a bin/ with no include/ next to it (as
    /usr/local/bin/nvcc): the headers are found through what the wrapper runs."""
    from tilelang.engine.cuda import find_cuda_include_dirs, nvcc_toolkit

    root = real_toolkit()
    wrapper = tmp_path / "bin" / "nvcc"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {root / "bin" / "nvcc"} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{wrapper.parent}{os.pathsep}{os.environ['PATH']}")
    assert shutil.which("nvcc") == str(wrapper)
    assert not (tmp_path / "include" / "cuda_runtime.h").exists()  # where a naive lookup goes
    assert nvcc_toolkit(str(wrapper)) == root.resolve()
    dirs, looked = find_cuda_include_dirs()
    assert looked[0].endswith("(nvcc)")
    assert any(os.path.exists(os.path.join(d, "cuda_runtime.h")) for d in dirs)
    assert all(d.startswith(str(root.resolve())) for d in dirs)


def test_symlinked_nvcc_is_resolved(tmp_path):
    from tilelang.engine.cuda import nvcc_toolkit

    root = real_toolkit()
    link = tmp_path / "nvcc"
    link.symlink_to(root / "bin" / "nvcc")
    assert nvcc_toolkit(str(link)) == root.resolve()


def fake_toolkit(folder):
    (folder / "include").mkdir(parents=True)
    (folder / "include" / "cuda_runtime.h").write_text("")
    return folder


def test_cuda_home_comes_first(tmp_path, monkeypatch, no_cuda_env):
    from tilelang.engine.cuda import find_cuda_include_dirs

    home = fake_toolkit(tmp_path / "cuda")
    monkeypatch.setenv("CUDA_PATH", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("CUDA_HOME", str(home))
    assert find_cuda_include_dirs()[0] == [str(home / "include")]


def test_nvidia_pip_package_headers(tmp_path, monkeypatch):
    from tilelang.engine.cuda import _pip_includes

    inc = tmp_path / "nvidia" / "cu13" / "include"
    inc.mkdir(parents=True)
    (inc / "cuda_runtime.h").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert str(inc) in _pip_includes()


# Flags ----------------------------------------------------------------------------------------

def test_both_compilers_get_the_same_flags():
    from tilelang.engine.cuda import compile_flags

    for fmt in ("cubin", "ptx"):
        nvcc = compile_flags("nvcc", "sm_90a", fmt, includes=["/inc"])
        nvrtc = compile_flags("nvrtc", "sm_90a", fmt, includes=["/inc"])
        assert "--use_fast_math" not in nvcc and "--use_fast_math" not in nvrtc
        shared = {"-std=c++17", "-I/inc", "-U__CUDA_NO_HALF_OPERATORS__", "-w"}
        assert shared <= set(nvcc) and shared <= set(nvrtc)
        fast = (compile_flags("nvcc", "sm_90a", fmt, True), compile_flags("nvrtc", "sm_90a", fmt, True))
        assert all("--use_fast_math" in f for f in fast)
    # nvcc's own depth for libcu++'s type-list unrolling (NVRTC's default makes
    # <cuda/std/type_traits> a second of parsing)
    assert "-D_CCCL_META_UNROLL_LIMIT=10" in compile_flags("nvrtc", "sm_90a", "cubin")
    assert "--gpu-architecture=compute_90a" in compile_flags("nvrtc", "sm_90a", "ptx")
    assert "--gpu-architecture=sm_90a" in compile_flags("nvrtc", "sm_90a", "cubin")


@needs_nvcc
@pytest.mark.parametrize("configs, fast", [({}, False), ({"tl.enable_fast_math": True}, True),
                                           ({"tl.enable_fast_math": "false"}, False)])
def test_fast_math_pass_config_reaches_the_compiler(monkeypatch, configs, fast):
    """TVM calls the compile hook inside ``tilelang.compile``'s pass-config scope (here without
    a GPU TVM keeps the source, so the hook is called as TVM would)."""
    from tilelang.engine import cuda
    from tilelang.transform import pass_config
    from tvm.target import Target

    seen = []
    real = cuda.compile_flags

    def spy(compiler, arch, fmt="cubin", fast_math=False, includes=()):
        seen.append(fast_math)
        return real(compiler, arch, fmt, fast_math, includes)

    monkeypatch.setattr(cuda, "compile_flags", spy)
    monkeypatch.setenv("TILELANG_CUDA_COMPILER", "nvcc")
    code = cuda.add_headers('extern "C" __global__ void k(float* a) { a[0] = expf(a[1]); }')
    with pass_config.scope(configs), cuda.building(Target({"kind": "cuda", "arch": "sm_80"})):
        cubin = cuda._compile(code)
    assert seen == [fast] and len(cubin) > 0


@needs_nvcc
def test_nvcc_compiles_when_nvrtc_cannot(monkeypatch):
    from tilelang.engine import cuda
    from tvm.target import Target

    def broken(*args, **kwargs):
        raise CompileError("NVRTC failed for sm_90a: cannot find CUDA headers")

    monkeypatch.delenv("TILELANG_CUDA_COMPILER", raising=False)
    monkeypatch.setattr(cuda, "has_nvrtc", lambda: True)
    monkeypatch.setattr(cuda, "nvrtc_compile", broken)
    code = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = 1.0f; }'
    with pytest.warns(UserWarning, match="NVRTC could not compile"):
        ptx = cuda.compile_source(code, Target({"kind": "cuda", "arch": "sm_90a"}), "ptx")
    assert b".target sm_90a" in ptx
    with pytest.raises(CompileError, match="NVRTC had failed first"):
        cuda.compile_source(BAD, Target({"kind": "cuda", "arch": "sm_90a"}), "ptx")


# TVM's process-wide hooks --------------------------------------------------------------------

PLAIN_TVM = '''
import sys, tvm
import tilelang, tilelang.language as T
from tvm.script import tirx as TS

def plain_source():
    @TS.prim_func
    def k(A: TS.Buffer((64,), "float32")):
        TS.func_attr({"global_symbol": "k"})
        for i in TS.thread_binding(64, thread="threadIdx.x"):
            A[i] = A[i] + TS.float32(1)
    mod = tvm.compile(tvm.IRModule({"k": k}),
                      target=tvm.target.Target({"kind": "cuda", "arch": "sm_80"}))
    return getattr(mod, "mod", mod).imports[0].inspect_source()

assert "tl_templates" not in plain_source()

@T.prim_func
def main(A: T.Tensor((64,), "float32")):
    with T.Kernel(1, threads=64) as bx:
        for i in T.Parallel(64):
            A[i] = A[i] + 1.0
k = tilelang.compile(main, target="cuda -arch=sm_80")
assert "tl_templates" in k.get_kernel_source()
assert "tl_templates" not in plain_source()  # the hooks were handed back
print("ok")
'''


@needs_nvcc
def test_plain_tvm_builds_get_no_tilelang_headers(tmp_path):
    import sys

    script = tmp_path / "plain.py"
    script.write_text(PLAIN_TVM)
    env = {**os.environ, "TILELANG_CUDA_COMPILER": "nvcc", "TILELANG_DISABLE_CACHE": "1"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]


@pytest.mark.gpu
def test_nvrtc_compiles_a_tma_kernel():
    """NVRTC sees no <cuda.h>, so the ``CUtensorMap`` parameters of a TMA kernel were undefined
    and every sm_90a kernel fell back to nvcc (H200 run, 2026-12-03); the headers declare it."""
    import sys
    import warnings

    import tilelang
    from tilelang.engine import cuda

    if not cuda.has_nvrtc():
        pytest.skip("needs cuda-python's NVRTC")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__))))
    from programs import matmul

    k = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, num_stages=3), out_idx=[2],
                         target="cuda -arch=sm_90a")
    src = k.get_kernel_source()
    assert "CUtensorMap" in src
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cuda.nvrtc_compile(src, "sm_90a")  # raises CompileError with NVRTC's log


class _FakeNvrtc:
    """cuda.bindings.nvrtc as far as ``nvrtc_compile`` uses it: records each program and its
    options; fails a compile when ``fail(source, options)`` says so."""

    class nvrtcResult:
        NVRTC_SUCCESS, NVRTC_ERROR_COMPILATION = 0, 6

    def __init__(self, fail):
        self.fail, self.calls, self._src = fail, [], {}

    def nvrtcVersion(self):
        return 0, 13, 0

    def nvrtcGetErrorString(self, r):
        return 0, b"error"

    def nvrtcCreateProgram(self, src, name, n, headers, names):
        prog = len(self._src)
        self._src[prog] = src.decode()
        return 0, prog

    def nvrtcCompileProgram(self, prog, n, opts):
        opts = [o.decode() for o in opts]
        self.calls.append((self._src[prog], opts))
        return (6 if self.fail(self._src[prog], opts) else 0,)

    def nvrtcGetProgramLogSize(self, prog):
        return 0, 5

    def nvrtcGetProgramLog(self, prog, log):
        return (0,)

    def nvrtcGetCUBINSize(self, prog):
        return 0, 4

    def nvrtcGetCUBIN(self, prog, out):
        return (0,)

    def nvrtcDestroyProgram(self, prog):
        return (0,)


@pytest.mark.parametrize("pch_fails", [False, True])
def test_nvrtc_precompiles_the_cuda_headers(tmp_path, monkeypatch, pch_fails):
    """NVRTC compiles the source behind the CUDA headers it includes anyway, with automatic
    precompiled headers in a folder of this process; when that compile fails, the source is
    compiled as it is (and only that failure keeps the source)."""
    import sys
    import types

    from tilelang.engine import cuda
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(cuda, "cuda_include_dirs", lambda: (["/inc"], []))
    fake = _FakeNvrtc(lambda src, opts: pch_fails and "--pch" in opts)
    bindings = types.ModuleType("cuda.bindings")
    bindings.nvrtc = fake
    monkeypatch.setitem(sys.modules, "cuda.bindings", bindings)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", fake)
    assert cuda.nvrtc_compile(BAD, "sm_90a") == b"    "
    first_src, first_opts = fake.calls[0]
    assert first_src == cuda.PCH_PREFIX + BAD
    assert "--pch" in first_opts and f"--pch-dir={cuda.pch_dir()}" in first_opts
    assert os.path.isdir(cuda.pch_dir()) and cuda.pch_dir() == cuda.pch_dir()
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as in a forked compile worker
    assert os.path.isdir(cuda.pch_dir()) and cuda.pch_dir() != first_opts[-1][len("--pch-dir="):]
    assert [c[0] for c in fake.calls[1:]] == ([BAD] if pch_fails else [])
    if pch_fails:
        assert not any("--pch" in o for o in fake.calls[1][1])
        assert not (tmp_path / "src").exists() or not list((tmp_path / "src").iterdir())


def test_precompiled_headers_are_what_the_sources_include():
    """Every header named first is one that the generated source includes anyway (TVM's
    preamble under NVRTC, or tilelang's headers), so moving it first changes nothing else."""
    import re

    from tilelang.engine import cuda

    root = os.path.join(cuda.template_dir(), "tl_templates", "cuda")
    included = set()
    for name in os.listdir(root):
        included |= set(re.findall(r"#include <([^>]+)>", open(os.path.join(root, name)).read()))
    preamble = {"cuda/std/cstdint", "cuda/std/type_traits", "cuda_fp16.h"}  # TVM's, under NVRTC
    assert set(cuda.PCH_HEADERS) <= included | preamble


@pytest.mark.gpu
def test_precompiled_headers_give_the_same_ptx(caplog):
    """The same kernels compiled by NVRTC with the CUDA headers precompiled and without: the
    PTX is identical, and the precompiled compiles did not fall back."""
    import logging
    import sys

    import tilelang
    from tilelang.engine import cuda

    if not cuda.has_nvrtc():
        pytest.skip("needs cuda-python's NVRTC")
    from cuda.bindings import nvrtc

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__))))
    from programs import matmul

    caplog.set_level(logging.DEBUG, logger="tilelang")
    for dtype in ("float16", "bfloat16"):
        k = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, num_stages=3, dtype=dtype),
                             out_idx=[2], target="cuda -arch=sm_90a")
        src = k.get_kernel_source()
        flags = cuda.compile_flags("nvrtc", "sm_90a", "ptx", False, cuda.cuda_include_dirs()[0])
        plain = cuda._nvrtc(nvrtc, src, flags, "sm_90a", "ptx")
        with_pch = cuda.nvrtc_compile(src, "sm_90a", "ptx")
        again = cuda.nvrtc_compile(src, "sm_90a", "ptx")  # reads the precompiled headers
        assert plain == with_pch == again
    assert "precompiled headers failed" not in caplog.text
