"""Run one GEMM configuration a few times, for a profiler (ncu) to look at:

    ncu --clock-control none -k main_kernel -s 2 -c 1 python3 tools/profile_gemm.py 128x256x64x256x3
"""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
from bench_gemm import matmul  # noqa: E402

import tilelang  # noqa: E402


def main():
    cfg = tuple(int(x) for x in (sys.argv[1] if len(sys.argv) > 1 else "128x256x64x256x3")
                .split("x"))
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
    k = tilelang.compile(matmul(n, n, n, *cfg, "float16"), out_idx=[2], target="cuda")
    a = torch.randn(n, n, device="cuda", dtype=torch.float16)
    b = torch.randn(n, n, device="cuda", dtype=torch.float16)
    for _ in range(4):
        k(a, b)
    torch.cuda.synchronize()
    print("ran", cfg)


if __name__ == "__main__":
    main()
