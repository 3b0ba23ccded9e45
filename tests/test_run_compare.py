"""Runs compared with their configs (engine.run_compare), and
``rl-studio-engine compare`` printing the same comparison."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from studio_harness import build_main_window, start_on_project

from engine import contract
from engine.run_compare import (
    METRICS,
    MISSING,
    compare_runs,
    config_diff,
    flatten_config,
    run_metrics,
)
from engine.store.project import Project

REPO = Path(__file__).resolve().parents[1]

PPO = {
    "env": "CartPole-v1",
    "algo": "PPO",
    "total_steps": 5000,
    "seed": 1,
    "hyperparameters": {"gamma": 0.99, "n_steps": 128, "learning_rate": 3e-4},
}
A2C = {
    "env": "CartPole-v1",
    "algo": "A2C",
    "total_steps": 5000.0,  # the same setting as 5000
    "seed": 1,
    "hyperparameters": {"gamma": 0.9, "n_steps": 5, "learning_rate": 3e-4},
}


def test_nested_settings_flatten_to_dotted_keys() -> None:
    config = {"a": 1, "h": {"gamma": 0.9, "net": {"pi": [64, 64]}}, "empty": {}}
    assert flatten_config(config) == {
        "a": 1,
        "h.gamma": 0.9,
        "h.net.pi": [64, 64],
        "empty": {},
    }


def test_the_diff_holds_only_the_differing_settings() -> None:
    a2c = {**A2C, "hyperparameters": {**A2C["hyperparameters"], "ent_coef": 0.01}}
    assert config_diff([PPO, a2c]) == {
        "algo": ["PPO", "A2C"],
        "hyperparameters.ent_coef": [MISSING, 0.01],
        "hyperparameters.gamma": [0.99, 0.9],
        "hyperparameters.n_steps": [128, 5],
    }


def test_a_missing_setting_differs_from_none_and_true_from_one() -> None:
    assert config_diff([{"seed": None}, {}]) == {"seed": [None, MISSING]}
    assert config_diff([{"x": True}, {"x": 1}]) == {"x": [True, 1]}
    assert config_diff([{"x": 1}, {"x": 1.0}, {"x": 1}]) == {}
    assert config_diff([{"x": [1, 2]}, {"x": [1, 3]}]) == {"x": [[1, 2], [1, 3]]}


def test_three_runs_differing_in_one_show_all_three_values() -> None:
    configs = [
        {"seed": 1, "env": "E"},
        {"seed": 1},
        {"seed": 2, "env": "E"},
    ]
    assert config_diff(configs) == {"env": ["E", MISSING, "E"], "seed": [1, 1, 2]}


def test_a_finished_runs_outcome_comes_from_its_summary() -> None:
    run = {
        "status": "completed",
        "started": 100.0,
        "ended": 150.0,
        "progress_done": 4000,
        "summary": {
            "best_eval_reward": 200.0,
            "last_eval_reward": 180.5,
            "total_steps": 5000,
        },
    }
    assert run_metrics(run) == {
        "status": "completed",
        "best_eval_reward": 200.0,
        "final_eval_reward": 180.5,
        "total_steps": 5000,
        "duration_s": 50.0,
        "steps_per_s": 100.0,
        "warnings": None,  # an RL run's health is not watched
    }
    assert list(run_metrics(run)) == [key for key, _ in METRICS]


def test_a_resumed_runs_speed_counts_only_its_last_stretch() -> None:
    run = {
        "status": "completed",
        "started": 100.0,
        "ended": 110.0,
        "summary": {"total_steps": 5000, "resumed_from": {"step": 3000}},
    }
    assert run_metrics(run)["steps_per_s"] == 200.0


def test_a_running_runs_outcome_so_far() -> None:
    run = {
        "status": "running",
        "started": 100.0,
        "ended": None,
        "progress_done": 600.0,
        "best_eval_live": 42.0,
        "summary": {},
    }
    assert run_metrics(run, now=130.0) == {
        "status": "running",
        "best_eval_reward": 42.0,
        "final_eval_reward": None,
        "total_steps": 600,
        "duration_s": 30.0,
        "steps_per_s": 20.0,
        "warnings": None,
    }
    never = run_metrics({"status": "queued", "started": None})
    assert never["duration_s"] is None and never["steps_per_s"] is None


def test_compare_runs_puts_runs_side_by_side() -> None:
    runs = [
        {"id": "a", "name": "ppo", "config": PPO, "status": "completed"},
        {"id": "b", "config": A2C, "status": "failed", "summary": None},
    ]
    comparison = compare_runs(runs)
    assert comparison["runs"] == [{"id": "a", "name": "ppo"}, {"id": "b", "name": "b"}]
    assert list(comparison["config_diff"]) == [
        "algo",
        "hyperparameters.gamma",
        "hyperparameters.n_steps",
    ]
    assert comparison["metrics"]["status"] == ["completed", "failed"]
    assert comparison["metrics"]["best_eval_reward"] == [None, None]


FLAT = "The gradient norm was 0 over steps 1-5, so no weight moved; check it."


def test_a_runs_health_warnings_come_from_its_summary() -> None:
    watched = {"status": "completed", "summary": {"warnings": [FLAT]}}
    assert run_metrics(watched)["warnings"] == [FLAT]
    healthy = {"status": "completed", "summary": {"warnings": []}}
    assert run_metrics(healthy)["warnings"] == []
    odd = {"status": "completed", "summary": {"warnings": "not a list"}}
    assert run_metrics(odd)["warnings"] is None


def test_the_runs_list_marks_a_run_that_warned() -> None:
    from studio.common import STATUS_COLORS
    from studio.training.compare import WARNING_COLOR
    from studio.training.workspace import status_color, status_text, status_tooltip

    run = {"status": "completed", "summary": {"warnings": [FLAT]}}
    assert status_text(run) == "completed ⚠"
    assert status_tooltip(run) == f"⚠ 1 warning:\n• {FLAT}"
    assert status_color(run) == WARNING_COLOR
    plain = {"status": "completed", "reason": "", "summary": {"warnings": []}}
    assert status_text(plain) == "completed" and status_tooltip(plain) == ""
    assert status_color(plain) == STATUS_COLORS["completed"]


def make_runs(project_dir: Path) -> list[str]:
    """Two finished rl.train runs with different settings, as the store
    records them."""
    project = Project.open(project_dir, create=True)
    try:
        ids = []
        for config, best, warnings in ((PPO, 200.0, None), (A2C, 120.0, [FLAT])):
            run = project.create_run("rl.train", config, name=f"{config['algo']} run")
            project.update_run(
                run.id,
                status="completed",
                started=1000.0,
                ended=1010.0,
                summary={
                    "best_eval_reward": best,
                    "last_eval_reward": best - 10,
                    "total_steps": 5000,
                    **({"warnings": warnings} if warnings else {}),
                },
            )
            # Evaluations every 1000 steps, for the curves.
            rows = [
                {
                    "step": step,
                    "time": step / 500,
                    "eval/mean_reward": best * step / 5000,
                }
                for step in range(1000, 5001, 1000)
            ]
            (Path(run.run_dir) / contract.METRICS_FILE).write_text(
                "".join(json.dumps(row) + "\n" for row in rows)
            )
            ids.append(run.id)
        return ids
    finally:
        project.close()


def engine(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_compare_command_prints_the_comparison(tmp_path: Path) -> None:
    a, b = make_runs(tmp_path / "p")
    out = engine("compare", a, b, "--project", str(tmp_path / "p"))
    assert out.returncode == 0, out.stderr
    printed = json.loads(out.stdout)
    assert printed["runs"] == [
        {"id": a, "name": "PPO run"},
        {"id": b, "name": "A2C run"},
    ]
    assert printed["config_diff"] == {
        "algo": ["PPO", "A2C"],
        "hyperparameters.gamma": [0.99, 0.9],
        "hyperparameters.n_steps": [128, 5],
    }
    assert printed["metrics"]["best_eval_reward"] == [200.0, 120.0]
    assert printed["metrics"]["final_eval_reward"] == [190.0, 110.0]
    assert printed["metrics"]["steps_per_s"] == [500.0, 500.0]


def test_compare_refuses_fewer_than_two_runs_and_unknown_ones(tmp_path: Path) -> None:
    a, _ = make_runs(tmp_path / "p")
    out = engine("compare", a, a, "--project", str(tmp_path / "p"))
    assert out.returncode == 2
    assert out.stderr.strip() == (
        "rl-studio-engine compare: compare needs two or more different run ids."
    )
    out = engine("compare", a, "nosuchrun", "--project", str(tmp_path / "p"))
    assert out.returncode == 2
    assert "There is no run 'nosuchrun' in this project." in out.stderr
    out = engine("compare", a, "x", "--project", str(tmp_path / "missing"))
    assert out.returncode == 2 and "does not exist" in out.stderr


def cells(table, row: int) -> list[str]:  # type: ignore[no-untyped-def]
    return [table.item(row, col).text() for col in range(table.columnCount())]


def test_compare_shows_the_differing_settings_and_both_outcomes(
    qtbot, tmp_path: Path
) -> None:
    """Two runs selected in the Training list: Compare shows only the
    settings that differ, both runs' outcomes, and the curves overlaid."""
    a, b = make_runs(tmp_path / "p")
    win = build_main_window(qtbot, tmp_path)
    try:
        start_on_project(qtbot, win, tmp_path / "p")
        win.set_workspace("training")
        training = win.workspaces["training"]
        qtbot.waitUntil(lambda: len(win.session.state.runs) == 2, timeout=10_000)
        training.table.select_keys([a])
        button = training.compare_button
        assert not button.isEnabled()
        assert "two or more runs" in button.toolTip()
        training.table.select_keys([a, b])
        assert button.isEnabled()
        button.click()
        view = training.compare
        assert training.tabs.currentWidget() is view
        assert view.run_ids() == [a, b]
        diff = view.diff_table
        settings = [diff.verticalHeaderItem(r).text() for r in range(diff.rowCount())]
        assert settings == ["algo", "hyperparameters.gamma", "hyperparameters.n_steps"]
        headers = [diff.horizontalHeaderItem(c).text() for c in range(2)]
        assert headers == ["PPO run", "A2C run"]
        assert [cells(diff, r) for r in range(3)] == [
            ["PPO", "A2C"],
            ["0.99", "0.9"],
            ["128", "5"],
        ]
        assert view.message.text() == "2 runs: 3 settings differ"
        metrics = view.metrics_table
        rows = {
            metrics.verticalHeaderItem(r).text(): cells(metrics, r)
            for r in range(metrics.rowCount())
        }
        assert rows == {
            "Status": ["completed", "completed"],
            "Best eval reward": ["200", "120"],
            "Final eval reward": ["190", "110"],
            "Total steps": ["5,000", "5,000"],
            "Duration": ["0:10", "0:10"],
            "Steps/s": ["500", "500"],
            "Health": ["—", "⚠ 1 warning"],
        }
        assert metrics.item(6, 1).toolTip() == FLAT
        # The highest best and final evaluation are in bold.
        assert metrics.item(1, 0).font().bold() and not metrics.item(1, 1).font().bold()
        assert metrics.item(2, 0).font().bold()
        # The curves: the plot panel overlays both runs, and each run's
        # column is headed in its curve's colour.
        plots = training.plots
        qtbot.waitUntil(
            lambda: (
                "Rewards" in plots.group_titles()
                and {(a, "eval/mean_reward"), (b, "eval/mean_reward")}
                <= set(plots.curve_keys("Rewards"))
            ),
            timeout=10_000,
        )
        color = diff.horizontalHeaderItem(0).foreground().color().name()
        assert color == plots.run_color(a)
        # The open tab follows the selection of two or more runs, and keeps
        # its comparison while fewer are selected.
        training.table.select_keys([b, a])
        assert view.run_ids() == [a, b]
        training.table.select_keys([b])
        assert not button.isEnabled() and view.run_ids() == [a, b]
    finally:
        win.session.client.stop()
