"""bool tiles on CUDA and the CPU: vector loops over bools stay scalar on CUDA (TVM prints four
bools as an 8-byte ``ushort4``), comparisons of bools work on the CPU, and a block-skipping
attention kernel whose pipelined loop body is ``if mask[k]:`` matches torch."""

import re

import pytest
import torch
import torch.nn.functional as F

import tilelang
import tilelang.language as T

SM90 = "cuda -arch=sm_90a"


def bool_row_copy(n=4, vectorized=False):
    @T.prim_func
    def main(M: T.Tensor((8, n), "bool"), O: T.Tensor((8, n), "int32")):
        with T.Kernel(8, threads=32) as bx:
            m = T.alloc_fragment([n], "bool")
            if vectorized:
                for i in T.vectorized(n):
                    m[i] = M[bx, i]
            else:
                T.copy(M[bx, :], m)
            for i in T.Parallel(n):
                O[bx, i] = T.if_then_else(m[i], 1, 0)

    return main


def _body(src: str) -> str:
    return src[src.index('extern "C"'):]


@pytest.mark.parametrize("n", [4, 8, 16])
@pytest.mark.parametrize("vectorized", [False, True])
def test_bool_copy_is_scalar_on_sm90(n, vectorized):
    src = _body(tilelang.compile(bool_row_copy(n, vectorized), target=SM90).get_kernel_source())
    assert "ushort" not in src and "char4" not in src, src
    # one 1-byte load per element
    assert len(re.findall(r"= M_ptr\[", src)) == n, src


@pytest.mark.parametrize("n", [4, 16])
def test_bool_copy_cpu(n):
    k = tilelang.compile(bool_row_copy(n), out_idx=[1], target="cpu")
    m = torch.rand(8, n) > 0.5
    torch.testing.assert_close(k(m), m.int())


def bool_compare(kind):
    @T.prim_func
    def main(M: T.Tensor((4, 8), "bool"), O: T.Tensor((4, 8), "int32")):
        with T.Kernel(4, threads=32) as bx:
            m = T.alloc_fragment([8], "bool")
            T.copy(M[bx, :], m)
            for k in T.serial(8):
                O[bx, k] = 0
                if kind == "ne0":
                    if m[k] != 0:
                        O[bx, k] = 1
                elif kind == "eq1":
                    if m[k] == 1:
                        O[bx, k] = 1
                elif kind == "ne":
                    if m[k] != m[(k + 1) % 8]:
                        O[bx, k] = 1
                else:
                    if m[k] < 1:
                        O[bx, k] = 1

    return main


@pytest.mark.parametrize("kind", ["ne0", "eq1", "ne", "lt"])
def test_bool_comparisons_cpu(kind):
    k = tilelang.compile(bool_compare(kind), out_idx=[1], target="cpu")
    m = torch.rand(4, 8) > 0.5
    expect = {"ne0": m, "eq1": m, "ne": m != m.roll(-1, 1), "lt": ~m}[kind]
    torch.testing.assert_close(k(m), expect.int())


# --- attention that skips the key blocks a bool mask turns off -----------------------------
def skip_block_attention(seq, dim, stages=1, blk=64, threads=128):
    """Causal attention over one head; key block ``k`` of query block ``bx`` is used only when
    ``keep[bx, k]`` (the whole pipelined loop body is under ``if``)."""
    nblk = seq // blk
    scale = dim ** -0.5 * 1.44269504

    @T.prim_func
    def main(Q: T.Tensor((seq, dim), "float16"), K: T.Tensor((seq, dim), "float16"),
             V: T.Tensor((seq, dim), "float16"), Keep: T.Tensor((nblk, nblk), "bool"),
             O: T.Tensor((seq, dim), "float16")):
        with T.Kernel(nblk, threads=threads) as bx:
            q = T.alloc_shared((blk, dim), "float16")
            k_s = T.alloc_shared((blk, dim), "float16")
            v_s = T.alloc_shared((blk, dim), "float16")
            s = T.alloc_fragment((blk, blk), "float32")
            p = T.alloc_fragment((blk, blk), "float16")
            o = T.alloc_fragment((blk, dim), "float32")
            row_max = T.alloc_fragment((blk,), "float32")
            old_max = T.alloc_fragment((blk,), "float32")
            rescale = T.alloc_fragment((blk,), "float32")
            row_sum = T.alloc_fragment((blk,), "float32")
            total = T.alloc_fragment((blk,), "float32")
            keep = T.alloc_fragment((nblk,), "bool")
            T.copy(Q[bx * blk, 0], q)
            T.copy(Keep[bx, :], keep)
            T.fill(o, 0)
            T.fill(total, 0)
            T.fill(row_max, -T.infinity("float32"))
            for kb in T.Pipelined(bx + 1, num_stages=stages):
                if keep[kb] != 0:
                    T.copy(K[kb * blk, 0], k_s)
                    for i, j in T.Parallel(blk, blk):
                        s[i, j] = T.if_then_else(bx * blk + i >= kb * blk + j, 0,
                                                 -T.infinity("float32"))
                    T.gemm(q, k_s, s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                    T.copy(row_max, old_max)
                    T.reduce_max(s, row_max, dim=1, clear=False)
                    for i in T.Parallel(blk):
                        rescale[i] = T.exp2(old_max[i] * scale - row_max[i] * scale)
                    for i, j in T.Parallel(blk, blk):
                        s[i, j] = T.exp2(s[i, j] * scale - row_max[i] * scale)
                    T.reduce_sum(s, row_sum, dim=1)
                    for i in T.Parallel(blk):
                        total[i] = total[i] * rescale[i] + row_sum[i]
                    T.copy(s, p)
                    for i, j in T.Parallel(blk, dim):
                        o[i, j] *= rescale[i]
                    T.copy(V[kb * blk, 0], v_s)
                    T.gemm(p, v_s, o, policy=T.GemmWarpPolicy.FullRow)
            for i, j in T.Parallel(blk, dim):
                o[i, j] /= total[i]
            T.copy(o, O[bx * blk, 0])

    return main


def skip_block_reference(q, k, v, keep, blk=64):
    seq = q.shape[0]
    allowed = torch.kron(keep.float(), torch.ones(blk, blk, device=keep.device)).bool()
    allowed &= torch.ones(seq, seq, dtype=torch.bool, device=keep.device).tril()
    att = (q.float() @ k.float().T) * q.shape[1] ** -0.5
    att = att.masked_fill(~allowed, float("-inf"))
    return F.softmax(att, dim=-1) @ v.float()


def skip_block_inputs(seq=256, dim=64, device="cpu"):
    nblk = seq // 64
    q, k, v = (torch.randn(seq, dim, dtype=torch.float16, device=device) for _ in range(3))
    keep = (torch.rand(nblk, nblk, device=device) > 0.5).tril()
    keep[:, 0] = True  # every query row keeps at least its first key block
    return q, k, v, keep


def test_skip_block_attention_cpu():
    q, k, v, keep = skip_block_inputs()
    kern = tilelang.compile(skip_block_attention(256, 64), out_idx=[4], target="cpu",
                            pass_configs={"tl.enable_fast_math": True})
    torch.testing.assert_close(kern(q, k, v, keep).float(), skip_block_reference(q, k, v, keep),
                               atol=1e-2, rtol=1e-2)


def test_skip_block_attention_sm90_mask_copy_is_scalar():
    kern = tilelang.compile(skip_block_attention(256, 64), out_idx=[4], target=SM90,
                            pass_configs={"tl.enable_fast_math": True})
    src = _body(kern.get_kernel_source())
    assert "ushort" not in src, src
    assert len(re.findall(r"keep_ptr\[\d\] = Keep_ptr\[", src)) == 4, src


@pytest.mark.gpu
@pytest.mark.parametrize("stages", [1, 2])
def test_skip_block_attention_gpu(stages):
    q, k, v, keep = skip_block_inputs(device="cuda")
    kern = tilelang.compile(skip_block_attention(256, 64, stages), out_idx=[4], target="cuda",
                            pass_configs={"tl.enable_fast_math": True})
    out = kern(q, k, v, keep)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), skip_block_reference(q, k, v, keep),
                               atol=1e-2, rtol=1e-2)
