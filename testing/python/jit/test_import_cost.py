"""``import tilelang`` stays cheap: it never loads ``torch._dynamo`` (over a second), which the
torch-op wrapper needs only once ``torch.compile`` traces a kernel (and has loaded it)."""

import subprocess
import sys

import torch

from tilelang.jit import torch_op


def test_import_does_not_load_dynamo():
    code = "import sys, tilelang; print('torch._dynamo' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_constant_mark_is_torchs():
    """Our stand-in for ``torch.compiler.assume_constant_result`` marks a function exactly as
    torch's decorator does (if torch changes how it marks, this fails)."""
    def ours():
        pass

    def theirs():
        pass

    torch_op._assume_constant_result(ours)
    torch.compiler.assume_constant_result(theirs)
    assert vars(ours) == vars(theirs) and vars(ours)
