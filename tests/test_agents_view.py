"""The Models workspace's Agents tab on a real engine and a real project store
(issue 32, "a screenshot of the agent's versions with the gate's decision
and the switch").

Agent ``pole`` has three versions written through the store's API (no
training): v1 evaluated at 149.9, v2 at 17.7 (the gate keeps it a candidate:
below v1) and v3 at 160 whose run warned (kept a candidate for its health).
The tab shows the gate's decisions, switches the agent and the project off
and on, promotes v2 and rolls it back by hand, each in the promotion log with
the reason typed; a rollback with nothing before answers one sentence.

With ``RLSTUDIO_SCREENSHOTS=DIR`` the tab is saved as
``DIR/agents-versions-gate.png`` (docs/screenshots/, by hand).
"""

from __future__ import annotations

import html
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import Qt
from studio_harness import build_main_window, start_on_project

from engine.store.decisions import DecisionLog
from engine.store.project import Project
from engine.store.promotion import (
    NoFallback,
    Promotion,
    agent_settings,
    named_rule_env,
    serving_settings,
)
from studio.main_window import MainWindow
from studio.model_manager.agents_view import COLUMNS, AgentsView
from studio.model_manager.workspace import ModelsWorkspace

AGENT = "pole"
WARNING = "The loss was NaN at step 3."
REFUSED = (
    "v2 stays a candidate: eval/mean_reward 17.7 is below v1's 149.9 minus the "
    "tolerance 0."
)


def build_project(root: Path) -> None:
    """Three versions of ``pole``, the last one's run with a warning."""
    project = Project.open(root, create=True)
    try:
        for reward, warned in ((149.9, False), (17.7, False), (160.0, True)):
            run = project.create_run("rl.train", {"env": "CartPole-v1"}, "PPO run")
            summary = {"warnings": [WARNING]} if warned else {}
            project.update_run(run.id, status="completed", summary=summary)
            weights = root / "scratch" / "model.zip"
            weights.parent.mkdir(exist_ok=True)
            weights.write_bytes(b"not read: nothing acts in this test")
            model = project.register_model(
                name=f"PPO {reward}",
                kind="sb3-policy",
                files=[weights],
                source_run=run.id,
                env="CartPole-v1",
                algo="PPO",
                metrics={"eval/mean_reward": reward},
            )
            project.add_version(AGENT, model.id)
    finally:
        project.close()


@pytest.fixture
def agents(qtbot, tmp_path: Path) -> Iterator[tuple[MainWindow, AgentsView, Path]]:  # type: ignore[no-untyped-def]
    root = tmp_path / "project"
    build_project(root)
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, root)
    workspace = win.workspaces["models"]
    assert isinstance(workspace, ModelsWorkspace)
    win.resize(1600, 800)
    win.show()
    win.set_workspace("models")
    workspace.tabs.setCurrentWidget(workspace.agents)  # asks for the agents
    view = workspace.agents
    qtbot.waitUntil(lambda: view.versions.rowCount() == 3, timeout=20_000)
    yield win, view, root
    win.session.client.stop()


def cells(view: AgentsView) -> list[dict[str, str]]:
    rows = []
    for row in range(view.versions.rowCount()):
        texts = [view.versions.item(row, c).text() for c in range(len(COLUMNS))]
        rows.append(dict(zip(COLUMNS, texts, strict=True)))
    return rows


def agent(view: AgentsView) -> dict[str, Any]:
    found = view.agent()
    assert found is not None
    return found


def stored(root: Path) -> tuple[bool, bool]:
    """The agent's and the project's switches as the store holds them."""
    project = Project.open(root)
    try:
        return (
            agent_settings(project, AGENT).rl_enabled,
            serving_settings(project).rl_enabled,
        )
    finally:
        project.close()


def log_of(root: Path) -> list[dict[str, Any]]:
    log = DecisionLog(root)
    try:
        return log.promotions(AGENT)
    finally:
        log.close()


def test_the_gate_s_decisions_the_switches_promote_and_roll_back(
    qtbot, agents: tuple[MainWindow, AgentsView, Path]
) -> None:
    win, view, root = agents
    rows = cells(view)
    assert [(r["Version"], r["Role"], r["Gate"]) for r in rows] == [
        ("v1", "current", "promoted"),
        ("v2", "candidate", "candidate"),
        ("v3", "candidate", "candidate"),
    ]
    first = "v1 promoted: the agent had no current version."
    assert rows[0]["Gate's decision"] == first
    assert rows[1]["Gate's decision"] == REFUSED
    assert rows[1]["Evaluation"] == "17.7"
    assert rows[2]["Health"] == f"1 warning(s): {WARNING}"
    assert rows[2]["Gate's decision"] == (
        f"v3 stays a candidate: its run warned: {WARNING}"
    )
    assert view.versions.horizontalHeaderItem(3).text() == "eval/mean_reward"
    assert "current <b>v1</b>" in view.title.text()
    assert view.agent_switch.isChecked() and view.project_switch.isChecked()
    # Promote and Roll back wait for a reason.
    view.versions.selectRow(1)
    assert html.escape(REFUSED) in view.decision.text()
    assert not view.promote_button.isEnabled()
    assert not view.rollback_button.isEnabled()
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        win.grab().save(str(Path(shots) / "agents-versions-gate.png"))

    # The switches, as the store keeps them.
    qtbot.mouseClick(view.agent_switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not agent(view)["rl_enabled"], timeout=10_000)
    assert stored(root) == (False, True)
    qtbot.mouseClick(view.project_switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not view.overview["rl_enabled"], timeout=10_000)
    assert stored(root) == (False, False) and not view.project_switch.isChecked()
    qtbot.mouseClick(view.agent_switch, Qt.MouseButton.LeftButton)
    qtbot.mouseClick(view.project_switch, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: view.overview["rl_enabled"], timeout=10_000)
    assert stored(root) == (True, True) and view.agent_switch.isChecked()

    # Promote v2 by hand, then roll it back: both logged with the reason.
    view.versions.selectRow(1)
    qtbot.keyClicks(view.why, "try the new reward on live traffic")
    assert view.promote_button.isEnabled()
    qtbot.mouseClick(view.promote_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: agent(view)["current"] == "v2", timeout=10_000)
    assert cells(view)[1]["Role"] == "current" and view.why.text() == ""
    entry = log_of(root)[-1]
    assert (entry["version"], entry["action"]) == (2, "promote")
    assert entry["reason"].endswith(": try the new reward on live traffic.")
    assert entry["reason"] in view.log_view.toPlainText()
    qtbot.keyClicks(view.why, "customers complained")
    qtbot.mouseClick(view.rollback_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: agent(view)["current"] == "v1", timeout=10_000)
    entry = log_of(root)[-1]
    assert (entry["version"], entry["action"]) == (2, "rollback")
    assert entry["reason"].startswith("v2 rolled back to v1 by ")
    assert cells(view)[1]["Gate"] == "rolled back"

    # Nothing was promoted before v1: one sentence, the view unchanged.
    qtbot.keyClicks(view.why, "again")
    qtbot.mouseClick(view.rollback_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: bool(view.message.text()), timeout=10_000)
    assert view.message.text() == (
        "Agent 'pole' has no version promoted before its current one to roll back to."
    )
    assert agent(view)["current"] == "v1" and log_of(root)[-1]["action"] == "rollback"

    # A refresh that another change starts keeps the sentence (the
    # supervisor's look at the agents store each second wiped it); the next
    # action the user takes clears it.
    refreshed: list[dict[str, Any]] = []
    view.controller.agents_changed.connect(refreshed.append)
    view.refresh()
    qtbot.waitUntil(lambda: bool(refreshed), timeout=10_000)
    assert view.message.text().startswith("Agent 'pole' has no version promoted")
    qtbot.mouseClick(view.agent_switch, Qt.MouseButton.LeftButton)
    assert view.message.text() == ""
    qtbot.waitUntil(lambda: not agent(view)["rl_enabled"], timeout=10_000)


def test_an_agent_with_nothing_to_answer_instead_stays_switched_on(
    tmp_path: Path,
) -> None:
    """No base model and no env for a rule policy: switching the agent off
    is refused in one sentence, nothing stored; the project's switch is not
    the agent's and goes off."""
    project = Project.open(tmp_path / "p", create=True)
    log = DecisionLog(project.path)
    try:
        weights = tmp_path / "w.zip"
        weights.write_bytes(b"x")
        model = project.register_model(name="m", kind="sb3-policy", files=[weights])
        project.add_version(AGENT, model.id)
        gate = Promotion(project, log)
        with pytest.raises(NoFallback) as err:
            gate.switch(AGENT, False, named_rule_env)
        assert str(err.value) == (
            "Agent 'pole' cannot be switched off: it has no base model and no "
            "rule policy to answer instead."
        )
        assert agent_settings(project, AGENT).rl_enabled
        assert gate.switch("", False, named_rule_env) is False
        assert gate.overviews()["rl_enabled"] is False
    finally:
        log.close()
        project.close()
