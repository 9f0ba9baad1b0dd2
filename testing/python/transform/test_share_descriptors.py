"""ShareDescriptors: a run of wgmma instructions computes each operand descriptor once, and
leaves every descriptor value as the instruction had it."""

import os
import sys

import tvm
from tvm import tirx

import tilelang
from tilelang.device import wgmma
from tilelang.device.effects import Mechanism, device_op_of, effect_of
from tilelang.engine import pipeline
from tilelang.ir_utils import find_all

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from programs import matmul  # noqa: E402

SM90 = "cuda -arch=sm_90a"


def lowered(monkeypatch, share: bool):
    """The matmul (two consumer warp groups) after tilelang's passes, with or without
    ShareDescriptors."""
    if not share:
        passes = pipeline.tile_passes
        monkeypatch.setattr(pipeline, "tile_passes", lambda: [
            p for p in passes() if p.info.name != "tl.ShareDescriptors"])
    mod = tilelang.lower(matmul(256, 256, 256, 128, 128, 64, threads=256, num_stages=2),
                         target=SM90, stage="tile")
    return mod[mod.get_global_vars()[0]]


def wgmmas(stmt):
    return find_all(stmt, tvm.ir.Call, lambda c: (effect_of(c) is not None and
                                                  effect_of(c).completes_on ==
                                                  Mechanism.WGMMA_GROUP))


def descriptors(node):
    return find_all(node, tvm.ir.Call, lambda c: device_op_of(c) is wgmma.DESC)


def test_each_operand_descriptor_is_bound_once_per_run(monkeypatch):
    after = lowered(monkeypatch, share=True)
    before = lowered(monkeypatch, share=False)
    # before: every wgmma builds its two descriptors (the tile's address is in its arguments)
    assert wgmmas(before.body) and all(len(descriptors(c)) == 2 for c in wgmmas(before.body))
    binds = find_all(after.body, tirx.Bind, lambda b: str(b.value.ty) == "uint64")
    assert sorted({b.var.name for b in binds}) == ["A_s_desc", "B_s_desc"]
    by_var = {b.var.name: b.value for b in binds}
    for c in wgmmas(after.body):
        assert not descriptors(c)  # the instruction takes the binding (plus a constant)
        names = {v.name for v in find_all(c, tirx.Var) if v.name.endswith("_desc")}
        assert names == {"A_s_desc", "B_s_desc"}
    # the bound values are the first instruction's own descriptors
    first = descriptors(wgmmas(before.body)[0])
    for name in ("A_s_desc", "B_s_desc"):
        assert str(by_var[name]) in {str(d) for d in first}


def test_the_kernel_compiles_with_the_bindings():
    src = tilelang.compile(matmul(256, 256, 256, 128, 128, 64, threads=256, num_stages=2),
                           out_idx=[2], target=SM90).get_kernel_source()
    assert src.count("uint64_t A_s_desc = tl::wgmma_desc(") == 1
