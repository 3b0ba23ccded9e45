"""Quitting while runs train asks what becomes of them (issue 29, item 7):
they train on headless (the engine is told to keep them), they stop, or the
quit is cancelled."""

from __future__ import annotations

from pathlib import Path

import pytest
from studio_harness import build_main_window


@pytest.mark.parametrize(
    ("choice", "closes", "keeps"),
    [("keep", True, True), ("stop", True, False), ("cancel", False, False)],
)
def test_the_quit_question_decides_the_runs_fate(
    qtbot, tmp_path: Path, choice: str, closes: bool, keeps: bool
) -> None:
    win = build_main_window(qtbot, tmp_path)
    win.session.state.runs["r-1"] = {
        "id": "r-1",
        "kind": "rl.train",
        "status": "running",
    }
    asked: list[int] = []
    win.ask_quit = lambda n: asked.append(n) or choice
    win.confirm_quit = True
    win.show()
    qtbot.waitExposed(win)
    assert win.close() is closes
    assert asked == [1] and win.keep_runs_on_quit is keeps


def test_nothing_is_asked_when_nothing_trains(qtbot, tmp_path: Path) -> None:
    win = build_main_window(qtbot, tmp_path)
    win.session.state.runs["r-1"] = {
        "id": "r-1",
        "kind": "rl.train",
        "status": "completed",
    }
    win.ask_quit = lambda n: pytest.fail("asked with no run training")
    win.confirm_quit = True
    win.show()
    qtbot.waitExposed(win)
    assert win.close() and not win.keep_runs_on_quit
