"""The Environments workspace against the real engine: editing the bundled
Jira workflow, undo and redo, the JSON view, saving, autosave, grid painting
and validation with problems shown on the field that causes them."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from engine.envs.grid import GridEnv
from studio.engine_client import EngineClient
from studio.environments.editors import EDITORS
from studio.environments.kind_editor import KindEditor
from studio.environments.workspace import EnvironmentsWorkspace
from studio.session import Session
from studio.settings import Settings
from studio.state.env_design import KINDS, autosave_path, read_spec_file
from studio.state.project_state import ProjectState


@pytest.fixture
def engine(qtbot) -> Iterator[EngineClient]:  # type: ignore[no-untyped-def]
    client = EngineClient(auto_restart=False)
    with qtbot.waitSignal(client.hello_received, timeout=20_000):
        client.start()
    yield client
    client.stop()


@pytest.fixture
def workspace(qtbot, engine: EngineClient, tmp_path: Path):  # type: ignore[no-untyped-def]
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    session = Session(engine, ProjectState(), settings)
    ws = EnvironmentsWorkspace(session)
    ws.restore_decider = lambda path, auto: pytest.fail("unexpected restore prompt")
    ws.confirm_discard = lambda name: True
    ws.confirm_delete = lambda name: True
    qtbot.addWidget(ws)
    ws.resize(1200, 760)
    with qtbot.waitSignal(ws.document_opened, timeout=20_000):
        session.open_project(str(tmp_path / "project"), create=True)
    ws.show()
    qtbot.waitExposed(ws)
    qtbot.waitUntil(lambda: ws.editors["workflow"].canvas.viewport().width() > 300)
    return ws


def press_enter(qtbot, widget) -> None:  # type: ignore[no-untyped-def]
    qtbot.keyClick(widget, Qt.Key.Key_Return)


def test_opens_the_jira_example_and_draws_it(workspace: EnvironmentsWorkspace) -> None:
    ws = workspace
    assert ws.path is not None and ws.path.name == "jira_issue_resolution.env.json"
    assert {d["name"] for d in ws.env_list.table.model.records} >= {
        "jira_issue_resolution",
        "maze",
        "cartpole",
    }
    canvas = ws.editors["workflow"].canvas
    assert set(canvas.status_names()) == set(ws.model.statuses())
    assert canvas.status_item("To Do").start
    assert canvas.status_item("Done").terminal and canvas.status_item("Done").success
    assert not canvas.status_item("Won't Do").success
    # Every transition has an arrow (the wildcard one from "any status").
    assert len(canvas.edge_items()) == len(ws.model.transitions())
    assert not ws.is_modified and ws.undo_stack.count() == 0
    # One table from kind to editor class: every kind's editor is built the
    # same way, on its own page, the open one's shown.
    assert set(EDITORS) == set(KINDS)
    for kind, editor_class in EDITORS.items():
        editor = ws.editors[kind]
        assert type(editor) is editor_class and isinstance(editor, KindEditor)
        assert ws.editors.indexOf(editor) == ws.editors.page_index(kind)
    assert ws.editors.currentWidget() is ws.editors["workflow"]


def test_edit_through_canvas_and_inspector_then_undo_redo(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    canvas, ins = ws.editors["workflow"].canvas, ws.editors["workflow"].inspector
    original = json.loads(json.dumps(ws.model.spec))
    canvas.status_add_requested.emit(900.0, 300.0)
    assert "New status" in ws.model.statuses()
    assert ws.model.positions["New status"] == (900.0, 300.0)
    assert ins.stack.currentIndex() == 1  # the new status is inspected
    ins.status_name.selectAll()
    qtbot.keyClicks(ins.status_name, "Triage")
    press_enter(qtbot, ins.status_name)
    assert "Triage" in ws.model.statuses() and canvas.status_item("Triage")

    canvas.transition_requested.emit("Triage", "To Do")
    new_index = len(ws.model.transitions()) - 1
    assert ws.model.transitions()[new_index]["from"] == "Triage"
    assert canvas.selected() == ("transition", new_index)
    assert ins.stack.currentIndex() == 2
    tool_edit = ins.transition_tool.lineEdit()
    tool_edit.selectAll()
    qtbot.keyClicks(tool_edit, "accept_issue")
    press_enter(qtbot, tool_edit)
    qtbot.keyClicks(ins.transition_probability, "0.7")
    press_enter(qtbot, ins.transition_probability)
    t = ws.model.transitions()[new_index]
    assert t == {
        "from": "Triage",
        "tool": "accept_issue",
        "to": "To Do",
        "probability": 0.7,
    }
    assert "accept_issue" in ws.model.tool_names()
    assert canvas.edge_item(new_index).edge.label == "accept_issue  p=0.7"
    assert ws.is_modified and "modified" in ws.header.title.text()

    count = ws.undo_stack.count()
    assert count == 5  # add, rename, connect, tool, probability
    for _ in range(count):
        ws.undo_stack.undo()
    assert ws.model.spec == original and not ws.is_modified
    assert "Triage" not in canvas.status_names()
    for _ in range(count):
        ws.undo_stack.redo()
    assert ws.model.transitions()[new_index]["probability"] == 0.7
    assert canvas.status_item("Triage") is not None


def test_a_drag_on_the_canvas_requests_a_transition(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    canvas = workspace.editors["workflow"].canvas
    source = canvas.status_item("To Do")
    target = canvas.status_item("Done")
    handle = canvas.mapFromScene(source.mapToScene(source.handle_center()))
    drop = canvas.mapFromScene(target.scenePos())
    with qtbot.waitSignal(canvas.transition_requested) as blocker:
        qtbot.mousePress(canvas.viewport(), Qt.MouseButton.LeftButton, pos=handle)
        qtbot.mouseMove(canvas.viewport(), drop)
        qtbot.mouseRelease(canvas.viewport(), Qt.MouseButton.LeftButton, pos=drop)
    assert blocker.args == ["To Do", "Done"]
    assert workspace.model.transitions()[-1]["to"] == "Done"


def test_json_view_stays_in_sync_both_ways(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    ws.editors["workflow"].canvas.status_add_requested.emit(0.0, 400.0)
    assert json.loads(ws.json_page.view.toPlainText()) == ws.model.spec
    spec = json.loads(ws.json_page.view.toPlainText())
    spec["workflow"]["max_steps"] = 33
    spec["workflow"]["statuses"].append("Archived")
    before = ws.undo_stack.count()
    ws.json_page.view.setPlainText("{ not json")
    qtbot.waitUntil(
        lambda: "Not valid JSON" in ws.json_page.status.text(), timeout=3000
    )
    assert ws.undo_stack.count() == before
    ws.json_page.view.setPlainText(json.dumps(spec, indent=2))
    qtbot.waitUntil(
        lambda: ws.model.get_field("workflow.max_steps") == 33, timeout=3000
    )
    assert ws.undo_stack.count() == before + 1  # one step for the JSON edit
    assert "Archived" in ws.editors["workflow"].canvas.status_names()
    assert ws.editors["workflow"].inspector.settings.values()["max_steps"] == 33
    ws.undo_stack.undo()
    assert ws.model.get_field("workflow.max_steps") == 20
    assert json.loads(ws.json_page.view.toPlainText()) == ws.model.spec


def test_save_is_atomic_and_reloads_identical(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    path = ws.path
    assert path is not None
    ws.editors["workflow"].canvas.status_add_requested.emit(100.0, -300.0)
    ws.editors["workflow"].canvas.statuses_moved.emit({"Done": (700.0, -40.0)})
    assert autosave_path(path).is_file()  # written after each edit
    spec = json.loads(json.dumps(ws.model.spec))
    inode = os.stat(path).st_ino
    assert ws.save()
    assert os.stat(path).st_ino != inode  # replaced by rename, not rewritten
    assert not ws.is_modified and not autosave_path(path).exists()
    assert [p.name for p in path.parent.iterdir() if ".tmp-" in p.name] == []
    assert read_spec_file(path) == spec
    # Another document, then back: the same spec and the same layout.
    maze = path.parent / "maze.env.json"
    assert ws.open_env(maze) and ws.model.kind == "grid"
    assert ws.open_env(path)
    assert ws.model.spec == spec
    assert ws.model.positions["Done"] == (700.0, -40.0)
    assert ws.editors["workflow"].canvas.status_item("Done").pos().x() == 700.0


def test_autosave_is_offered_after_a_crash(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    path = ws.path
    assert path is not None
    ws.editors["workflow"].canvas.status_add_requested.emit(0.0, 500.0)
    edited = json.loads(json.dumps(ws.model.spec))
    assert read_spec_file(autosave_path(path)) == edited
    # Simulate a crash: the editor goes away without saving or cleaning up.
    ws.undo_stack.setClean()  # so switching documents does not delete the copy
    autosave = autosave_path(path).read_text()
    ws.open_env(path.parent / "maze.env.json")
    autosave_path(path).write_text(autosave)
    asked = []
    ws.restore_decider = lambda p, a: asked.append((p, a)) or True
    assert ws.open_env(path)
    assert asked == [(path, autosave_path(path))]
    assert ws.model.spec == edited and ws.is_modified
    ws.undo_stack.undo()  # back to the file as saved
    assert "New status" not in ws.model.statuses()


def test_malformed_file_on_open_says_one_sentence_and_loses_nothing(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    ws.editors["workflow"].canvas.status_add_requested.emit(0.0, 500.0)  # unsaved work
    open_path, spec = ws.path, json.loads(json.dumps(ws.model.spec))
    broken = open_path.parent / "broken.env.json"
    broken.write_text('{"kind": "workflow", "name": "broken",,}')
    assert not ws.open_env(broken)
    assert ws.banner.text() == (
        "broken.env.json is not valid JSON (line 1, column 39: Expecting property "
        "name enclosed in double quotes); fix it in a text editor, the file was "
        "left as it is."
    )
    assert broken.read_text() == '{"kind": "workflow", "name": "broken",,}'
    assert ws.path == open_path and ws.model.spec == spec and ws.is_modified


def test_a_file_of_the_wrong_shape_is_refused_before_any_view_is_built(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """Issue 29: a workflow whose ``statuses`` is a string drew one status per
    character while the JSON tab and the tools still showed the env before."""
    ws = workspace
    canvas = ws.editors["workflow"].canvas
    open_path, spec = ws.path, json.loads(json.dumps(ws.model.spec))
    statuses = canvas.status_names()
    bad = json.loads(json.dumps(spec))
    bad["name"] = "stringly"
    bad["workflow"]["statuses"] = "To Do"
    path = open_path.parent / "stringly.env.json"
    path.write_text(json.dumps(bad))
    assert not ws.open_env(path)
    assert ws.banner.text() == (
        "stringly.env.json cannot be opened: workflow.statuses must be a list, "
        "not a string; fix it in a text editor, the file was left as it is."
    )
    # Every view still shows the env that was open, and the same one.
    assert ws.path == open_path and ws.model.spec == spec
    assert canvas.status_names() == statuses and "T" not in statuses
    assert json.loads(ws.json_page.view.toPlainText()) == spec
    assert ws.env_list.table.selected_keys() == [str(open_path)]
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        ws.grab().save(str(Path(shots) / "env-wrong-shape-after.png"))
    # The JSON tab refuses the same shape as it is typed.
    before = ws.undo_stack.count()
    ws.json_page.view.setPlainText(json.dumps(bad))
    qtbot.waitUntil(
        lambda: "workflow.statuses must be a list" in ws.json_page.status.text(),
        timeout=3000,
    )
    assert ws.undo_stack.count() == before and ws.model.spec == spec
    assert canvas.status_names() == statuses


def test_grid_stroke_is_one_undo_step(qtbot, workspace: EnvironmentsWorkspace) -> None:
    ws = workspace
    assert ws.open_env(ws.path.parent / "maze.env.json")
    painter = ws.editors["grid"].painter
    assert ws.editors.currentIndex() == 2 and painter.rows == 7 and painter.cols == 9
    walls_before = len(ws.model.body["walls"])
    ws.editors["grid"].cell_palette.buttons["wall"].click()
    with qtbot.waitSignal(painter.stroke_finished) as stroke:
        qtbot.mousePress(
            painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(0, 2)
        )
        qtbot.mouseMove(painter, painter.cell_center(0, 5))
        qtbot.mouseRelease(
            painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(0, 5)
        )
    assert [(r, c) for r, c, _, _ in stroke.args[0]] == [(0, c) for c in range(2, 6)]
    assert ws.undo_stack.count() == 1
    assert len(ws.model.body["walls"]) == walls_before + 4
    ws.editors["grid"].cell_palette.buttons["start"].click()
    qtbot.mouseClick(painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(6, 0))
    assert ws.model.body["start"] == [6, 0] and painter.cell(0, 0) == (
        "empty",
        None,
        False,
    )
    ws.undo_stack.undo()
    ws.undo_stack.undo()
    assert len(ws.model.body["walls"]) == walls_before
    assert ws.model.body["start"] == [0, 0]


def _paint(qtbot, painter, cells: list[tuple[int, int]]) -> None:  # type: ignore[no-untyped-def]
    """One stroke with the mouse over ``cells``, as a user paints it."""
    with qtbot.waitSignal(painter.stroke_finished):
        qtbot.mousePress(
            painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(*cells[0])
        )
        for cell in cells[1:]:
            qtbot.mouseMove(painter, painter.cell_center(*cell))
        qtbot.mouseRelease(
            painter, Qt.MouseButton.LeftButton, pos=painter.cell_center(*cells[-1])
        )


def _check(qtbot, ws: EnvironmentsWorkspace) -> list[dict]:  # type: ignore[no-untyped-def]
    """The engine's spec check of the open env (no env runs)."""
    with qtbot.waitSignal(ws.problems_changed, timeout=30_000) as shown:
        ws.validate(env_checks=False)
    return shown.args[0]


def test_a_reward_painted_once_pays_once_and_the_check_says_so(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    assert ws.open_env(ws.path.parent / "maze.env.json")
    painter, palette = ws.editors["grid"].painter, ws.editors["grid"].cell_palette
    palette.buttons["reward"].click()
    palette.reward.setValue(0.5)
    assert not palette.once.isChecked()
    # Paid each entry, two cells side by side are a farm: the check warns on
    # the first and names the box that fixes it.
    _paint(qtbot, painter, [(0, 1), (0, 2)])
    assert ws.model.body["cell_rewards"][:2] == [
        {"cell": [0, 1], "reward": 0.5},
        {"cell": [0, 2], "reward": 0.5},
    ]
    farm = [p for p in _check(qtbot, ws) if p["path"] == "grid.cell_rewards[0]"]
    assert farm and "tick 'once' on the reward tool" in farm[0]["message"]
    (target,) = [t for t, p in ws.problem_targets() if p == farm[0]]
    assert target.kind == "cell" and target.key == (0, 1)

    qtbot.mouseClick(palette.once, Qt.MouseButton.LeftButton)
    assert palette.once.isChecked()
    _paint(qtbot, painter, [(0, 1), (0, 2)])
    assert ws.model.body["cell_rewards"][:2] == [
        {"cell": [0, 1], "reward": 0.5, "once": True},
        {"cell": [0, 2], "reward": 0.5, "once": True},
    ]
    assert painter.cell(0, 1) == ("empty", 0.5, True)
    assert not [p for p in _check(qtbot, ws) if "cell_rewards" in p["path"]]
    # The engine's env built from the spec pays each coin once an episode.
    env = GridEnv(json.loads(json.dumps(ws.model.spec)), source=str(ws.path))
    env.slip = 0.0
    env.reset(seed=0)
    right, left = 1, 3
    paid = [env.step(a)[4]["reward_breakdown"]["cell"] for a in (right, right, left)]
    assert paid == [0.5, 0.5, 0.0]

    # Cleared, the box paints the cell back to paid each entry; undo restores.
    qtbot.mouseClick(palette.once, Qt.MouseButton.LeftButton)
    _paint(qtbot, painter, [(0, 1)])
    assert ws.model.body["cell_rewards"][0] == {"cell": [0, 1], "reward": 0.5}
    assert painter.cell(0, 1) == ("empty", 0.5, False)
    ws.undo_stack.undo()
    assert ws.model.body["cell_rewards"][0]["once"] is True
    assert painter.cell(0, 1) == ("empty", 0.5, True)
    ws.undo_stack.undo()
    assert "once" not in ws.model.body["cell_rewards"][1]
    ws.undo_stack.redo()
    ws.undo_stack.redo()
    assert ws.model.body["cell_rewards"][0] == {"cell": [0, 1], "reward": 0.5}


def test_validation_in_the_engine_marks_the_culprit(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    # A transition to a status that does not exist, made in the JSON view.
    spec = json.loads(json.dumps(ws.model.spec))
    spec["workflow"]["transitions"][3]["to"] = "Reviewed"
    ws.json_page.view.setPlainText(json.dumps(spec))
    qtbot.waitUntil(lambda: ws.model.spec == spec, timeout=3000)
    with qtbot.waitSignal(ws.problems_changed, timeout=30_000) as shown:
        ws.validate(env_checks=False)
    problems = shown.args[0]
    assert {
        "path": "workflow.transitions[3].to",
        "severity": "error",
        "message": "workflow.transitions[3].to names 'Reviewed', which is not a "
        "status.",
        "check": "spec",
    } in problems
    # The arrow has no status to point at; its field in the inspector shows it.
    ws.problems_panel.tree.setCurrentItem(ws.problems_panel.tree.topLevelItem(0))
    ws.problems_panel.tree.itemClicked.emit(ws.problems_panel.tree.topLevelItem(0), 0)
    assert ws.editors["workflow"].canvas.selected() == ("transition", 3)
    to_combo = ws.editors["workflow"].inspector.transition_to
    assert "which is not a status" in to_combo.toolTip()
    assert "#d62728" in to_combo.styleSheet()

    # Fix it; now make a terminal status unreachable: a warning on its box.
    ws.undo_stack.undo()
    i = next(k for k, t in enumerate(ws.model.transitions()) if t["to"] == "Won't Do")
    while any(t["to"] == "Won't Do" for t in ws.model.transitions()):
        i = next(
            k for k, t in enumerate(ws.model.transitions()) if t["to"] == "Won't Do"
        )
        ws.editors["workflow"].canvas.select("transition", i)
        ws.editors["workflow"].delete_selection()
    with qtbot.waitSignal(ws.problems_changed, timeout=60_000) as shown:
        ws.validate()
    problems = shown.args[0]
    unreachable = [p for p in problems if p["path"] == "workflow.terminal[1]"]
    assert unreachable and "cannot be reached" in unreachable[0]["message"]
    box = ws.editors["workflow"].canvas.status_item("Won't Do")
    assert "cannot be reached from the start" in box.problem
    assert "cannot be reached from the start" in box.toolTip()
    assert "OK" in ws.problems_panel.label.text()  # warnings only: still usable
    # An edit makes the marks stale: they go away until the next check.
    ws.editors["workflow"].canvas.status_add_requested.emit(0.0, 600.0)
    assert box.problem == "" and "Validate again" in ws.problems_panel.label.text()


def test_every_canvas_tool_is_in_sight_in_a_1024_px_window(
    qtbot, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    """The canvas tool bar wraps instead of scrolling: at 1,024 px each of
    its buttons is shown whole (none clipped by the splitter, none behind a
    scroll bar)."""
    from studio_harness import build_main_window, start_on_project

    win = build_main_window(qtbot, tmp_path)
    win.resize(1024, 700)
    win.show()
    win.set_workspace("environments")
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    ws = win.workspaces["environments"]
    assert isinstance(ws, EnvironmentsWorkspace)
    try:
        qtbot.waitUntil(lambda: ws.model.kind == "workflow", timeout=20_000)
        assert win.width() == 1024
        buttons = ws.editors["workflow"].tool_buttons
        assert list(buttons) == [
            "Add status",
            "Delete",
            "Layered layout",
            "Circle layout",
            "Fit",
        ]

        def whole(button) -> bool:  # type: ignore[no-untyped-def]
            return (
                button.isVisible()
                and button.visibleRegion().boundingRect() == button.rect()
            )

        qtbot.waitUntil(lambda: all(whole(b) for b in buttons.values()))
        # Each one does what it says there: Circle layout moves the statuses.
        before = dict(ws.model.positions)
        qtbot.mouseClick(buttons["Circle layout"], Qt.MouseButton.LeftButton)
        qtbot.waitUntil(lambda: ws.model.positions != before)
    finally:
        win.session.client.stop()
