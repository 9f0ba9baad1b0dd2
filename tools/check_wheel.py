"""Check an installed (non-editable) tilelang: run from outside the repository, it verifies
that every package of the repository was installed, that the CUDA headers came with it and
that a GEMM compiles to sm_90a PTX.  Usage: ``python tools/check_wheel.py <repository>``."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def main(repo: str) -> None:
    import tilelang
    import tilelang.language as T
    from tilelang.engine.cuda import template_dir

    installed = Path(tilelang.__file__).resolve().parent
    repo_path = Path(repo).resolve()
    assert repo_path not in installed.parents, f"tilelang was imported from the repository: {installed}"
    missing = sorted({p.parent.relative_to(repo_path).as_posix()
                      for p in (repo_path / "tilelang").rglob("*.py")}
                     - {p.parent.relative_to(installed.parent).as_posix()
                        for p in installed.rglob("*.py")})
    assert not missing, f"packages missing from the wheel (add them to pyproject.toml): {missing}"
    assert Path(template_dir()) == installed, f"headers found in {template_dir()}, not the wheel"

    @T.prim_func
    def gemm(A: T.Tensor((256, 256), "float16"), B: T.Tensor((256, 256), "float16"),
             C: T.Tensor((256, 256), "float16")):
        with T.Kernel(2, 2, threads=128) as (bx, by):
            A_s = T.alloc_shared((128, 32), "float16")
            B_s = T.alloc_shared((32, 128), "float16")
            C_l = T.alloc_fragment((128, 128), "float32")
            T.clear(C_l)
            for k in T.Pipelined(8, num_stages=2):
                T.copy(A[by * 128, k * 32], A_s)
                T.copy(B[k * 32, bx * 128], B_s)
                T.gemm(A_s, B_s, C_l)
            T.copy(C_l, C[by * 128, bx * 128])

    ptx = tilelang.compile(gemm, out_idx=[2], target="cuda -arch=sm_90a").get_ptx()
    assert ".target sm_90a" in ptx, ptx[:500]
    print(f"wheel OK: tilelang from {installed}, GEMM -> {len(ptx)} bytes of sm_90a PTX "
          f"(cwd {os.getcwd()})")


if __name__ == "__main__":
    main(sys.argv[1])
