"""Relax modules that mix tile programs with Relax's own operators and dataflow blocks."""

import pytest
import tvm
from tvm import relax

import tilelang.contrib.relax as tl_relax
from programs import example

mlp = example("relax/example_mlp.py")


def test_mlp_example_matches_relax_on_cpu():
    assert mlp.run("cpu") < 1e-4


def test_only_tile_programs_take_the_tile_pipeline():
    mod = relax.transform.LegalizeOps()(mlp.mlp_with_tile_kernels())
    kinds = {gv.name_hint: tl_relax.is_tile_program(f) for gv, f in mod.functions.items()
             if isinstance(f, tvm.tirx.PrimFunc)}
    assert kinds.pop("linear1") and kinds.pop("linear2")
    assert kinds and not any(kinds.values())  # add, relu: Relax's own PrimFuncs


def test_unmarked_tile_program_is_recognised():
    assert tl_relax.is_tile_program(mlp.matmul(32, 32, 32))


@pytest.mark.gpu
def test_mlp_example_matches_relax_on_cuda():
    assert mlp.run("cuda") < 2e-3


def test_tile_programs_survive_operator_fusion():
    """GPU Relax pipelines fuse call_tir neighbours; tile programs must stay whole."""
    mod = relax.transform.LegalizeOps()(mlp.mlp_with_tile_kernels())
    mod = relax.transform.AnnotateTIROpPattern()(mod)
    mod = relax.transform.FuseTIR()(relax.transform.FuseOps()(mod))
    names = {gv.name_hint for gv in mod.functions}
    assert {"linear1", "linear2"} <= names
    assert tl_relax.is_tile_program(mod["linear1"])
