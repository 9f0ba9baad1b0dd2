"""Target resolution (``tilelang/engine/target.py``)."""

import pytest
import tvm
from tvm.target import Target

from tilelang.engine.target import resolve


@pytest.mark.parametrize("spec, config", [
    ("cpu", {"kind": "llvm"}),
    ("llvm", {"kind": "llvm"}),
    ("cuda -arch=sm_90a", {"kind": "cuda", "arch": "sm_90a"}),
    ("cuda -arch=sm_80 -max_num_threads=512", {"kind": "cuda", "arch": "sm_80",
                                                "max_num_threads": 512}),
    ({"kind": "cuda", "arch": "sm_86"}, {"kind": "cuda", "arch": "sm_86"}),
])
def test_resolved_targets_skip_the_dict_conversion(monkeypatch, spec, config):
    """Targets are made from FFI maps: TVM's conversion of a dict costs a fresh process about
    2 ms (an ABC test), on every cache hit of its first compile.  The target is the same."""
    want = Target(config)
    convert = tvm.target.target.convert

    def no_dicts(value):
        assert not isinstance(value, dict), "a target was made from a Python dict"
        return convert(value)

    monkeypatch.setattr(tvm.target.target, "convert", no_dicts)
    got = resolve(spec)
    assert str(got) == str(want)
    assert got.kind.name == config["kind"] and str(got.attrs.get("arch", "")) == \
        config.get("arch", "")


class _Device:
    def __init__(self, version):
        self.compute_version = version


@pytest.mark.parametrize("version, arch", [("9.0", "sm_90a"), ("8.6", "sm_86"), ("10.0", "sm_100")])
def test_visible_arch_without_torch_cuda_comes_from_tvm(monkeypatch, version, arch):
    """Before torch has set up CUDA, ``"cuda"`` reads device 0's compute capability through
    TVM's runtime (the driver alone), never torch's CUDA initialisation (about 14 ms of a
    fresh process whose compile is a cache hit)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)

    def no_torch_init(*a, **kw):
        raise AssertionError("torch.cuda was initialised to read the compute capability")

    monkeypatch.setattr(torch.cuda, "get_device_capability", no_torch_init)
    monkeypatch.setattr(tvm.runtime, "cuda", lambda i=0: _Device(version))
    assert str(resolve("cuda").attrs["arch"]) == arch


def test_visible_arch_follows_torch_once_it_has_cuda(monkeypatch):
    """Once torch has CUDA up, its current device decides (``torch.cuda.set_device`` holds)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(tvm.runtime, "cuda", lambda i=0: _Device("9.0"))
    assert str(resolve("cuda").attrs["arch"]) == "sm_80"
