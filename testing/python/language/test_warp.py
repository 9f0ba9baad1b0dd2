"""Warp-level language: votes, shuffles, warp reductions, block votes, bit searches and the
warp / lane indices.  CUDA source (compiled by nvcc for sm_90a and sm_80), argument checks,
the CPU backend's answers (``__ffs`` computed, collectives rejected by name), GPU runs."""

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang import tvm
from tilelang.errors import DSLError, DSLTypeError, LoweringError
from tilelang.ir_utils import find_all, substitute
from tvm.sym import Analyzer

SM90, SM80 = "cuda -arch=sm_90a", "cuda -arch=sm_80"


def _body(src: str) -> str:
    return src[src.find('extern "C" __global__'):]


def _lane_kernel(fn, dtype="int32", threads=32):
    """One value per thread: ``B[tx] = fn(tx)``."""
    @T.prim_func
    def main(B: T.Tensor((threads,), dtype)):
        with T.Kernel(1, threads=threads):
            tx = T.get_thread_binding()
            B[tx] = fn(tx)

    return main


VOTES = [
    (lambda tx: T.any_sync(tx == 0), "int32", "__any_sync((uint)4294967295, "),
    (lambda tx: T.all_sync(tx < 31, 0xFFFF), "int32", "__all_sync((uint)65535, "),
    (lambda tx: T.cast(T.ballot_sync(tx >= 7), "int64"), "int64",
     "((uint64_t)__ballot_sync((uint)4294967295, "),
    (lambda tx: T.cast(T.ballot(1), "int64"), "int64", "__ballot_sync((uint)4294967295, 1)"),
    (lambda tx: T.cast(T.activemask(), "int64"), "int64", "((uint64_t)__activemask())"),
    (lambda tx: T.cast(T.match_any_sync(tx % 4), "int32"), "int32", "__match_any_sync("),
    (lambda tx: T.cast(T.match_all_sync(7), "int32"), "int32", "__match_all_sync("),
    (lambda tx: T.syncthreads_count(tx < 16), "int32", "__syncthreads_count("),
    (lambda tx: T.syncthreads_and(tx != 0), "int32", "__syncthreads_and("),
    (lambda tx: T.syncthreads_or(tx == 0), "int32", "__syncthreads_or("),
    (lambda tx: T.shfl_sync(tx * 10, 31), "int32", "__shfl_sync((uint)4294967295, "),
    (lambda tx: T.shfl_xor(tx, 1), "int32", "__shfl_xor_sync("),
    (lambda tx: T.shfl_down(tx, 2, 16), "int32", "__shfl_down_sync("),
    (lambda tx: T.shfl_up(T.cast(tx, "float32"), 1), "float32", "__shfl_up_sync("),
    (lambda tx: T.__ffs(T.ballot_sync(tx >= 7)) - 1, "int32", "__ffsll("),
    (lambda tx: T.cast(T.__fns(T.cast(T.ballot(tx >= 7), "uint32"), 0, 3), "int32"), "int32",
     "__fns("),
]


@pytest.mark.parametrize("target", [SM90, SM80])
@pytest.mark.parametrize("fn, dtype, text", VOTES, ids=[v[2].split("(")[-2] or v[2] for v in VOTES])
def test_vote_and_shuffle_emit_the_cuda_builtin(fn, dtype, text, target):
    src = _body(tilelang.compile(_lane_kernel(fn, dtype), target=target).get_kernel_source())
    assert text in src


def test_match_all_sync_passes_a_per_thread_predicate():
    src = _body(tilelang.compile(_lane_kernel(lambda tx: T.cast(T.match_all_sync(tx), "int32")),
                                 target=SM90).get_kernel_source())
    assert "int match_pred_ptr[1];" in src
    assert "(&(match_pred_ptr[0])))" in src


@pytest.mark.parametrize("kind", ["sum", "max", "min", "bitand", "bitor"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_warp_reduce_is_a_full_warp_butterfly(kind, dtype):
    fn = getattr(T, f"warp_reduce_{kind}")
    src = _body(tilelang.compile(_lane_kernel(lambda tx: fn(T.cast(tx, dtype)), dtype),
                                 target=SM90).get_kernel_source())
    op = {"sum": "SumOp", "max": "MaxOp", "min": "MinOp", "bitand": "BitAndOp",
          "bitor": "BitOrOp"}[kind]
    assert f"tl::all_reduce<tl::{op}, 32, 1, 32>(" in src


def test_sync_warp_emits_syncwarp():
    @T.prim_func
    def main(A: T.Tensor((2,), "int32")):
        with T.Kernel(1, threads=32):
            tx = T.get_thread_binding()
            if tx == 0:
                A[0] = -1
            T.sync_warp()
            if tx == 1:
                A[1] = A[0]
            T.sync_warp(0x3)

    src = _body(tilelang.compile(main, target=SM90).get_kernel_source())
    assert "__syncwarp((uint)4294967295);" in src and "__syncwarp((uint)3);" in src


# argument checks --------------------------------------------------------------------------

PREDICATED = [T.any_sync, T.all_sync, T.ballot_sync, T.ballot, T.syncthreads_count,
              T.syncthreads_and, T.syncthreads_or]


@pytest.mark.parametrize("fn", PREDICATED, ids=lambda f: f.__name__)
def test_a_float_predicate_is_a_type_error(fn):
    with pytest.raises(DSLTypeError, match=f"T.{fn.__name__} requires an integer or boolean"):
        fn(tvm.tirx.FloatImm("float32", 0.5))


@pytest.mark.parametrize("fn", PREDICATED, ids=lambda f: f.__name__)
def test_a_wide_predicate_is_tested_against_zero(fn):
    # 1 << 32 is true: passing it to the int builtin as is would make it 0
    call = fn(tvm.tirx.Var("p", "int64"))
    assert isinstance(call, tvm.tirx.Call)
    assert str(call.args[-1]) == 'T.Cast("int32", p != T.int64(0))'


def test_mask_must_fit_32_bits():
    with pytest.raises(DSLError, match="not a 32-bit lane mask"):
        T.any_sync(1, 1 << 32)


def test_shuffle_width_must_be_a_power_of_two():
    with pytest.raises(DSLError, match="width must be a power of two"):
        T.shfl_sync(tvm.tirx.const(1, "int32"), 0, 12)


def test_bit_reductions_need_integers():
    with pytest.raises(DSLTypeError, match="T.warp_reduce_bitor: value must be an integer"):
        T.warp_reduce_bitor(tvm.tirx.FloatImm("float32", 1.0))


def test_indices_need_a_kernel():
    with pytest.raises(DSLError, match="T.get_lane_idx is only valid inside a T.Kernel"):
        T.get_lane_idx()
    with pytest.raises(DSLError, match="T.match_all_sync is only valid inside a T.Kernel"):
        T.match_all_sync(1)


def test_warps_per_group_needs_warp_size():
    with pytest.raises(DSLError, match="give warp_size too"):
        @T.prim_func
        def main(A: T.Tensor((128,), "int32")):
            with T.Kernel(1, threads=128):
                tx = T.get_thread_binding()
                A[tx] = T.get_warp_group_idx(None, 2)


# indices ----------------------------------------------------------------------------------

def _index_program(fn, threads):
    return _lane_kernel(lambda tx: fn(), "int32", threads)


@pytest.mark.parametrize("fn, want", [
    (lambda: T.get_lane_idx(), lambda t: t % 32),
    (lambda: T.get_lane_idx(64), lambda t: t % 64),
    (lambda: T.get_warp_idx(), lambda t: t // 32),
    (lambda: T.get_warp_idx(20), lambda t: t // 20),
    (lambda: T.get_warp_idx_sync(16), lambda t: t // 16),
    (lambda: T.get_warp_group_idx(), lambda t: t // 128),
    (lambda: T.get_warp_group_idx(32, 5), lambda t: t // 160),
    (lambda: T.cast(T.shuffle_elect(64), "int32"), lambda t: int(t % 64 == 0)),
    (lambda: T.cast(T.shuffle_elect(0), "int32"), lambda t: int(t == 0)),
])
def test_index_of_every_thread(fn, want):
    """The index expression, evaluated for threads of a 320-thread block."""
    func = _index_program(fn, 320)
    (store,) = find_all(func.body, tvm.tirx.BufferStore)
    (tx,) = [a.node.var for a in find_all(func.body, tvm.tirx.AttrStmt,
                                          lambda a: a.attr_key == "thread_extent"
                                          and a.node.thread_tag == "threadIdx.x")]
    ana = Analyzer()
    for t in (0, 1, 31, 32, 63, 64, 127, 128, 159, 160, 200, 319):
        got = ana.simplify(substitute(store.value, {tx: tvm.tirx.const(t, "int32")}))
        assert int(got.value) == want(t), (t, got)


def test_indices_linearize_a_multi_dimensional_block():
    @T.prim_func
    def main(A: T.Tensor((4, 16), "int32")):
        with T.Kernel(1, threads=(16, 4)):
            tx, ty = T.get_thread_binding(0), T.get_thread_binding(1)
            A[ty, tx] = T.get_warp_idx() * 100 + T.get_lane_idx()

    src = _body(tilelang.compile(main, target=SM90).get_kernel_source())
    assert "threadIdx.y) * 16)" in src


# CPU --------------------------------------------------------------------------------------

def test_ffs_on_the_cpu():
    @T.prim_func
    def main(A: T.Tensor((8,), "int32"), B: T.Tensor((8,), "int64"),
             C: T.Tensor((8,), "int32"), D: T.Tensor((8,), "int32")):
        with T.Kernel(1, threads=1):
            for i in T.Parallel(8):
                C[i] = T.__ffs(A[i])
                D[i] = T.__ffs(B[i])

    k = tilelang.compile(main, target="cpu")
    a = torch.tensor([0, 1, 2, 12, -1, 1 << 30, -(1 << 31), 96], dtype=torch.int32)
    b = torch.tensor([0, 1, 1 << 40, -(1 << 63), 3 << 33, 7, -2, 1 << 62], dtype=torch.int64)
    c = torch.zeros(8, dtype=torch.int32)
    d = torch.zeros(8, dtype=torch.int32)
    k(a, b, c, d)

    def ffs(x, bits):
        x &= (1 << bits) - 1
        return 0 if x == 0 else (x & -x).bit_length()

    assert c.tolist() == [ffs(int(x), 32) for x in a]
    assert d.tolist() == [ffs(int(x), 64) for x in b]


@pytest.mark.parametrize("fn, name", [
    (lambda tx: T.any_sync(tx == 0), "T.any_sync"),
    (lambda tx: T.warp_reduce_sum(tx), "T.warp_reduce_sum"),
    (lambda tx: T.shfl_sync(tx, 0), "T.shfl_sync"),
    (lambda tx: T.syncthreads_count(tx < 4), "T.syncthreads_count"),
    (lambda tx: T.cast(T.__fns(T.uint32(5), 0, 1), "int32"), "T.__fns"),
])
def test_the_cpu_rejects_warp_collectives_by_name(fn, name):
    with pytest.raises(LoweringError, match=f"{name} needs the threads of a warp"):
        tilelang.compile(_lane_kernel(fn), target="cpu")


def test_a_collective_without_thread_index_is_rejected_too():
    @T.prim_func
    def main(A: T.Tensor((4,), "float32")):
        with T.Kernel(1, threads=32):
            A[0] = T.warp_reduce_max(A[1])

    with pytest.raises(LoweringError, match="T.warp_reduce_max"):
        tilelang.compile(main, target="cpu")


# GPU --------------------------------------------------------------------------------------

@pytest.mark.gpu
def test_votes_on_gpu():
    cases = [
        (lambda tx: T.any_sync(tx == 5), "int32", lambda t: 1),
        (lambda tx: T.all_sync(tx != 5), "int32", lambda t: 0),
        (lambda tx: T.cast(T.ballot_sync(tx >= 7), "int64"), "int64", lambda t: 0xFFFFFF80),
        (lambda tx: T.cast(T.activemask(), "int64"), "int64", lambda t: 0xFFFFFFFF),
        (lambda tx: T.cast(T.match_any_sync(tx // 16), "int64"), "int64",
         lambda t: 0xFFFF << (16 * (t // 16))),
        (lambda tx: T.cast(T.match_all_sync(3), "int64"), "int64", lambda t: 0xFFFFFFFF),
        (lambda tx: T.syncthreads_count(tx < 16), "int32", lambda t: 16),
        (lambda tx: T.shfl_sync(tx * 10, 31), "int32", lambda t: 310),
        (lambda tx: T.shfl_xor(tx, 1), "int32", lambda t: t ^ 1),
        (lambda tx: T.__ffs(T.ballot_sync(tx >= 7)) - 1, "int32", lambda t: 7),
        (lambda tx: T.cast(T.__fns(T.cast(T.ballot(tx >= 7), "uint32"), 0, 3), "int32"),
         "int32", lambda t: 9),
        (lambda tx: T.get_lane_idx() + 100 * T.get_warp_idx(), "int32", lambda t: t),
    ]
    for fn, dtype, want in cases:
        k = tilelang.compile(_lane_kernel(fn, dtype), target="cuda")
        out = torch.zeros(32, dtype=getattr(torch, dtype), device="cuda")
        k(out)
        assert out.cpu().tolist() == [want(t) for t in range(32)], fn


@pytest.mark.gpu
@pytest.mark.parametrize("kind", ["sum", "max", "min", "bitand", "bitor"])
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32"])
def test_warp_reduce_on_gpu(kind, dtype):
    if dtype == "float32" and kind.startswith("bit"):
        pytest.skip("bit reductions take integers")

    @T.prim_func
    def main(x: T.Tensor((64,), dtype)):
        with T.Kernel(1, threads=64):
            tx = T.get_thread_binding()
            x[tx] = getattr(T, f"warp_reduce_{kind}")(x[tx])

    k = tilelang.compile(main, target="cuda")
    if dtype == "float32":
        a = torch.randint(-50, 50, (64,), device="cuda").float()
    else:
        a = torch.randint(1, 1 << 20, (64,), device="cuda", dtype=getattr(torch, dtype))
    want = a.clone().view(2, 32)
    red = {"sum": lambda v: v.sum(), "max": lambda v: v.max(), "min": lambda v: v.min(),
           "bitand": lambda v: _fold(v, lambda p, q: p & q),
           "bitor": lambda v: _fold(v, lambda p, q: p | q)}[kind]
    want = torch.stack([torch.full_like(r, red(r)) for r in want]).view(64)
    k(a)
    assert torch.equal(a, want)


def _fold(v, f):
    out = v[0]
    for x in v[1:]:
        out = f(out, x)
    return out
