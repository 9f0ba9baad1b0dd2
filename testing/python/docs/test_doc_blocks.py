"""Every ```python block of README.md and docs/*.md runs, as a file of its own.

Blocks are written to files and run with this interpreter in subprocesses (a cwd and a
``TILELANG_CACHE_DIR`` per block). To pay ``import tilelang`` (seconds) once per group
rather than per block, the blocks selected in this session run in groups of a few (in file order,
docs/passes.md last), each group in one interpreter (``run_block_files.py``: a fresh namespace per file), two groups at a time. A
block marked ``<!-- doc-test: gpu -->`` is skipped where no GPU is visible.
"""

from __future__ import annotations

import re
import shlex
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from doc_blocks import REPO, doc_files, parse, python_blocks, run_blocks

BLOCKS = python_blocks()
_BY_ID = {b.id: b for b in BLOCKS}
_GROUP_SIZE = 6  # blocks per interpreter: each pays `import tilelang` (~4 s) once
_WORKERS = 2
_LAST = "docs/passes.md"  # a pass refactor is in flight: its blocks run in the last group


def _param(block):
    marks = []
    if block.needs_gpu:
        marks.append(pytest.mark.gpu)
    if block.skip_reason:
        marks.append(pytest.mark.skip(reason=f"doc-test: skip ({block.skip_reason})"))
    return pytest.param(block.id, marks=marks, id=block.id)


def _runnable(block) -> bool:
    return not block.skip_reason and (torch.cuda.is_available() or not block.needs_gpu)


@pytest.fixture(scope="module")
def results(request, tmp_path_factory):
    """Runs every selected, runnable block once; the result of each, by block id."""
    selected = [item.callspec.params["block_id"] for item in request.session.items
                if getattr(item, "callspec", None) is not None
                and item.originalname == "test_python_block"]
    blocks = [_BY_ID[i] for i in selected if _runnable(_BY_ID[i])]
    blocks.sort(key=lambda b: (b.file == _LAST, b.file, b.line))
    groups = [blocks[i:i + _GROUP_SIZE] for i in range(0, len(blocks), _GROUP_SIZE)]
    root = tmp_path_factory.mktemp("doc_blocks")
    merged: dict[str, dict] = {}
    with ThreadPoolExecutor(_WORKERS) as pool:
        for part in pool.map(lambda g: run_blocks(g[1], root / f"group{g[0]}"),
                             enumerate(groups)):
            merged.update(part)
    return merged


@pytest.mark.parametrize("block_id", [_param(b) for b in BLOCKS])
def test_python_block(block_id, results):
    r = results[block_id]
    assert r["ok"], f"the ```python block at {block_id} failed:\n{r['error']}"


def test_markers_are_well_formed():
    """A doc-test marker is `gpu` or `skip (reason)`, and stands before a ```python block."""
    problems = []
    for f in doc_files():
        for b in parse(f):
            if b.marker is None:
                continue
            if b.marker_error():
                problems.append(b.marker_error())
            elif b.lang not in ("python", "py", "python3"):
                problems.append(f"{b.id}: a doc-test marker before a ```{b.lang} block, "
                                "which is never run")
    assert not problems, "\n".join(problems)


def test_parser_finds_blocks_and_markers(tmp_path):
    """The extraction itself: languages, fence lines, markers and their reasons."""
    md = tmp_path / "probe.md"
    md.write_text("text\n<!-- doc-test: gpu -->\n```python\nx = 1\n```\n\n"
                  "<!-- doc-test: skip (needs a cluster) -->\n```python\ny = 2\n```\n"
                  "```bash\nls\n```\n```\nplain\n```\n<!-- doc-test: gpux -->\n```python\n```\n"
                  "```` ```python ```` is inline code\n")
    blocks = parse(md)
    assert [(b.line, b.lang) for b in blocks] == [(3, "python"), (8, "python"), (11, "bash"),
                                                  (14, ""), (18, "python")]
    assert blocks[0].needs_gpu and blocks[0].code == "x = 1\n"
    assert blocks[1].skip_reason == "needs a cluster" and not blocks[1].needs_gpu
    assert blocks[2].marker is None and blocks[3].marker is None
    assert blocks[4].marker_error() and "gpux" in blocks[4].marker_error()


def test_runner_reports_each_block(tmp_path):
    """A failing block names its error, a crashing one does not hide the blocks after it."""
    from doc_blocks import Block

    code = ["import sys\nassert __name__ == '__main__'\nopen('here', 'w').write('x')\n",
            "raise ValueError('doc block broke')\n",
            "import os\nos._exit(3)\n",
            "import os\nassert os.path.exists(os.environ['TILELANG_CACHE_DIR']) is False\n"
            "assert not os.path.exists('here')\n"]
    blocks = [Block("probe.md", i + 1, "python", c, None) for i, c in enumerate(code)]
    r = run_blocks(blocks, tmp_path)
    assert r["probe.md:1"]["ok"], r["probe.md:1"]
    assert not r["probe.md:2"]["ok"] and "doc block broke" in r["probe.md:2"]["error"]
    assert not r["probe.md:3"]["ok"] and "died" in r["probe.md:3"]["error"]
    assert r["probe.md:4"]["ok"], r["probe.md:4"]


def _commands(text: str) -> list[str]:
    """Shell commands split at `&&`, normalized: `python3` -> `python`, `-m pip` -> `pip`, no -q."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        line = line.split("#", 1)[0].strip()
        for cmd in filter(None, (c.strip() for c in line.split("&&"))):
            words = [w for w in shlex.split(cmd) if w != "-q"]
            words = ["python" if w == "python3" else w for w in words]
            if words[:3] == ["python", "-m", "pip"]:
                words = ["pip", *words[3:]]
            out.append(" ".join(words))
    return out


def test_quick_start_is_what_ci_runs():
    """The README's quick-start commands are run, in order, by .ci/run."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    quick = [b for b in parse(REPO / "README.md") if b.lang == "bash"
             and b.code.strip() in section]
    assert quick, "README.md has no ```bash block under '## Quick start'"
    wanted = _commands(quick[0].code)
    ci = iter(_commands((REPO / ".ci" / "run").read_text()))
    missing = [c for c in wanted if not any(c == d for d in ci)]
    assert not missing, f".ci/run does not run these quick-start commands in order: {missing}"
    assert re.search(r"torch==[\d.]+", quick[0].code)
