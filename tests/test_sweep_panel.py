"""The Sweep panel of the Training workspace driven like a user: a tiny
Optuna study started through the real engine, its trials appearing in the
run list as runs and its optimization history drawn live; a bad search item
is refused with the engine's sentence."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QLineEdit
from studio_harness import build_main_window, start_on_project

from studio.main_window import MainWindow
from studio.training.sweep import SweepPanel, objective_label, text_items


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.show()
    win.set_workspace("training")
    yield win
    win.session.client.stop()


def _panel(qtbot, win: MainWindow) -> SweepPanel:
    training = win.workspaces["training"]
    training.tabs.setCurrentWidget(training.sweep_tab)
    panel: SweepPanel = training.sweep
    qtbot.waitUntil(lambda: "trials" in panel.form.values(), timeout=30_000)
    return panel


def _type(qtbot, panel: SweepPanel, name: str, text: str) -> None:
    editor = panel.form.editor(name)
    line = editor.property("line_edit") if not isinstance(editor, QLineEdit) else editor
    assert isinstance(line, QLineEdit)
    line.selectAll()
    qtbot.keyClicks(line, text)


def test_text_items_are_one_a_line() -> None:
    assert text_items(" gamma \n\nlearning_rate=1e-4:1e-2:log\n") == [
        "gamma",
        "learning_rate=1e-4:1e-2:log",
    ]


@pytest.mark.slow
def test_a_sweep_runs_its_trials_as_runs_and_draws_its_history(
    qtbot, window: MainWindow
) -> None:
    panel = _panel(qtbot, window)
    algo = panel.form.editor("algo")
    assert isinstance(algo, QComboBox)
    algo.setCurrentText("PPO")
    _type(qtbot, panel, "trials", "2")
    _type(qtbot, panel, "steps", "512")
    _type(qtbot, panel, "prune_startup", "2")
    panel.search_edit.setPlainText("learning_rate=1e-4:1e-2:log")
    panel.settings_edit.setPlainText("eval_episodes=2")
    assert panel.form.is_valid(), panel.form.errors()
    with qtbot.waitSignal(panel.sweep_started, timeout=30_000) as started:
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    run_id = started.args[0]
    state = window.session.state
    qtbot.waitUntil(
        lambda: (state.run(run_id) or {}).get("status") == "completed", timeout=180_000
    )
    sweep = state.run(run_id) or {}
    assert sweep["kind"] == "rl.tune"
    completed = sweep["summary"]["completed"]
    assert completed >= 1 and sweep["summary"]["finished"] == 2
    # Every trial is a run of the project, listed beside the sweep.
    qtbot.waitUntil(
        lambda: len([r for r in state.runs.values() if r["kind"] == "rl.train"]) == 2,
        timeout=30_000,
    )
    qtbot.waitUntil(lambda: panel.history.point_count() == completed, timeout=10_000)
    assert "2/2 trials" in panel.status.text()
    assert f"best {sweep['summary']['best_value']:.4g}" in panel.status.text()
    assert panel.start_button.isEnabled() and not panel.stop_button.isEnabled()

    # Its best trial becomes a project preset with one click.
    assert panel.save_preset_button.isEnabled()
    panel.preset_name.setText("swept")
    qtbot.mouseClick(panel.save_preset_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: "as the preset 'swept'" in panel.preset_message.text(), timeout=60_000
    )
    best = sweep["summary"]
    assert f"Saved trial #{best['best_trial']}" in panel.preset_message.text()
    preset_file = Path(state.path) / "presets" / "swept.preset.json"
    preset = json.loads(preset_file.read_text(encoding="utf-8"))
    assert preset["env"] == "CartPole-v1" and preset["algo"] == "PPO"
    assert preset["provenance"]["study"] == best["study"]
    assert preset["provenance"]["trial"] == best["best_trial"]
    lr = best["best_params"]["learning_rate"]
    assert preset["settings"]["learning_rate"] == pytest.approx(lr)
    # The run dialog offers it.
    fields: list[list[dict]] = []
    window.session.request_run_schema(
        "rl.train", {"env": "CartPole-v1", "algo": "PPO"}, fields.append
    )
    qtbot.waitUntil(lambda: bool(fields), timeout=30_000)
    (preset_field,) = [f for f in fields[0] if f["name"] == "preset"]
    assert "swept" in preset_field["suggestions"]
    # The same name again is refused in one sentence; the saved one is kept.
    saved = preset_file.read_bytes()
    qtbot.waitUntil(panel.save_preset_button.isEnabled, timeout=10_000)
    qtbot.mouseClick(panel.save_preset_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: "already has a preset 'swept'" in panel.preset_message.text(),
        timeout=30_000,
    )
    assert preset_file.read_bytes() == saved
    assert panel.save_preset_button.isEnabled()


@pytest.mark.slow
def test_a_time_to_target_sweep_plots_cpu_seconds_to_its_target(
    qtbot, window: MainWindow
) -> None:
    panel = _panel(qtbot, window)
    assert panel.history.y_label() == "eval reward (last evaluation)"
    for name, text in (("algo", "PPO"), ("objective", "time_to_target")):
        combo = panel.form.editor(name)
        assert isinstance(combo, QComboBox)
        combo.setCurrentText(text)
    _type(qtbot, panel, "trials", "2")
    _type(qtbot, panel, "steps", "512")
    panel.search_edit.setPlainText("gamma")
    # CartPole pays at least 1 an episode: every trial reaches it.
    panel.settings_edit.setPlainText("eval_episodes=2\ntarget_eval_reward=1")
    with qtbot.waitSignal(panel.sweep_started, timeout=30_000) as started:
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    assert panel.history.y_label() == "CPU seconds to eval reward 1"
    state = window.session.state
    qtbot.waitUntil(
        lambda: (state.run(started.args[0]) or {}).get("status") == "completed",
        timeout=180_000,
    )
    summary = (state.run(started.args[0]) or {})["summary"]
    assert summary["objective"] == "time_to_target" and summary["completed"] == 2
    qtbot.waitUntil(lambda: panel.history.point_count() == 2, timeout=10_000)
    assert f"best {summary['best_value']:.4g}" in panel.status.text()


def test_the_value_axis_says_what_the_objective_measures() -> None:
    assert objective_label({"objective": "reward"}) == "eval reward (last evaluation)"
    assert objective_label({"objective": "time_to_target"}) == "CPU seconds"
    assert (
        objective_label(
            {"objective": "time_to_target", "settings": ["target_eval_reward = 475"]}
        )
        == "CPU seconds to eval reward 475"
    )


def test_a_bad_search_item_is_refused_with_the_engines_sentence(
    qtbot, window: MainWindow
) -> None:
    panel = _panel(qtbot, window)
    panel.search_edit.setPlainText("lerning_rate=1e-4:1e-2")
    qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(panel.message.isVisible, timeout=30_000)
    assert "did you mean 'learning_rate'?" in panel.message.text()
    assert panel.run_id == ""
    assert not window.session.state.runs


@pytest.mark.slow
def test_stop_stops_the_sweep_and_its_trials_with_checkpoints(
    qtbot, window: MainWindow
) -> None:
    panel = _panel(qtbot, window)
    algo = panel.form.editor("algo")
    assert isinstance(algo, QComboBox)
    algo.setCurrentText("PPO")
    _type(qtbot, panel, "trials", "4")
    _type(qtbot, panel, "steps", "1000000")
    _type(qtbot, panel, "workers", "2")
    panel.search_edit.setPlainText("gamma")
    with qtbot.waitSignal(panel.sweep_started, timeout=30_000) as started:
        qtbot.mouseClick(panel.start_button, Qt.MouseButton.LeftButton)
    run_id = started.args[0]
    state = window.session.state

    def trials() -> list[dict]:
        return [r for r in state.runs.values() if r["kind"] == "rl.train"]

    # Both workers are training (their runs listed as running).
    qtbot.waitUntil(
        lambda: len([r for r in trials() if r["status"] == "running"]) == 2,
        timeout=60_000,
    )
    qtbot.waitUntil(panel.stop_button.isEnabled, timeout=10_000)
    qtbot.mouseClick(panel.stop_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(
        lambda: (state.run(run_id) or {}).get("status") == "stopped", timeout=60_000
    )
    qtbot.waitUntil(
        lambda: all(r["status"] == "stopped" for r in trials()), timeout=30_000
    )
    assert len(trials()) == 2  # no trial started after the stop
    for run in trials():
        assert run["summary"]["stopped_by"] == "signal"
        assert any(Path(run["run_dir"], "checkpoints").glob("step-*"))
    summary = (state.run(run_id) or {})["summary"]
    assert summary["stopped_by"] == "user" and summary.get("finished") == 2, summary


def test_the_history_plots_values_and_a_staircase_of_the_best(qtbot) -> None:
    import numpy as np

    from widgets.history_plot import HistoryPlot

    plot = HistoryPlot()
    qtbot.addWidget(plot)
    nan = float("nan")
    plot.set_history(
        np.array([1.0, 2.0, 3.0]), np.array([5.0, nan, 7.0]), np.array([5.0, 5.0, 7.0])
    )
    assert plot.point_count() == 2  # the pruned trial has no value
    xs, ys = plot.best.getData()
    assert list(xs) == [1, 2, 2, 3, 3] and list(ys) == [5, 5, 5, 5, 7]
