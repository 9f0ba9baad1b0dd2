"""Flash-attention forward (online softmax), causal or not, any sequence length, fp16 or bf16.
Tensors are (batch, seq_len, heads, dim) ("BSHD").

Per block of block_M queries: S = Q K^T (T.gemm with transpose_B), running row max and
rescale with T.exp2, P V accumulated in fp32 (second T.gemm), normalized at the end.
Keys past the sequence end (and, when causal, after the query) are masked to -inf.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T


def flashattn(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1,
              threads=128, dtype="float16", cluster=1):
    """``cluster``: blocks of consecutive query tiles launched as one cluster (the number of
    query tiles, ceil(seq_len / block_M), must be a multiple of it); on sm_90a their common K
    and V tiles are then multicast (when every block runs the same key loop: not causal)."""
    scale = (1.0 / dim) ** 0.5 * 1.44269504  # softmax scale folded with log2(e)
    shape = [batch, seq_len, heads, dim]
    accum_dtype = "float32"

    @T.prim_func
    def main(
        Q: T.Tensor(shape, dtype),
        K: T.Tensor(shape, dtype),
        V: T.Tensor(shape, dtype),
        Output: T.Tensor(shape, dtype),
    ):
        # fast math, as FlashAttention-3 is built: exp2 is the hardware's ex2.approx.ftz (a
        # result below 2**-126 is 0, where exp2f keeps it subnormal at 3 more instructions)
        T.annotate_pass_configs({tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True})
        with T.Kernel(T.ceildiv(seq_len, block_M), heads, batch, threads=threads,
                      cluster_dims=(cluster, 1, 1)) as (bx, by, bz):
            Q_shared = T.alloc_shared([block_M, dim], dtype)
            K_shared = T.alloc_shared([block_N, dim], dtype)
            V_shared = T.alloc_shared([block_N, dim], dtype)
            O_shared = T.alloc_shared([block_M, dim], dtype)
            acc_s = T.alloc_fragment([block_M, block_N], accum_dtype)
            acc_s_cast = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            scores_max = T.alloc_fragment([block_M], accum_dtype)
            scores_max_prev = T.alloc_fragment([block_M], accum_dtype)
            scores_scale = T.alloc_fragment([block_M], accum_dtype)
            scores_sum = T.alloc_fragment([block_M], accum_dtype)
            logsum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(logsum, 0)
            T.fill(scores_max, -T.infinity(accum_dtype))

            loop_range = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(loop_range, num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by, :], K_shared)
                for i, j in T.Parallel(block_M, block_N):
                    if is_causal:
                        acc_s[i, j] = T.if_then_else(
                            (bx * block_M + i >= k * block_N + j) and (k * block_N + j < seq_len),
                            0, -T.infinity(accum_dtype))
                    else:
                        acc_s[i, j] = T.if_then_else(k * block_N + j < seq_len, 0,
                                                     -T.infinity(accum_dtype))
                T.gemm(Q_shared, K_shared, acc_s, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by, :], V_shared)
                T.copy(scores_max, scores_max_prev)
                T.fill(scores_max, -T.infinity(accum_dtype))
                T.reduce_max(acc_s, scores_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    scores_max[i] = T.max(scores_max[i], scores_max_prev[i])
                for i in T.Parallel(block_M):
                    scores_scale[i] = T.exp2(scores_max_prev[i] * scale - scores_max[i] * scale)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= scores_scale[i]
                for i, j in T.Parallel(block_M, block_N):
                    acc_s[i, j] = T.exp2(acc_s[i, j] * scale - scores_max[i] * scale)
                T.copy(acc_s, acc_s_cast)
                T.gemm(acc_s_cast, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_sum(acc_s, scores_sum, dim=1)
                for i in T.Parallel(block_M):
                    logsum[i] = logsum[i] * scores_scale[i] + scores_sum[i]
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= logsum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def reference(Q, K, V, is_causal):
    q, k, v = (x.float().transpose(1, 2) for x in (Q, K, V))  # (B, H, S, D)
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        n = s.shape[-1]
        mask = torch.ones(n, n, dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~mask, float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).transpose(1, 2).to(Q.dtype)


# Tolerance against the fp32 reference: the output is rounded to the input dtype (bf16 keeps
# 8 significant bits, fp16 11) and P is rounded to it before the second GEMM.
TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None)
    parser.add_argument("--seq_len", type=int, default=None)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float16")
    parser.add_argument("--target", default="auto")
    args = parser.parse_args(argv)
    on_gpu = torch.cuda.is_available() and args.target in ("auto", "cuda")
    B = args.batch or (8 if on_gpu else 1)
    H = args.heads or (16 if on_gpu else 2)
    S = args.seq_len or (4096 if on_gpu else 200)
    D = args.dim
    kernel = tilelang.compile(flashattn(B, H, S, D, args.causal, dtype=args.dtype), out_idx=[3],
                              target=args.target)
    device = "cuda" if on_gpu else "cpu"
    dtype = getattr(torch, args.dtype)
    q, k, v = (torch.randn(B, S, H, D, device=device, dtype=dtype) for _ in range(3))
    out = kernel(q, k, v)
    tol = TOLERANCE[args.dtype]
    torch.testing.assert_close(out, reference(q, k, v, args.causal), rtol=tol, atol=tol)
    print(f"flash attention BSHD B={B} H={H} S={S} D={D} causal={args.causal} {args.dtype} on "
          f"{kernel.target.kind.name}: matches torch")


if __name__ == "__main__":
    main()
