"""What the GPU tests need to know about the machine's GPU."""


def has_sm90() -> bool:
    """Whether torch sees a CUDA GPU of compute capability 9.x or newer (TMA, WGMMA)."""
    try:
        import torch
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
    except Exception:
        return False


def run_script(prelude: str, code: str, timeout: int = 240) -> None:
    """Run ``prelude + code`` from a file in a fresh interpreter (a file, since a
    ``T.prim_func`` needs its source), so that a kernel that hangs on a wrong barrier count
    only costs ``timeout`` seconds; fails the test on a non-zero exit or a hang."""
    import os
    import subprocess
    import sys
    import tempfile
    import textwrap

    import pytest

    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "gpu_case.py")
        with open(script, "w") as f:
            f.write(textwrap.dedent(prelude) + textwrap.dedent(code))
        try:
            proc = subprocess.run([sys.executable, script], capture_output=True, text=True,
                                  timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"kernel did not finish within {timeout} s (barrier hang?)")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
