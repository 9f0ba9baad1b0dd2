"""LayoutInference asks the ops for their layout demands (``TileOp.infer_layout``,
``TileOp.propagate_layout``) and knows no op class: an op it has never heard of is honoured.
A gemm's plan is made there once and recorded in the op for the lowering."""

import pytest
import tvm
import tvm_ffi
from tvm import tirx

import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.layout import codec
from tilelang.layout.fragment import elementwise, mma_accumulator
from tilelang.ops import decode
from tilelang.ops.base import TileOp, register
from tilelang.ops.gemm import Gemm, MmaPlan, WgmmaPlan, decode_plan, encode_plan
from tilelang.transform import LayoutInference, LowerTileOps, pass_config

from cuda_helpers import SM80
from helpers import bind, calls_of


@register
class _Pin(TileOp):
    """A test op: fixes ``buffer`` to the element-wise layout of one element per register."""

    name = "tl.test_pin_layout"
    printer = "test_pin_layout"
    fields = ("buffer",)

    def infer_layout(self, ctx):
        shape = [int(s) for s in self.buffer.shape]
        ctx.demand(self.buffer, elementwise(shape, ctx.num_threads, vec=1), "test_pin_layout")


@register
class _Mirror(TileOp):
    """A test op: ``dst`` takes ``src``'s layout once it is known."""

    name = "tl.test_mirror_layout"
    printer = "test_mirror_layout"
    fields = ("src", "dst")

    def propagate_layout(self, ctx):
        if ctx.layout(self.src) is not None:
            ctx.demand(self.dst, ctx.layout(self.src), "test_mirror_layout")


def _kernel(second_pin=False):
    pin = lambda b: _Pin(buffer=b).to_call()  # noqa: E731
    mirror = lambda a, b: _Mirror(src=a, dst=b).to_call()  # noqa: E731

    @T.prim_func
    def main(X: T.Tensor((64, 64), "float32")):
        with T.Kernel(1, threads=128) as bx:
            a = T.alloc_fragment((64, 64), "float32")
            b = T.alloc_fragment((64, 64), "float32")
            T.evaluate(mirror(a, b))
            T.evaluate(pin(a))
            if second_pin:
                T.annotate_layout({b: elementwise([64, 64], 128, vec=4)})
            for i, j in T.Parallel(64, 64):
                X[i, j] = a[i, j] + b[i, j]

    return main


def _layouts(func):
    out = {}

    def on_alloc(s):
        if "tl.layout" in s.annotations:
            out[s.buffer.name] = codec.decode(s.annotations["tl.layout"])

    tvm_ffi.structural_walk(func.body, (tirx.AllocBuffer, on_alloc))
    return out


def test_an_unknown_op_states_and_propagates_its_demands():
    f = LayoutInference()(bind(_kernel(), SM80))["main"]
    pinned = elementwise([64, 64], 128, vec=1)
    lay = _layouts(f)
    # without the op's demand the default (4 elements per vector for float32) would win
    assert not pinned.same_as(elementwise([64, 64], 128, vec=4))
    assert lay["a"].same_as(pinned) and lay["b"].same_as(pinned)


def test_a_conflict_with_an_op_demand_names_the_op():
    with pytest.raises(LoweringError, match=r"(?s)fragment b: T.annotate_layout gives .* but "
                                            r"test_mirror_layout needs .*T.evaluate\(mirror"):
        LayoutInference.run(bind(_kernel(second_pin=True), SM80)["main"])


# The gemm's plan: chosen once by LayoutInference, recorded in the op, read by the lowering ----
SM90A = tvm.target.Target({"kind": "cuda", "arch": "sm_90a"})


def _gemm_kernel(threads=128, in_group=False):
    @T.prim_func
    def main(A: T.Tensor((128, 64), "float16"), B: T.Tensor((64, 128), "float16"),
             C: T.Tensor((128, 128), "float32")):
        with T.Kernel(1, threads=threads) as bx:
            A_s = T.alloc_shared((128, 64), "float16")
            B_s = T.alloc_shared((64, 128), "float16")
            C_f = T.alloc_fragment((128, 128), "float32")
            T.copy(A, A_s)
            T.copy(B, B_s)
            if in_group:
                with T.ws(0):
                    T.gemm(A_s, B_s, C_f, clear_accum=True)
            else:
                T.gemm(A_s, B_s, C_f, clear_accum=True)
            T.copy(C_f, C)

    return main


def _gemms(func):
    out = []
    tvm_ffi.structural_walk(func.body, (tirx.Evaluate, lambda s: out.append(decode(s))))
    return [op for op in out if isinstance(op, Gemm)]


def test_layout_inference_records_the_gemm_plan_its_layouts_follow():
    mod = bind(_gemm_kernel(), SM80)
    assert _gemms(mod["main"])[0].plan == ""  # unplanned: left out of the call
    assert "T.gemm(" in mod.script() and "mma:" not in mod.script()
    f = LayoutInference()(mod)["main"]
    plan = decode_plan(_gemms(f)[0].plan)
    assert plan == MmaPlan(2, 2)
    acc = _layouts(f)["C_f"]
    assert acc.same_as(mma_accumulator(128, 128, plan.warps_m, plan.warps_n))
    f90 = LayoutInference()(bind(_gemm_kernel(), SM90A))["main"]
    plan = decode_plan(_gemms(f90)[0].plan)
    assert isinstance(plan, WgmmaPlan) and (plan.wg_m, plan.wg_n, plan.n_inst) == (1, 1, 128)
    assert decode_plan(encode_plan(plan)) == plan


def test_the_lowering_follows_the_recorded_plan():
    """The lowering reads the plan instead of planning again: a config that changes after
    layout inference cannot split layouts and instructions."""
    mod = LayoutInference()(bind(_gemm_kernel(), SM90A))
    with pass_config.scope({"tl.disable_wgmma": True}):
        f = LowerTileOps()(mod)["main"]
    names = calls_of(f, "tl.device.")
    assert "tl.device.wgmma_ss" in names
    assert not [n for n in names if n.startswith("tl.device.gemm")]  # gemm_ss: mma.sync


def test_a_gemm_lowered_without_a_plan_or_on_other_warps_is_refused():
    with pytest.raises(LoweringError, match="no plan: LayoutInference records it"):
        LowerTileOps.run(bind(_gemm_kernel(), SM80)["main"])
    # a gemm in T.ws(0) whose accumulator the whole block then copies: the fragment would be
    # spread over two different sets of threads
    with pytest.raises(LoweringError, match=r"fragment C_f is used by two thread groups: "
                                            r"threads 0..127 in T.gemm .*threads 0..255 in "
                                            r"T.copy"):
        LayoutInference.run(bind(_gemm_kernel(threads=256, in_group=True), SM80)["main"])
