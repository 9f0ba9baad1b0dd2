"""Folder helpers shared by the tests of the kernel cache and the CUDA compile step."""

import os
import subprocess

import pytest


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
