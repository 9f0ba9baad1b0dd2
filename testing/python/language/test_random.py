"""T.rng_init / T.rng_rand / T.rng_rand_float: every thread draws from its own Philox4x32-10
stream, cuRAND's (and Triton's tl.randint4x) bit for bit: checked on the CPU against a
reference written here, the CUDA header's functions compiled as host C++ against the CPU,
sm_90a source, and GPU-marked runs."""

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import CompileError, DSLError, LoweringError

M32 = 0xFFFFFFFF


# -- a reference Philox4x32-10 (Salmon et al., SC'11) ----------------------------------------
def philox(ctr, key):
    x, y, z, w = ctr
    k0, k1 = key
    for _ in range(10):
        p0, p1 = 0xD2511F53 * x, 0xCD9E8D57 * z
        x, y, z, w = ((p1 >> 32) ^ y ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ w ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return [x, y, z, w]


def stream(seed, seq, off, n):
    """Elements off .. off + n - 1 of subsequence seq: counter (e // 4, seq), output e % 4."""
    out = []
    for e in range(off, off + n):
        c = e // 4
        ctr = [c & M32, (c >> 32) & M32, seq & M32, (seq >> 32) & M32]
        out.append(philox(ctr, [seed & M32, (seed >> 32) & M32])[e % 4])
    return out


def uniform32(x):
    return np.float32(np.float32(x) * np.float32(2.0 ** -32) + np.float32(2.0 ** -33))


def uniform64(x, y):
    return float((x ^ (y << 21)) * 2.0 ** -53 + 2.0 ** -54)


def normal_pairs(values, bits):
    """curand_normal[_double]: Box-Muller over 2 (4) draws, the sine value first."""
    out, step = [], 2 if bits == 32 else 4
    for i in range(0, len(values) - step + 1, step):
        if bits == 32:
            u = float(uniform32(values[i]))
            v = float(np.float32(values[i + 1]) * np.float32(2.0 ** -32 * np.float32(2 * math.pi))
                      + np.float32(2.0 ** -33 * np.float32(2 * math.pi)))
        else:
            u = uniform64(values[i], values[i + 1])
            v = ((values[i + 2] ^ (values[i + 3] << 21)) * 2.0 ** -52 + 2.0 ** -53) * math.pi
        s = math.sqrt(-2.0 * math.log(u))
        out += [s * math.sin(v), s * math.cos(v)]
    return out


def test_reference_philox_matches_the_published_known_answers():
    assert philox([0, 0, 0, 0], [0, 0]) == [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert philox([M32] * 4, [M32] * 2) == [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


# -- programs ---------------------------------------------------------------------------------
def draws(M=512, per=128, seed=42, seq=0, kind="uint", bit=32, dist="uniform", threads=1):
    """The public test's pattern: one thread per block starts at element bx * per of the
    stream and writes its draws in order."""
    dtype = "uint32" if kind == "uint" else f"float{bit}"

    @T.prim_func
    def main(A: T.Tensor((M,), dtype)):
        with T.Kernel(T.ceildiv(M, per), threads=threads) as bx:
            T.rng_init(seed, seq, bx * per)
            for i, j in T.Parallel(1, per):
                if bx * per + j < M:
                    if kind == "uint":
                        A[bx * per + j] = T.rng_rand()
                    else:
                        A[bx * per + j] = T.rng_rand_float(bit=bit, dist=dist)

    return main


def run_cpu(func):
    return tilelang.compile(func, out_idx=[0], target="cpu")()


def test_uint_stream_is_philox_with_offsets_per_block():
    got = run_cpu(draws(M=500, seed=123)).numpy().astype(np.uint64)
    want = np.array(stream(123, 0, 0, 500), dtype=np.uint64)  # block b starts at 128 b
    np.testing.assert_array_equal(got, want)


def test_subsequence_seed_high_bits_and_counter_carry():
    seed, seq = (7 << 32) | 99, (3 << 32) | 5
    off = 4 * M32 + 2  # the counter's low word wraps after two draws

    @T.prim_func
    def main(A: T.Tensor((12,), "uint32")):
        with T.Kernel(1, threads=1) as bx:
            T.rng_init(seed, seq, off)
            for j in T.serial(12):
                A[j] = T.rng_rand()

    got = run_cpu(main).numpy().astype(np.uint64).tolist()
    assert got == stream(seed, seq, off, 12)


@pytest.mark.parametrize("bit", [32, 64])
def test_uniform_floats_convert_the_stream_like_curand(bit):
    got = run_cpu(draws(M=256, kind="float", bit=bit)).numpy()
    raw = stream(42, 0, 0, 256 * (bit // 32))
    if bit == 32:
        want = np.array([uniform32(x) for x in raw], dtype=np.float32)
        np.testing.assert_array_equal(got, want)
    else:  # two draws per value, within each block's run of 128
        blocks = [raw[b * 256:(b + 1) * 256] for b in range(1)]
        want = [uniform64(r[2 * i], r[2 * i + 1]) for r in blocks for i in range(128)]
        np.testing.assert_allclose(got[:128], want, rtol=0, atol=0)
    assert got.min() > 0 and got.max() <= 1


@pytest.mark.parametrize("bit", [32, 64])
def test_normal_floats_are_box_muller_pairs(bit):
    got = run_cpu(draws(M=128, kind="float", bit=bit, dist="normal")).numpy()
    raw = stream(42, 0, 0, 128 * (bit // 32))
    np.testing.assert_allclose(got, normal_pairs(raw, bit), rtol=2e-5, atol=2e-5)
    big = run_cpu(draws(M=1 << 14, per=1 << 14, kind="float", bit=bit, dist="normal"))
    assert abs(float(big.mean())) < 0.05 and abs(float(big.std()) - 1) < 0.05


def test_init_under_a_guard_continues_the_same_stream():
    @T.prim_func
    def main(A: T.Tensor((16,), "uint32"), n: T.int32):
        with T.Kernel(16, threads=1) as bx:
            s = T.alloc_shared((4,), "int32")
            if bx < n:
                T.rng_init(5, bx, 0)
                T.fill(s, 1)
                T.cumsum(s, dim=0)
                A[bx] = T.rng_rand() + T.cast(s[3], "uint32") * 0

    kernel = tilelang.compile(main, target="cpu")
    a = torch.full((16,), 7, dtype=torch.uint32)
    kernel(a, 10)
    want = [stream(5, b, 0, 1)[0] for b in range(10)]
    assert a[:10].numpy().astype(np.uint64).tolist() == want
    assert (a[10:].numpy() == 7).all()


def test_default_sequence_is_the_threads_place_in_the_grid():
    @T.prim_func
    def main(A: T.Tensor((3, 4), "uint32")):
        with T.Kernel(4, 3, threads=1) as (bx, by):
            T.rng_init(11)
            A[by, bx] = T.rng_rand()

    got = run_cpu(main).numpy().astype(np.uint64)
    want = [[stream(11, by * 4 + bx, 0, 1)[0] for bx in range(4)] for by in range(3)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint64))


def test_misuse_raises_naming_the_op():
    with pytest.raises(DSLError, match="only valid inside a T.Kernel"):
        T.rng_rand()
    with pytest.raises(DSLError, match="bit must be 32 or 64"):
        @T.prim_func
        def half(A: T.Tensor((4,), "float16")):
            with T.Kernel(1, threads=1) as bx:
                T.rng_init(1)
                A[0] = T.rng_rand_float(bit=16)
    with pytest.raises(DSLError, match="unknown generator"):
        @T.prim_func
        def mt(A: T.Tensor((4,), "uint32")):
            with T.Kernel(1, threads=1) as bx:
                T.rng_init(1, generator="mt19937")

    @T.prim_func
    def no_init(A: T.Tensor((4,), "uint32")):
        with T.Kernel(1, threads=1) as bx:
            A[0] = T.rng_rand()

    with pytest.raises(LoweringError, match="T.rng_init must start"):
        tilelang.compile(no_init, target="cpu")

    with pytest.raises(LoweringError, match="runs a block on one thread"):
        tilelang.compile(draws(threads=32), target="cpu")

    @T.prim_func
    def xorwow(A: T.Tensor((4,), "uint32")):
        with T.Kernel(1, threads=1) as bx:
            T.rng_init(1, 0, 0, generator="curandStateXORWOW_t")
            A[0] = T.rng_rand()

    with pytest.raises(LoweringError, match="CPU backend has only"):
        tilelang.compile(xorwow, target="cpu")


# -- CUDA -------------------------------------------------------------------------------------
HEADER = os.path.join(os.path.dirname(tilelang.__file__), "..", "src", "tl_templates", "cuda",
                      "random.h")


@pytest.mark.skipif(shutil.which("g++") is None or not os.path.exists(HEADER),
                    reason="needs g++ and the source tree's headers")
def test_cuda_header_philox_equals_the_cpu_backend(tmp_path):
    """The CUDA functions, compiled as host C++, give the CPU backend's values."""
    text = open(HEADER).read()
    philox_part = text.split('#include "common.h"')[1].split("// cuRAND's other generators")[0]
    prog = tmp_path / "philox.cpp"
    prog.write_text(
        "#include <cstdint>\n#include <cmath>\n#include <cstdio>\n#define TL_DEVICE inline\n"
        "static inline uint32_t __umulhi(uint32_t a, uint32_t b) "
        "{ return (uint32_t)(((uint64_t)a * b) >> 32); }\n" + philox_part +
        "int main() { uint32_t st[13]; int flag[2]; float f[2]; double d[2];\n"
        "  tl::philox_init(st, flag, 42ull, 0ull, 0ull);\n"
        "  for (int i = 0; i < 128; ++i) printf(\"%u\\n\", tl::philox_next(st));\n"
        "  tl::philox_init(st, flag, 42ull, 0ull, 0ull);\n"
        "  for (int i = 0; i < 128; ++i) printf(\"%.9g\\n\", tl::philox_uniform(st));\n"
        "  tl::philox_init(st, flag, 42ull, 0ull, 0ull);\n"
        "  for (int i = 0; i < 128; ++i) printf(\"%.9g\\n\", tl::philox_normal(st, flag, f));\n"
        "  tl::philox_init(st, flag, 42ull, 0ull, 0ull);\n"
        "  for (int i = 0; i < 128; ++i) printf(\"%.17g\\n\", tl::philox_normal_double(st, flag, d));\n"
        "}\n")
    exe = tmp_path / "philox"
    subprocess.run(["g++", "-O1", "-o", str(exe), str(prog)], check=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.split()
    values = [float(x) for x in lines]
    assert [int(v) for v in values[:128]] == \
        run_cpu(draws(M=128)).numpy().astype(np.uint64).tolist()
    np.testing.assert_array_equal(np.float32(values[128:256]),
                                  run_cpu(draws(M=128, kind="float")).numpy())
    np.testing.assert_allclose(values[256:384], run_cpu(draws(M=128, kind="float",
                                                              dist="normal")).numpy(), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(values[384:], run_cpu(draws(M=128, kind="float", bit=64,
                                                           dist="normal")).numpy(), rtol=1e-12,
                               atol=1e-12)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_sm90a_kernel_calls_the_philox_functions_with_registers_state():
    kernel = tilelang.compile(draws(kind="float", dist="normal", threads=32), out_idx=[0],
                              target="cuda -arch=sm_90a")
    src = kernel.get_kernel_source()
    assert re.search(r"tl::philox_init\(", src) and "tl::philox_normal(" in src
    assert "curand" not in src.split('#include "tl_templates/cuda/tl.h"')[-1]
    assert ".entry" in kernel.get_ptx()


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("generator", ["curandStateXORWOW_t", "curandStateMRG32k3a_t"])
def test_only_curand_generators_include_curand_headers(generator):
    """cuRAND's headers (slower to compile than most kernels) are included by the kernels
    that start one of its generators, not by the Philox ones or any other kernel."""
    @T.prim_func
    def main(A: T.Tensor((32,), "uint32")):
        with T.Kernel(1, threads=32) as bx:
            tx = T.get_thread_binding()
            T.rng_init(5, tx, 0, generator=generator)
            A[tx] = T.rng_rand()

    kernel = tilelang.compile(main, out_idx=[0], target="cuda -arch=sm_90a")
    assert '#include "tl_templates/cuda/curand.h"' in kernel.get_kernel_source()
    from tilelang.engine.cuda import cuda_include_dirs

    if any(os.path.exists(os.path.join(d, "curand_kernel.h")) for d in cuda_include_dirs()[0]):
        assert ".entry" in kernel.get_ptx()  # tl::rng_init<generator> comes from that header
    else:
        with pytest.raises(CompileError, match="needs cuRAND's device headers"):
            kernel.get_ptx()
    philox = tilelang.compile(draws(kind="float", threads=32), out_idx=[0],
                              target="cuda -arch=sm_90a")
    assert "curand.h" not in philox.get_kernel_source()


def _gpu_draws(**kw):
    kernel = tilelang.compile(draws(**kw), out_idx=[0], target="cuda")
    return kernel().cpu()


@pytest.mark.gpu
@pytest.mark.parametrize("kind,bit,dist", [("uint", 32, "uniform"), ("float", 32, "uniform"),
                                           ("float", 64, "uniform"), ("float", 32, "normal"),
                                           ("float", 64, "normal")])
def test_gpu_stream_equals_the_cpu(kind, bit, dist):
    gpu = _gpu_draws(M=1000, kind=kind, bit=bit, dist=dist)
    cpu = run_cpu(draws(M=1000, kind=kind, bit=bit, dist=dist))
    if kind == "uint":
        assert torch.equal(gpu, cpu)
    else:
        torch.testing.assert_close(gpu, cpu, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_gpu_threads_draw_their_own_subsequences():
    @T.prim_func
    def main(A: T.Tensor((4, 64), "uint32")):
        with T.Kernel(4, threads=64) as bx:
            tx = T.get_thread_binding()
            T.rng_init(3)
            A[bx, tx] = T.rng_rand()

    got = tilelang.compile(main, out_idx=[0], target="cuda")().cpu().numpy().astype(np.uint64)
    want = [[stream(3, b * 64 + t, 0, 1)[0] for t in range(64)] for b in range(4)]
    np.testing.assert_array_equal(got, np.array(want, dtype=np.uint64))


@pytest.mark.gpu
@pytest.mark.parametrize("generator", ["curandStateXORWOW_t", "curandStateMRG32k3a_t"])
def test_gpu_curand_generators_are_reproducible(generator):
    """(needs cuRAND's headers where the kernel is compiled)"""
    @T.prim_func
    def main(A: T.Tensor((64,), "uint32"), B: T.Tensor((64,), "float32")):
        with T.Kernel(64, threads=32) as bx:
            tx = T.get_thread_binding()
            T.rng_init(9, 0, bx, generator=generator)
            if tx == 0:
                A[bx] = T.rng_rand()
                B[bx] = T.rng_rand_float()

    kernel = tilelang.compile(main, out_idx=[0, 1], target="cuda")
    a1, b1 = kernel()
    a2, b2 = kernel()
    assert torch.equal(a1, a2) and torch.equal(b1, b2)
    assert len(set(a1.cpu().tolist())) > 60 and float(b1.min()) > 0 and float(b1.max()) <= 1
