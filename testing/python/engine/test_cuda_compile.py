"""The CUDA compile step: where failed sources go, how the CUDA headers are found, which
flags each compiler gets, and that TVM's process-wide hooks serve tilelang's builds only."""

import os
import shutil
import subprocess

import pytest

from tilelang.errors import CompileError

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
BAD = 'extern "C" __global__ void k() { this is not cuda; }'


def read_only(folder):
    """Make ``folder`` unwritable, even for root (chattr +i); returns the undo, or skips."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    undo = lambda: folder.chmod(0o755)  # noqa: E731
    if os.access(folder, os.W_OK):  # root: permissions do not apply
        if subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            undo()
            pytest.skip("cannot make a folder read-only here")
        undo = lambda: (subprocess.run(["chattr", "-i", str(folder)]),  # noqa: E731
                        folder.chmod(0o755))
    return undo


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
