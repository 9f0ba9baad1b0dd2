"""The ordered pipeline: tilelang.lower, the registered TVM pipeline, IR dumps."""

import os

import torch
import tvm

import tilelang
from tilelang.engine import pipeline

from helpers import copy_kernel


def test_lower_returns_module_ready_for_codegen():
    mod = tilelang.lower(copy_kernel(), target="cpu")
    assert isinstance(mod, tvm.IRModule)
    assert "main" in [gv.name_hint for gv in mod.get_global_vars()]


def test_lower_tile_stage_keeps_loops_visible():
    mod = tilelang.lower(copy_kernel(), target="cpu", stage="tile")
    assert "for block in T.parallel(3)" in mod["main"].script()


def test_pipeline_is_registered_with_tvm():
    from tvm.tirx import compilation_pipeline as cp

    assert pipeline.NAME in cp.PIPELINE_MAP
    lib = tvm.compile(tvm.IRModule({"main": copy_kernel(M=32)}), target=tvm.target.Target(
        {"kind": "llvm"}), tir_pipeline=pipeline.NAME)
    a, b = torch.randn(32, 8), torch.empty(32, 8)
    lib["main"](a, b)
    torch.testing.assert_close(b, a + 2)


def test_dump_ir_after_every_pass(tmp_path):
    tilelang.lower(copy_kernel(), target="cpu",
                   pass_configs={tilelang.PassConfigKey.TL_DUMP_IR_DIR: str(tmp_path)})
    names = sorted(os.listdir(tmp_path))
    assert names[0] == "00_input.py"
    assert any("LowerTileOps" in n for n in names)
    assert any("MakePackedAPI" in n for n in names)
    assert len(names) == 1 + len(pipeline.tile_passes()) + len(pipeline.stock_passes())


def test_dump_ir_env_var(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_DUMP_IR", str(tmp_path / "ir"))
    tilelang.compile(copy_kernel(), out_idx=[1], target="cpu")
    assert any(p.name.endswith("_tl_LowerTileOps.py") for p in (tmp_path / "ir").iterdir())


def test_public_pass_config_keys_are_accepted():
    keys = tilelang.PassConfigKey
    configs = {keys.TL_DISABLE_THREAD_STORAGE_SYNC: True, keys.TL_DISABLE_FAST_MATH: True,
               keys.TL_PTXAS_REGISTER_USAGE_LEVEL: 10, keys.TL_ENABLE_ASYNC_COPY: True}
    kernel = tilelang.compile(copy_kernel(M=32), out_idx=[1], target="cpu", pass_configs=configs)
    a = torch.randn(32, 8)
    torch.testing.assert_close(kernel(a), a + 2)
