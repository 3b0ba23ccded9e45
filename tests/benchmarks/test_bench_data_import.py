"""Benchmark (issue 30's targets): a 100,000-row JSONL chat file previews in
at most 1 s and imports (read, check, deduplicate, split, write JSONL and
Parquet) in at most 10 s.

Run with::

    .venv/bin/pytest tests/benchmarks/test_bench_data_import.py -s -o addopts=""

Each row is a chat of a system message, a user message and the assistant's
answer (about 330 characters, all rows distinct): a 41 MB file. The preview is
timed twice: in-process (``preview``, the first 20 rows) and as the command
a user types (``rl-studio-engine data import FILE --preview``, interpreter
start included). The import is timed without and with token statistics (a
tiny Qwen2 tokenizer, on a sample of 2,000 rows); the load average is
printed with the figures, as the machine is shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny_models import build_tiny_model

from engine.llm.data_import import import_dataset, preview, validate_import

pytestmark = pytest.mark.bench

ROOT = Path(__file__).resolve().parents[2]
ROWS = 100_000
SYSTEM = (
    "You resolve Jira issues by calling exactly one tool per turn. Tools: "
    "start_progress, resolve_issue, close_issue, comment."
)


def _write(path: Path) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(ROWS):
            row = {
                "messages": [
                    {"role": "system", "content": SYSTEM},
                    {
                        "role": "user",
                        "content": f"Issue RLHUB-{i}: status In Progress, priority "
                        f"{('Low', 'High')[i % 2]}, {i % 7} comments. Next tool?",
                    },
                    {
                        "role": "assistant",
                        "content": ("resolve_issue", "comment")[i % 2],
                    },
                ]
            }
            fh.write(json.dumps(row) + "\n")


def test_preview_and_import_of_100k_chat_rows(tmp_path: Path) -> None:
    source = tmp_path / "chats.jsonl"
    _write(source)
    size_mb = source.stat().st_size / 1e6
    model = build_tiny_model(tmp_path / "base")

    t0 = time.perf_counter()
    shown = preview(str(source))
    in_process = time.perf_counter() - t0
    assert shown["format"] == "chat" and len(shown["rows"]) == 20

    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "engine", "data", "import", str(source), "--preview"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    command = time.perf_counter() - t0
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["format"] == "chat"

    t0 = time.perf_counter()
    plain = import_dataset(
        validate_import({"source": str(source), "name": "plain"}), tmp_path / "p"
    )
    imported = time.perf_counter() - t0
    assert (plain["stats"]["train"], plain["stats"]["validation"]) == (90_000, 10_000)

    t0 = time.perf_counter()
    measured = import_dataset(
        validate_import(
            {"source": str(source), "name": "tokens", "base_model": str(model)}
        ),
        tmp_path / "p",
    )
    with_tokens = time.perf_counter() - t0
    tokens = measured["stats"]["tokens"]
    assert tokens["measured_rows"] == 2_000 and tokens["truncated"] == 0

    print(
        f"\n{ROWS:,} chat rows ({size_mb:.0f} MB): preview {in_process:.3f} s "
        f"in-process, {command:.2f} s as a command; import {imported:.2f} s, "
        f"{with_tokens:.2f} s with token statistics (mean {tokens['mean']:.0f} "
        f"tokens); load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    assert in_process <= 1.0 and command <= 1.0
    assert imported <= 10.0 and with_tokens <= 10.0
