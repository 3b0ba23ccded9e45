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


@pytest.mark.parametrize(
    ("kind", "status", "reason", "told"),
    [
        ("rl.train", "completed", "", "PPO CartPole-v1 · calm-otter completed."),
        ("rl.train", "failed", "The loss became nan.", "PPO CartPole-v1 · calm-otter "
         "failed: The loss became nan."),
        ("rl.train", "stopped", "", None),  # the user stopped it: they know
        ("env_preview", "completed", "", None),  # not a training run
    ],
)  # fmt: skip
def test_a_run_ending_while_the_user_looks_elsewhere_is_announced(
    qtbot, tmp_path: Path, kind: str, status: str, reason: str, told: str | None
) -> None:
    """Issue 29, item 7: nothing said so when a run ended."""
    win = build_main_window(qtbot, tmp_path)
    win.session.state.runs["r-1"] = {
        "id": "r-1",
        "kind": kind,
        "name": "PPO CartPole-v1 · calm-otter",
        "status": status,
    }
    said: list[tuple[str, str]] = []
    win.notify = lambda title, text: said.append((title, text))
    assert not win.isActiveWindow()
    win.session.run_ended.emit("r-1", status, reason)
    assert said == ([] if told is None else [("RL Studio", told)])


def test_the_desktop_is_told_without_a_tray(qtbot, tmp_path: Path) -> None:
    """Offscreen there is no system tray: the taskbar is asked for attention
    and nothing fails."""
    from PySide6.QtWidgets import QSystemTrayIcon

    win = build_main_window(qtbot, tmp_path)
    win.notifier.notify("RL Studio", "PPO CartPole-v1 · calm-otter completed.")
    # A tray icon exactly where the desktop has a tray to show it in.
    assert (win.notifier.tray is not None) == QSystemTrayIcon.isSystemTrayAvailable()
