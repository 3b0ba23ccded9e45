"""The Training dashboard driven like a user: New run, live plots, a refused
config, duplicate with changes — against the real engine and real SB3."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox, QLabel, QLineEdit
from studio_harness import build_main_window, start_on_project

from studio.main_window import MainWindow
from studio.state.project_state import ProjectState
from studio.training.run_dialog import RunDialog, flatten_config, nest_values
from studio.training.workspace import best_reward

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.show()
    win.set_workspace("training")
    yield win
    win.session.client.stop()


def type_into(qtbot, dialog: RunDialog, name: str, text: str) -> None:
    editor = dialog.form.editor(name)
    line = editor.property("line_edit") if not isinstance(editor, QLineEdit) else editor
    assert isinstance(line, QLineEdit)
    line.selectAll()
    qtbot.keyClicks(line, text)


def open_dialog(qtbot, win: MainWindow, initial: dict | None = None) -> RunDialog:
    dialog = win.workspaces["training"].open_run_dialog(initial)
    qtbot.waitUntil(
        lambda: "hyperparameters.learning_rate" in dialog.form.values(), timeout=30_000
    )
    return dialog


def test_values_round_trip_between_config_and_form() -> None:
    config = {"env": "CartPole-v1", "seed": None, "hyperparameters": {"n_steps": 64}}
    assert nest_values(flatten_config(config)) == {
        "env": "CartPole-v1",
        "hyperparameters": {"n_steps": 64},
    }


def test_new_run_trains_and_plots_live(qtbot, window: MainWindow) -> None:
    training = window.workspaces["training"]
    dialog = open_dialog(qtbot, window)
    algo = dialog.form.editor("algo")
    assert isinstance(algo, QComboBox)
    algo.setCurrentText("PPO")
    type_into(qtbot, dialog, "total_steps", "512")
    type_into(qtbot, dialog, "eval_every_steps", "256")
    type_into(qtbot, dialog, "eval_episodes", "2")
    type_into(qtbot, dialog, "n_envs", "1")
    type_into(qtbot, dialog, "hyperparameters.n_steps", "128")
    type_into(qtbot, dialog, "hyperparameters.batch_size", "64")
    assert dialog.form.is_valid(), dialog.form.errors()
    with qtbot.waitSignal(dialog.accepted, timeout=30_000):
        dialog.buttons.accepted.emit()
    run_id = dialog.started_run_id
    assert run_id
    state = window.session.state
    qtbot.waitUntil(
        lambda: (state.run(run_id) or {}).get("status") == "completed", timeout=180_000
    )
    store = window.session.metrics
    assert "rollout/ep_rew_mean" in store.keys(run_id)
    assert "eval/mean_reward" in store.keys(run_id)
    training.table.select_keys([run_id])
    assert any(k.startswith("train/") and "loss" in k for k in store.keys(run_id))
    groups = training.plots.group_titles
    qtbot.waitUntil(lambda: {"Rewards", "Losses"} <= set(groups()), timeout=10_000)
    assert training.progress.state() == "completed"
    record = next(r for r in training.table.model.records if r["id"] == run_id)
    assert record["summary"]["total_steps"] >= 512
    qtbot.waitUntil(lambda: len(window.session.state.models) == 1, timeout=10_000)
    assert window.session.state.models[0]["algo"] == "PPO"


def test_the_dialog_sends_only_what_the_user_changed(qtbot, window: MainWindow) -> None:
    """Untouched fields stay the engine's to choose (and fit to the budget)."""
    dialog = open_dialog(qtbot, window)
    type_into(qtbot, dialog, "total_steps", "3000")
    type_into(qtbot, dialog, "hyperparameters.gamma", "0.95")
    assert dialog.config() == {
        "env": "CartPole-v1",
        "algo": "auto",
        "total_steps": 3000,
        "hyperparameters": {"gamma": 0.95},
    }
    dialog.reject()


def test_a_project_preset_gives_the_dialogs_defaults(qtbot, window: MainWindow) -> None:
    """A preset a sweep saved (tune --save-preset) is offered by the dialog,
    and choosing it shows its settings; the engine applies them to the
    fields left untouched."""
    from engine.rl.config import save_preset

    save_preset(
        window.session.state.path,
        "tuned",
        env="CartPole-v1",
        algo="PPO",
        settings={"learning_rate": 0.00123, "n_epochs": 7, "n_envs": 2},
        provenance={"study": "s"},
    )
    dialog = open_dialog(qtbot, window)
    preset = dialog.form.editor("preset")
    assert isinstance(preset, QComboBox)
    assert [preset.itemText(i) for i in range(preset.count())] == ["", "tuned"]
    algo = dialog.form.editor("algo")
    assert isinstance(algo, QComboBox)
    algo.setCurrentText("PPO")
    preset.setCurrentText("tuned")
    values = dialog.form.values
    qtbot.waitUntil(
        lambda: values().get("hyperparameters.learning_rate") == 0.00123,
        timeout=30_000,
    )
    assert values()["hyperparameters.n_epochs"] == 7 and values()["n_envs"] == 2
    assert dialog.config() == {"env": "CartPole-v1", "algo": "PPO", "preset": "tuned"}
    # Under the field: where the defaults come from (shown once the form the
    # preset shaped is in place, which a busy machine delays).
    qtbot.waitUntil(
        lambda: (
            (note := dialog.form.findChild(QLabel, "preset-note")) is not None
            and note.isVisible()
            and note.text() == "The project preset 'tuned': tuned by the sweep 's'."
        ),
        timeout=30_000,
    )
    preset = dialog.form.editor("preset")
    assert isinstance(preset, QComboBox)
    preset.setCurrentText("")
    qtbot.waitUntil(
        lambda: (
            (label := dialog.form.findChild(QLabel, "preset-note")) is not None
            and label.text().startswith("The built-in preset for PPO on CartPole-v1: ")
        ),
        timeout=30_000,
    )
    dialog.reject()


def test_a_refused_config_is_shown_on_its_field(qtbot, window: MainWindow) -> None:
    dialog = open_dialog(qtbot, window)
    # The form checks bounds itself; the engine checks how fields fit together.
    type_into(qtbot, dialog, "hyperparameters.batch_size", "100000")
    dialog.buttons.accepted.emit()
    qtbot.waitUntil(lambda: dialog.message.isVisible(), timeout=30_000)
    assert "larger than the rollout" in dialog.message.text()
    assert dialog.isVisible() and not window.session.state.runs


def test_duplicate_prefills_the_dialog(qtbot, window: MainWindow) -> None:
    dialog = open_dialog(
        qtbot,
        window,
        {
            "env": "CartPole-v1",
            "algo": "A2C",
            "total_steps": 777,
            "hyperparameters": {"gamma": 0.9},
        },
    )
    values = dialog.form.values()
    assert values["algo"] == "A2C" and values["total_steps"] == 777
    assert values["hyperparameters.gamma"] == 0.9
    dialog.reject()


HEADLESS_STEPS = 15_000
"""Long enough (~10 s of training) that the studio's refreshes, driven by the
engine's once-a-second look at the database and the job's progress saves
every 2 s, see the run mid-way even on a fast machine; 3,000 steps once ended
between two refreshes."""


@pytest.mark.slow
def test_a_headless_run_shows_live_in_an_open_studio(qtbot, window: MainWindow) -> None:
    """``rl-studio-engine train --project P`` while the studio has P open: the
    run appears in the Training list, its progress and curves follow the
    file, and its model lands in Models."""
    training = window.workspaces["training"]
    state = window.session.state
    command = [sys.executable, "-m", "engine.cli", "train", "--env", "CartPole-v1"]
    steps, every = str(HEADLESS_STEPS), str(HEADLESS_STEPS // 3)
    command += ["--algo", "PPO", "--steps", steps, "--seed", "4", "--quiet"]
    command += ["--project", state.path, "--set", "n_envs=1", "--set", "n_steps=64"]
    command += ["--set", "batch_size=64", "--set", "n_epochs=1"]
    command += ["--set", f"eval_every_steps={every}", "--set", "eval_episodes=1"]
    command += ["--set", "name=headless"]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        qtbot.waitUntil(lambda: bool(state.runs), timeout=60_000)
        (run_id,) = state.runs
        assert state.runs[run_id]["name"] == "headless"
        training.table.select_keys([run_id])
        store = window.session.metrics
        # While it trains: the row's progress moves and curves arrive. Every
        # look is recorded, so a run that ends early fails on what was seen
        # rather than on a timeout.
        seen_live: list[tuple[float, int]] = []

        def live_or_ended() -> bool:
            run = state.runs[run_id]
            done = run.get("progress_done", 0)
            if run.get("status") == "running" and 0 < done < HEADLESS_STEPS:
                seen_live.append((done, store.length(run_id, "time/fps")))
            return run.get("status") in ("completed", "failed", "stopped") or any(
                fps > 0 for _, fps in seen_live
            )

        qtbot.waitUntil(live_or_ended, timeout=180_000)
        assert any(fps > 0 for _, fps in seen_live), (state.runs[run_id], seen_live)
        qtbot.waitUntil(
            lambda: state.runs[run_id].get("status") == "completed", timeout=180_000
        )
    except BaseException:
        proc.kill()
        raise
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    qtbot.waitUntil(lambda: len(state.models) == 1, timeout=10_000)
    assert state.models[0]["source_run"] == run_id
    assert state.models[0]["algo"] == "PPO"
    record = next(r for r in training.table.model.records if r["id"] == run_id)
    assert record["summary"]["total_steps"] >= HEADLESS_STEPS
    # The Best column had the best evaluation before the summary did.
    assert record["best_eval_live"] == record["summary"]["best_eval_reward"]
    # Every row the file holds is on the plot, none twice.
    training.table.select_keys([run_id])
    qtbot.waitUntil(lambda: store.length(run_id, "eval/mean_reward") == 3, timeout=5000)
    qtbot.waitUntil(lambda: "Rewards" in training.plots.group_titles(), timeout=5000)


CRASHING_ENV = """
import gymnasium as gym
import numpy as np


class Crashing(gym.Env):
    \"\"\"Plays normal 25-step episodes until its 290th step, in the middle of
    the 12th episode, where it raises.\"\"\"

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode
        self.total = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        self.total += 1
        if self.total == 290:
            raise RuntimeError(f"sensor failed at step {self.t} of an episode")
        obs = np.full(2, self.t / 25, np.float32)
        return obs, float(action), self.t >= 25, False, {}
"""


def test_a_crashing_env_fails_the_run_and_leaves_it_inspectable(
    qtbot, window: MainWindow
) -> None:
    training = window.workspaces["training"]
    session = window.session
    envs = Path(session.state.path) / "envs"
    (envs / "crashing.py").write_text(CRASHING_ENV)
    (envs / "crashing.env.json").write_text(
        '{"format": 1, "name": "crashing", "kind": "python",'
        ' "python": {"file": "crashing.py", "class": "Crashing"}}'
    )
    started: list[str] = []
    ended: list[tuple[str, str]] = []
    session.run_ended.connect(lambda rid, status, _reason: ended.append((rid, status)))
    session.start_run(
        "rl.train",
        {
            "env": "rlstudio/crashing-v0",
            "algo": "PPO",
            "total_steps": 2000,
            "n_envs": 1,
            "eval_every_steps": 0,
            "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
        },
        on_started=started.append,
    )
    qtbot.waitUntil(lambda: bool(started), timeout=30_000)
    (run_id,) = started
    # Unnamed, it is called after its algorithm and env, and two words.
    assert session.state.run(run_id)["name"].startswith("PPO rlstudio/crashing-v0 · ")
    # While it runs, its full config is known (Details, Duplicate).
    qtbot.waitUntil(
        lambda: session.state.run(run_id).get("config", {}).get("algo") == "PPO",
        timeout=10_000,
    )
    qtbot.waitUntil(lambda: bool(ended), timeout=120_000)
    assert ended == [(run_id, "failed")]
    # The env's own error is the reason, on the run's row and under the bar.
    reason = "The run failed: RuntimeError: sensor failed at step 15 of an episode"
    assert session.state.run(run_id)["reason"] == reason
    training.table.select_keys([run_id])
    assert training.progress.state() == "failed"
    assert training.reason_label.isVisible() and reason in training.reason_label.text()
    # Inspect: the log holds the traceback through the env's file, the
    # curves up to the crash are there, and it can be resumed.
    log = training.run_log.text()
    assert "Traceback" in log and "crashing.py" in log
    store = session.metrics
    assert store.length(run_id, "rollout/ep_rew_mean") == 4  # 4 rollouts of 64
    qtbot.waitUntil(lambda: "Rewards" in training.plots.group_titles(), timeout=5000)
    assert training.resume_button.isEnabled() and training.duplicate_button.isEnabled()
    assert not training.stop_button.isEnabled()
    assert not session.state.models  # nothing is registered from a failed run
    # Snapshots (every few seconds while a headless run trains) keep the log
    # as it is shown unless log.txt changed.
    training.run_log.append_line("a line only the console holds", "test")
    with qtbot.waitSignal(session.project_opened, timeout=10_000):
        session.open_project(session.state.path)
    assert "a line only the console holds" in training.run_log.text()
    with open(Path(session.state.run(run_id)["run_dir"]) / "log.txt", "a") as fh:
        fh.write("a line someone added to log.txt\n")
    with qtbot.waitSignal(session.project_opened, timeout=10_000):
        session.open_project(session.state.path)
    log = training.run_log.text()
    assert "a line someone added to log.txt" in log
    assert "a line only the console holds" not in log


def test_a_headless_runs_speed_and_eta_come_from_snapshots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [100.0]
    monkeypatch.setattr("studio.state.project_state.time.monotonic", lambda: clock[0])
    state = ProjectState()

    def snapshot(done: float, status: str = "running") -> dict:
        run = {"id": "r", "name": "headless", "status": status}
        run.update(progress_done=done, progress_total=20_000.0)
        return {"path": "/p", "name": "p", "runs": [run]}

    state.load_snapshot(snapshot(1000))
    clock[0] += 2
    state.load_snapshot(snapshot(2000))
    # Readings seconds apart mostly measure when each was written: no speed yet.
    assert "rate" not in state.run("r")
    clock[0] += 4
    state.load_snapshot(snapshot(4000))  # 3000 steps in 6 s
    assert state.run("r")["rate"] == 500 and state.run("r")["eta_s"] == 32
    clock[0] += 6
    state.load_snapshot(snapshot(10_000))  # 1000 steps/s now; smoothed
    assert state.run("r")["rate"] == 0.6 * 500 + 0.4 * 1000
    assert state.run("r")["eta_s"] == 10_000 / 700
    # A run the engine reports keeps the engine's (newer) numbers.
    state.on_run_progress("r", 10_500, 20_000, 900.0, 6.1)
    state.load_snapshot(snapshot(10_100))
    assert (state.run("r")["progress_done"], state.run("r")["rate"]) == (10_500, 900)


@pytest.mark.slow
def test_stop_button_stops_a_headless_run(qtbot, window: MainWindow) -> None:
    """Stop on a run training in a terminal stops it as Ctrl-C does: it saves
    a checkpoint, registers its model so far and ends as stopped."""
    training = window.workspaces["training"]
    state = window.session.state
    command = [sys.executable, "-m", "engine.cli", "train", "--env", "CartPole-v1"]
    command += ["--algo", "A2C", "--steps", "1000000", "--seed", "2", "--quiet"]
    command += ["--project", state.path, "--set", "n_envs=2"]
    command += ["--set", "eval_every_steps=0"]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        qtbot.waitUntil(
            lambda: any(r.get("progress_done", 0) > 0 for r in state.runs.values()),
            timeout=120_000,
        )
        (run_id,) = state.runs
        training.table.select_keys([run_id])
        assert training.stop_button.isEnabled()
        training.stop_button.click()
        qtbot.waitUntil(
            lambda: state.runs[run_id].get("status") == "stopped", timeout=60_000
        )
    except BaseException:
        proc.kill()
        raise
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-2000:]
    assert "stopping: saving a checkpoint" in err
    summary = state.runs[run_id]["summary"]
    assert summary["stopped_by"] == "user" and summary["total_steps"] < 1_000_000
    checkpoint = Path(state.runs[run_id]["run_dir"]) / "checkpoints"
    assert (checkpoint / f"step-{summary['total_steps']:010d}" / "model.zip").is_file()
    qtbot.waitUntil(lambda: len(state.models) == 1, timeout=10_000)
    # The studio resumes it from that checkpoint, as one of its own runs.
    assert training.resume_button.isEnabled()
    training.resume_button.click()
    store = window.session.metrics
    before = store.length(run_id, "time/fps")
    qtbot.waitUntil(
        lambda: (
            state.runs[run_id].get("status") == "running"
            and store.length(run_id, "time/fps") > before
        ),
        timeout=60_000,
    )
    steps = store.series(run_id, "time/fps")[0]
    assert steps[before] > summary["total_steps"]  # the step axis carried on
    training.stop_button.click()
    qtbot.waitUntil(
        lambda: state.runs[run_id].get("status") == "stopped", timeout=60_000
    )
    resumed = state.runs[run_id]["summary"]["resumed_from"]
    assert resumed["step"] == summary["total_steps"]


def test_best_eval_so_far_shows_before_the_run_ends() -> None:
    state = ProjectState()
    run = {"id": "r", "name": "live", "status": "running"}
    state.load_snapshot({"path": "/p", "name": "p", "runs": [run]})
    assert best_reward(state.run("r")) is None
    state.on_run_eval("r", 120.0)
    state.on_run_eval("r", 80.0)  # a worse evaluation does not lower it
    assert best_reward(state.run("r")) == 120.0
    # ... and it survives a snapshot, until the summary says the final word.
    state.load_snapshot({"path": "/p", "name": "p", "runs": [run]})
    assert best_reward(state.run("r")) == 120.0
    done = {**run, "status": "completed", "summary": {"best_eval_reward": 130.5}}
    state.load_snapshot({"path": "/p", "name": "p", "runs": [done]})
    assert best_reward(state.run("r")) == 130.5
