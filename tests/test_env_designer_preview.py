"""The designer's Preview tab and "Train this environment", against the real
engine: episodes play in an ``env_preview`` job, the results come back as a
return histogram, a success rate, a step trace and frames; a bad spec shows
the error and loses no edit; Train opens the Training dialog preselected."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, Qt

from studio.engine_client import EngineClient
from studio.environments.commands import ReplaceDocument
from studio.environments.workspace import EnvironmentsWorkspace
from studio.main_window import MainWindow
from studio.session import Session
from studio.settings import Settings
from studio.state.env_design import autosave_path, read_spec_file
from studio.state.env_preview import (
    env_refs,
    grid_preview_frames,
    matching_policies,
    suggest_algo,
    summary,
    trace_rows,
    train_config,
)
from studio.state.project_state import ProjectState
from studio.training.run_dialog import RunDialog
from widgets.code_editor import CodeEditor
from widgets.histogram import Histogram, histogram_bins

PREVIEW_TIMEOUT_MS = 90_000

# ------------------------------------------------------------ pure helpers


def test_big_grids_ask_for_fewer_frames() -> None:
    assert grid_preview_frames(7, 9) == 200
    assert grid_preview_frames(256, 256) == 5  # 50 MB each
    assert grid_preview_frames(4096, 4096) == 1


def test_algorithm_fits_the_env() -> None:
    assert suggest_algo("workflow") == "MaskablePPO"
    assert suggest_algo("grid") == "PPO"
    assert suggest_algo("gymnasium", "Discrete(2)") == "PPO"
    assert suggest_algo("gymnasium", "Box(-2.0, 2.0, (1,), float32)") == "SAC"
    assert suggest_algo("python", "MultiDiscrete([3 3])") == "PPO"
    assert suggest_algo("python", None) == "PPO"


def test_training_names_the_designed_id_unless_a_plain_gym_id_will_do() -> None:
    plain = {"name": "cartpole", "kind": "gymnasium", "gymnasium": {"id": "X-v1"}}
    assert train_config(plain, "Discrete(2)") == {"env": "X-v1", "algo": "PPO"}
    tuned = {
        "name": "pend",
        "kind": "gymnasium",
        "gymnasium": {"id": "Pendulum-v1", "kwargs": {"g": 9.0}},
    }
    assert train_config(tuned, "Box(-2.0, 2.0, (1,), float32)") == {
        "env": "rlstudio/pend-v0",
        "algo": "SAC",
    }
    jira = {"name": "jira", "kind": "workflow", "workflow": {}}
    assert train_config(jira) == {"env": "rlstudio/jira-v0", "algo": "MaskablePPO"}


def test_policies_match_the_env_by_any_of_its_names(tmp_path: Path) -> None:
    spec = {"name": "maze", "kind": "grid", "grid": {}}
    path = tmp_path / "envs" / "maze.env.json"
    assert {"rlstudio/maze-v0", "envs/maze.env.json", str(path)} <= env_refs(spec, path)
    models = [
        {"id": "a", "kind": "sb3-policy", "env": "rlstudio/maze-v0", "algo": "PPO",
         "path": "a.zip", "created": 1},
        {"id": "b", "kind": "sb3-policy", "env": "CartPole-v1", "algo": "PPO",
         "path": "b.zip", "created": 2},
        {"id": "c", "kind": "lora-adapter", "env": "rlstudio/maze-v0",
         "path": "c", "created": 3},
        {"id": "d", "kind": "sb3-policy", "env": "envs/maze.env.json",
         "algo": "DQN", "path": "d.zip", "created": 4},
    ]  # fmt: skip
    assert [m["id"] for m in matching_policies(models, spec, path)] == ["d", "a"]


def test_trace_rows_name_actions_and_label_observations() -> None:
    data = {
        "env_id": "rlstudio/x-v0",
        "episodes": [{"return": 1.5, "length": 2, "success": True}],
        "return_mean": 1.5,
        "return_std": 0.0,
        "length_mean": 2.0,
        "success_rate": 1.0,
        "action_names": ["start", "finish"],
        "observation_labels": ["step fraction", "done"],
        "trace": [
            {"episode": 0, "step": 1, "observation": [0.0, 0.0], "action": 0,
             "action_name": None, "reward": 0.5,
             "reward_breakdown": {"step": -0.5, "status": 1.0, "success": 0},
             "status": "Doing", "terminated": False, "truncated": False,
             "text": "Current status: Doing"},
            {"episode": 0, "step": 2, "observation": [0.5, 0.0], "action": 1,
             "action_name": "finish", "reward": 1.0, "reward_breakdown": {},
             "status": "Done", "terminated": True, "truncated": False,
             "text": None},
        ],
    }  # fmt: skip
    rows = trace_rows(data)
    assert [r["action"] for r in rows] == ["start", "finish"]
    assert rows[0]["breakdown"] == "step -0.5, status +1"  # zero rules left out
    assert rows[0]["observation_labelled"] == "step fraction = 0\ndone = 0"
    assert rows[1]["status"] == "Done · terminated"
    s = summary(data)
    assert s["success_rate"] == 1.0 and s["returns"] == [1.5]
    # A plain gymnasium env has no notion of success: none is claimed.
    assert summary({**data, "env_id": "CartPole-v1"})["success_rate"] is None


def test_histogram_bins_and_mean(qtbot) -> None:  # type: ignore[no-untyped-def]
    edges, counts = histogram_bins([2.0, 2.0, 2.0])
    assert list(edges) == [1.5, 2.5] and list(counts) == [3]  # one visible bar
    edges, counts = histogram_bins([0.0, 1.0, float("nan"), 3.0, 4.0], max_bins=2)
    assert list(counts) == [2, 2] and list(edges) == [0.0, 2.0, 4.0]
    chart = Histogram(title="Return per episode")
    qtbot.addWidget(chart)
    chart.set_values([1.0, 2.0, 6.0])
    assert sum(chart.counts()) == 3
    assert chart.mean_line.value() == 3.0
    assert chart.mean_line.label.toPlainText() == "mean 3"
    chart.set_values([])
    assert chart.counts() == [] and not chart.mean_line.isVisible()


# ------------------------------------------------------------ the workspace


@pytest.fixture
def session(qtbot, tmp_path: Path) -> Iterator[Session]:  # type: ignore[no-untyped-def]
    client = EngineClient(auto_restart=False)
    with qtbot.waitSignal(client.hello_received, timeout=20_000):
        client.start()
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    yield Session(client, ProjectState(), settings)
    client.stop()


@pytest.fixture
def workspace(qtbot, session: Session, tmp_path: Path):  # type: ignore[no-untyped-def]
    ws = EnvironmentsWorkspace(session)
    ws.restore_decider = lambda path, auto: pytest.fail("unexpected restore prompt")
    ws.confirm_discard = lambda name: True
    qtbot.addWidget(ws)
    ws.resize(1200, 800)
    with qtbot.waitSignal(ws.document_opened, timeout=20_000):
        session.open_project(str(tmp_path / "project"), create=True)
    ws.show()
    qtbot.waitExposed(ws)
    ws.tabs.setCurrentWidget(ws.preview_panel)
    return ws


def run_preview(qtbot, ws: EnvironmentsWorkspace, episodes: int) -> dict:  # type: ignore[no-untyped-def]
    panel = ws.preview_panel
    panel.episodes.setValue(episodes)
    progress: list[tuple[int, int]] = []
    ws.controller.preview_progress.connect(lambda d, t: progress.append((d, t)))
    with qtbot.waitSignal(
        ws.controller.preview_finished, timeout=PREVIEW_TIMEOUT_MS
    ) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
        assert not panel.run_button.isEnabled() and panel.stop_button.isEnabled()
    assert progress and progress[-1][1] == episodes
    assert panel.run_button.isEnabled() and not panel.progress.isVisible()
    return blocker.args[0]


def test_preview_of_the_jira_env_shows_a_trace_and_a_success_rate(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws, panel = workspace, workspace.preview_panel
    assert ws.model.name == "jira_issue_resolution"
    assert panel.policy_combo.currentText() == "Random policy"
    data = run_preview(qtbot, ws, episodes=12)
    assert len(data["episodes"]) == 12
    text = panel.status_label.text()
    assert "12</b> episodes" in text and "success rate" in text
    assert f"{data['success_rate']:.0%}" in text
    assert sum(panel.histogram.counts()) == 12
    assert panel.histogram.isVisible()
    rows = panel.trace_table.model.records
    # The first five episodes, step by step.
    assert len(rows) == sum(e["length"] for e in data["episodes"][:5])
    assert {r["episode"] for r in rows} == {1, 2, 3, 4, 5}
    assert {r["action"] for r in rows} <= set(ws.model.tool_names())
    assert all(r["breakdown"] or r["reward"] == 0 for r in rows)
    for ep in range(1, 6):
        last = [r for r in rows if r["episode"] == ep][-1]
        assert last["status"].endswith(("terminated", "truncated"))
    # The chosen step shows what a language-model policy reads.
    assert "Current status" in panel.step_detail.toPlainText()
    assert "step_fraction = 0" in panel.step_detail.toPlainText()
    # The workflow draws its status diagram, a frame per step of episode 1.
    assert panel.frames.isVisibleTo(panel)
    assert panel.frames.frame_count() == data["episodes"][0]["length"] + 1
    # An edit makes the results stale, and says so.
    ws.undo_stack.push(
        ReplaceDocument(ws.model, {**ws.model.spec, "description": "edited"})
    )
    assert "edited since" in panel.status_label.text()


def test_preview_plays_the_unsaved_edit(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    spec = json.loads(json.dumps(ws.model.spec))
    spec["workflow"]["rewards"]["per_step"] = -0.25
    ws.undo_stack.push(ReplaceDocument(ws.model, spec))
    assert ws.is_modified
    data = run_preview(qtbot, ws, episodes=2)
    assert data["trace"][0]["reward_breakdown"]["step"] == -0.25
    assert ws.is_modified  # previewing saved nothing
    assert read_spec_file(ws.path)["workflow"]["rewards"]["per_step"] != -0.25


def test_preview_of_the_grid_maze_shows_frames(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws, panel = workspace, workspace.preview_panel
    maze = next(d for d in ws.env_list.table.model.records if d["name"] == "maze")
    assert ws.open_env(maze["path"])
    assert panel.data is None  # another env: the old results are gone
    data = run_preview(qtbot, ws, episodes=3)
    assert panel.frames.isVisibleTo(panel)
    # The reset frame, then one per step of the first episode.
    assert panel.frames.frame_count() == data["episodes"][0]["length"] + 1
    assert not panel.frames.image.pixmap().isNull()
    actions = {r["action"] for r in panel.trace_table.model.records}
    assert actions <= {"up", "right", "down", "left"}
    assert sum(panel.histogram.counts()) == 3


def test_preview_of_a_bad_spec_shows_the_error_and_loses_no_edit(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws, panel = workspace, workspace.preview_panel
    spec = json.loads(json.dumps(ws.model.spec))
    spec["workflow"]["transitions"][0]["to"] = "Nowhere"
    ws.json_page.view.setPlainText(json.dumps(spec, indent=2))
    qtbot.waitUntil(lambda: ws.model.spec == spec, timeout=5000)
    count = ws.undo_stack.count()
    with (
        qtbot.waitSignal(ws.problems_changed, timeout=PREVIEW_TIMEOUT_MS),
        qtbot.waitSignal(ws.controller.preview_failed, timeout=30_000) as err,
    ):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert "workflow.transitions[0].to" in err.args[0]
    assert "Nowhere" in panel.status_label.text()
    assert not panel.charts.isVisible()  # no empty axes
    assert "failed" in panel.status_label.text()
    assert panel.run_button.isEnabled()
    # Nothing was lost: the edit, its undo step, the autosave.
    assert ws.model.spec == spec and ws.is_modified
    assert ws.undo_stack.count() == count
    assert read_spec_file(autosave_path(ws.path)) == spec
    # The culprit is marked on the canvas, as Validate would.
    assert any(p["path"] == "workflow.transitions[0].to" for p in ws.problems)
    qtbot.waitUntil(lambda: bool(ws.editors["workflow"].canvas.edge_item(0).problem))


def test_train_this_env_opens_the_training_dialog_preselected(
    qtbot, session: Session, tmp_path: Path
) -> None:
    win = MainWindow(session, session.settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    ws = win.environments
    with qtbot.waitSignal(ws.document_opened, timeout=20_000):
        session.open_project(str(tmp_path / "project"), create=True)
    win.show()
    assert ws.model.name == "jira_issue_resolution"
    ws.undo_stack.push(
        ReplaceDocument(ws.model, {**ws.model.spec, "description": "to train"})
    )
    with qtbot.waitSignal(ws.train_requested) as req:
        qtbot.mouseClick(ws.header.train_button, Qt.MouseButton.LeftButton)
    assert req.args[0] == {
        "env": "rlstudio/jira_issue_resolution-v0",
        "algo": "MaskablePPO",
    }
    # Training uses the spec on disk, so it was saved first.
    assert not ws.is_modified
    assert read_spec_file(ws.path)["description"] == "to train"
    assert win.current_workspace() == "training"
    dialog = win.training.findChild(RunDialog)
    assert dialog is not None and dialog.isVisible()
    assert "jira_issue_resolution" in dialog.windowTitle()
    # The engine's form arrives with the env and the algorithm kept.
    qtbot.waitUntil(lambda: bool(dialog.form.values()), timeout=30_000)
    values = dialog.form.values()
    assert values["env"] == "rlstudio/jira_issue_resolution-v0"
    assert values["algo"] == "MaskablePPO"
    dialog.reject()


def test_gymnasium_form_is_built_from_the_env_signature(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """CartPole-v1 registers no kwargs; its constructor still takes
    ``sutton_barto_reward``, and the form offers it."""
    ws = workspace
    cartpole = next(
        d for d in ws.env_list.table.model.records if d["name"] == "cartpole"
    )
    assert ws.open_env(cartpole["path"])
    ws.tabs.setCurrentIndex(0)
    qtbot.waitUntil(
        lambda: "sutton_barto_reward" in ws.editors["gymnasium"].kwargs.values(),
        timeout=30_000,
    )
    assert ws.editors["gymnasium"].kwargs.values()["sutton_barto_reward"] is False
    assert "Discrete(2)" in ws.editors["gymnasium"].spaces.text()
    box = ws.editors["gymnasium"].kwargs.editor("sutton_barto_reward")
    box.setFocus()
    qtbot.keyClick(box, Qt.Key.Key_Space)
    assert ws.model.get_field("gymnasium.kwargs") == {"sutton_barto_reward": True}
    assert json.loads(ws.editors["gymnasium"].kwargs_text.text()) == {
        "sutton_barto_reward": True
    }
    ws.undo_stack.undo()
    assert ws.model.get_field("gymnasium.kwargs") == {}
    assert ws.editors["gymnasium"].kwargs.values()["sutton_barto_reward"] is False


def test_a_python_env_that_fails_to_import_fails_its_preview_run(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """The engine starts the run (the spec itself is fine); the user's file
    raises in the job, the run fails, and the panel says why."""
    ws, panel = workspace, workspace.preview_panel
    assert ws.new_env("python", "broken")
    code = Path(ws._state.path) / ws.model.get_field("python.file")
    code.write_text("import gymnasium\nraise RuntimeError('wires crossed')\n")
    with (
        qtbot.waitSignal(ws.problems_changed, timeout=PREVIEW_TIMEOUT_MS),
        qtbot.waitSignal(
            ws.controller.preview_failed, timeout=PREVIEW_TIMEOUT_MS
        ) as err,
    ):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert "wires crossed" in err.args[0]
    assert "wires crossed" in panel.status_label.text()
    run = next(r for r in ws._state.runs.values() if r["kind"] == "env_preview")
    assert run["status"] == "failed"
    assert any(p["path"] == "python.file" for p in ws.problems)


@pytest.mark.slow
def test_preview_with_a_policy_trained_on_the_env(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """A short MaskablePPO run registers a policy; the Preview offers it for
    this env (and only this env) and plays with it."""
    ws, panel, session = workspace, workspace.preview_panel, workspace._session
    ended: list[tuple[str, str, str]] = []
    session.run_ended.connect(lambda *args: ended.append(args))
    session.start_run(
        "rl.train",
        {
            "env": "rlstudio/jira_issue_resolution-v0",
            "algo": "MaskablePPO",
            "total_steps": 64,
            "seed": 0,
            "n_envs": 1,
            "eval_every_steps": 0,
            "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
        },
        name="tiny",
        on_error=lambda e: ended.append(("", "refused", e.message)),
    )
    # Torch and SB3 load in the job: slow on a busy two-core machine.
    qtbot.waitUntil(lambda: bool(ended), timeout=4 * PREVIEW_TIMEOUT_MS)
    assert ended[0][1] == "completed", ended
    qtbot.waitUntil(lambda: panel.policy_combo.count() == 2, timeout=30_000)
    assert panel.policy_combo.isEnabled()
    assert "MaskablePPO" in panel.policy_combo.itemText(1)
    panel.policy_combo.setCurrentIndex(1)
    data = run_preview(qtbot, ws, episodes=3)
    assert len(data["episodes"]) == 3
    policy = ws.policies()[0]
    assert f"with {policy['name']}" in panel.status_label.text()
    # The maze has no policy of its own: only Random is offered there.
    maze = next(d for d in ws.env_list.table.model.records if d["name"] == "maze")
    assert ws.open_env(maze["path"])
    assert panel.policy_combo.count() == 1


def test_an_argument_the_env_does_not_take_is_marked_on_the_kwargs(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws = workspace
    cartpole = next(
        d for d in ws.env_list.table.model.records if d["name"] == "cartpole"
    )
    assert ws.open_env(cartpole["path"])
    ws.tabs.setCurrentIndex(0)
    ws.editors["gymnasium"].kwargs_text.setText('{"pole_colour": "red"}')
    ws.editors["gymnasium"].kwargs_text.setFocus()
    qtbot.keyClick(ws.editors["gymnasium"].kwargs_text, Qt.Key.Key_Return)
    assert ws.model.get_field("gymnasium.kwargs") == {"pole_colour": "red"}
    with qtbot.waitSignal(ws.problems_changed, timeout=PREVIEW_TIMEOUT_MS):
        ws.validate()
    assert [p["path"] for p in ws.problems if p["severity"] == "error"] == [
        "gymnasium.kwargs"
    ]
    assert "pole_colour" in ws.editors["gymnasium"].kwargs_text.property("problem")
    assert not ws.editors["gymnasium"].env_id.property("problem")


def test_stop_ends_a_long_preview_and_shows_what_it_played(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws, panel = workspace, workspace.preview_panel
    maze = next(d for d in ws.env_list.table.model.records if d["name"] == "maze")
    assert ws.open_env(maze["path"])
    panel.episodes.setValue(5000)
    with qtbot.waitSignal(ws.controller.preview_progress, timeout=PREVIEW_TIMEOUT_MS):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert panel.progress.isVisible() and panel.progress.maximum() == 5000
    # The first progress says 0 played; on a loaded machine a Stop then may
    # come before the first episode ends.
    qtbot.waitUntil(lambda: panel.progress.value() >= 1, timeout=PREVIEW_TIMEOUT_MS)
    with qtbot.waitSignal(
        ws.controller.preview_finished, timeout=PREVIEW_TIMEOUT_MS
    ) as done:
        qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    played = len(done.args[0]["episodes"])
    assert 0 < played < 5000
    assert f"{played}</b> episodes" in panel.status_label.text()
    assert panel.run_button.isEnabled() and not panel.stop_button.isEnabled()


PYTHON_SEVENS = """import gymnasium as gym
import numpy as np


class MyEnv(gym.Env):
    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._steps = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self._steps += 1
        return np.zeros(2, np.float32), 7.0, False, self._steps >= 4, {}
"""


def test_python_env_code_is_edited_in_the_designer_and_previewed(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """A new python env starts from a template that passes every check; its
    code is edited in place, and Preview writes it first (the engine imports
    the file), while the spec stays as it was."""
    ws = workspace
    assert ws.new_env("python", "sevens")
    ws.tabs.setCurrentIndex(0)
    assert (
        ws.editors["python"].code_path is not None
        and ws.editors["python"].code_path.name == "sevens.py"
    )
    assert "class MyEnv(gym.Env)" in ws.editors["python"].code.toPlainText()
    assert not ws.is_modified
    with qtbot.waitSignal(ws.problems_changed, timeout=PREVIEW_TIMEOUT_MS):
        ws.validate()
    assert [p for p in ws.problems if p["severity"] == "error"] == []

    template = ws.editors["python"].code_path.read_text()
    ws.editors["python"].code.selectAll()
    ws.editors["python"].code.insertPlainText(PYTHON_SEVENS)  # as a paste would
    assert (
        ws.is_modified
        and ws.editors["python"].code_modified
        and "modified" in ws.header.title.text()
    )
    assert "unsaved changes" in ws.editors["python"].note.text()
    assert ws.editors["python"].code_path.read_text() == template  # nothing written yet
    data = run_preview(qtbot, ws, episodes=2)
    assert ws.editors["python"].code_path.read_text() == PYTHON_SEVENS
    assert not ws.is_modified and "unsaved" not in ws.editors["python"].note.text()
    assert [e["return"] for e in data["episodes"]] == [28.0, 28.0]
    assert data["action_space"] == "Discrete(3)"
    # It cannot draw: the sentence stands where the frames would be.
    sentence = (
        "rlstudio/sevens-v0 cannot draw frames: it takes no render_mode argument."
    )
    assert data["frames_note"] == sentence
    panel = ws.preview_panel
    assert panel.frames.image.text() == sentence and panel.frames.isVisibleTo(panel)
    # The editor's own undo brings the template back (unsaved again).
    ws.editors["python"].code.undo()
    assert (
        ws.editors["python"].code.toPlainText() == template
        and ws.editors["python"].code_modified
    )
    assert ws.save() and ws.editors["python"].code_path.read_text() == template


def test_code_editor_indents_with_spaces(qtbot) -> None:  # type: ignore[no-untyped-def]
    editor = CodeEditor()
    qtbot.addWidget(editor)
    editor.set_code("")
    qtbot.keyClicks(editor, "def f(x):")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.keyClicks(editor, "if x:")
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.keyClick(editor, Qt.Key.Key_Tab)
    qtbot.keyClicks(editor, "return 1")
    assert editor.toPlainText() == "def f(x):\n    if x:\n            return 1"
    assert editor.document().isModified()


def test_a_fixed_seed_replays_the_same_episodes(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    ws, panel = workspace, workspace.preview_panel
    assert panel.seed.text() == "new seed"
    panel.seed.setValue(5)
    first = run_preview(qtbot, ws, episodes=6)
    second = run_preview(qtbot, ws, episodes=6)
    assert first["seed"] == second["seed"] == 5
    assert first["episodes"] == second["episodes"]
    assert first["trace"] == second["trace"]
    assert "seed 5" in panel.status_label.text()


def test_train_a_gymnasium_spec_names_its_id_and_fits_the_algorithm(
    qtbot, workspace: EnvironmentsWorkspace
) -> None:
    """CartPole-v1 without arguments trains on its own id (RL Zoo's preset
    applies); its Discrete(2) actions, from the engine's description, ask
    for PPO."""
    ws = workspace
    cartpole = next(
        d for d in ws.env_list.table.model.records if d["name"] == "cartpole"
    )
    assert ws.open_env(cartpole["path"])
    qtbot.waitUntil(
        lambda: "Discrete(2)" in ws.editors["gymnasium"].spaces.text(), timeout=30_000
    )
    with qtbot.waitSignal(ws.train_requested) as req:
        assert ws.train()
    assert req.args[0] == {"env": "CartPole-v1", "algo": "PPO"}
