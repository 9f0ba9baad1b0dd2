"""tilelang.utils.tensor: the inputs a profiler generates, and the comparison it makes."""

import pytest
import torch

from tilelang.utils.tensor import TensorSupplyType, compare, make_tensor


def auto(dtype, tdtype, n=4096):
    return make_tensor((n,), dtype, tdtype, "cpu", TensorSupplyType.Auto)


@pytest.mark.parametrize(("dtype", "tdtype"), [("float16", torch.float16),
                                               ("bfloat16", torch.bfloat16),
                                               ("float32", torch.float32)])
def test_auto_floats_are_uniform_in_minus_one_one(dtype, tdtype):
    """The public TileLang's ``Auto``: the tolerances of its tests (a float16-accumulated
    768-deep GEMM within 1e-2) are calibrated for inputs of this spread, not normal ones."""
    t = auto(dtype, tdtype)
    assert t.dtype == tdtype and t.abs().max() <= 1 and t.min() < -0.9 and t.max() > 0.9
    assert 0.25 < float(t.float().var()) < 0.42  # 1/3, where normal(0, 1) gives 1


def test_auto_float8_and_integers():
    f8 = auto("float8_e4m3", torch.float8_e4m3fn).float()
    assert f8.min() >= -128 and f8.max() <= 128 and bool((f8 == f8.round()).all())
    assert set(auto("int8", torch.int8).unique().tolist()) == {-2, -1, 0, 1, 2}
    assert set(auto("uint8", torch.uint8).unique().tolist()) == {0, 1, 2}
    assert set(auto("bool", torch.bool).unique().tolist()) == {False, True}


def test_compare_allows_the_mismatch_ratio():
    ref = torch.zeros(1000)
    out = ref.clone()
    out[:10] = 1
    compare(out, ref, 1e-2, 1e-2, 0.01)
    out[10] = 1
    with pytest.raises(AssertionError, match=r"11 of 1000 elements \(1.10%\)"):
        compare(out, ref, 1e-2, 1e-2, 0.01)
