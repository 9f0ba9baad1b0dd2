"""T.reduce_* of a fragment on CUDA where each thread holds 8 or more elements of a line: the
thread folds them into 4 partial results, combined pairwise, so that its dependency chain is
4 times shorter.  The sm_90a source shows the partials; the GPU checks every kind."""

import re

import pytest
import torch

import tilelang
from programs import reduce_kernel
from test_reduce import FOLD, KINDS


def lanes(src: str) -> list[tuple[str, int]]:
    return [(n, int(k)) for n, k in re.findall(r"float (\w+_lane\w*)\[(\d+)\]", src)]


def test_long_lines_fold_into_four_partials():
    # 64x128 over 128 threads: each thread holds 16 elements of a column (dim 0) and 4 of a
    # row (dim 1)
    src = tilelang.compile(reduce_kernel("max", 64, 128, 0, True), out_idx=[2],
                           target="cuda -arch=sm_90a").get_kernel_source()
    (name, regs), = lanes(src)
    assert regs == 4 * 4  # 4 partials of each of the thread's 4 columns
    for k in range(4):  # each partial starts at the identity and is folded into
        assert f"{name}[{k}] = max({name}[{k}]" in src


def test_short_lines_fold_serially():
    src = tilelang.compile(reduce_kernel("sum", 64, 128, 1, True), out_idx=[2],
                           target="cuda -arch=sm_90a").get_kernel_source()
    assert lanes(src) == []


@pytest.mark.gpu
@pytest.mark.parametrize("clear", [True, False])
@pytest.mark.parametrize("kind", list(KINDS))
def test_gpu_values(kind, clear):
    k = tilelang.compile(reduce_kernel(kind, 64, 128, 0, clear), out_idx=[2], target="cuda")
    x, init = torch.randn(64, 128, device="cuda"), torch.randn(128, device="cuda")
    x[5, 7] = -float("inf")
    ref = KINDS[kind](x, 0)
    if not clear:
        ref = FOLD[kind](init, ref)
    torch.testing.assert_close(k(x, init), ref, rtol=1e-5, atol=1e-5)
