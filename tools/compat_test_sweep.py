"""Run the public TileLang test files on a CPU-only machine under the hooks of
``compat_sweep.py``: every ``tilelang.compile`` targets ``cuda -arch=sm_90a``, CUDA tensors are
made on the CPU, compiled kernels are not run (their outputs come back as zeros).  A pytest
plugin classifies each test case:

- ``PASS``: the test passed as is (source checks, errors it expected, CPU-only tests);
- ``COMPILED``: it compiled at least one kernel and then failed on an assertion outside
  tilelang (its result check: meaningless here, since no kernel ran);
- ``FAIL``: anything else (type, first line, innermost tilelang/test frame).

    cd /tmp/corpus/corpus && python3 -m pytest testing/python/language -q -p no:cacheprovider \
        -o addopts="" -p compat_test_sweep --sweep-out /tmp/tsweep.jsonl   # tools/ on PYTHONPATH
    python3 tools/compat_test_sweep.py /tmp/tsweep.jsonl        # summary against the bar

PASS and COMPILED say nothing about results on the GPU (the GPU run does).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compat_sweep  # noqa: E402

BAR = Path(__file__).resolve().parents[1] / ".compat" / "tests_public_surface.txt"


def pytest_addoption(parser):
    parser.addoption("--sweep-out", default="/tmp/compat_test_sweep.jsonl")


def pytest_configure(config):
    compat_sweep._install_stubs()
    compat_sweep._install_hooks()
    import torch

    torch.cuda.is_available = lambda: True  # the tests' requires_cuda marks see the H200
    torch.cuda.device_count = lambda: 1
    config._sweep_out = open(config.getoption("--sweep-out"), "a")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    compat_sweep._State.compiled = 0
    compat_sweep._State.result_path = "/dev/null"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call" or (rep.when == "setup" and not rep.passed):
        if rep.passed:
            status, detail = "PASS", ""
        elif rep.skipped:
            status, detail = "SKIP", str(rep.longrepr)[-160:]
        else:
            e = call.excinfo.value if call.excinfo else None
            tb = call.excinfo.tb if call.excinfo else None
            msg = (str(e).strip().splitlines() or [""])[0][:160] if e is not None else ""
            line = f"{type(e).__name__}: {msg} [{compat_sweep._where(tb)}]" if e is not None else ""
            result_check = isinstance(e, AssertionError) and not compat_sweep._in_tilelang(tb)
            status = "COMPILED" if result_check and compat_sweep._State.compiled else "FAIL"
            detail = line
        f = item.config._sweep_out
        f.write(json.dumps({"id": item.nodeid, "status": status, "detail": detail}) + "\n")
        f.flush()


def summarize(path: str) -> None:
    rows = {}
    for line in open(path):
        r = json.loads(line)
        rows[r["id"]] = r
    bar = [t for t in BAR.read_text().split() if t]
    counts: dict[str, int] = {}
    fails: dict[str, int] = {}
    for t in bar:
        st = rows.get(t, {"status": "MISSING"})["status"]
        counts[st] = counts.get(st, 0) + 1
        if st == "FAIL":
            key = rows[t]["detail"][:110]
            fails[key] = fails.get(key, 0) + 1
    for k, n in sorted(fails.items(), key=lambda kv: -kv[1]):
        print(f"{n:4d}  {k}")
    print("# bar cases:", ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    summarize(sys.argv[1])
