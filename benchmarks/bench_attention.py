"""Attention forward: the tilelang examples of examples/flash_attention/ (BSHD, BHSD and GQA)
against torch SDPA with the cuDNN and flash backends and a Triton kernel, in one run.

    python benchmarks/bench_attention.py [--cases PATTERN ...] [--causal both|yes|no]
                                         [--batch 8 --heads 16 --kv-heads 4 --seq 4096]
                                         [--configs 128x128x3x256 ...]

A case is a layout, a dtype and a head dim, run causal and not (names: `--list`; `--cases`
takes shell patterns, e.g. 'bshd-*' or 'gqa-*'). Each tilelang case is the best of CONFIGS
(or of ``--configs``: block_M x block_N x num_stages x threads [x cluster], the last the query
tiles per cluster, whose K and V tiles are multicast), checked against the example's
torch reference; target "cuda" is the visible GPU (sm_90a on an H100/H200: the
warp-specialized TMA + WGMMA path). SDPA gets its native (B, H, S, D) layout
(enable_gqa for GQA; a backend that refuses it is timed on K/V repeated to H heads, noted in the
row). FLOPs = 4*B*H*S*S*D with H the query heads, halved when causal. Prints TFLOP/s and ratios
(ours/X > 1: ours is faster); writes bench_attention.json next to the script (or under $OUT)
after each case, so that the cases done survive a crash of a later one.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import sys
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "examples", "flash_attention"))
import example_gqa_fwd_bshd  # noqa: E402
import example_mha_fwd  # noqa: E402
import example_mha_fwd_bhsd  # noqa: E402
from common import interleaved_ms, print_table, write_json  # noqa: E402

import tilelang  # noqa: E402

# (block_M, block_N, num_stages, threads)
CONFIGS = [(64, 64, 2, 128), (128, 64, 2, 256), (128, 128, 2, 256), (128, 128, 3, 256),
           (64, 128, 2, 128)]

EXAMPLES = {"bshd": example_mha_fwd, "bhsd": example_mha_fwd_bhsd, "gqa": example_gqa_fwd_bshd}
SHORT = {"float16": "fp16", "bfloat16": "bf16"}


@dataclass(frozen=True)
class Case:
    """One example (its layout: bshd, bhsd, or gqa = BSHD with grouped K/V heads), dtype and
    head dim."""

    layout: str
    dtype: str
    dim: int

    @property
    def name(self) -> str:
        return f"{self.layout}-{SHORT[self.dtype]}-d{self.dim}"


CASES = [Case("bshd", "float16", 64), Case("bshd", "float16", 128),
         Case("bshd", "bfloat16", 128), Case("bhsd", "float16", 128),
         Case("gqa", "float16", 128)]


class Shape:
    """Sizes of one run; kv_heads only matters for GQA."""

    def __init__(self, batch: int, heads: int, kv_heads: int, seq: int):
        if heads % kv_heads:
            raise SystemExit(f"--heads {heads} is not a multiple of --kv-heads {kv_heads}")
        self.B, self.H, self.Hkv, self.S = batch, heads, kv_heads, seq


def program(case: Case, shape: Shape, causal: bool, cfg: tuple):
    bm, bn, st, th, *cluster = cfg
    extra = {"groups": shape.H // shape.Hkv} if case.layout == "gqa" else {}
    return EXAMPLES[case.layout].flashattn(shape.B, shape.H, shape.S, case.dim, causal, **extra,
                                           block_M=bm, block_N=bn, num_stages=st, threads=th,
                                           dtype=case.dtype, cluster=cluster[0] if cluster else 1)


def inputs(case: Case, shape: Shape):
    """Q, K, V in the example's layout."""
    B, H, S, D = shape.B, shape.H, shape.S, case.dim
    Hkv = shape.Hkv if case.layout == "gqa" else H
    dt = getattr(torch, case.dtype)
    if case.layout == "bhsd":
        q_shape, kv_shape = (B, H, S, D), (B, Hkv, S, D)
    else:
        q_shape, kv_shape = (B, S, H, D), (B, S, Hkv, D)
    q = torch.randn(q_shape, device="cuda", dtype=dt)
    k, v = (torch.randn(kv_shape, device="cuda", dtype=dt) for _ in range(2))
    return q, k, v


def to_bhsd(case: Case, x: torch.Tensor) -> torch.Tensor:
    return x if case.layout == "bhsd" else x.transpose(1, 2).contiguous()


def sdpa(backend: str, q, k, v, causal: bool):
    """A no-argument call of SDPA on `backend` for (B, H, S, D) inputs, and a note: K/V with
    fewer heads than Q use enable_gqa, or, where the backend refuses it, K/V repeated."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    kind = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
    gqa = k.shape[1] != q.shape[1]

    def call(k, v, **kw):
        def run():
            with sdpa_kernel(kind):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal, **kw)
        return run

    if not gqa:
        return call(k, v), ""
    try:
        fn = call(k, v, enable_gqa=True)
        fn()
        return fn, ""
    except RuntimeError as e:
        print(f"sdpa {backend} with enable_gqa: {str(e).splitlines()[0][:100]}; "
              "timing K/V repeated to all heads")
        g = q.shape[1] // k.shape[1]
        return call(k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)), f"{backend}: K/V repeated"


def triton_attention():
    """Flash attention in Triton on tensors with any (batch, head, seq) strides and contiguous
    head dim; query head h reads K/V head h // G."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None

    @triton.jit
    def kernel(Q, K, V, O, sqb, sqh, sqs, skb, skh, sks, S, H, G, scale, D: tl.constexpr,
               BM: tl.constexpr, BN: tl.constexpr, CAUSAL: tl.constexpr):
        pm, bh = tl.program_id(0), tl.program_id(1)
        b, h = bh // H, bh % H
        q_base = b * sqb + h * sqh
        kv_base = b * skb + (h // G) * skh
        rm = pm * BM + tl.arange(0, BM)
        rd = tl.arange(0, D)
        q = tl.load(Q + q_base + rm[:, None] * sqs + rd[None, :], mask=rm[:, None] < S, other=0.0)
        m = tl.full((BM,), float("-inf"), tl.float32)
        l = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        hi = tl.minimum(S, (pm + 1) * BM) if CAUSAL else S
        for start in range(0, hi, BN):
            rn = start + tl.arange(0, BN)
            k = tl.load(K + kv_base + rn[None, :] * sks + rd[:, None], mask=rn[None, :] < S,
                        other=0.0)
            s = tl.dot(q, k) * scale
            ok = rn[None, :] < S
            if CAUSAL:
                ok = ok & (rm[:, None] >= rn[None, :])
            s = tl.where(ok, s, float("-inf"))
            m_new = tl.maximum(m, tl.max(s, 1))
            p = tl.exp2(s - m_new[:, None])
            alpha = tl.exp2(m - m_new)
            l = l * alpha + tl.sum(p, 1)
            v = tl.load(V + kv_base + rn[:, None] * sks + rd[None, :], mask=rn[:, None] < S,
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m = m_new
        acc = acc / l[:, None]
        tl.store(O + q_base + rm[:, None] * sqs + rd[None, :], acc.to(O.dtype.element_ty),
                 mask=rm[:, None] < S)

    def run(q, k, v, causal, layout):
        """q, k, v in `layout` ("bhsd" or BSHD otherwise), contiguous."""
        hd, sd = (1, 2) if layout == "bhsd" else (2, 1)
        B, S, H, D = q.shape[0], q.shape[sd], q.shape[hd], q.shape[3]
        o = torch.empty_like(q)
        kernel[(triton.cdiv(S, 128), B * H)](
            q, k, v, o, q.stride(0), q.stride(hd), q.stride(sd), k.stride(0), k.stride(hd),
            k.stride(sd), S, H, H // k.shape[hd], D ** -0.5 * 1.44269504, D=D, BM=128, BN=64,
            CAUSAL=causal, num_warps=8, num_stages=2)
        return o

    return run


def bench_case(case: Case, shape: Shape, causal: bool, tri, rounds: int = 3,
               configs: list = CONFIGS) -> dict:
    """One row: every configuration, the SDPA backends and Triton timed in interleaved
    ``rounds`` (each contender's median)."""
    mod = EXAMPLES[case.layout]
    q, k, v = inputs(case, shape)
    flops = 4 * shape.B * shape.H * shape.S * shape.S * case.dim * (0.5 if causal else 1.0)
    tf = lambda ms: flops / ms * 1e-9  # noqa: E731
    ref = mod.reference(q, k, v, causal) if shape.S <= 4096 else None
    tol = mod.TOLERANCE[case.dtype]
    row = {"case": case.name, "causal": causal, "config": None, "ours": None}
    contenders, errs = {}, {}
    for cfg in configs:
        try:
            kern = tilelang.compile(program(case, shape, causal, cfg), out_idx=[3], target="cuda")
        except tilelang.TileLangError as err:
            print(f"{case.name} config {cfg}: {str(err)[:120]}")
            continue
        out = kern(q, k, v)
        err = None
        if ref is not None:
            err = float((out.float() - ref.float()).abs().max())
            if not torch.allclose(out.float(), ref.float(), rtol=tol, atol=tol):  # NaN too
                print(f"{case.name} causal={causal} config {cfg}: WRONG, max error {err}")
                continue
        contenders[cfg], errs[cfg] = (lambda kern=kern: kern(q, k, v)), err
    qs, ks, vs = (to_bhsd(case, x) for x in (q, k, v))
    notes = []
    for name in ("cudnn", "flash"):
        try:
            fn, note = sdpa(name, qs, ks, vs, causal)
            fn()
            contenders[name] = fn
            notes += [note] if note else []
        except Exception as e:  # a backend may not support the shape or dtype
            print(f"{case.name} sdpa {name}: {type(e).__name__}: {str(e)[:100]}")
    if tri is not None:
        try:
            out = tri(q, k, v, causal, case.layout)
            if ref is not None and not torch.allclose(out.float(), ref.float(), rtol=tol,
                                                      atol=tol):
                raise ValueError(f"WRONG, max error {(out.float() - ref.float()).abs().max()}")
            contenders["triton"] = lambda: tri(q, k, v, causal, case.layout)
        except Exception as e:
            print(f"{case.name} triton: {type(e).__name__}: {str(e)[:200]}")
    ms, _ = interleaved_ms(contenders, rounds)
    ours = list(errs)
    for cfg in ours if len(ours) > 1 else ():
        print(f"{case.name} causal={causal} config {'x'.join(map(str, cfg))}: "
              f"{tf(ms[cfg]):.1f} TFLOP/s")
    if ours:
        cfg = min(ours, key=lambda c: ms[c])
        row.update(config="x".join(map(str, cfg)), ours=tf(ms[cfg]), max_err=errs[cfg])
    for name in ("cudnn", "flash", "triton"):
        if name in ms:
            row[name] = tf(ms[name])
            if ours:
                row[f"ours/{name}"] = ms[name] / ms[cfg]
    row["note"] = "; ".join(notes) or None
    return row


def config(text: str) -> tuple:
    """``128x128x3x256`` -> (block_M, block_N, num_stages, threads); ``128x128x3x256x2`` ->
    the same in clusters of two query tiles."""
    parts = text.split("x")
    if len(parts) not in (4, 5) or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected block_M x block_N x num_stages x "
                                         "threads [x cluster], e.g. 128x128x3x256 or "
                                         "128x128x3x256x2")
    return tuple(int(p) for p in parts)


def select(patterns: list[str] | None) -> list[Case]:
    if not patterns:
        return list(CASES)
    chosen = [c for c in CASES if any(fnmatch.fnmatch(c.name, p) for p in patterns)]
    if not chosen:
        raise SystemExit(f"no case matches {patterns}; cases: {' '.join(c.name for c in CASES)}")
    return chosen


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cases", nargs="+", metavar="PATTERN",
                   help="case names or shell patterns (default: all; see --list)")
    p.add_argument("--causal", choices=("both", "yes", "no"), default="both")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--heads", type=int, default=16, help="query heads")
    p.add_argument("--kv-heads", type=int, default=4, help="K/V heads of the GQA cases")
    p.add_argument("--seq", type=int, default=4096)
    p.add_argument("--rounds", type=int, default=3,
                   help="timing rounds: each round times every contender once, in turn, "
                        "starting one contender later than the round before")
    p.add_argument("--configs", nargs="+", type=config, metavar="MxNxSTAGESxTHREADS[xCLUSTER]",
                   help="the tile configurations to try (default: "
                        f"{' '.join('x'.join(map(str, c)) for c in CONFIGS)})")
    args = p.parse_args(argv)
    configs = args.configs or CONFIGS
    cases = select(args.cases)
    if args.list:
        print("\n".join(c.name for c in cases))
        return
    shape = Shape(args.batch, args.heads, args.kv_heads, args.seq)
    causals = {"both": (False, True), "yes": (True,), "no": (False,)}[args.causal]
    tri = triton_attention()
    rows = []
    for case in cases:
        for causal in causals:
            t0 = time.time()
            row = bench_case(case, shape, causal, tri, args.rounds, configs)
            rows.append(row)
            best = (f"{row['config']} {row['ours']:.1f} TFLOP/s, {row.get('ours/cudnn', 0):.2f}x "
                    "cuDNN; " if row["ours"] else "")
            print(f"{case.name} causal={causal}: {best}{time.time() - t0:.0f} s", flush=True)
            write_json(rows, "bench_attention.json")
            torch.cuda.empty_cache()
    print(f"B={shape.B} H={shape.H} (GQA: {shape.Hkv} K/V heads) S={shape.S}, TFLOP/s")
    print_table(rows, ["case", "causal", "config", "ours", "cudnn", "ours/cudnn", "flash",
                       "ours/flash", "triton", "ours/triton", "max_err", "note"])


if __name__ == "__main__":
    main()
