"""Benchmark: the traces view opens 100,000 steps in under a second and
labels at keyboard speed (no key press over 50 ms).

Run with ``.venv/bin/pytest tests/benchmarks/test_bench_labels.py -s -o addopts=""``.

The trace file holds 1,000 episodes of 100 steps, each step with a Jira-like
prompt (a system and a user message, about 700 characters) and a short
completion: about 90 MB. Opening is the file chosen in the list until its
episode table is filled and the first episode's steps are shown; a key press
is the press plus the events it causes (the label committed to SQLite, the
row repainted, the next step selected and its prompt shown).
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import json
import statistics
import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from studio.model_manager.trace_viewer import TraceViewer

pytestmark = pytest.mark.bench

EPISODES, STEPS = 1_000, 100
SYSTEM = (
    "You resolve Jira issues by calling exactly one tool per turn. Answer with "
    "the tool name only. Tools: start_progress, resolve_issue, close_issue, "
    "reopen_issue, assign, comment, link_duplicate, escalate. " * 2
)


def _write(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for e in range(EPISODES):
            steps = [
                {
                    "t": t,
                    "messages": [
                        {"role": "system", "content": SYSTEM},
                        {
                            "role": "user",
                            "content": f"Issue RLHUB-{e} step {t}: status In "
                            "Progress, assignee none, priority High, 2 comments, "
                            "last comment: 'the fix is merged, please verify'.",
                        },
                    ],
                    "completion": "resolve_issue" if t % 3 else "comment",
                    "tool": "resolve_issue" if t % 3 else "comment",
                    "action": t % 8,
                    "parsed": True,
                    "valid": t % 7 != 0,
                    "reward": 0.1 * (t % 5) - 0.2,
                    "reward_breakdown": {"status": 0.1, "step": -0.01},
                }
                for t in range(STEPS)
            ]
            ep = {
                "episode": e,
                "env": "envs/jira.env.json",
                "task_id": f"RLHUB-{e}",
                "policy": "llm:tiny" if e % 2 else "llm:base",
                "steps": steps,
                "return": sum(s["reward"] for s in steps),
                "length": STEPS,
                "success": e % 3 == 0,
                "truncated": False,
            }
            fh.write(json.dumps(ep) + "\n")


def test_open_100k_steps_and_label_at_keyboard_speed(qtbot, tmp_path: Path) -> None:
    project = tmp_path / "project"
    path = project / "data" / "traces" / "big.jsonl"
    _write(path)
    size_mb = path.stat().st_size / 1e6
    viewer = TraceViewer()
    qtbot.addWidget(viewer)
    viewer.resize(1200, 800)
    viewer.show()
    viewer.set_project(str(project))
    t0 = time.perf_counter()
    viewer.files.setCurrentRow(0)
    QApplication.processEvents()
    opened = time.perf_counter() - t0
    assert len(viewer.browser.episodes.model.records) == EPISODES
    assert len(viewer.browser.steps.model.records) == STEPS

    viewer.browser.steps.view.setFocus()
    presses = []
    for i in range(300):
        key = (Qt.Key.Key_G, Qt.Key.Key_B)[i % 2]
        if i % 100 == 99:  # next episode: its 100 steps are listed
            viewer.browser.episodes.select_keys([str(i // 100 + 1)])
            QApplication.processEvents()
        t = time.perf_counter()
        qtbot.keyClick(viewer.browser.steps.view, key)
        QApplication.processEvents()
        presses.append(time.perf_counter() - t)
    t = time.perf_counter()
    qtbot.keyClick(
        viewer.browser.steps.view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier
    )
    QApplication.processEvents()
    undo = time.perf_counter() - t
    assert viewer.labels.store is not None and viewer.labels.store.count() == 299
    print(
        f"\nopen {EPISODES * STEPS} steps ({size_mb:.0f} MB): {opened * 1000:.0f} ms; "
        f"label key press: median {statistics.median(presses) * 1000:.1f} ms, "
        f"99th percentile {sorted(presses)[int(0.99 * len(presses))] * 1000:.1f} ms, "
        f"max {max(presses) * 1000:.1f} ms over {len(presses)}; "
        f"undo {undo * 1000:.1f} ms"
    )
    assert max(presses) < 0.05 and undo < 0.05
    assert opened < 1.0
