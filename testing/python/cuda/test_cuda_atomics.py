"""Atomics on CUDA: the sm_90a PTX has the instructions (packed vector adds, fences for memory
orders, one update per element), and on the GPU the results match the CPU backend."""

import re
import shutil

import pytest
import torch

import tilelang

from atomic_programs import addx, load_store, max_min_prev, simt_histogram, slots, ticket

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def ptx_and_source(func):
    k = tilelang.compile(func, target="cuda -arch=sm_90a")
    return k.get_ptx(), k.get_kernel_source()


def instructions(ptx):
    return set(re.findall(r"\b(atom\.[\w.]+|membar\.\w+|fence\.[\w.]+)", ptx))


@needs_nvcc
@pytest.mark.parametrize("lanes,dtype,packed", [
    (2, "float16", "atom.add.noftz.f16x2"), (4, "bfloat16", "atom.add.noftz.bf16x2"),
    (2, "float32", "atom.global.add.v2.f32"), (4, "float32", "atom.global.add.v4.f32")])
def test_vector_adds_use_packed_atomics(lanes, dtype, packed):
    ptx, src = ptx_and_source(addx(lanes, 4, 16, dtype))
    assert packed in instructions(ptx)
    assert re.search(rf"AtomicAddx{lanes}\(.*, 0\);", src)
    assert "membar" not in ptx and "fence" not in ptx  # relaxed: no fences


@needs_nvcc
def test_memory_orders_become_fences():
    ptx, src = ptx_and_source(addx(4, 4, 16, "float32", order="release"))
    assert re.search(r"AtomicAddx4\(.*, 3\);", src) and "membar.gl" in ptx
    ptx, src = ptx_and_source(load_store(4))
    assert re.search(r"AtomicStore\(.*, 3\);", src) and re.search(r"AtomicLoad\(.*, 2\)\)", src)
    assert "membar.gl" in ptx


@needs_nvcc
def test_return_prev_in_a_replicated_loop_is_made_once_per_element():
    # 16 elements over 32 threads: threads 16..31 are replicas, which must not add again
    ptx, src = ptx_and_source(slots(16))
    body = src[src.index("main_kernel("):]
    call = body.index("AtomicAddRet(")
    assert "threadIdx.x) >> 4) == 0" in body[:call], body


@needs_nvcc
def test_block_level_return_prev_reaches_every_thread():
    ptx, src = ptx_and_source(ticket(5))
    body = src[src.index("main_kernel("):]
    assert re.search(r"if \(\(\(int\)threadIdx.x\) == 0\) \{\s*tl::store_to", body), body
    assert "__syncthreads()" in body


@needs_nvcc
def test_simt_kernels_update_per_thread():
    ptx, src = ptx_and_source(simt_histogram(100, 8))
    body = src[src.index("main_kernel("):]
    assert "AtomicAdd(" in body and "== 0)" not in body


# on the GPU ---------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_ticket_and_slots():
    c = torch.zeros(1, dtype=torch.int32, device="cuda")
    out = torch.zeros(5, 64, dtype=torch.int32, device="cuda")
    tilelang.compile(ticket(5), target="cuda")(c, out)
    assert int(c) == 5
    assert sorted(out[:, 0].tolist()) == list(range(5)) and (out == out[:, :1]).all()
    x = torch.tensor([3, -1, 2, 0, 5, 7, -2, 1] * 2, dtype=torch.int32, device="cuda")
    pos = torch.zeros(16, dtype=torch.int32, device="cuda")
    cnt = torch.zeros(1, dtype=torch.int32, device="cuda")
    tilelang.compile(slots(16), target="cuda")(x, pos, cnt)
    assert int(cnt) == int((x > 0).sum())
    assert sorted(pos[x > 0].tolist()) == list(range(int(cnt)))


@pytest.mark.gpu
def test_gpu_simt_histogram_and_max_min():
    x = torch.randint(0, 8, (100,), dtype=torch.int32, device="cuda")
    h = torch.zeros(8, dtype=torch.int32, device="cuda")
    tilelang.compile(simt_histogram(100, 8), target="cuda")(x, h)
    assert torch.equal(h.cpu(), torch.bincount(x.cpu(), minlength=8).int())
    for dtype in ("float32", "float16", "bfloat16"):
        t = getattr(torch, dtype)
        v = torch.randn(6, device="cuda").to(t)
        m = torch.zeros(2, device="cuda").to(t)
        old = torch.zeros(6, 2, device="cuda").to(t)
        tilelang.compile(max_min_prev(6, dtype), target="cuda")(v, m, old)
        assert m[0] == max(v.max(), 0) and m[1] == min(v.min(), 0)


@pytest.mark.gpu
@pytest.mark.parametrize("lanes,dtype", [(2, "float16"), (2, "bfloat16"), (2, "float32"),
                                         (4, "float32"), (4, "float16")])
def test_gpu_addx_matches_cpu(lanes, dtype):
    t = getattr(torch, dtype)
    a = torch.randn(4, 16).to(t)
    b = torch.randn(4, 16).to(t)
    cpu_b = b.clone()
    tilelang.compile(addx(lanes, 4, 16, dtype), target="cpu")(a, cpu_b)
    gpu_b = b.cuda()
    tilelang.compile(addx(lanes, 4, 16, dtype, order="acq_rel"), target="cuda")(a.cuda(), gpu_b)
    torch.testing.assert_close(gpu_b.cpu().float(), cpu_b.float(), atol=5e-2, rtol=2e-2)


@pytest.mark.gpu
def test_gpu_load_store():
    flag = torch.zeros(4, dtype=torch.int32, device="cuda")
    seen = torch.zeros(4, dtype=torch.int32, device="cuda")
    tilelang.compile(load_store(4), target="cuda")(flag, seen)
    assert flag.tolist() == [1, 2, 3, 4] and seen.tolist() == [1, 2, 3, 4]


# public helper names, bitwise atomics, regions with a scalar, vector old values --------------
import tilelang.language as T  # noqa: E402

from atomic_programs import addx_prev  # noqa: E402


@needs_nvcc
def test_bitwise_atomics_name_their_helpers_and_orders():
    @T.prim_func
    def main(A: T.Tensor((3,), "int32"), m: T.int32):
        with T.Kernel(1, threads=32):
            T.atomic_or(A[0], m, memory_order="release")
            T.atomic_and(A[1], m)
            T.atomic_xor(A[2], m, memory_order="acq_rel")

    ptx, src = ptx_and_source(main)
    assert re.search(r"AtomicOr\(.*, 3\);", src) and re.search(r"AtomicAnd\(.*, 0\);", src)
    assert re.search(r"AtomicXor\(.*, 4\);", src)
    assert {"atom.global.or.b32", "atom.global.and.b32", "atom.global.xor.b32"} <= \
        instructions(ptx) or "red.global.or.b32" in ptx


@needs_nvcc
def test_region_with_scalar_value_and_one_element_tensor_compile():
    @T.prim_func
    def main(A: T.Tensor((64, 64), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(2, 2, threads=32) as (bx, by):
            a = T.alloc_local([1], "float32")
            T.copy(B, a)
            T.clear(B)  # a 1-element fill: thread 0 stores it
            T.atomic_max(A[bx * 32:(bx + 1) * 32, by * 32:(by + 1) * 32], 0.5)
            T.atomic_add(B, a)

    ptx, src = ptx_and_source(main)
    body = src[src.index("main_kernel("):]
    assert body.count("AtomicMax(") >= 32  # 32 x 32 elements over 32 threads
    assert "AtomicAdd(" in body
    assert re.search(r"if \(\(\(int\)threadIdx.x\) == 0\) \{\s*B_ptr\[0\] = ", body), body


@pytest.mark.gpu
def test_gpu_one_element_tensor_cleared_then_added():
    @T.prim_func
    def main(A: T.Tensor((1,), "float32"), B: T.Tensor((1,), "float32")):
        with T.Kernel(1) as _:
            a = T.alloc_local([1], "float32")
            T.copy(A, a)
            T.clear(B)
            T.atomic_add(B, a)
            T.atomic_add(B, 1)

    a = torch.tensor([2.5], device="cuda")
    b = torch.full((1,), 7.0, device="cuda")
    tilelang.compile(main, target="cuda")(a, b)
    assert b.tolist() == [3.5]


@needs_nvcc
@pytest.mark.parametrize("lanes,dtype,wrap", [(2, "float32", ""), (4, "float32", ""),
                                              (2, "float16", "tl::to_uint1("),
                                              (4, "bfloat16", "tl::to_uint2(")])
def test_vector_add_return_prev_source(lanes, dtype, wrap):
    ptx, src = ptx_and_source(addx_prev(lanes, dtype))
    assert f"{wrap}AtomicAddx{lanes}Ret(" in src


@needs_nvcc
def test_bf16_vector_adds_compile_for_sm75():
    @T.prim_func
    def main(A: T.Tensor((64,), "bfloat16"), B: T.Tensor((64,), "bfloat16"),
             P: T.Tensor((64,), "bfloat16")):
        with T.Kernel(1, threads=32):
            T.atomic_add(B[1], A[1])
            for i in T.Parallel(32):
                T.atomic_addx2(B[i * 2], A[i * 2])
            P[0] = T.atomic_add(B[0], A[0], return_prev=True)
            P[0:2] = T.atomic_addx2(B[0:2], A[0:2], return_prev=True)
            P[0:4] = T.atomic_addx4(B[0:4], A[0:4], return_prev=True)

    src = tilelang.compile(main, target="cuda -arch=sm_75").get_kernel_source()
    for helper in ("AtomicAdd(", "AtomicAddx2(", "AtomicAddRet(", "AtomicAddx2Ret(",
                   "AtomicAddx4Ret("):
        assert helper in src


@pytest.mark.gpu
@pytest.mark.parametrize("lanes,dtype", [(2, "float32"), (4, "float32"), (2, "float16"),
                                         (4, "bfloat16")])
def test_gpu_vector_add_return_prev(lanes, dtype):
    t = getattr(torch, dtype)
    d = torch.arange(1, lanes + 1).to(t).cuda()
    v = (10 * torch.arange(1, lanes + 1)).to(t).cuda()
    p = torch.zeros(lanes).to(t).cuda()
    tilelang.compile(addx_prev(lanes, dtype), target="cuda")(d, v, p)
    assert p.tolist() == list(range(1, lanes + 1))
    assert d.tolist() == [11 * k for k in range(1, lanes + 1)]


def region_add(n, threads, dtype, order):
    @T.prim_func
    def main(X: T.Tensor((n,), dtype), Out: T.Tensor((n,), dtype)):
        with T.Kernel(1, threads=threads):
            T.atomic_add(Out[0:n], X[0:n], memory_order=order)
    return main


@needs_nvcc
@pytest.mark.parametrize("dtype,lanes", [("float16", 2), ("bfloat16", 2), ("float32", 4)])
def test_region_add_between_memory_tiles_is_packed_and_keeps_its_order(dtype, lanes):
    ptx, src = ptx_and_source(region_add(64, 32, dtype, "acq_rel"))
    calls = re.findall(r"AtomicAddx\d\([^;]*\);", src)
    assert calls and all(c.startswith(f"AtomicAddx{lanes}(") and c.endswith(", 4);")
                         for c in calls), src
    assert "AtomicAdd(" not in src


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_gpu_region_add_packed(dtype):
    t = getattr(torch, dtype)
    x = torch.randn(64, device="cuda").to(t)
    out = torch.ones(64, device="cuda").to(t)
    tilelang.compile(region_add(64, 32, dtype, "release"), target="cuda")(x, out)
    torch.testing.assert_close(out.float(), 1 + x.float(), atol=1e-2, rtol=1e-2)
