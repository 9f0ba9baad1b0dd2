"""Shared test setup: the ``gpu`` marker skips where no CUDA GPU is visible."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "python"))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Tests compile into a cache of their own, so they never read a stale user cache."""
    old = os.environ.get("TILELANG_CACHE_DIR")
    os.environ["TILELANG_CACHE_DIR"] = str(tmp_path_factory.mktemp("tilelang_cache"))
    yield
    if old is None:
        os.environ.pop("TILELANG_CACHE_DIR", None)
    else:
        os.environ["TILELANG_CACHE_DIR"] = old
