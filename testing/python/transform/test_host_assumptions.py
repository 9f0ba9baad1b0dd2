"""A ``T.assume`` over the kernel's parameters and tensor sizes, holding for the whole kernel, is
checked on every call (``RuntimeError("Assume: ...")``) before anything runs; assumptions
about loop variables, thread indices, buffer contents or inside branches stay compile-time
facts (``CheckHostAssumptions``)."""

import pytest
import torch
import tvm
import tvm_ffi
from tvm import tirx

import tilelang
import tilelang.language as T
from tilelang.transform.host_assumptions import CheckHostAssumptions


def fill(cond_kind: str):
    N = T.dynamic("N")

    @T.prim_func
    def main(A: T.Tensor((N,), T.float32), lo: T.int32):
        with T.Kernel(1, threads=32):
            if cond_kind == "size":
                T.assume(N % 4 == 0)
            elif cond_kind == "scalar":
                T.assume(lo >= 0 and lo < N)
            elif cond_kind == "branch":
                if lo > 0:
                    T.assume(N % 4 == 0)
            for i in T.Parallel(32):
                if i < N:
                    A[i] = T.float32(1)
            for i in T.serial(4):
                T.assume(lo + i >= 0)  # a loop variable: a compile-time fact only

    return main


def _asserts(func) -> list:
    mod = CheckHostAssumptions()(tvm.IRModule({"main": func}))
    found = []
    tvm_ffi.structural_walk(mod["main"].body, (tirx.AssertStmt, found.append))
    return [a.message_parts[0].value for a in found]


def test_only_unconditional_host_assumptions_become_checks():
    assert _asserts(fill("size")) == ["Assume: N % 4 == 0"]
    assert len(_asserts(fill("scalar"))) == 1 and "lo" in _asserts(fill("scalar"))[0]
    assert _asserts(fill("branch")) == []
    assert _asserts(fill("none")) == []


def test_size_assumption_is_checked_on_each_call_cpu():
    k = tilelang.compile(fill("size"), target="cpu")
    a = torch.zeros(8)
    k(a, 0)
    assert bool((a == 1).all())
    bad = torch.zeros(6)
    with pytest.raises(RuntimeError, match=r"Assume: N % 4 == 0"):
        k(bad, 0)
    assert bool((bad == 0).all())  # nothing ran


def test_scalar_assumption_is_checked_cpu():
    k = tilelang.compile(fill("scalar"), target="cpu")
    k(torch.zeros(8), 3)
    with pytest.raises(RuntimeError, match=r"Assume: "):
        k(torch.zeros(8), 9)


def test_branch_assumption_is_not_checked_cpu():
    k = tilelang.compile(fill("branch"), target="cpu")
    k(torch.zeros(6), 1)  # compile-time fact only: no call-time check


def test_check_is_in_the_cuda_host_code():
    k = tilelang.compile(fill("size"), target="cuda -arch=sm_90a")
    assert "Assume: N % 4 == 0" in k.get_host_source()
    assert "Assume" not in k.get_kernel_source()


@pytest.mark.gpu
def test_size_assumption_is_checked_gpu():
    k = tilelang.compile(fill("size"), target="cuda")
    k(torch.zeros(8, device="cuda"), 0)
    with pytest.raises(RuntimeError, match=r"Assume: N % 4 == 0"):
        k(torch.zeros(6, device="cuda"), 0)
