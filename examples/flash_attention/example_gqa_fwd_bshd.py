"""Grouped-query attention forward ("GQA") on (batch, seq_len, heads, dim) tensors ("BSHD"),
causal or not, any sequence length, fp16 or bf16.

Q has `heads` heads; K and V have heads // groups heads, and query head h reads K/V head
h // groups (`groups` query heads share one K/V head; groups=1 is plain multi-head attention,
groups=heads is multi-query attention). Each block owns block_M queries of one (batch, query
head) and runs the online softmax of flash attention over the key tiles of its K/V head.
"""

import argparse

import torch

import tilelang
import tilelang.language as T

LOG2_E = 1.44269504


def flashattn(batch, heads, seq_len, dim, is_causal, groups=1, block_M=64, block_N=64,
              num_stages=1, threads=128, dtype="float16", cluster=1):
    """``cluster``: blocks of consecutive query tiles launched as one cluster (the number of
    query tiles, ceil(seq_len / block_M), must be a multiple of it); on sm_90a their common K
    and V tiles are then multicast (when every block runs the same key loop: not causal)."""
    if heads % groups:
        raise ValueError(f"heads={heads} is not a multiple of groups={groups}")
    q_shape = [batch, seq_len, heads, dim]
    kv_shape = [batch, seq_len, heads // groups, dim]
    accum_dtype = "float32"
    scale = dim ** -0.5 * LOG2_E
    neg_inf = -T.infinity(accum_dtype)

    @T.prim_func
    def main(
        Q: T.Tensor(q_shape, dtype),
        K: T.Tensor(kv_shape, dtype),
        V: T.Tensor(kv_shape, dtype),
        Output: T.Tensor(q_shape, dtype),
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

            T.copy(Q[bz, bx * block_M:(bx + 1) * block_M, by, :], Q_shared)
            T.fill(acc_o, 0)
            T.fill(row_sum, 0)
            T.fill(row_max, neg_inf)

            # Causal: key tiles past the block's last query contribute nothing.
            n_tiles = (
                T.min(T.ceildiv(seq_len, block_N), T.ceildiv((bx + 1) * block_M, block_N))
                if is_causal else T.ceildiv(seq_len, block_N)
            )
            for k in T.Pipelined(n_tiles, num_stages=num_stages):
                T.copy(K[bz, k * block_N:(k + 1) * block_N, by // groups, :], K_shared)
                for i, j in T.Parallel(block_M, block_N):
                    key = k * block_N + j
                    if is_causal:
                        scores[i, j] = T.if_then_else(
                            (bx * block_M + i >= key) and (key < seq_len), 0, neg_inf)
                    else:
                        scores[i, j] = T.if_then_else(key < seq_len, 0, neg_inf)
                T.gemm(Q_shared, K_shared, scores, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(V[bz, k * block_N:(k + 1) * block_N, by // groups, :], V_shared)
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
            T.copy(O_shared, Output[bz, bx * block_M:(bx + 1) * block_M, by, :])

    return main


def reference(Q, K, V, is_causal):
    """torch SDPA in fp32 with enable_gqa on (B, S, H, D) / (B, S, H // groups, D) tensors,
    cast to Q's dtype."""
    q, k, v = (x.float().transpose(1, 2) for x in (Q, K, V))  # (B, H, S, D)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=is_causal,
                                                           enable_gqa=True)
    return out.transpose(1, 2).to(Q.dtype)


# Tolerance against the fp32 reference: the output is rounded to the input dtype (bf16 keeps
# 8 significant bits, fp16 11) and P is rounded to it before the second GEMM.
TOLERANCE = {"float16": 1e-2, "bfloat16": 2e-2}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--heads", type=int, default=None, help="query heads")
    parser.add_argument("--groups", type=int, default=None,
                        help="query heads per K/V head (heads // kv_heads)")
    parser.add_argument("--seq_len", type=int, default=None)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--dtype", choices=sorted(TOLERANCE), default="float16")
    parser.add_argument("--target", default="auto")
    args = parser.parse_args(argv)
    on_gpu = torch.cuda.is_available() and args.target in ("auto", "cuda")
    B = args.batch or (8 if on_gpu else 1)
    H = args.heads or (16 if on_gpu else 4)
    G = args.groups or (4 if on_gpu else 2)
    S = args.seq_len or (4096 if on_gpu else 200)
    D = args.dim
    kernel = tilelang.compile(flashattn(B, H, S, D, args.causal, groups=G, dtype=args.dtype),
                              out_idx=[3], target=args.target)
    device = "cuda" if on_gpu else "cpu"
    dtype = getattr(torch, args.dtype)
    q = torch.randn(B, S, H, D, device=device, dtype=dtype)
    k, v = (torch.randn(B, S, H // G, D, device=device, dtype=dtype) for _ in range(2))
    out = kernel(q, k, v)
    tol = TOLERANCE[args.dtype]
    torch.testing.assert_close(out, reference(q, k, v, args.causal), rtol=tol, atol=tol)
    print(f"GQA flash attention BSHD B={B} H={H} KV heads={H // G} S={S} D={D} "
          f"causal={args.causal} {args.dtype} on {kernel.target.kind.name}: matches torch")


if __name__ == "__main__":
    main()
