"""``engine.service.state.MetricsTail``: the rows a metrics file gained,
counted as ``iter_metrics`` counts them, read in chunks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.service import state
from engine.service.state import MetricsTail
from engine.store.metrics import read_metrics


@pytest.mark.parametrize("chunk", [7, 64, 4 << 20])
def test_rows_since_an_index_in_chunks_and_pages(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(state, "READ_CHUNK_BYTES", chunk)
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": i, "a/x": i * 0.5}) for i in range(40)]
    lines[5] = "{corrupt"
    lines[9] = "[1, 2]"  # JSON, but no row
    path.write_text("\n".join(lines) + "\n" + '{"step": 99, "a/y"')  # torn tail
    expected = read_metrics(path)
    assert len(expected) == 38

    assert MetricsTail(path).read() == expected
    assert MetricsTail(path, skip=30).read() == expected[30:]
    pages, tail = [], MetricsTail(path, skip=3)
    while page := tail.read(limit=4):
        pages.append(page)
    assert [r for p in pages for r in p] == expected[3:]
    assert all(len(p) == 4 for p in pages[:-1])
    assert tail.latest["a/x"] == 19.5 and tail.latest["step"] == 39

    # The torn line completes: it is read once, whole.
    with open(path, "a") as fh:
        fh.write(': 1.0}\n{"step": 100}\n')
    assert [r["step"] for r in tail.read()] == [99, 100]
    assert tail.read() == []
    assert tail.latest["a/y"] == 1.0


def test_a_missing_file_has_no_rows(tmp_path: Path) -> None:
    assert MetricsTail(tmp_path / "none.jsonl").read() == []
