"""The Training workspace's readiness strip on a real engine: trajectories
recorded straight into the project's store show as counts against the
retraining rules, and the strip flips to ready once the rules are met; the
schedule a ``serve-http --retrain-every`` records, and the agent's
versions, are shown too."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from studio_harness import build_main_window, start_on_project

from engine import retrain_status
from engine.store.project import Project
from engine.store.trajectories import TrajectoryStore
from studio.main_window import MainWindow
from studio.state.readiness import readiness_text
from studio.training.readiness import ReadinessStrip


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.show()
    win.set_workspace("training")
    yield win
    win.session.client.stop()


def _record(project: Path, scenario: str, count: int) -> None:
    store = TrajectoryStore(project)
    try:
        for _ in range(count):
            tid = store.start("bot", scenario=scenario)
            store.add_steps(
                tid, [{"action": "a", "reward": 1.0}, {"action": "b", "reward": 0.0}]
            )
            store.end(tid, status="completed")
    finally:
        store.close()


def _set(project: Path, key: str, value: dict[str, Any]) -> None:
    opened = Project.open(project)
    try:
        opened.set_setting(key, value)
    finally:
        opened.close()


def _shows(qtbot, strip: ReadinessStrip, check: Callable[[str], bool]) -> None:  # type: ignore[no-untyped-def]
    """Wait until the strip's text passes ``check``; each look asks the
    engine again (an answer still awaited is not asked twice)."""

    def shown() -> bool:
        strip.refresh()
        return check(strip.headline.text() + "\n" + strip.details.text())

    qtbot.waitUntil(shown, timeout=30_000)


def test_the_strip_counts_trajectories_and_flips_to_ready(
    qtbot, window: MainWindow
) -> None:
    strip: ReadinessStrip = window.workspaces["training"].readiness
    project = Path(window.session.state.path)
    _shows(qtbot, strip, lambda t: "No training flow is set" in t)
    _set(
        project,
        retrain_status.SETTINGS_KEY,
        {
            "flow": "cartpole_ppo",
            "agent": "bot",
            "min_trajectories": 4,
            "min_scenario_groups": 2,
            "min_hours_between": 0,
        },
    )
    _record(project, "RLHUB-1", 3)
    _shows(qtbot, strip, lambda t: "3 new of 4 needed" in t)
    text = strip.headline.text() + "\n" + strip.details.text()
    assert "Not ready to train: 3 of 4 trajectories recorded." in text
    assert "scenario groups: 1 of 2" in text
    assert "At least 0 h between trainings (never trained)" in text
    assert "No schedule" in text
    assert "Agent bot: latest none, deployed none" in text
    assert strip.text is not None and not strip.text.ready

    _record(project, "RLHUB-2", 1)
    _shows(qtbot, strip, lambda t: "Ready to train." in t)
    assert strip.text is not None and strip.text.ready
    assert "4 new of 4 needed (4 ended, 0 recording)" in strip.details.text()
    assert "scenario groups: 2 of 2" in strip.details.text()

    # A serve-http --retrain-every records its schedule in the project.
    _set(
        project,
        retrain_status.SCHEDULE_KEY,
        {
            "everySeconds": 86400.0,
            "nextAt": time.time() + 3600,
            "lastCheck": {"time": time.time(), "reason": "Not ready to train: x."},
            "lastStarted": {"time": time.time() - 60, "started": "r-7"},
        },
    )
    _shows(qtbot, strip, lambda t: "Schedule: every 1 d, next check" in t)
    assert "(last check: Not ready to train: x.)" in strip.details.text()
    assert "; it last started r-7 at " in strip.details.text()


def test_a_schedule_left_by_a_server_that_died_is_no_schedule(
    tmp_path: Path,
) -> None:
    project = Project.open(tmp_path / "p", create=True)
    try:
        recorded = {
            "everySeconds": 60.0,
            "nextAt": time.time() + 30,
            "lastCheck": None,
            "lastStarted": None,
        }
        project.set_setting(retrain_status.SCHEDULE_KEY, recorded)
        assert retrain_status.recorded_schedule(project) == recorded
        overdue = time.time() - retrain_status.SCHEDULE_GRACE_S - 1
        project.set_setting(
            retrain_status.SCHEDULE_KEY, {**recorded, "nextAt": overdue}
        )
        status = retrain_status.recorded_schedule(project)
        assert status == dict.fromkeys(
            ("everySeconds", "nextAt", "lastCheck", "lastStarted")
        )
    finally:
        project.close()


def test_the_text_names_versions_and_the_last_completed_run() -> None:
    status = {
        "readiness": {"ready": False, "reason": "r.", "stats": {}},
        "schedule": {"everySeconds": None, "nextAt": None, "lastCheck": None},
        "settings": {"agent": "bot", "flow": "f"},
        "latestModelVersion": "v3",
        "deployedModelVersion": "v2",
        "lastCompleted": {"job_id": "r1", "name": "retrain", "ended": 0.0},
    }
    text = readiness_text(status)
    assert text.headline == "Not ready to train: r."
    assert text.schedule.startswith("No schedule")
    assert text.hours == "At least ? h between trainings (never trained)"
    assert text.versions.startswith("Agent bot: latest v3, deployed v2")
    assert "last completed: retrain (" in text.versions


def test_a_project_without_a_training_flow_is_off_not_warned() -> None:
    """A new project has no training flow: retraining is off, which is no
    fault, so the headline says so without the warning colour."""
    status = {"readiness": {"ready": False, "reason": "No flow."}, "settings": {}}
    text = readiness_text(status)
    assert not text.configured
    assert text.headline == "Automatic retraining is off. No flow."


def test_the_details_stay_folded_until_asked(qtbot, window: MainWindow) -> None:  # type: ignore[no-untyped-def]
    strip: ReadinessStrip = window.workspaces["training"].readiness
    _shows(qtbot, strip, lambda t: "Automatic retraining is off" in t)
    assert strip.headline.styleSheet() == ""
    assert not strip.details.isVisibleTo(strip)
    strip.toggle.click()
    assert strip.details.isVisibleTo(strip)
    assert "Trajectories:" in strip.details.text()
