"""The designer's document and its undo commands, without a QApplication."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtGui import QUndoStack

from engine.contract import atomic_write_text
from engine.envs.grid import GridEnv
from studio.environments import commands as cmd
from studio.state.env_design import (
    EMPTY_CELL,
    DesignError,
    EnvDesign,
    Target,
    autosave_path,
    new_spec,
    problem_target,
    read_spec_file,
    spec_text,
)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples" / "envs"


def jira() -> dict:
    return json.loads((EXAMPLES / "jira_issue_resolution.env.json").read_text())


def test_status_edits_keep_every_reference_consistent() -> None:
    m = EnvDesign(jira())
    events: list[tuple[str, str]] = []
    m.subscribe(lambda what, key: events.append((what, key)))
    m.rename_status("In Review", "Review")
    body = m.body
    assert "Review" in body["statuses"] and "In Review" not in body["statuses"]
    assert all("In Review" not in (t["from"], t["to"]) for t in body["transitions"])
    assert body["rewards"]["status"]["Review"] == 0.3
    m.rename_status("To Do", "Backlog")
    assert m.start() == "Backlog"
    m.remove_status("Blocked")
    assert all("Blocked" not in (t["from"], t["to"]) for t in m.transitions())
    assert "Blocked" not in m.status_rewards()
    m.remove_status("Done")
    assert m.terminal() == ["Won't Do"] and m.success() == []
    assert events and events[0] == ("reset", "")


def test_bad_edits_are_refused_with_one_sentence() -> None:
    m = EnvDesign(jira())
    with pytest.raises(DesignError, match="There is already a status 'Done'"):
        m.add_status("Done")
    with pytest.raises(DesignError, match="A status needs a name"):
        m.rename_status("Done", "  ")
    with pytest.raises(DesignError, match="not a valid tool name"):
        m.add_tool("2fast")
    with pytest.raises(DesignError, match="There is no transition 99"):
        m.edit_transition(99, probability=0.5)
    with pytest.raises(DesignError, match="The name must start with a letter"):
        m.set_field("name", "1 bad")
    assert m.spec == jira()  # nothing changed on the way


def test_success_and_terminal_marks() -> None:
    spec = jira()
    del spec["workflow"]["success"]
    m = EnvDesign(spec)
    assert m.effective_success() == ["Done"]  # terminal with a positive weight
    m.set_success("In Review", True)
    assert m.success() == ["Done", "In Review"] and "In Review" in m.terminal()
    m.set_terminal("In Review", False)
    assert "In Review" not in m.terminal()
    m.set_status_reward("Done", None)
    assert "Done" not in m.status_rewards()


def test_grid_cells_round_trip_and_one_start() -> None:
    m = EnvDesign(new_spec("grid", "g"))
    m.set_grid_cells(
        [
            (1, 1, ("wall", None, False)),
            (2, 2, ("trap", None, False)),
            (3, 3, ("empty", 0.5, False)),
        ]
    )
    m.set_grid_cells([(2, 3, ("start", None, False))])
    cells = m.grid_cells()
    assert cells[(2, 3)] == ("start", None, False) and (0, 0) not in cells
    assert m.body["start"] == [2, 3] and m.body["walls"] == [[1, 1]]
    assert m.body["cell_rewards"] == [{"cell": [3, 3], "reward": 0.5}]
    m.resize_grid(2, 2)
    # The start fell outside: it moves to the nearest cell inside (over the wall).
    assert m.body["size"] == [2, 2] and m.body["start"] == [1, 1]
    assert m.body["walls"] == [] and "cell_rewards" not in m.body
    with pytest.raises(DesignError, match="1 to 256"):
        m.resize_grid(0, 3)


def _cell_rewards_paid(spec: dict, moves: list[int]) -> list[float]:
    """The cell reward of each step of ``moves`` in the engine's grid env
    built from ``spec`` (validated as the engine does), without slips."""
    env = GridEnv(copy.deepcopy(spec), source="designed.env.json")
    env.slip = 0.0
    env.reset(seed=0)
    return [env.step(a)[4]["reward_breakdown"]["cell"] for a in moves]


def test_a_cell_reward_paid_once_is_written_cleared_and_undone() -> None:
    m = EnvDesign(json.loads((EXAMPLES / "maze.env.json").read_text()))
    assert m.grid_cells()[(4, 7)] == ("empty", 0.1, True)
    stack = QUndoStack()
    # A coin one step right of the start, over the painted stroke's old cell.
    stack.push(cmd.PaintCells(m, [(0, 1, EMPTY_CELL, ("empty", 0.5, True))]))
    assert m.body["cell_rewards"] == [
        {"cell": [0, 1], "reward": 0.5, "once": True},
        {"cell": [4, 7], "reward": 0.1, "once": True},
    ]
    assert m.grid_cells()[(0, 1)] == ("empty", 0.5, True)
    right, left = 1, 3
    assert _cell_rewards_paid(m.spec, [right, left, right, left]) == [0.5, 0, 0, 0]
    # Painted again with the box cleared: paid each time it is entered.
    stack.push(cmd.PaintCells(m, [(0, 1, ("empty", 0.5, True), ("empty", 0.5, False))]))
    assert m.body["cell_rewards"][0] == {"cell": [0, 1], "reward": 0.5}
    assert _cell_rewards_paid(m.spec, [right, left, right]) == [0.5, 0, 0.5]
    stack.undo()
    assert m.body["cell_rewards"][0] == {"cell": [0, 1], "reward": 0.5, "once": True}
    stack.redo()
    assert "once" not in m.body["cell_rewards"][0]
    # A goal painted over a coin keeps it; a wall or an erase drops the reward.
    m.set_grid_cells([(4, 7, ("goal", 0.1, True))])
    assert m.body["cell_rewards"][1] == {"cell": [4, 7], "reward": 0.1, "once": True}
    m.set_grid_cells([(4, 7, ("wall", None, False)), (0, 1, EMPTY_CELL)])
    assert "cell_rewards" not in m.body


def test_a_spec_without_the_once_mark_loads_as_paid_each_entry() -> None:
    spec = json.loads((EXAMPLES / "maze.env.json").read_text())
    del spec["grid"]["cell_rewards"][0]["once"]  # as written before the mark
    m = EnvDesign(spec)
    assert m.grid_cells()[(4, 7)] == ("empty", 0.1, False)
    m.set_grid_cells([(0, 8, ("empty", 0.5, False))])  # a stroke elsewhere
    assert m.body["cell_rewards"] == [
        {"cell": [0, 8], "reward": 0.5},
        {"cell": [4, 7], "reward": 0.1},
    ]


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("workflow.transitions[3].to", Target("transition", 3, "to")),
        ("workflow.transitions[7].probability", Target("transition", 7, "probability")),
        ("workflow.statuses[2]", Target("status", "Blocked", "statuses")),
        ("workflow.terminal[1]", Target("status", "Won't Do", "terminal")),
        ("workflow.terminal", Target("status", "To Do", "terminal")),
        ("workflow.start", Target("status", "To Do", "start")),
        ("workflow.tools[4].name", Target("tool", 4, "name")),
        ("workflow.rewards.status.Done", Target("status", "Done", "reward")),
        ("workflow.max_steps", Target("field", "workflow.max_steps")),
        ("", Target("spec")),
    ],
)
def test_problem_paths_map_to_designer_elements(path: str, target: Target) -> None:
    assert problem_target(jira(), path) == target


def test_grid_problem_paths_map_to_cells() -> None:
    spec = json.loads((EXAMPLES / "maze.env.json").read_text())
    assert problem_target(spec, "grid.walls[0]") == Target("cell", (1, 1), "walls")
    assert problem_target(spec, "grid.start") == Target("cell", (0, 0), "start")
    assert problem_target(spec, "grid.slip") == Target("field", "grid.slip")


def test_every_command_undoes_and_redoes_exactly() -> None:
    m = EnvDesign(jira())
    stack = QUndoStack()
    states = [m.snapshot()]
    edits = [
        cmd.AddStatus(m, "Triage", (10.0, 20.0)),
        cmd.AddTransition(m, "Triage", "triage", "To Do"),
        cmd.EditTransition(m, 0, probability=0.5),
        cmd.EditTransition(m, 0, tool="brand_new_tool"),
        cmd.RenameStatus(m, "Triage", "Inbox"),
        cmd.RenameTool(m, "merge", "land"),
        cmd.RemoveTransition(m, 1),
        cmd.MoveStatuses(m, {"Inbox": (1.0, 2.0), "Done": (3.0, 4.0)}),
        cmd.SetField(m, "workflow.max_steps", 30),
        cmd.RemoveTool(m, "flag_blocked"),
        cmd.RemoveStatus(m, "Blocked"),
    ]
    for c in edits:
        stack.push(c)
        states.append(m.snapshot())
    assert "brand_new_tool" in m.tool_names()
    for i in range(len(edits), 0, -1):
        stack.undo()
        assert m.snapshot() == states[i - 1]
    for i in range(1, len(edits) + 1):
        stack.redo()
        assert m.snapshot() == states[i]


def test_consecutive_field_edits_merge_into_one_undo_step() -> None:
    m = EnvDesign(jira())
    stack = QUndoStack()
    for v in (1, 12, 123):
        stack.push(cmd.SetField(m, "workflow.max_steps", v))
    stack.push(cmd.SetField(m, "workflow.rewards.per_step", -0.5))
    assert stack.count() == 2
    stack.undo()
    stack.undo()
    assert m.spec == jira()
    assert stack.isClean()


def test_grid_stroke_is_one_undo_step() -> None:
    m = EnvDesign(new_spec("grid", "g"))
    before = copy.deepcopy(m.spec)
    stack = QUndoStack()
    stroke = [(0, c, EMPTY_CELL, ("wall", None, False)) for c in range(1, 4)]
    stack.push(cmd.PaintCells(m, stroke))
    assert stack.count() == 1 and len(m.body["walls"]) == 3
    stack.undo()
    assert m.spec == before


names = st.text(alphabet="abcXYZ _", min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["add", "rename", "remove"]), names), max_size=12
    )
)
def test_random_status_edits_undo_to_the_start(ops: list[tuple[str, str]]) -> None:
    m = EnvDesign(jira())
    stack = QUndoStack()
    start = m.snapshot()
    for op, name in ops:
        statuses = m.statuses()
        if op == "add" and not m.status_name_problem(name):
            stack.push(cmd.AddStatus(m, name, None))
        elif (
            op == "rename" and statuses and not m.status_name_problem(name, statuses[0])
        ):
            stack.push(cmd.RenameStatus(m, statuses[0], name))
        elif op == "remove" and len(statuses) > 1:
            stack.push(cmd.RemoveStatus(m, statuses[-1]))
        names_now = set(m.statuses())
        for t in m.transitions():
            assert t["from"] in names_now | {"*"} and t["to"] in names_now | {"*"}
        assert m.start() in names_now
    while stack.canUndo():
        stack.undo()
    assert m.snapshot() == start


def test_files_are_written_atomically_and_read_with_clear_errors(
    tmp_path: Path,
) -> None:
    target = tmp_path / "envs" / "x.env.json"
    atomic_write_text(target, spec_text(jira()))
    assert read_spec_file(target) == jira()
    assert [p.name for p in target.parent.iterdir()] == ["x.env.json"]
    assert autosave_path(target) == tmp_path / "envs" / ".autosave" / "x.env.json"
    bad = tmp_path / "bad.env.json"
    bad.write_text('{"kind": "workflow",\n  "name": }')
    with pytest.raises(DesignError) as err:
        read_spec_file(bad)
    assert str(err.value) == (
        "bad.env.json is not valid JSON (line 2, column 11: Expecting value); fix it "
        "in a text editor, the file was left as it is."
    )
    (tmp_path / "list.env.json").write_text("[1, 2]")
    with pytest.raises(DesignError, match="must hold a JSON object, not a list"):
        read_spec_file(tmp_path / "list.env.json")
    (tmp_path / "flow.env.json").write_text('{"nodes": []}')
    with pytest.raises(DesignError, match="is not an environment spec"):
        read_spec_file(tmp_path / "flow.env.json")
