"""Flash-attention forward on (batch, heads, seq_len, dim) tensors ("BHSD", the layout of
torch's scaled_dot_product_attention), causal or not, any sequence length, fp16 or bf16.

One block owns block_M queries of one (batch, head): it walks the keys in tiles of block_N,
keeps a running row maximum and row sum (online softmax in base 2, the 1/sqrt(dim) scale folded
with log2(e)), rescales the fp32 output accumulator when the maximum grows, and divides by the
row sum at the end. Keys past seq_len (and, when causal, after the query) score -inf.
"""

import argparse
import math

import torch

import tilelang
import tilelang.language as T

LOG2_E = 1.44269504


def flashattn(batch, heads, seq_len, dim, is_causal, block_M=64, block_N=64, num_stages=1,
              threads=128, dtype="float16", cluster=1):
    """``cluster``: blocks of consecutive query tiles launched as one cluster (the number of
    query tiles, ceil(seq_len / block_M), must be a multiple of it); on sm_90a their common K
    and V tiles are then multicast (when every block runs the same key loop: not causal)."""
    shape = [batch, heads, seq_len, dim]
    accum_dtype = "float32"
    scale = dim ** -0.5 * LOG2_E
    neg_inf = -T.infinity(accum_dtype)

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
            scores = T.alloc_fragment([block_M, block_N], accum_dtype)
            probs = T.alloc_fragment([block_M, block_N], dtype)
            acc_o = T.alloc_fragment([block_M, dim], accum_dtype)
            row_max = T.alloc_fragment([block_M], accum_dtype)
            row_max_prev = T.alloc_fragment([block_M], accum_dtype)
            rescale = T.alloc_fragment([block_M], accum_dtype)
            tile_sum = T.alloc_fragment([block_M], accum_dtype)
            row_sum = T.alloc_fragment([block_M], accum_dtype)

            T.copy(Q[bz, by, bx * block_M:(bx + 1) * block_M, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(row_sum, 0)
            T.fill(row_max, neg_inf)

            # Causal: key tiles past the block's last query contribute nothing.
            n_tiles = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(K[bz, by, k * block_N:(k + 1) * block_N, :], K_shared)
                for i, j in T.Parallel(block_M, block_N):
                    key = k * block_N + j
                    if is_causal:
                        scores[i, j] = T.if_then_else(
                            (bx * block_M + i >= key) and (key < seq_len), 0, neg_inf)
                    else:
                        scores[i, j] = T.if_then_else(key < seq_len, 0, neg_inf)
                T.gemm(Q_shared, K_shared, scores, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(V[bz, by, k * block_N:(k + 1) * block_N, :], V_shared)
                T.copy(row_max, row_max_prev)
                T.reduce_max(scores, row_max, dim=1, clear=False)
                for i in T.Parallel(block_M):
                    rescale[i] = T.exp2(row_max_prev[i] * scale - row_max[i] * scale)
                for i, j in T.Parallel(block_M, dim):
                    acc_o[i, j] *= rescale[i]
                for i, j in T.Parallel(block_M, block_N):
                    scores[i, j] = T.exp2(scores[i, j] * scale - row_max[i] * scale)
                T.copy(scores, probs)
                T.gemm(probs, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)
                T.reduce_sum(scores, tile_sum, dim=1)
                for i in T.Parallel(block_M):
                    row_sum[i] = row_sum[i] * rescale[i] + tile_sum[i]
            for i, j in T.Parallel(block_M, dim):
                acc_o[i, j] /= row_sum[i]
            T.copy(acc_o, O_shared)
            T.copy(O_shared, Output[bz, by, bx * block_M:(bx + 1) * block_M, :])

    return main


def reference(Q, K, V, is_causal):
    """softmax(Q K^T / sqrt(D)) V in fp32 on (B, H, S, D) tensors, cast to Q's dtype."""
    q, k, v = (x.float() for x in (Q, K, V))
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if is_causal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool, device=s.device).tril(),
                          float("-inf"))
    return (torch.softmax(s, dim=-1) @ v).to(Q.dtype)


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
    q, k, v = (torch.randn(B, H, S, D, device=device, dtype=dtype) for _ in range(3))
    out = kernel(q, k, v)
    tol = TOLERANCE[args.dtype]
    torch.testing.assert_close(out, reference(q, k, v, args.causal), rtol=tol, atol=tol)
    print(f"flash attention BHSD B={B} H={H} S={S} D={D} causal={args.causal} {args.dtype} on "
          f"{kernel.target.kind.name}: matches torch")


if __name__ == "__main__":
    main()
