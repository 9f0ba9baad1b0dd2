"""tilelang.utils.tvm_compat: names of older TVMs that public programs use on TVM 0.27."""

import tvm

import tilelang  # noqa: F401  (installs the compatibility names)
import tilelang.language as T


@T.prim_func
def _kernel(A: T.Tensor((4,), "float64")):
    with T.Kernel(1):
        value = T.alloc_var("float64", init=1e300)
        for i in T.serial(4):
            A[i] = value + 1.5


def test_post_order_visit_reaches_every_node_children_first():
    seen = []
    tvm.tirx.stmt_functor.post_order_visit(_kernel.body, seen.append)
    floats = [n.value for n in seen if isinstance(n, tvm.tirx.FloatImm)]
    assert 1e300 in floats and 1.5 in floats
    kinds = [type(n).__name__ for n in seen]
    assert "For" in kinds and "BufferStore" in kinds
    # a statement comes after everything under it
    assert kinds.index("BufferStore") < kinds.index("For")


def test_stmt_functor_is_importable_as_a_module():
    from tvm.tirx.stmt_functor import post_order_visit

    assert post_order_visit is tvm.tirx.stmt_functor.post_order_visit
