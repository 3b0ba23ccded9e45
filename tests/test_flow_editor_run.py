"""A flow built in the editor runs on the real engine to completion, with
node badges following the engine's ``flow.node_state`` events."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, QSettings, Qt
from test_flow_editor_workspace import drop, link_by_mouse, type_into

from engine import flow
from studio.engine_client import EngineClient
from studio.models.project_state import ProjectState
from studio.session import Session
from studio.settings import Settings
from studio.workspaces.workflows import WorkflowsWorkspace

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("engine.nodes") is None,
    reason="engine/nodes (the node types and the flow.run job) is not there yet",
)


@pytest.fixture
def live(qtbot, tmp_path: Path):
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    client = EngineClient()
    session = Session(client, ProjectState(), settings)
    ws = WorkflowsWorkspace(session)
    qtbot.addWidget(ws)
    project = tmp_path / "project"
    with qtbot.waitSignal(session.project_opened, timeout=30_000):
        client.start()
        session.open_project(str(project), create=True)
    qtbot.waitUntil(lambda: "rl.train" in ws.catalog, timeout=20_000)
    ws.ask_save_path = lambda suggested: str(project / "flows" / "cart.flow.json")
    ws.resize(1280, 800)
    ws.show()
    qtbot.waitExposed(ws)
    yield ws, project
    client.stop()


def test_a_flow_built_in_the_editor_runs_on_the_engine(qtbot, live) -> None:
    ws, project = live
    drop(ws, "env.environment", QPoint(150, 200))
    drop(ws, "rl.train", QPoint(420, 200))
    drop(ws, "rl.evaluate", QPoint(690, 200))
    link_by_mouse(qtbot, ws, "environment", "env", "train", "env")
    link_by_mouse(qtbot, ws, "train", "policy", "evaluate", "policy")
    ws.canvas.select_nodes(["train"])
    type_into(qtbot, ws, "total_steps", "256")
    ws.canvas.select_nodes(["evaluate"])
    type_into(qtbot, ws, "episodes", "2")

    states: list[tuple[str, str]] = []
    ws.controller.node_state_received.connect(
        lambda run, node, state, *_: states.append((node, state))
    )
    with qtbot.waitSignal(ws.run_finished, timeout=120_000) as finished:
        assert ws.actions["run"].isEnabled()
        ws.actions["run"].trigger()
        assert not ws.actions["run"].isEnabled()
        qtbot.waitUntil(lambda: ws.actions["cancel"].isEnabled(), timeout=20_000)
    assert finished.args == ["completed", ""], ws.status_label.text()

    path = project / "flows" / "cart.flow.json"
    assert not ws.is_modified()
    saved = flow.load(path)
    assert saved.node("train").params["total_steps"] == 256
    for node_id in ("environment", "train", "evaluate"):
        assert ws.canvas.node_state(node_id) == ("done", 1.0), states
    assert ("train", "running") in states
    assert ws.status_label.text() == "The run completed."

    # Clicking a node shows its last outputs.
    rect = ws.canvas.node_scene_rect("evaluate")
    click = ws.canvas.mapFromScene(rect.topLeft()) + QPoint(60, 10)
    qtbot.mouseClick(ws.canvas.viewport(), Qt.MouseButton.LeftButton, pos=click)
    shown = json.loads(ws.output_view.toPlainText())
    assert shown["node"] == "evaluate" and shown["state"] == "done"
    assert "report" in shown["outputs"]

    # A second run of the unchanged flow reuses every cached node.
    states.clear()
    with qtbot.waitSignal(ws.run_finished, timeout=60_000) as finished:
        ws.actions["run"].trigger()
    assert finished.args[0] == "completed"
    final = {node: state for node, state in states}
    assert final["train"] == "cached" and final["evaluate"] == "cached"
