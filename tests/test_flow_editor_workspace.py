"""The Workflows workspace as a user drives it: drop nodes, link ports, edit
parameters, undo, save, reopen, paste, recover an autosave. The engine is
not started here (the editor works without one); the catalog is the
engine's own, handed over as the ``flow.catalog`` reply would."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPoint, QPointF, QSettings, Qt
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication, QLineEdit

from engine import flow
from engine.nodes import catalog
from studio.engine_client import EngineClient
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from studio.workflows.workspace import WorkflowsWorkspace
from widgets.node_graph import NODE_TYPE_MIME

PASS_THROUGH = {
    "type": "test.pass",
    "title": "Pass",
    "category": "Test",
    "inputs": [{"name": "env", "type": "env"}],
    "outputs": [{"name": "env", "type": "env"}],
    "params": [],
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    path = tmp_path / "project"
    (path / "flows").mkdir(parents=True)
    return path


@pytest.fixture
def make_workspace(qtbot, tmp_path: Path, project: Path):
    def make() -> WorkflowsWorkspace:
        settings = Settings(
            QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
        )
        state = ProjectState()
        # Never started: editing needs no engine.
        session = Session(EngineClient(), state, settings)
        ws = WorkflowsWorkspace(session)
        qtbot.addWidget(ws)
        state.load_snapshot({"path": str(project), "name": "project", "flows": []})
        ws.set_catalog([*catalog(), PASS_THROUGH])
        ws.files.ask_save_path = lambda suggested: str(
            project / "flows" / "cart.flow.json"
        )
        ws.errors_shown_to_user = []
        ws.files.show_error = ws.errors_shown_to_user.append
        ws.files.ask_unsaved = lambda: "discard"
        ws.resize(1280, 800)
        ws.show()
        qtbot.waitExposed(ws)
        return ws

    return make


@pytest.fixture
def ws(make_workspace) -> WorkflowsWorkspace:
    return make_workspace()


def drop(ws: WorkflowsWorkspace, type_name: str, view_pos: QPoint) -> None:
    """What a drag from the palette delivers to the canvas."""
    mime = QMimeData()
    mime.setData(NODE_TYPE_MIME, type_name.encode())
    target = ws.editor.canvas.viewport()
    args = (Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
            Qt.KeyboardModifier.NoModifier)  # fmt: skip
    enter = QDragEnterEvent(view_pos, *args)
    QApplication.sendEvent(target, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(target, QDropEvent(QPointF(view_pos), *args))


def mouse_drag(qtbot, ws: WorkflowsWorkspace, start: QPointF, end: QPointF) -> None:
    view = ws.editor.canvas
    a, b = view.mapFromScene(start), view.mapFromScene(end)
    qtbot.mousePress(view.viewport(), Qt.MouseButton.LeftButton, pos=a)
    for i in range(1, 6):
        qtbot.mouseMove(view.viewport(), a + (b - a) * (i / 5))
    qtbot.mouseRelease(view.viewport(), Qt.MouseButton.LeftButton, pos=b)


def link_by_mouse(qtbot, ws, a: str, ap: str, b: str, bp: str) -> None:
    canvas = ws.editor.canvas
    mouse_drag(
        qtbot,
        ws,
        canvas.port_scene_pos(a, ap, output=True),
        canvas.port_scene_pos(b, bp, output=False),
    )


def type_into(qtbot, ws: WorkflowsWorkspace, name: str, text: str) -> None:
    editor = ws.editor.inspector.param_form.editor(name)
    line = editor.property("line_edit") if not isinstance(editor, QLineEdit) else editor
    assert isinstance(line, QLineEdit)
    line.setFocus()
    line.selectAll()
    qtbot.keyClicks(line, text)


def build_cartpole(qtbot, ws: WorkflowsWorkspace) -> None:
    drop(ws, "env.environment", QPoint(150, 200))
    drop(ws, "rl.train", QPoint(420, 200))
    drop(ws, "rl.evaluate", QPoint(690, 200))
    assert ws.editor.node_ids() == ["environment", "train", "evaluate"]
    link_by_mouse(qtbot, ws, "environment", "env", "train", "env")
    ws.editor.canvas.link_requested.emit("train", "policy", "evaluate", "policy")
    assert {(lk.from_node, lk.to_node) for lk in ws.editor.links()} == {
        ("environment", "train"),
        ("train", "evaluate"),
    }
    ws.editor.canvas.select_nodes(["train"])
    type_into(qtbot, ws, "total_steps", "256")
    ws.editor.canvas.select_nodes(["evaluate"])
    type_into(qtbot, ws, "episodes", "2")


def test_build_undo_redo_save_and_reopen_identical(qtbot, ws, project) -> None:
    build_cartpole(qtbot, ws)
    model = ws.model
    assert model.node("train").params["total_steps"] == 256
    assert model.node("evaluate").params["episodes"] == 2
    assert ws.files.is_modified() and "•" in ws.editor.title_label.text()
    # 3 drops + 2 links + 2 typed values, each typed value one step.
    assert ws.undo_stack.count() == 7

    ws.editor.canvas.select_nodes(["train"])
    ws.flow_actions["undo"].trigger()  # the evaluate edit
    ws.flow_actions["undo"].trigger()  # the train edit
    assert model.node("train").params["total_steps"] is None  # the preset's
    assert model.node("evaluate").params["episodes"] == 10
    assert ws.editor.inspector.param_form.editor("total_steps").text() == ""
    ws.flow_actions["undo"].trigger()  # the second link
    assert len(ws.editor.links()) == 1 and len(ws.editor.canvas.links) == 1
    for _ in range(3):
        ws.flow_actions["redo"].trigger()
    assert model.node("train").params["total_steps"] == 256
    assert ws.editor.inspector.param_form.editor("total_steps").text() == "256"
    assert len(ws.editor.canvas.links) == 2

    with qtbot.waitSignal(ws.files.document_saved):
        ws.flow_actions["save"].trigger()
    path = project / "flows" / "cart.flow.json"
    assert not ws.files.is_modified() and "•" not in ws.editor.title_label.text()
    saved_text = path.read_text()
    assert not ws.files.autosave_file().exists()  # a save clears the autosave copy

    ws.flow_actions["new"].trigger()
    assert ws.editor.node_ids() == [] and not ws.editor.canvas.nodes
    assert ws.open_file(path)
    assert flow.dumps(ws.model.doc) == saved_text
    assert sorted(ws.editor.canvas.nodes) == ["environment", "evaluate", "train"]
    assert len(ws.editor.canvas.links) == 2
    assert not ws.files.is_modified()
    assert ws.editor.errors == {}  # a complete flow: no red marks


def test_refused_links_say_why(qtbot, ws) -> None:
    drop(ws, "env.environment", QPoint(150, 150))
    drop(ws, "rl.evaluate", QPoint(450, 150))
    drop(ws, "test.pass", QPoint(150, 400))
    drop(ws, "test.pass", QPoint(450, 400))
    canvas = ws.editor.canvas
    # A type mismatch, dragged with the mouse: env output -> policy input.
    mouse_drag(
        qtbot,
        ws,
        canvas.port_scene_pos("environment", "env", output=True),
        canvas.port_scene_pos("evaluate", "policy", output=False),
    )
    reason = "A env output cannot feed the policy input 'policy' of 'Evaluate policy'."
    assert canvas.last_refusal == reason
    assert canvas.refusal_label.isVisible() and canvas.refusal_label.text() == reason
    assert ws.editor.status_label.text() == reason
    assert ws.editor.links() == []
    # A cycle: pass -> pass_2 -> pass.
    assert ws.editor.request_link("pass", "env", "pass_2", "env") == (True, "")
    ok, reason = ws.editor.request_link("pass_2", "env", "pass", "env")
    assert not ok
    assert reason == "The link would close a cycle: 'Pass' already feeds 'Pass'."
    assert canvas.last_refusal == reason
    ok, reason = ws.editor.request_link("pass", "env", "pass", "env")
    assert (ok, reason) == (False, "A node cannot feed itself.")
    assert len(ws.editor.links()) == 1


def test_a_move_is_one_undo_step_and_delete_takes_links(qtbot, ws) -> None:
    build_cartpole(qtbot, ws)
    canvas = ws.editor.canvas
    count = ws.undo_stack.count()
    before = (ws.model.node("train").x, ws.model.node("train").y)
    rect = canvas.node_scene_rect("train")
    grab = rect.topLeft() + QPointF(50, 10)
    mouse_drag(qtbot, ws, grab, grab + QPointF(100, 160))
    assert ws.undo_stack.count() == count + 1
    after = (ws.model.node("train").x, ws.model.node("train").y)
    assert after != before and canvas.node_pos("train") == after
    ws.undo_stack.undo()
    assert (ws.model.node("train").x, ws.model.node("train").y) == before
    assert canvas.node_pos("train") == before

    canvas.select_nodes(["train"])
    canvas.setFocus()
    qtbot.keyClick(canvas, Qt.Key.Key_Delete)
    assert (
        ws.editor.node_ids() == ["environment", "evaluate"] and ws.editor.links() == []
    )
    assert "train" not in canvas.nodes and not canvas.links
    ws.undo_stack.undo()
    assert ws.editor.node_ids() == ["environment", "train", "evaluate"]
    assert len(ws.editor.links()) == 2 and len(canvas.links) == 2


def test_copy_paste_and_duplicate(qtbot, ws) -> None:
    build_cartpole(qtbot, ws)
    ws.editor.canvas.select_nodes(["environment", "train"])
    assert ws.flow_actions["copy"].isEnabled()
    ws.flow_actions["copy"].trigger()
    pasted = ws.editor.paste()
    assert pasted == ["environment_2", "train_2"]
    assert ws.editor.canvas.selected_nodes() == pasted
    new = ws.model.node("train_2")
    assert new.params["total_steps"] == 256
    assert (new.x, new.y) == (
        ws.model.node("train").x + 40,
        ws.model.node("train").y + 40,
    )
    assert flow.Link("environment_2", "env", "train_2", "env") in ws.editor.links()
    duplicated = ws.editor.duplicate_selected()
    assert duplicated == ["environment_3", "train_3"]
    assert len(ws.editor.links()) == 4 and len(ws.editor.canvas.links) == 4
    ws.undo_stack.undo()
    ws.undo_stack.undo()
    assert ws.editor.node_ids() == ["environment", "train", "evaluate"]
    # The clipboard holds readable JSON for other programs too.
    text = QApplication.clipboard().text()
    assert json.loads(text)["kind"] == "flow-fragment"


def test_autosave_is_offered_after_a_crash(qtbot, make_workspace, project) -> None:
    first = make_workspace()
    build_cartpole(qtbot, first)
    assert first.files.save()
    path = first.model.path
    first.editor.canvas.select_nodes(["train"])
    type_into(qtbot, first, "seed", "7")
    autosave = project / "flows" / ".autosave" / "cart.flow.json"
    assert flow.load(autosave).node("train").params["seed"] == 7
    assert flow.load(path).node("train").params["seed"] is None
    # The app dies here: no save, no clean-up. A new session opens the file.
    asked = []
    second = make_workspace()
    second.files.ask_restore = lambda p, a: asked.append((p, a)) or False
    assert second.open_file(path)
    assert asked == [(path, autosave)]
    assert second.model.node("train").params["seed"] is None
    third = make_workspace()
    third.files.ask_restore = lambda p, a: True
    assert third.open_file(path)
    assert third.model.node("train").params["seed"] == 7
    assert third.files.is_modified()  # restored, not yet saved
    assert third.files.save()
    assert flow.load(path).node("train").params["seed"] == 7
    assert not autosave.exists()


def test_bad_files_open_with_a_clear_message_and_lose_nothing(
    qtbot, ws, project
) -> None:
    build_cartpole(qtbot, ws)
    before = flow.dumps(ws.model.doc)
    flows = project / "flows"
    garbage = flows / "garbage.flow.json"
    garbage.write_bytes(b"\x00\xff not json")
    future = flows / "future.flow.json"
    future.write_text(json.dumps({"format": 99, "nodes": []}))
    # A value the editor could not save again is refused when opening.
    nan = flows / "nan.flow.json"
    nan.write_text(before.replace('"total_steps": ', '"total_steps": NaN, "x": ', 1))
    for path, message in (
        (garbage, "The flow file garbage.flow.json is not UTF-8 text."),
        (
            nan,
            "The flow file nan.flow.json: 'nodes[1].params.total_steps' is not a "
            "finite number (NaN).",
        ),
        (
            future,
            "The flow is in format 99, written by a newer RL Studio; this one "
            "reads formats up to 1.",
        ),
    ):
        assert not ws.open_file(path)
        assert ws.errors_shown_to_user[-1] == message
        assert flow.dumps(ws.model.doc) == before  # the open flow is untouched

    odd = flows / "odd.flow.json"
    odd.write_text(
        json.dumps(
            {
                "format": 1,
                "kind": "flow",
                "name": "odd",
                "comment": "kept",
                "nodes": [
                    {"id": "env", "type": "env.environment", "params": {}},
                    {
                        "id": "lab",
                        "type": "lab.mystery",
                        "params": {"knob": 3},
                        "color": "teal",
                    },
                ],
                "links": [
                    {
                        "from": {"node": "env", "port": "env"},
                        "to": {"node": "gone", "port": "env"},
                    },
                ],
            }
        )
    )
    ws.files.ask_unsaved = lambda: "discard"
    assert ws.open_file(odd)
    assert "Unknown node type 'lab.mystery'" in ws.editor.canvas.node_errors("lab")[0]
    assert ws.editor.canvas.node_errors("env") == [
        "Output 'env' is linked to a missing node 'gone'."
    ]
    assert "problems in 2 nodes" in ws.editor.status_label.text()
    ws.editor.canvas.select_nodes(["lab"])
    assert (
        "does not know the node type 'lab.mystery'" in ws.editor.inspector.help.text()
    )
    # Editing and saving keeps what this version does not understand.
    ws.editor.canvas.select_nodes(["env"])
    type_into(qtbot, ws, "env", "Acrobot-v1")
    ws.files.ask_save_path = lambda s: str(flows / "odd.flow.json")
    assert ws.files.save()
    data = json.loads(odd.read_text())
    assert data["comment"] == "kept"
    assert data["nodes"][1] == {
        "id": "lab",
        "type": "lab.mystery",
        "position": {"x": 0.0, "y": 0.0},
        "params": {"knob": 3},
        "color": "teal",
    }
    assert data["links"][0]["to"]["node"] == "gone"
    assert data["nodes"][0]["params"]["env"] == "Acrobot-v1"


def test_validate_marks_nodes_and_form_fields(qtbot, ws) -> None:
    drop(ws, "rl.train", QPoint(300, 200))
    errors = ws.editor.validate()
    assert errors["train"] == ["The required input 'env' (env) is not linked."]
    assert ws.editor.canvas.node_errors("train") == errors["train"]
    assert "1 problem in 1 node" in ws.editor.status_label.text()
    ws.editor.canvas.select_nodes(["train"])
    type_into(qtbot, ws, "total_steps", "0")  # below the minimum: the form refuses
    assert ws.editor.inspector.param_form.errors() == {
        "total_steps": "Total steps must be at least 1."
    }
    assert ws.model.node("train").params["total_steps"] is None
    assert not ws.run_flow()  # invalid flows do not run
    assert "cannot run yet" in ws.editor.status_label.text()
    assert os.listdir(ws.project_flows_dir()) == [".autosave"]  # nothing saved


def test_a_type_error_goes_with_the_node_it_came_from(qtbot, ws, project) -> None:
    """Issue 29: a type-error line (the engine's word on a link) stayed on
    the status line after the node at its other end was deleted."""
    path = project / "flows" / "typed.flow.json"
    env = {"id": "env", "type": "env.environment", "params": {"env": "CartPole-v1"}}
    path.write_text(
        json.dumps(
            {
                "format": 1,
                "kind": "flow",
                "name": "typed",
                "nodes": [env, {"id": "evaluate", "type": "rl.evaluate"}],
                "links": [
                    {
                        "from": {"node": "env", "port": "env"},
                        "to": {"node": "evaluate", "port": "policy"},
                    }
                ],
            }
        )
    )
    assert ws.open_file(path)
    type_error = (
        "Input 'policy' takes policy, but it is linked to the env output 'env' "
        "of 'Environment'."
    )
    assert ws.editor.canvas.node_errors("evaluate") == [type_error]
    # The engine's check says the same (and the studio has no engine here:
    # the reply is handed over as the controller would).
    asked: list[dict] = []
    ws.editor.validation_requested.connect(asked.append)
    ws.editor.add_engine_errors({"evaluate": [type_error, "Engine-only problem."]})
    assert "2 problems in 1 node" in ws.editor.status_label.text()
    ws.editor.canvas.select_nodes(["env"])
    ws.editor.delete_selected()
    assert ws.model.doc.node_ids() == ["evaluate"]
    assert ws.editor.canvas.node_errors("evaluate") == [
        "The required input 'policy' (policy) is not linked."
    ]
    assert "1 problem in 1 node" in ws.editor.status_label.text()
    qtbot.waitUntil(lambda: bool(asked))  # the engine is asked again, once
    assert len(asked) == 1 and [n["id"] for n in asked[0]["nodes"]] == ["evaluate"]


def test_flow_name_and_description_are_undoable_and_saved(qtbot, ws, project) -> None:
    build_cartpole(qtbot, ws)
    ws.editor.canvas.select_nodes([])
    assert (
        ws.editor.inspector.flow_panel.isVisible()
        and not ws.editor.inspector.param_form.isVisible()
    )
    count = ws.undo_stack.count()
    ws.editor.inspector.flow_name_edit.setFocus()
    ws.editor.inspector.flow_name_edit.selectAll()
    qtbot.keyClicks(ws.editor.inspector.flow_name_edit, "cartpole check")
    qtbot.keyClick(ws.editor.inspector.flow_name_edit, Qt.Key.Key_Return)
    ws.editor.inspector.flow_description_edit.setFocus()
    qtbot.keyClicks(
        ws.editor.inspector.flow_description_edit, "Train PPO, then evaluate it."
    )
    ws.editor.canvas.setFocus()  # leaving the description commits it
    qtbot.waitUntil(lambda: ws.model.doc.description != "")
    assert ws.undo_stack.count() == count + 2
    assert ws.model.doc.name == "cartpole check"
    assert "cartpole check" in ws.editor.title_label.text()
    assert "Train PPO, then evaluate it." in ws.editor.title_label.toolTip()
    assert ws.files.save()
    data = json.loads((project / "flows" / "cart.flow.json").read_text())
    assert (data["name"], data["description"]) == (
        "cartpole check",
        "Train PPO, then evaluate it.",
    )
    ws.flow_actions["undo"].trigger()
    assert (
        ws.model.doc.description == ""
        and ws.editor.inspector.flow_description_edit.toPlainText() == ""
    )
    assert ws.files.is_modified()
    ws.flow_actions["undo"].trigger()
    assert ws.model.doc.name == "" and ws.editor.inspector.flow_name_edit.text() == ""
    assert "cart" in ws.editor.title_label.text()  # the file name stands in
    ws.flow_actions["redo"].trigger()
    assert ws.editor.inspector.flow_name_edit.text() == "cartpole check"


def write_flow_run(
    project: Path, run_id: str, doc: flow.FlowDocument, path: Path, nodes: dict
) -> dict:
    """A flow run's folder as the engine leaves it, and its record."""
    run_dir = project / "runs" / run_id
    run_dir.mkdir(parents=True)
    config = {"flow_path": str(path), "document": doc.to_dict()}
    (run_dir / "config.json").write_text(
        json.dumps({"run_id": run_id, "kind": "flow.run", "config": config})
    )
    (run_dir / "flow_state.json").write_text(json.dumps({"nodes": nodes}))
    (run_dir / "log.txt").write_text(
        "[environment] made CartPole-v1\n"
        "node train (Train (SB3)) failed: RuntimeError: out of memory\n"
        "Traceback (most recent call last):\n"
    )
    return {
        "id": run_id,
        "kind": "flow.run",
        "name": f"Flow {run_id}",
        "status": "failed",
        "reason": "The node 'train' (Train (SB3)) failed: out of memory.",
        "created": 1.0,
        "ended": 1_700_000_000.0,
        "config": config,
        "run_dir": str(run_dir),
    }


def test_the_last_run_shows_again_when_the_project_arrives(qtbot, ws, project) -> None:
    build_cartpole(qtbot, ws)
    assert ws.files.save()
    path = ws.model.path
    model_file = project / "models" / "policy.zip"
    model_file.parent.mkdir()
    model_file.write_bytes(b"zip")
    record = write_flow_run(
        project,
        "r1",
        ws.model.doc,
        path,
        {
            "environment": {
                "state": "done",
                "progress": 1.0,
                "message": "Done in 0.2 s.",
                "outputs": {"env": {"id": "CartPole-v1", "file": str(model_file)}},
                "summary": {"seconds": 0.2},
            },
            "train": {"state": "failed", "progress": 0.3, "message": "out of memory"},
            "evaluate": {"state": "skipped", "progress": 0.0, "message": "Not run."},
        },
    )
    # Opened before the project's runs are known (start-up): nothing to show.
    assert ws.open_file(path)
    assert ws.editor.canvas.node_state("train") == ("", 0.0)
    assert ws.editor.inspector.last_run_label.text() == "Never run."
    ws._state.load_snapshot(
        {"path": str(project), "name": "project", "flows": [], "runs": [record]}
    )
    assert ws.editor.canvas.node_state("environment") == ("done", 1.0)
    assert ws.editor.canvas.node_state("train")[0] == "failed"
    assert ws.editor.canvas.node_state("evaluate")[0] == "skipped"
    assert ws.editor.inspector.last_run_label.text().startswith("Failed 2023-11-")
    assert "1 done, 1 failed, 1 skipped" in ws.editor.inspector.last_run_label.text()
    ws.show_node_details("train")
    assert ws.details.log_view.toPlainText().startswith(
        "node train (Train (SB3)) failed"
    )
    assert "Traceback" in ws.details.log_view.toPlainText()
    ws.show_node_details("environment")
    assert ws.details.log_view.toPlainText() == "[environment] made CartPole-v1"
    assert str(model_file) in ws.details.output_view.toPlainText()  # a link to the file
    assert "seconds" in ws.details.output_view.toPlainText()
    ws.show_node_details("evaluate")
    assert "skipped" in ws.details.output_view.toPlainText()


def test_a_killed_run_leaves_no_node_running(qtbot, ws) -> None:
    """The supervisor kills a run that ignores Stop: no more node events
    come, and the editor settles the nodes itself."""
    build_cartpole(qtbot, ws)
    ws.model.set_path(ws.project_flows_dir() / "cart.flow.json")
    ws.undo_stack.setClean()
    ctl = ws.controller
    ws.watcher._run_pending = True
    ctl.run_started.emit("r9")
    assert ws.watcher.run_id == "r9" and ws.flow_actions["cancel"].isEnabled()
    ctl.node_state_received.emit("r9", "environment", "done", 1.0, "ok", {}, {})
    ctl.node_state_received.emit("r9", "train", "running", 0.4, "", {}, {})
    ctl.node_state_received.emit("r9", "evaluate", "queued", 0.0, "", {}, {})
    ctl.run_log_received.emit("r9", ["[train] step 1", "a library's own print"])
    assert ws.watcher.node_logs["train"] == ["[train] step 1", "a library's own print"]
    with qtbot.waitSignal(ws.watcher.run_finished) as finished:
        ctl.run_ended.emit("r9", "stopped", "")
    assert finished.args == ["stopped", ""]
    assert ws.editor.canvas.node_state("train")[0] == "stopped"
    assert ws.editor.canvas.node_state("evaluate")[0] == "skipped"
    assert ws.editor.canvas.node_state("environment")[0] == "done"
    assert ws.watcher.run_id is None and ws.flow_actions["run"].isEnabled()
    assert ws.editor.inspector.last_run_label.text().startswith("Stopped")


def test_recent_files_and_paste_availability(qtbot, ws, project, tmp_path) -> None:
    outside = tmp_path / "elsewhere" / "mine.flow.json"
    outside.parent.mkdir()
    flow.save(flow.FlowDocument(name="mine"), outside)
    build_cartpole(qtbot, ws)
    assert ws.files.save()
    assert ws.open_file(outside)
    recent = ws.files.recent_files()
    assert recent[:2] == [str(outside), str(project / "flows" / "cart.flow.json")]
    ws.recent_menu.aboutToShow.emit()
    names = [a.text() for a in ws.recent_menu.actions()]
    assert names[:2] == ["mine", "cart"]
    ws.recent_menu.actions()[1].trigger()
    assert ws.model.path == project / "flows" / "cart.flow.json"

    QApplication.clipboard().setText("just words")
    assert not ws.flow_actions["paste"].isEnabled()
    ws.editor.canvas.select_nodes(["train"])
    ws.flow_actions["copy"].trigger()
    assert ws.flow_actions["paste"].isEnabled()


def test_keyboard_select_all_zoom_and_multi_delete(qtbot, ws) -> None:
    build_cartpole(qtbot, ws)
    canvas = ws.editor.canvas
    canvas.setFocus()
    qtbot.keyClick(canvas, Qt.Key.Key_0, Qt.KeyboardModifier.ControlModifier)
    assert canvas.zoom() == 1.0
    ws.flow_actions["zoom_in"].trigger()
    assert canvas.zoom() == 1.25
    ws.flow_actions["zoom_out"].trigger()
    assert canvas.zoom() == 1.0
    qtbot.keyClick(canvas, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    assert canvas.selected_nodes() == ["environment", "train", "evaluate"]
    assert "No node" not in ws.editor.inspector.heading.text()  # several: the flow
    qtbot.keyClick(canvas, Qt.Key.Key_Delete)
    assert ws.editor.node_ids() == [] and ws.editor.links() == []
    ws.flow_actions["undo"].trigger()  # one step brings all of it back
    assert ws.editor.node_ids() == ["environment", "train", "evaluate"]
    assert len(ws.editor.links()) == 2


def test_the_details_pane_follows_clicks(qtbot, ws) -> None:
    build_cartpole(qtbot, ws)
    assert (
        "Run the flow to see each node's state" in ws.details.output_view.toPlainText()
    )
    rect = ws.editor.canvas.node_scene_rect("train")
    click = ws.editor.canvas.mapFromScene(rect.topLeft()) + QPoint(60, 10)
    qtbot.mouseClick(ws.editor.canvas.viewport(), Qt.MouseButton.LeftButton, pos=click)
    assert ws.details.output_view.toPlainText().startswith("Train (SB3) · train")
    assert "No result yet" in ws.details.output_view.toPlainText()
    assert ws.details.log_view.placeholderText() == "train has not run yet."
    ws.set_catalog([*catalog(), PASS_THROUGH])  # the engine sent it again
    assert ws.details.output_view.toPlainText().startswith("Train (SB3) · train")
    empty = ws.editor.canvas.mapFromScene(rect.topLeft()) + QPoint(60, 300)
    qtbot.mouseClick(ws.editor.canvas.viewport(), Qt.MouseButton.LeftButton, pos=empty)
    assert (
        "Run the flow to see each node's state" in ws.details.output_view.toPlainText()
    )


def test_an_untitled_flow_is_restored_after_a_crash(
    qtbot, make_workspace, project
) -> None:
    first = make_workspace()
    build_cartpole(qtbot, first)
    autosave = project / "flows" / ".autosave" / "untitled.flow.json"
    assert flow.load(autosave).node_ids() == ["environment", "train", "evaluate"]
    # The app dies; the next session opens the project with an empty editor.
    second = make_workspace()
    asked = []
    second.files.ask_restore = lambda p, a: asked.append((p, a)) or True
    second._session.project_opened.emit(str(project))
    assert asked == [(None, autosave)]
    assert second.editor.node_ids() == ["environment", "train", "evaluate"]
    assert second.model.path is None and second.files.is_modified()
    assert "Restored an unsaved flow" in second.editor.status_label.text()


def test_save_as_and_a_failed_save_keep_the_old_file(
    qtbot, ws, project, monkeypatch
) -> None:
    build_cartpole(qtbot, ws)
    assert ws.files.save()
    first = project / "flows" / "cart.flow.json"
    saved = first.read_bytes()
    ws.files.ask_save_path = lambda suggested: str(project / "flows" / "copy")
    assert ws.files.save_as()
    copy = project / "flows" / "copy.flow.json"
    assert ws.model.path == copy and copy.read_bytes() == saved
    assert ws._session.settings.recent_flows[:2] == [str(copy), str(first)]

    # The disk fills up in the middle of the next save.
    ws.editor.canvas.select_nodes(["train"])
    type_into(qtbot, ws, "seed", "5")

    def no_space(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", no_space)
    assert not ws.files.save()
    monkeypatch.undo()
    assert ws.errors_shown_to_user[-1] == (
        f"Could not save {copy}: No space left on device."
    )
    assert copy.read_bytes() == saved  # the old file, whole
    assert [p.name for p in copy.parent.iterdir() if ".tmp-" in p.name] == []
    assert ws.files.is_modified() and ws.model.node("train").params["seed"] == 5
    assert ws.files.save() and flow.load(copy).node("train").params["seed"] == 5


def test_a_refused_run_says_why_and_leaves_no_node_waiting(qtbot, ws) -> None:
    """No engine runs here: the start is refused at once, and that sentence,
    not "Starting…", is what the status line keeps."""
    build_cartpole(qtbot, ws)
    assert ws.run_flow()
    assert ws.editor.status_label.text() == "The engine is not running."
    states = [ws.editor.canvas.node_state(n) for n in ws.editor.node_ids()]
    assert states == [("", 0.0)] * 3
    assert not ws.watcher.busy and ws.flow_actions["run"].isEnabled()
    assert ws.editor.inspector.last_run_label.text() == "Never run."


def test_waiting_nodes_keep_their_badge_and_settle_when_the_run_ends(
    qtbot, ws, monkeypatch
) -> None:
    build_cartpole(qtbot, ws)
    ctl = ws.controller
    monkeypatch.setattr(ctl, "start_run", lambda *args: None)  # answered below
    assert ws.run_flow()
    assert ws.editor.inspector.last_run_label.text() == "Running now."
    # An event may overtake the reply to run.start: it is kept for its run.
    ctl.node_state_received.emit("r7", "environment", "done", 1.0, "ok", {}, {})
    ctl.node_state_received.emit("other", "train", "failed", 0.0, "no", {}, {})
    assert ws.editor.canvas.node_state("environment") == ("queued", 0.0)
    ctl.run_started.emit("r7")
    assert ws.editor.canvas.node_state("environment") == ("done", 1.0)
    ws.set_catalog([*catalog(), PASS_THROUGH])  # the engine sent it again
    assert ws.editor.canvas.node_state("train") == ("queued", 0.0)
    with qtbot.waitSignal(ws.watcher.run_finished) as finished:
        ctl.run_ended.emit("r7", "failed", "The engine stopped.")
    assert finished.args == ["failed", "The engine stopped."]
    states = [ws.editor.canvas.node_state(n)[0] for n in ws.editor.node_ids()]
    assert states == ["done", "skipped", "skipped"]
    assert ws.editor.status_label.text() == "The run failed: The engine stopped."
