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
