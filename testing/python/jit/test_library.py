"""export_library + tilelang.load: a kernel exported in one process is called in another that
never compiles, with the same argument checks, outputs and size binding."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
import tilelang.language as T
from tilelang.errors import TileLangError


def scale_rows():
    M = T.dynamic("M")

    @T.prim_func
    def main(X: T.Tensor((M, 24), "float32"), s: T.float32, Y: T.Tensor((M, 24), "float32")):
        with T.Kernel(T.ceildiv(M, 16), threads=64) as bx:
            x = T.alloc_fragment((16, 24), "float32")
            T.copy(X[bx * 16, 0], x)
            for i, j in T.Parallel(16, 24):
                x[i, j] = x[i, j] * s
            T.copy(x, Y[bx * 16, 0])

    return main


def bump(N=32):
    @T.prim_func
    def main(A: T.Tensor((N,), "float32")):
        with T.Kernel(1, threads=32) as bx:
            for i in T.Parallel(N):
                A[i] = A[i] + 1

    return main


# Run in a fresh interpreter: any pass or compiler invocation fails the check.
LOADER = textwrap.dedent("""
    import sys, numpy as np, torch, tvm
    import tilelang
    from tilelang.engine import pipeline
    from tilelang.jit import kernel as jk

    def forbidden(*a, **k):
        raise AssertionError("the load path compiled something")

    tvm.compile = pipeline.run_passes = jk.build = forbidden
    k = tilelang.load(sys.argv[1])
    for m in (5, 40):
        x = np.random.randn(m, 24).astype("float32")
        y = k(x, 2.5)
        assert isinstance(y, np.ndarray) and y.shape == (m, 24), y.shape
        np.testing.assert_allclose(y, x * 2.5, rtol=1e-6)
    t = torch.randn(9, 24)
    torch.testing.assert_close(k(t, -1.0), -t)
    for bad, msg in [((torch.randn(9, 24).double(), 1.0), "expects dtype float32"),
                     ((torch.randn(9, 23), 1.0), "expected 24"),
                     ((torch.randn(9, 24),), "takes 2 arguments")]:
        try:
            k(*bad)
        except tilelang.KernelArgumentError as err:
            assert msg in str(err), str(err)
        else:
            raise AssertionError(f"no error for {msg}")
    print("loaded", k.name, k.out_idx, [p.name for p in k.params])
""")


def _run_loader(path):
    return subprocess.run([sys.executable, "-c", LOADER, str(path)], capture_output=True,
                          text=True, timeout=300)


def test_export_and_load_in_a_fresh_process(tmp_path):
    k = tilelang.compile(scale_rows(), out_idx=[2], target="cpu")
    lib = tmp_path / "scale.so"
    k.export_library(str(lib))
    record = json.loads((tmp_path / "scale.so.json").read_text())
    assert record["out_idx"] == [2]
    assert record["params"][0]["shape"] == ["M", 24]
    assert record["params"][1] == {"name": "s", "dtype": "float32", "kind": "scalar"}
    assert record["target"]["kind"] == "llvm"
    assert record["device_source"]
    done = _run_loader(lib)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "loaded main [2] ['X', 's', 'Y']" in done.stdout


def test_loaded_kernel_keeps_written_params_for_torch_compile(tmp_path):
    k = tilelang.compile(bump(), target="cpu")
    k.export_library(str(tmp_path / "bump.so"))
    loaded = tilelang.load(tmp_path / "bump.so")
    assert loaded.prim_func is None
    assert "Tensor(a0!) A" in str(loaded.as_torch_op()._schema)
    a = torch.zeros(32)
    torch._dynamo.reset()
    torch.compile(lambda t: loaded(t), fullgraph=True, backend="aot_eager")(a)
    torch.testing.assert_close(a, torch.ones(32))


def test_load_reports_missing_or_bad_record(tmp_path):
    k = tilelang.compile(bump(), target="cpu")
    lib = tmp_path / "bump.so"
    k.export_library(str(lib))
    os.rename(str(lib) + ".json", tmp_path / "moved.json")
    with pytest.raises(TileLangError, match=r"bump.so.json does not exist"):
        tilelang.load(lib)
    (tmp_path / "bump.so.json").write_text('{"format": 99}')
    with pytest.raises(TileLangError, match="is not a kernel record: unknown record format"):
        tilelang.load(lib)


def test_load_refuses_a_library_that_is_not_the_exported_one(tmp_path):
    # a library truncated by an interrupted copy killed the loading process (SIGBUS)
    k = tilelang.compile(bump(), target="cpu")
    lib = tmp_path / "bump.so"
    k.export_library(str(lib))
    data = lib.read_bytes()
    lib.write_bytes(data[:len(data) // 2])
    with pytest.raises(TileLangError, match=r"bump.so is not the library that was exported"):
        tilelang.load(lib)


@pytest.mark.gpu
def test_export_and_load_cuda(tmp_path):
    k = tilelang.compile(scale_rows(), out_idx=[2], target="cuda")
    lib = tmp_path / "scale_cuda.so"
    k.export_library(str(lib))
    code = textwrap.dedent("""
        import sys, torch, tilelang
        k = tilelang.load(sys.argv[1])
        x = torch.randn(77, 24, device="cuda")
        torch.testing.assert_close(k(x, 3.0), x * 3)
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", code, str(lib)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-3000:]


def test_export_of_cached_and_loaded_kernels(tmp_path):
    first = tilelang.compile(bump(16), target="cpu")
    again = tilelang.compile(bump(16), target="cpu")  # served by the disk cache
    assert getattr(again.rt_mod, "kind", None) == "library"
    again.export_library(str(tmp_path / "a.so"))
    tilelang.load(tmp_path / "a.so").export_library(str(tmp_path / "b.so"))
    tilelang.clear_cache()  # its library gone (as an autotuner's scratch copy): built again
    again.export_library(str(tmp_path / "c.so"))
    for name in ("a.so", "b.so", "c.so"):
        a = torch.zeros(16)
        tilelang.load(tmp_path / name)(a)
        torch.testing.assert_close(a, torch.ones(16))
    assert getattr(first.rt_mod, "kind", None) != "library"
