"""Finding and telling runs apart in the Training workspace (issue 29, item
1): a search box and filters over thousands of runs, tags and a note edited
in the details and kept by the real engine, and a flow run's row showing
what it trained."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt

from engine import protocol
from engine.store.project import Project
from studio.engine_client import EngineClient
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from studio.training.workspace import TrainingWorkspace

ENVS = ("CartPole-v1", "LunarLander-v3", "Pendulum-v1", "MountainCar-v0")
STATUSES = ("completed", "failed", "stopped")


def make_workspace(qtbot, tmp_path: Path, runs: list[dict]) -> TrainingWorkspace:  # type: ignore[no-untyped-def]
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    state = ProjectState()
    ws = TrainingWorkspace(Session(EngineClient(), state, settings))
    qtbot.addWidget(ws)
    state.load_snapshot({"path": str(tmp_path), "name": "p", "runs": runs})  # type: ignore[typeddict-item]
    return ws


def many_runs(n: int) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i:05d}",
            "name": f"PPO {ENVS[i % 4]} · run-{i}",
            "kind": "rl.train",
            "status": STATUSES[i % 3],
            "created": float(i),
            "config": {"env": ENVS[i % 4], "algo": ("PPO", "SAC", "DQN")[i % 3]},
            "summary": {"total_steps": 1000 * i},
            "tags": ["keeper"] if i % 7 == 0 else [],
            "note": "lr halved" if i % 50 == 0 else "",
        }
        for i in range(n)
    ]


def test_search_and_filters_find_runs_among_thousands(qtbot, tmp_path: Path) -> None:
    runs = many_runs(3000)
    ws = make_workspace(qtbot, tmp_path, runs)
    table, bar = ws.table, ws.table_filter
    assert len(table.shown_keys()) == 3000
    # Every word typed, in any case and order, across name, tags, note.
    matching = {
        r["id"]
        for r in runs
        if r["config"]["env"] == "CartPole-v1" and "keeper" in r["tags"]
    }
    kept = sorted(matching)[-1]
    table.select_keys([kept, "r00001"])  # r00001 trains LunarLander
    with (
        qtbot.waitSignal(table.selection_changed) as lost,
        qtbot.waitSignal(bar.filter_changed),
    ):
        qtbot.keyClicks(bar.search, "KEEPER cartpole")
    assert set(table.shown_keys()) == matching
    # The selection keeps the runs still shown and says so once.
    assert lost.args == [[kept]] and ws.selected_run() == ws._state.run(kept)
    # The note is searched too.
    with qtbot.waitSignal(bar.filter_changed):
        bar.search.setText("halved")
    assert len(table.shown_keys()) == 60
    # Facets: the status and the tag picked, the search cleared at once.
    bar.search.clear()
    assert len(table.shown_keys()) == 3000
    combo = bar.combos["status"]
    assert [combo.itemText(i) for i in range(combo.count())] == [
        "Any status",
        "completed",
        "failed",
        "stopped",
    ]
    bar.choose("status", "failed")
    bar.choose("tag", "keeper")
    shown = table.shown_keys()
    assert shown and all(
        ws._state.runs[k]["status"] == "failed"
        and "keeper" in ws._state.runs[k]["tags"]
        for k in shown
    )
    # A run that stops matching while shown leaves the list (and the
    # selection), as one change.
    table.select_keys([shown[0]])
    run = ws._state.runs[shown[0]]
    with qtbot.waitSignal(table.selection_changed) as changed:
        run["status"] = "completed"
        ws._state.notify("run", run["id"])
    assert changed.args == [[]] and run["id"] not in table.shown_keys()
    # Nothing matching: the list says so instead of looking empty.
    bar.choose("algorithm", "PPO")
    bar.choose("env", "Pendulum-v1")
    bar.choose("status", "stopped")
    bar.choose("tag", None)
    with qtbot.waitSignal(bar.filter_changed):
        bar.search.setText("no such run")
    assert table.shown_keys() == []
    assert table._stack.currentWidget() is table.empty_label
    assert "matches" in table.empty_label.text()
    # A run asked for (a finished run's notice) is never hidden.
    ws.show_run("r00002")
    assert not bar.is_active() and ws.selected_run() == ws._state.run("r00002")


def test_a_flow_run_shows_the_env_algorithm_and_steps_it_trained(
    qtbot, tmp_path: Path
) -> None:
    policy = {
        "file": "model.zip",
        "algo": "PPO",
        "env": {"id": "CartPole-v1", "kwargs": {}},
        "total_steps": 2048,
    }
    summary = {
        "flow": "train_cartpole",
        "status": "completed",
        "order": ["env", "train", "eval"],
        "nodes": {
            "env": {"state": "done", "outputs": {"env": {"id": "CartPole-v1"}}},
            "train": {"state": "cached", "outputs": {"policy": policy}},
            "eval": {"state": "done", "outputs": {"report": {"mean_reward": 9.0}}},
        },
    }
    flow_run = {
        "id": "f1",
        "kind": "flow.run",
        "name": "train_cartpole · calm-otter",
        "status": "completed",
        "config": {"flow": "flows/train_cartpole.flow.json"},
        "summary": summary,
    }
    ws = make_workspace(qtbot, tmp_path, [flow_run])
    model = ws.table.view.model()
    cells = {
        model.headerData(c, Qt.Orientation.Horizontal): model.index(0, c).data()
        for c in range(model.columnCount())
    }
    assert (cells["Algo"], cells["Env"], cells["Steps"]) == (
        "PPO",
        "CartPole-v1",
        "2,048",
    )
    assert ws.table_filter.combos["env"].findData("CartPole-v1") > 0


@pytest.fixture
def session(qtbot, tmp_path: Path) -> Iterator[Session]:
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    session = Session(EngineClient(), ProjectState(), settings)
    yield session
    session.client.stop()


def test_tags_and_note_are_saved_in_the_project_from_the_details(
    qtbot, tmp_path: Path, session: Session
) -> None:
    folder = tmp_path / "project"
    project = Project.open(folder, create=True, examples=None)
    run_id = project.create_run("selftest", {"steps": 1}, name="PPO · brisk-otter").id
    project.update_run(run_id, status="completed")
    project.close()
    with qtbot.waitSignal(session.project_opened, timeout=30_000):
        session.client.start()
        session.open_project(str(folder))
    ws = TrainingWorkspace(session)
    qtbot.addWidget(ws)
    ws.show_run(run_id)
    notes = ws.notes
    assert notes.run_id == run_id and not notes.save_button.isEnabled()

    qtbot.keyClicks(notes.tags, "good, ppo ,Good,")
    qtbot.keyClicks(notes.note, "lr 3e-4")
    qtbot.keyClick(notes.note, Qt.Key.Key_Return)
    qtbot.keyClicks(notes.note, "best so far")
    assert notes.save_button.isEnabled()
    qtbot.mouseClick(notes.save_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: notes.message.text() == "Saved.", timeout=10_000)
    run = session.state.run(run_id) or {}
    assert (run["tags"], run["note"]) == (["good", "ppo"], "lr 3e-4\nbest so far")
    assert notes.tags.text() == "good, ppo"  # as stored
    assert not notes.save_button.isEnabled()
    # The tag is offered by the filter and found by the search at once.
    assert ws.activity_filter.combos["tag"].findData("ppo") > 0  # a self-test
    assert '"ppo"' in ws.details.toPlainText()

    # Bad input: one sentence in the details; what was typed stays.
    too_many = ", ".join(f"t{i}" for i in range(protocol.MAX_TAGS + 1))
    notes.tags.setText(too_many)
    notes.save()
    assert notes.message.text() == "A run can have at most 20 tags, not 21."
    assert notes.tags.text() == too_many and notes.is_dirty()
    notes.tags.setText("good, ppo")
    notes.note.setPlainText("n" * (protocol.MAX_NOTE_CHARS + 1))
    notes.save()
    assert notes.message.text().startswith("The note is longer than 5,000")
    # A run the engine does not know (gone from the project): its sentence.
    session.state.on_run_started("ghost", "selftest", "ghost", "")
    ws.show_run("ghost")
    assert notes.run_id == "ghost" and not notes.message.text()
    notes.tags.setText("x")
    notes.save()
    qtbot.waitUntil(lambda: "no run" in notes.message.text(), timeout=10_000)
    assert notes.message.text() == "There is no run 'ghost' in this project."

    # Kept in the project: a fresh open reads them back.
    session.client.stop()
    reopened = Project.open(folder)
    stored = reopened.get_run(run_id)
    reopened.close()
    assert (stored.tags, stored.note) == (["good", "ppo"], "lr 3e-4\nbest so far")
