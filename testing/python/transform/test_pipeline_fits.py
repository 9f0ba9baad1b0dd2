"""A T.Pipelined loop whose stage copies would not fit in shared memory gets as many stages as
fit (a debug log says so) instead of failing in PlanSharedMemory; so does a warp-specialized
loop's ring, and the kernel stays specialized."""

import logging
import os
import sys

import tilelang
from tilelang.ir_utils import find_all
from tvm import tirx

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import matmul  # noqa: E402

SM90 = "cuda -arch=sm_90a"


def staged_depths(prog, tile_elems=None, **cfg):
    """Copies of A_s and B_s in the planned shared memory (their views' elements over one
    tile's)."""
    mod = tilelang.lower(prog, target=SM90, stage="tile", pass_configs=cfg or None)
    f = mod[mod.get_global_vars()[0]]
    tile_elems = tile_elems or {"A_s": BIG["bM"] * BIG["bK"], "B_s": BIG["bK"] * BIG["bN"]}
    return {d.buffer.name: int(d.buffer.shape[0]) // tile_elems[d.buffer.name]
            for d in find_all(f.body, tirx.DeclBuffer) if d.buffer.name in tile_elems}, f


# 128 x 128 + 128 x 256 fp16 tiles: 96 KB a stage; 3 stages (288 KB) exceed sm_90a's 227 KB
BIG = dict(M=512, N=512, K=1024, bM=128, bN=256, bK=128)


def test_stages_shrink_to_fit(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    depths, _ = staged_depths(matmul(*BIG.values(), num_stages=3, threads=256),
                              **{"tl.disable_warp_specialized": True})
    assert depths == {"A_s": 2, "B_s": 2}
    assert "3 stages do not fit" in caplog.text and "2 stages" in caplog.text


def test_warp_specialized_ring_shrinks_to_fit(caplog):
    caplog.set_level(logging.DEBUG, logger="tilelang")
    depths, f = staged_depths(matmul(*BIG.values(), num_stages=3, threads=256))
    assert "warp specialization of main: loop over k: 3 stages do not fit" in caplog.text
    assert "the stage rings would need" not in caplog.text
    assert depths == {"A_s": 2, "B_s": 2}
    k = tilelang.compile(matmul(*BIG.values(), num_stages=3, threads=256), out_idx=[2],
                         target=SM90)
    src = k.get_kernel_source()
    assert "__launch_bounds__(384)" in src and "setmaxnreg" in src


def test_stages_that_fit_are_kept():
    depths, _ = staged_depths(matmul(512, 512, 512, 128, 128, 64, num_stages=4, threads=256),
                              tile_elems={"A_s": 128 * 64, "B_s": 64 * 128})
    assert depths == {"A_s": 4, "B_s": 4}
