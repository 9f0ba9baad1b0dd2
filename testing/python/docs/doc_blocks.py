"""The fenced code blocks of README.md and docs/*.md, and a runner that executes them as files.

A block is a fence opened with a language word (```python, ```bash, ...). The line right before
the fence may carry a marker, an HTML comment the rendered page hides:

- ``<!-- doc-test: gpu -->``: the block needs a CUDA GPU (skipped where none is visible);
- ``<!-- doc-test: skip (why) -->``: the block cannot run anywhere in CI; the reason is required.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
_SKIP = re.compile(r"^skip\s*\((.+)\)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file (relative to the repository), the fence's line, language, code."""

    file: str
    line: int
    lang: str
    code: str
    marker: str | None  # the text of a doc-test marker on the line before the fence

    @property
    def id(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def needs_gpu(self) -> bool:
        return self.marker == "gpu"

    @property
    def skip_reason(self) -> str | None:
        m = _SKIP.match(self.marker or "")
        return m.group(1).strip() if m else None

    def marker_error(self) -> str | None:
        """Why the marker is malformed, or None when it is absent or well formed."""
        if self.marker is None or self.needs_gpu or self.skip_reason:
            return None
        return (f"{self.id}: unknown doc-test marker {self.marker!r}; write "
                "'<!-- doc-test: gpu -->' or '<!-- doc-test: skip (reason) -->'")


def doc_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def parse(path: Path) -> list[Block]:
    """The fenced blocks of one markdown file, in order (an unclosed fence raises ValueError)."""
    rel = path.relative_to(REPO).as_posix() if path.is_relative_to(REPO) else path.name
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m or (m.group(1)[0] == "`" and "`" in lines[i][len(m.group(1)):]):
            # a backtick fence's info string has no backtick (CommonMark): this is inline code
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2).lower(), i
        marker = _MARKER.match(lines[i - 1]) if i > 0 else None
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise ValueError(f"{rel}:{start + 1}: the fence is never closed")
        blocks.append(Block(rel, start + 1, lang, "\n".join(body) + "\n",
                            marker.group(1) if marker else None))
        i += 1
    return blocks


def python_blocks() -> list[Block]:
    return [b for f in doc_files() for b in parse(f) if b.lang in ("python", "py", "python3")]


_DRIVER = Path(__file__).with_name("run_block_files.py")


def run_blocks(blocks: list[Block], workdir: Path, timeout: float = 300) -> dict[str, dict]:
    """Run each block as its own file, in order, in one fresh interpreter; a result per block id.

    Each block gets its own folder (its cwd) and ``TILELANG_CACHE_DIR`` under ``workdir``. A block
    that kills the interpreter is reported as such, and the blocks after it run in a new one.
    """
    results: dict[str, dict] = {}
    todo = list(blocks)
    while todo:
        jobs = []
        for b in todo:
            folder = workdir / re.sub(r"[^\w]+", "_", b.id)
            folder.mkdir(parents=True, exist_ok=True)
            src = folder / (re.sub(r"[^\w]+", "_", b.id) + ".py")
            src.write_text(b.code, encoding="utf-8")
            jobs.append({"id": b.id, "path": str(src), "cwd": str(folder),
                         "cache": str(folder / "cache")})
        fd, out = tempfile.mkstemp(suffix=".jsonl", dir=workdir)
        os.close(fd)
        spec = Path(out).with_suffix(".json")
        spec.write_text(json.dumps(jobs))
        env = dict(os.environ, PYTHONUNBUFFERED="1", TQDM_DISABLE="1")
        try:
            proc = subprocess.run([sys.executable, str(_DRIVER), str(spec), out], env=env,
                                  cwd=str(workdir), capture_output=True, text=True,
                                  timeout=timeout)
            tail, died = (proc.stdout + proc.stderr)[-4000:], proc.returncode != 0
        except subprocess.TimeoutExpired as e:
            tail = ((e.stdout or b"").decode(errors="replace")
                    + (e.stderr or b"").decode(errors="replace"))[-4000:]
            died = True
        for line in Path(out).read_text().splitlines():
            r = json.loads(line)
            results[r["id"]] = r
        todo = [b for b in todo if b.id not in results]
        if todo and died:
            # the first block without a result is the one that was running
            results[todo[0].id] = {"id": todo[0].id, "ok": False,
                                   "error": "the interpreter died or timed out while running "
                                            f"this block; its output ends with:\n{tail}"}
            todo = todo[1:]
        elif todo:
            raise RuntimeError(f"the block runner stopped early:\n{tail}")
    return results
