"""GuardGlobalAccesses: on CUDA a global access that cannot be proven in range reads 0 (a load)
or is skipped (a store), as in the public TileLang; proven accesses are left alone.  The GPU
cases put NaNs right past the end of a tensor, where an unguarded gather would read them."""

import re

import pytest
import torch

import tilelang
import tilelang.language as T
from programs import matmul

SM90 = "cuda -arch=sm_90a"


def gather_rows(n_rows=16, n_src=32, dim=64):
    """``Out[i, :] = X[Idx[i], :]``: the row index comes from memory."""

    @T.prim_func
    def main(X: T.Tensor((n_src, dim), "float32"), Idx: T.Tensor((n_rows,), "int32"),
             Out: T.Tensor((n_rows, dim), "float32")):
        with T.Kernel(1, threads=128) as bx:
            tile = T.alloc_shared((n_rows, dim), "float32")
            for i, d in T.Parallel(n_rows, dim):
                tile[i, d] = X[Idx[i], d]
            T.copy(tile, Out)

    return main


def scatter_rows(n_rows=16, n_dst=32, dim=64):
    """``Out[Idx[i], :] = X[i, :]``: the row written comes from memory."""

    @T.prim_func
    def main(X: T.Tensor((n_rows, dim), "float32"), Idx: T.Tensor((n_rows,), "int32"),
             Out: T.Tensor((n_dst, dim), "float32")):
        with T.Kernel(1, threads=128) as bx:
            for i, d in T.Parallel(n_rows, dim):
                Out[Idx[i], d] = X[i, d]

    return main


def _body(kernel) -> str:
    src = kernel.get_kernel_source()
    return src[src.index('extern "C"'):]


def test_gather_load_is_guarded_on_sm90():
    src = _body(tilelang.compile(gather_rows(), out_idx=[2], target=SM90))
    loads = re.findall(r"= X_ptr\[", src)
    assert loads, src
    # each load of X sits under a range check of the row read from Idx
    assert len(re.findall(r"0 <= Idx_ptr\[[^\]]*\]\) && \(Idx_ptr\[[^\]]*\] < 32\)", src)) \
        == len(loads), src


def test_scatter_store_is_guarded_on_sm90():
    src = _body(tilelang.compile(scatter_rows(), target=SM90))
    stores = re.findall(r"Out_ptr\[[^;]*\] = ", src)
    assert stores, src
    assert len(re.findall(r"if \(\(0 <= Idx_ptr\[[^\]]*\]\) && \(Idx_ptr\[[^\]]*\] < 32\)\)",
                          src)) == len(stores), src


@pytest.mark.parametrize("M", [256, 200])
def test_provable_accesses_stay_unguarded(M):
    """A GEMM (full tiles, or edge tiles the copies guard themselves) compiles to the same
    source with and without the guards."""
    prog = matmul(M, 256, 256, 128, 128, 32)
    on = _body(tilelang.compile(prog, out_idx=[2], target=SM90))
    off = _body(tilelang.compile(prog, out_idx=[2], target=SM90,
                                 pass_configs={"tl.disable_safe_memory_access": True}))
    assert on == off


def test_pass_config_turns_guards_off():
    src = _body(tilelang.compile(gather_rows(), out_idx=[2], target=SM90,
                                 pass_configs={"tl.disable_safe_memory_access": True}))
    assert "Idx_ptr" in src and "<= Idx_ptr" not in src, src


@pytest.mark.gpu
def test_gather_past_the_end_reads_zero_gpu():
    storage = torch.full((33, 64), float("nan"), device="cuda")
    x = storage[:32]  # row 32 of the storage (NaN) lies right past X
    x.copy_(torch.randn(32, 64, device="cuda"))
    idx = torch.randint(0, 32, (16,), dtype=torch.int32, device="cuda")
    idx[::3] = 32  # one past the end
    idx[1] = -1
    out = tilelang.compile(gather_rows(), out_idx=[2], target="cuda")(x, idx)
    expect = torch.where(((idx >= 0) & (idx < 32))[:, None], x[idx.clamp(0, 31).long()],
                         torch.zeros((), device="cuda"))
    torch.testing.assert_close(out, expect)


@pytest.mark.gpu
def test_scatter_past_the_end_is_skipped_gpu():
    storage = torch.full((33, 64), 7.0, device="cuda")
    out = storage[:32]
    out.zero_()
    x = torch.randn(16, 64, device="cuda")
    idx = torch.arange(16, dtype=torch.int32, device="cuda") * 2
    idx[5] = 32
    tilelang.compile(scatter_rows(), target="cuda")(x, idx, out)
    assert torch.all(storage[32] == 7.0)  # the row past the end is untouched
    keep = idx < 32
    torch.testing.assert_close(out[idx[keep].long()], x[keep])


# --- sparse attention over gathered key rows (the DeepSeek-V3.2 sparse MLA shape) ----------
def sparse_gather_attention(seq, seq_kv, heads=64, dim=128, tail=64, topk=128, blk=64,
                            threads=256, stages=2):
    """Each query position ``s`` attends, per head, to the key rows ``Idx[s, :]`` whose index
    is <= s (the others are masked; unused slots hold ``seq_kv``, one past the end).  Keys
    have ``dim + tail`` features, values are their first ``dim``; the score is two GEMMs on
    column slices of the query tile, over 2 warpgroups."""
    scale = (dim + tail) ** -0.5 * 1.44269504

    @T.prim_func
    def main(Q: T.Tensor((seq, heads, dim + tail), "bfloat16"),
             KV: T.Tensor((seq_kv, dim + tail), "bfloat16"),
             Idx: T.Tensor((seq, topk), "int32"),
             O: T.Tensor((seq, heads, dim), "bfloat16")):
        with T.Kernel(seq, threads=threads) as s:
            q = T.alloc_shared((heads, dim + tail), "bfloat16")
            k_main = T.alloc_shared((blk, dim), "bfloat16")
            k_tail = T.alloc_shared((blk, tail), "bfloat16")
            p_s = T.alloc_shared((heads, blk), "bfloat16")
            valid = T.alloc_fragment((blk,), "bool")
            score = T.alloc_fragment((heads, blk), "float32")
            acc = T.alloc_fragment((heads, dim), "float32")
            run_max = T.alloc_fragment((heads,), "float32")
            prev_max = T.alloc_fragment((heads,), "float32")
            corr = T.alloc_fragment((heads,), "float32")
            part = T.alloc_fragment((heads,), "float32")
            denom = T.alloc_fragment((heads,), "float32")
            T.fill(acc, 0)
            T.fill(denom, 0)
            T.fill(run_max, -(2**30))
            T.copy(Q[s, :, :dim], q[:, :dim])
            T.copy(Q[s, :, dim:], q[:, dim:])
            for it in T.Pipelined(topk // blk, num_stages=stages):
                for j in T.Parallel(blk):
                    valid[j] = Idx[s, it * blk + j] <= s
                for j, d in T.Parallel(blk, dim):
                    k_main[j, d] = KV[Idx[s, it * blk + j], d]
                for j, d in T.Parallel(blk, tail):
                    k_tail[j, d] = KV[Idx[s, it * blk + j], dim + d]
                for h, j in T.Parallel(heads, blk):
                    score[h, j] = T.if_then_else(valid[j], 0, -T.infinity("float32"))
                T.gemm(q[:, :dim], k_main, score, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.gemm(q[:, dim:], k_tail, score, transpose_B=True,
                       policy=T.GemmWarpPolicy.FullRow)
                T.copy(run_max, prev_max)
                T.reduce_max(score, run_max, dim=1, clear=False)
                for h in T.Parallel(heads):
                    run_max[h] = T.max(run_max[h], prev_max[h])
                    corr[h] = T.exp2((prev_max[h] - run_max[h]) * scale)
                for h, j in T.Parallel(heads, blk):
                    score[h, j] = T.exp2(score[h, j] * scale - run_max[h] * scale)
                T.reduce_sum(score, part, dim=1)
                for h in T.Parallel(heads):
                    denom[h] = denom[h] * corr[h] + part[h]
                for h, d in T.Parallel(heads, dim):
                    acc[h, d] *= corr[h]
                T.copy(score, p_s)
                T.gemm(p_s, k_main, acc, policy=T.GemmWarpPolicy.FullRow)
            for h, d in T.Parallel(heads, dim):
                acc[h, d] /= denom[h]
            T.copy(acc, O[s, :, :])

    return main


def sparse_gather_reference(q, kv, idx, dim):
    seq, _, width = q.shape
    out = torch.empty(q.shape[0], q.shape[1], dim, device=q.device)
    for s in range(seq):
        rows = idx[s].long()
        keep = rows <= s
        k = kv.float()[rows.clamp(max=kv.shape[0] - 1)]
        att = (q[s].float() @ k.T) * width ** -0.5
        att[:, ~keep] = float("-inf")
        out[s] = att.softmax(-1) @ k[:, :dim]
    return out


def sparse_gather_inputs(seq, seq_kv, heads=64, dim=128, tail=64, topk=128, device="cpu",
                         poison=False):
    """Inputs whose index table pads each row with ``seq_kv`` (one past the end); with
    ``poison`` the storage row past ``KV`` holds NaN."""
    q = torch.randn(seq, heads, dim + tail, device=device).bfloat16()
    storage = torch.full((seq_kv + 1, dim + tail), float("nan"), device=device).bfloat16()
    kv = storage[:seq_kv] if poison else storage[:seq_kv].clone()
    kv.copy_(torch.randn(seq_kv, dim + tail, device=device).bfloat16())
    idx = torch.full((seq, topk), seq_kv, dtype=torch.int32, device=device)
    for s in range(seq):
        pick = torch.randperm(s + 1)[:topk]
        idx[s, :len(pick)] = pick.to(device=device, dtype=torch.int32)
    return q, kv, idx


def test_sparse_gather_attention_cpu():
    """The CPU reference semantics, on in-range indices (the CPU raises on the padding)."""
    q, kv, idx = sparse_gather_inputs(4, 160)
    idx = idx.clamp(max=159)  # padding that stays in range (and is masked: 159 > s)
    kern = tilelang.compile(sparse_gather_attention(4, 160), out_idx=[3], target="cpu",
                            pass_configs={"tl.enable_fast_math": True})
    torch.testing.assert_close(kern(q, kv, idx).float(), sparse_gather_reference(q, kv, idx, 128),
                               atol=2e-2, rtol=2e-2)


def test_sparse_gather_attention_sm90_guards_only_the_gather():
    kern = tilelang.compile(sparse_gather_attention(64, 256), out_idx=[3], target=SM90,
                            pass_configs={"tl.enable_fast_math": True,
                                          "tl.disable_tma_lower": True,
                                          "tl.disable_warp_specialized": True})
    src = _body(kern)
    kv_loads = re.findall(r"= KV_ptr\[", src)
    guards = re.findall(r"if \(\(0 <= Idx_ptr\[[^\]]*\]\) && \(Idx_ptr\[[^\]]*\] < 256\)\)", src)
    assert kv_loads and len(guards) == len(kv_loads), src
    assert "wgmma" in src and "<= Q_ptr" not in src


@pytest.mark.gpu
def test_sparse_gather_attention_gpu():
    q, kv, idx = sparse_gather_inputs(128, 256, device="cuda", poison=True)
    kern = tilelang.compile(sparse_gather_attention(128, 256), out_idx=[3], target="cuda",
                            pass_configs={"tl.enable_fast_math": True,
                                          "tl.disable_tma_lower": True,
                                          "tl.disable_warp_specialized": True})
    out = kern(q, kv, idx)
    torch.cuda.synchronize()
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), sparse_gather_reference(q, kv, idx, 128),
                               atol=2e-2, rtol=2e-2)
