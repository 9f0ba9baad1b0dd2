"""LayoutInference asks the ops for their layout demands (``TileOp.infer_layout``,
``TileOp.propagate_layout``) and knows no op class: an op it has never heard of is honoured."""

import pytest
import tvm_ffi
from tvm import tirx

import tilelang.language as T
from tilelang.errors import LoweringError
from tilelang.layout import codec
from tilelang.layout.fragment import elementwise
from tilelang.ops import region as R
from tilelang.ops.base import TileOp, register
from tilelang.transform import LayoutInference

from cuda_helpers import SM80
from helpers import bind


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
