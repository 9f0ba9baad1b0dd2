"""The tile operators sit below the passes: no module of ``tilelang.ops`` imports
``tilelang.transform``, directly or through the tilelang modules it imports (lazy imports
inside functions count too).  Read from the sources, so import order cannot hide a cycle."""

import ast
from pathlib import Path

import tilelang

ROOT = Path(tilelang.__file__).parent


def _module_file(name: str) -> Path | None:
    """The source file of a ``tilelang`` module (a package's ``__init__.py``), or None."""
    rel = Path(*name.split(".")[1:])
    for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if p.is_file():
            return p
    return None


def _name_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["tilelang", *parts])


def imports_of(name: str) -> set[str]:
    """The tilelang modules ``name`` imports anywhere in its source, with the packages whose
    ``__init__`` such an import runs (the root package excepted: it imports everything)."""
    path = _module_file(name)
    is_pkg = path.name == "__init__.py"
    package = name if is_pkg else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names)
    out = set()
    for m in found:
        if not m.startswith("tilelang."):
            continue
        parts = m.split(".")
        for k in range(2, len(parts) + 1):  # the packages on the way run their __init__
            sub = ".".join(parts[:k])
            if _module_file(sub) is not None:
                out.add(sub)
    return out


def _chain_to(start: str, bad: str) -> list[str] | None:
    """An import chain from ``start`` to a module under ``bad``, or None."""
    seen, todo = {start: None}, [start]
    while todo:
        cur = todo.pop()
        for nxt in sorted(imports_of(cur)):
            if nxt in seen:
                continue
            seen[nxt] = cur
            if nxt == bad or nxt.startswith(bad + "."):
                chain = [nxt]
                while seen[chain[-1]] is not None:
                    chain.append(seen[chain[-1]])
                return chain[::-1]
            todo.append(nxt)
    return None


def test_the_import_scanner_sees_relative_and_lazy_imports():
    deps = imports_of("tilelang.transform.lower_tile_ops")
    assert "tilelang.ops" in deps and "tilelang.transform.pass_config" in deps
    assert "tilelang.layout.codec" in deps and "tilelang.layout" in deps


def test_no_tile_op_module_imports_the_passes():
    mods = sorted(_name_of(p) for p in (ROOT / "ops").glob("*.py"))
    assert "tilelang.ops.gemm" in mods
    chains = [c for c in (_chain_to(m, "tilelang.transform") for m in mods) if c]
    assert not chains, "tilelang.ops reaches tilelang.transform: " + "; ".join(
        " -> ".join(c) for c in chains)
