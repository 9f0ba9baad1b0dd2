"""The on-disk cache: a second process gets the compiled kernel back."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import tilelang
from folders import read_only

PROGRAM = textwrap.dedent('''
    import sys, time, torch
    import tilelang, tilelang.language as T
    from tilelang.jit import cache

    # Keys must agree across this test's processes even while tilelang's sources are being
    # edited (a changed source rightly changes every key): pin the compiler's digest.
    cache.compiler_digest = lambda: "pinned"

    def add(N):
        @T.prim_func
        def main(A: T.Tensor((N,), "float32"), B: T.Tensor((N,), "float32")):
            with T.Kernel(1, threads=32) as bx:
                for i in T.Parallel(N):
                    B[i] = A[i] + 1
        return main

    f = add(64)
    t = time.perf_counter()
    k = tilelang.compile(f, out_idx=[1], target="cpu")
    ms = (time.perf_counter() - t) * 1e3
    a = torch.randn(64)
    assert torch.allclose(k(a), a + 1)
    print(f"{ms:.1f}")
''')


def run(tmp_path, env_extra):
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    env = {**os.environ, **env_extra}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         check=True)
    return float(out.stdout.strip().splitlines()[-1])


def test_second_process_hits_the_cache(tmp_path):
    env = {"TILELANG_CACHE_DIR": str(tmp_path / "cache")}
    run(tmp_path, env)
    entries = list((tmp_path / "cache" / "kernels").iterdir())
    assert len(entries) == 1 and (entries[0] / "kernel.so").exists()
    run(tmp_path, env)  # loads the stored library (and still computes the right answer)
    assert len(list((tmp_path / "cache" / "kernels").iterdir())) == 1


def test_disable_cache_env(tmp_path):
    env = {"TILELANG_CACHE_DIR": str(tmp_path / "cache"), "TILELANG_DISABLE_CACHE": "1"}
    run(tmp_path, env)
    assert not (tmp_path / "cache" / "kernels").exists()


def test_key_depends_on_program_and_target():
    from tilelang.jit.cache import key_of
    from tilelang.engine.target import resolve
    import tilelang.language as T

    @T.prim_func
    def f(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                A[i] = 0.0

    @T.prim_func
    def g(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                A[i] = 1.0

    cpu, cuda = resolve("cpu"), resolve("cuda -arch=sm_80")
    assert key_of(f, cpu, [], {}) == key_of(f, cpu, [], {})
    assert key_of(f, cpu, [], {}) != key_of(g, cpu, [], {})
    assert key_of(f, cpu, [], {}) != key_of(f, cuda, [], {})
    assert key_of(f, cpu, [], {}) != key_of(f, cpu, [0], {})


def test_disable_cache_function(tmp_path, monkeypatch):
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path))
    tilelang.disable_cache()
    try:
        import tilelang.language as T

        @T.prim_func
        def f(A: T.Tensor((8,), "float32")):
            with T.Kernel(1, threads=8) as bx:
                for i in T.Parallel(8):
                    A[i] = 2.0

        k = tilelang.compile(f, target="cpu")
        a = torch.zeros(8)
        k(a)
        assert torch.all(a == 2) and not (tmp_path / "kernels").exists()
    finally:
        tilelang.enable_cache()


LAYOUT_PROGRAM = textwrap.dedent('''
    import sys, torch
    import tilelang, tilelang.language as T
    from tilelang.jit import cache
    from tilelang.jit.cache import key_of
    from tilelang.engine.target import resolve
    from tilelang.layout import Layout

    cache.compiler_digest = lambda: "pinned"  # as in PROGRAM

    MAPS = {"rows": lambda i, j: [i, j], "cols": lambda i, j: [j, i],
            "xor": lambda i, j: [i, j ^ (i % 4)]}

    def program(kind):
        @T.prim_func
        def main(A: T.Tensor((16, 16), "float32"), B: T.Tensor((16, 16), "float32")):
            with T.Kernel(1, threads=64) as bx:
                S = T.alloc_shared((16, 16), "float32")
                T.annotate_layout({S: Layout((16, 16), MAPS[kind])})
                T.copy(A, S)
                for i, j in T.Parallel(16, 16):
                    B[i, j] = S[i, j] * 2
        return main

    for kind in sys.argv[1:]:
        f = program(kind)
        k = tilelang.compile(f, out_idx=[1], target="cpu")
        a = torch.randn(16, 16)
        assert torch.allclose(k(a), a * 2), kind
        print(kind, key_of(f, resolve("cpu"), [1], {}))
''')


def layout_keys(tmp_path, *kinds):
    script = tmp_path / "layouts.py"
    script.write_text(LAYOUT_PROGRAM)
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(script), *kinds], capture_output=True, text=True,
                         env=env)
    assert out.returncode == 0, out.stderr
    return dict(line.split() for line in out.stdout.strip().splitlines())


def test_programs_differing_only_in_an_index_map_get_their_own_kernels(tmp_path):
    """Each process sees only its own map, so a key that held the map's position in a
    process-local table would collide; the printed layout keeps the keys apart."""
    rows = layout_keys(tmp_path, "rows")["rows"]
    cols = layout_keys(tmp_path, "cols")["cols"]
    assert rows != cols
    both = layout_keys(tmp_path, "xor", "rows", "cols")  # one process, cache on, all correct
    assert both["rows"] == rows and both["cols"] == cols and len(set(both.values())) == 3
    assert len(list((tmp_path / "cache" / "kernels").iterdir())) == 3


def test_key_covers_the_compiler_itself(monkeypatch):
    """An upgraded tilelang (other sources or headers) never reuses an older kernel."""
    from tilelang.jit import cache
    from tilelang.engine.target import resolve
    import tilelang.language as T

    @T.prim_func
    def f(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                A[i] = 0.0

    before = cache.key_of(f, resolve("cpu"), [], {})
    assert len(cache.compiler_digest()) == 64
    monkeypatch.setattr(cache, "compiler_digest", lambda: "0" * 64)
    assert cache.key_of(f, resolve("cpu"), [], {}) != before


# Damaged entries ---------------------------------------------------------------------------

def _truncate(lib, meta):
    data = lib.read_bytes()
    lib.write_bytes(data[:len(data) // 2])


def _flip(lib, meta):
    data = bytearray(lib.read_bytes())  # at 1000: the dynamic linker's tables, loading dies
    at = min(1000, len(data) - 200)
    data[at:at + 200] = bytes(b ^ 0xFF for b in data[at:at + 200])
    lib.write_bytes(bytes(data))


def _empty_list_meta(lib, meta):
    meta.write_text("[]")


@pytest.fixture(scope="module")
def pristine_entry(tmp_path_factory):
    """One cache entry of the ``add`` program, stored by a first process."""
    root = tmp_path_factory.mktemp("stored")
    run(root, {"TILELANG_CACHE_DIR": str(root / "cache")})
    (entry,) = (root / "cache" / "kernels").iterdir()
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["library"]["size"] == (entry / "kernel.so").stat().st_size
    return entry, root / "prog.py"  # the same program at the same lines: the same key


@pytest.mark.parametrize("damage", [_truncate, _flip, _empty_list_meta])
def test_damaged_entry_is_deleted_and_rebuilt(tmp_path, pristine_entry, damage):
    """A half library gave SIGBUS, flipped bytes SIGSEGV, ``[]`` an AttributeError; now the
    next process warns, deletes the entry, recompiles (and stores a good entry again)."""
    stored, script = pristine_entry
    entry = tmp_path / "cache" / "kernels" / stored.name
    shutil.copytree(stored, entry)
    damage(entry / "kernel.so", entry / "meta.json")
    env = {**os.environ, "TILELANG_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "deleting the damaged cache entry" in out.stderr
    from tilelang.jit.cache import _damage

    meta, why = _damage(entry)  # rebuilt and stored again, intact
    assert why is None and meta["source"] is not None


# Where the cache lives ----------------------------------------------------------------------



def fill_program(value):
    import tilelang.language as T

    @T.prim_func
    def f(A: T.Tensor((8,), "float32")):
        with T.Kernel(1, threads=8) as bx:
            for i in T.Parallel(8):
                A[i] = value
    return f


def test_empty_cache_dir_means_the_default(tmp_path, monkeypatch):
    """``TILELANG_CACHE_DIR=""`` used to cache into the working directory."""
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("TILELANG_CACHE_DIR", "")
    tilelang.compile(fill_program(3.0), target="cpu")
    assert list(work.iterdir()) == []
    assert len(list((home / ".tilelang" / "cache" / "kernels").iterdir())) == 1


def test_unwritable_cache_dir_falls_back_to_temp_with_one_warning(tmp_path, monkeypatch):
    import tempfile
    import warnings

    ro, tmp = tmp_path / "ro", tmp_path / "tmp"
    tmp.mkdir()
    undo = read_only(ro)
    try:
        monkeypatch.setenv("TILELANG_CACHE_DIR", str(ro))
        monkeypatch.setattr(tempfile, "tempdir", str(tmp))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for value in (4.0, 5.0):
                k = tilelang.compile(fill_program(value), target="cpu")
                a = torch.zeros(8)
                k(a)
                assert torch.all(a == value)
        msgs = [str(w.message) for w in caught if "tilelang" in str(w.message)]
        assert len(msgs) == 1 and "cannot be written" in msgs[0], msgs
        (fallback,) = tmp.iterdir()
        assert len(list((fallback / "kernels").iterdir())) == 2
        assert list(ro.iterdir()) == []
    finally:
        undo()


def test_read_only_cache_serves_its_kernels(tmp_path, monkeypatch):
    """A cache that cannot be written (a shared, prepared one) still serves the kernels it holds,
    without the temp-folder fallback or its warning."""
    import warnings

    from tilelang.jit import cache

    folder = tmp_path / "shared"
    monkeypatch.setenv("TILELANG_CACHE_DIR", str(folder))
    tilelang.compile(fill_program(6.0), target="cpu")  # stores the kernel
    (stored,) = (folder / "kernels").iterdir()
    undo = read_only(folder)
    cache._writable.cache_clear()  # as a fresh process would see the folder
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            k = tilelang.compile(fill_program(6.0), target="cpu")
        assert k.library_path == str(stored / "kernel.so")
        assert [str(w.message) for w in caught if "tilelang" in str(w.message)] == []
        a = torch.zeros(8)
        k(a)
        assert torch.all(a == 6.0)
    finally:
        undo()
        cache._writable.cache_clear()


def test_compiler_digest_follows_edits_without_reading_sources(tmp_path, monkeypatch):
    """The digest changes when a source is edited, added or renamed, and is computed from the
    files' metadata: a fresh process's cache hit reads no source of tilelang."""
    import builtins

    from tilelang.jit import cache

    tree = tmp_path / "pkg"
    (tree / "sub").mkdir(parents=True)
    (tree / "a.py").write_text("x = 1\n")
    (tree / "sub" / "b.py").write_text("y = 2\n")
    (tree / "notes.txt").write_text("not a source")
    trees = [(str(tree), ".py")]

    def refuse(*args, **kwargs):
        raise AssertionError(f"a source was opened: {args[:1]}")

    def digest():
        with monkeypatch.context() as m:
            m.setattr(builtins, "open", refuse)
            return cache.tree_digest(trees)

    seen = {digest()}
    (tree / "notes.txt").write_text("still not a source")
    assert digest() in seen
    st = os.stat(tree / "a.py")
    (tree / "a.py").write_text("x = 3\n")  # an edit of the same size, a nanosecond later
    os.utime(tree / "a.py", ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    for change in (lambda: None,
                   lambda: (tree / "c.py").write_text(""),
                   lambda: (tree / "sub" / "b.py").rename(tree / "sub" / "d.py")):
        change()
        d = digest()
        assert d not in seen
        seen.add(d)
    cache.compiler_digest.cache_clear()  # tilelang's own digest, as a fresh process makes it
    with monkeypatch.context() as m:
        m.setattr(builtins, "open", refuse)
        assert len(cache.compiler_digest()) == 64


def test_the_same_program_elsewhere_names_its_own_line(tmp_path, monkeypatch):
    # a CPU library names the user's line in its bounds errors: the entry of the same kernel
    # written in another file (or at another line) must not be served
    import importlib.util

    from tilelang.errors import OutOfBoundsError

    monkeypatch.setenv("TILELANG_CACHE_DIR", str(tmp_path / "cache"))
    kernel = textwrap.dedent("""
        import tilelang.language as T

        @T.prim_func
        def f(n: T.int32, O: T.Tensor((8,), "int32")):
            with T.Kernel(1, threads=1) as bx:
                O[n] = 1
    """)
    for name, pad in (("first", 0), ("second", 3)):
        path = tmp_path / f"{name}.py"
        path.write_text("\n" * pad + kernel)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        k = tilelang.compile(mod.f, out_idx=[1], target="cpu")
        with pytest.raises(OutOfBoundsError, match=rf"at {path}:{7 + pad}: O\[n\] = 1"):
            k(100)
