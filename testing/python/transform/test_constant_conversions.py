"""FoldConstantConversions: float -> integer conversions made constant by unrolling or by a
loop of one iteration."""

import re
import shutil

import pytest

import tilelang
import tilelang.language as T


def _unrolled(dst):
    @T.prim_func
    def main(O: T.Tensor((9,), dst)):
        with T.Kernel(1, threads=1):
            for i in T.unroll(8):
                O[i] = T.cast(T.float32(i - 4) * 1e9 + 0.5, dst)
            for j in T.serial(1):  # the simplifier substitutes j = 0
                O[j + 8] = T.cast(T.float32(j + 5) * 1e9, dst)

    return main


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dst", ["int8", "int32", "uint16"])
def test_unrolled_constants_convert_as_on_the_cpu(dst):
    # TVM's simplifier folded -3e9 -> int32 with its raw check ("exceeds range of int32")
    cpu = tilelang.compile(_unrolled(dst), out_idx=[0], target="cpu")().tolist()
    src = tilelang.compile(_unrolled(dst), out_idx=[0], target="cuda -arch=sm_90a")
    stores = re.findall(r"O_ptr\[(\d)\] = (?:\(\w[\w ]*\))?\(?(-?\d+)", src.get_kernel_source())
    assert sorted((int(i), int(v)) for i, v in stores) == list(enumerate(cpu))
