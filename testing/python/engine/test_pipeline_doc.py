"""docs/passes.md's table of passes is the pipeline that runs: the same passes, in order."""

import os
import re

from tilelang.engine import pipeline

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "passes.md")


def test_pass_table_matches_the_pipeline():
    text = open(DOC).read()
    table = text[text.index("## The passes, in order"):]
    table = table[:table.index("\n\n", table.index("| --- |"))]
    rows = re.findall(r"^\| (\d+) \| `([\w.]+)`", table, re.M)
    assert [int(i) for i, _ in rows] == list(range(1, len(rows) + 1))
    names = [p.info.name for p in pipeline.tile_passes() + pipeline.stock_passes()]
    assert [n for _, n in rows] == names
