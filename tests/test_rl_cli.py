"""``rl-studio-engine train``: bad input exits 2 with one sentence; a tiny
run prints its summary as JSON and leaves a self-describing run folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import cli, contract
from engine.jobs.names import words_of
from engine.rl.cli import parse_settings, progress_line
from engine.store.atomic import atomic_write_json
from engine.store.metrics import read_metrics
from engine.store.project import Project

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--env", "CartPol-v1", "--steps", "10"], "did you mean 'CartPole-v1'"),
        (
            ["--env", "Pendulum-v1", "--algo", "DQN"],
            "DQN needs a discrete action space",
        ),
        (
            ["--env", "CartPole-v1", "--set", "learning_rate=-1"],
            "learning_rate must be",
        ),
        (["--env", "CartPole-v1", "--set", "batch_size=4096"], "batch_size (4096)"),
        (["--env", "CartPole-v1", "--set", "lr=0.1"], "Unknown hyperparameter 'lr'"),
        (["--env", "CartPole-v1", "--set", "noequals"], "--set takes key=value"),
        (["--env", "CartPole-v1", "--steps", "0"], "total_steps must be at least 1"),
        (["--env", "CartPole-v1", "--algo", "PPOO"], "Unknown algorithm 'PPOO'"),
    ],
)
def test_bad_input_exits_2_with_one_sentence(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = cli.main(["train", *argv, "--project", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rl-studio-engine train: ")
    assert words in lines[0] and lines[0][-1] in ".?"
    assert not (tmp_path / "runs").exists()  # refused before anything started


def test_bad_input_exit_code_from_the_real_command(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "train",
            "--env",
            "Pendulum-v1",
            "--algo",
            "SAC",
            "--set",
            "gamma=2",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 2
    assert (
        done.stderr.strip() == "rl-studio-engine train: gamma must be at most 1, not 2."
    )
    # Without --project it made a temporary project folder, removed on refusal.
    assert list(tmp_path.glob("rlstudio-train-*")) == []


def test_settings_split_into_top_level_and_hyperparameters() -> None:
    top, hyper = parse_settings(
        [
            "n_envs=4",
            "learning_rate=3e-4",
            "net_arch=[32,32]",
            "ent_coef=auto",
            "name=007",
            "device=cpu",
        ]
    )
    # a text setting keeps its text, even when it would parse as a number
    assert top == {"n_envs": 4, "name": "007", "device": "cpu"}
    assert hyper == {"learning_rate": 3e-4, "net_arch": [32, 32], "ent_coef": "auto"}


def test_progress_line_shows_steps_rate_and_eta() -> None:
    line = progress_line(500, 2000, 250.0, width=10)
    assert line.startswith("[##........] 500/2000 steps")
    assert "250 steps/s" in line and "ETA 00:06" in line


@pytest.mark.slow
def test_a_tiny_run_prints_its_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {
        "n_envs": 2,
        "n_steps": 32,
        "batch_size": 32,
        "n_epochs": 1,
        "eval_every_steps": 64,
        "eval_episodes": 1,
    }
    argv = ["train", "--env", "CartPole-v1", "--algo", "PPO", "--steps", "128"]
    argv += ["--seed", "5", "--project", str(tmp_path)]
    for key, value in settings.items():
        argv += ["--set", f"{key}={value}"]
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["total_steps"] == 128 and summary["algo"] == "PPO"
    assert summary["stopped_by"] == "steps"
    assert "steps/s" in captured.err and "ETA" in captured.err
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert json.loads((run_dir / "result.json").read_text())["status"] == "completed"
    assert json.loads((run_dir / "config.json").read_text())["kind"] == "rl.train"
    record = json.loads((run_dir / "reproduce.json").read_text())
    assert record["command"].startswith(
        "rl-studio-engine train --env CartPole-v1 --algo PPO --steps 128 --seed 5"
    )
    assert Path(summary["models"][0]["file"]).is_file()
    log = (run_dir / "log.txt").read_text()
    # Each line is stamped with when it was written (the log reads back
    # with its own times).
    (first_time, first), *_ = contract.read_log(run_dir / "log.txt")
    assert first == f"reproduce with: {record['command']}"
    assert first_time is not None and abs(first_time - time.time()) < 600
    assert "PPO on CartPole-v1: 128 steps" in log

    # The run is in the project's run list, its best model in its models.
    project = Project.open(tmp_path)
    try:
        (run,) = project.list_runs()
        models = project.list_models()
        lineage = project.lineage(models[0].id) if models else []
    finally:
        project.close()
    assert Path(run.run_dir) == run_dir
    assert (run.kind, run.status) == ("rl.train", "completed")
    # Its own name, two words telling it from the other CartPole runs, and
    # its model's.
    assert run.name.startswith("PPO CartPole-v1 · ") and words_of(run.name)
    assert run.config["name"] == run.name
    assert run.config["seed"] == 5 and run.config["total_steps"] == 128
    assert run.started and run.ended and run.ended >= run.started
    assert run.exit_code == 0 and run.progress_done == run.progress_total == 128
    assert run.summary["best_eval_reward"] == summary["best_eval_reward"]
    (model,) = models
    assert (
        run.summary["registered_models"] == summary["registered_models"] == [model.id]
    )
    assert (model.kind, model.algo, model.env) == ("sb3-policy", "PPO", "CartPole-v1")
    assert model.source_run == run.id and Path(model.path).is_file()
    assert model.name == run.name  # the run's name is its model's
    assert Path(model.path).is_relative_to(tmp_path / "models")
    assert model.metrics["eval/mean_reward"] == summary["best_eval_reward"]
    assert (run.id, model.id, "trained") in lineage
    # ... so the project's model list shows it, as the studio's Models does.
    listed = subprocess.run(
        [sys.executable, "-m", "engine.cli", "models", "--project", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listed.returncode == 0 and model.id in listed.stdout


def test_a_new_project_trains_on_a_bundled_designed_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The bundled examples a new project gets are valid --env ids before the
    project folder exists."""
    project_dir = tmp_path / "new-project"
    argv = ["train", "--env", "rlstudio/maze-v0", "--algo", "PPO", "--steps", "64"]
    argv += ["--project", str(project_dir), "--set", "n_steps=32"]
    argv += ["--set", "batch_size=32", "--set", "n_epochs=1"]
    code = cli.main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert json.loads(captured.out)["total_steps"] >= 64
    assert (project_dir / "envs" / "maze.env.json").is_file()


@pytest.mark.slow
def test_a_failing_run_is_recorded_as_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "flaky.py").write_text(FLAKY_ENV)
    atomic_write_json(tmp_path / "envs" / "flaky.env.json", FLAKY_SPEC)
    argv = ["train", "--env", "rlstudio/flaky-v0", "--algo", "PPO", "--steps", "256"]
    argv += ["--project", str(tmp_path), "--quiet", "--set", "n_envs=1"]
    argv += ["--set", "n_steps=64", "--set", "batch_size=32"]
    capsys.readouterr()
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    # one sentence on the terminal; the traceback went to the run's log
    assert "Traceback" not in err
    assert err.rstrip().endswith(
        "failed with RuntimeError: sensor failed at step 40 (run with --debug for "
        "the traceback)."
    )
    project = Project.open(tmp_path)
    try:
        (run,) = project.list_runs()
        models = project.list_models()
    finally:
        project.close()
    assert run.status == "failed" and models == []
    assert run.reason == "RuntimeError: sensor failed at step 40"
    assert json.loads((Path(run.run_dir) / "result.json").read_text()) == {
        "status": "failed",
        "reason": run.reason,
    }
    log = (Path(run.run_dir) / "log.txt").read_text()
    assert "Traceback" in log and log.rstrip().endswith(run.reason)


FLAKY_ENV = """
import gymnasium as gym
import numpy as np


class Flaky(gym.Env):
    \"\"\"Never ends an episode before step 40, where its sensor fails.\"\"\"

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, render_mode=None):
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= 40:
            raise RuntimeError("sensor failed at step 40")
        return np.full(2, 0.5, np.float32), 1.0, False, False, {}
"""
FLAKY_SPEC = {
    "format": 1,
    "name": "flaky",
    "kind": "python",
    "python": {"file": "flaky.py", "class": "Flaky"},
}


@pytest.mark.slow
def test_ctrl_c_stops_with_a_checkpoint_and_resume_continues(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    command = [sys.executable, "-m", "engine.cli", "train", "--env", "CartPole-v1"]
    command += ["--algo", "A2C", "--steps", "1000000", "--seed", "9", "--quiet"]
    command += ["--project", str(tmp_path), "--set", "n_envs=2"]
    command += ["--set", "eval_every_steps=0"]
    proc = subprocess.Popen(
        command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # Wait (without sleeping blind) for the first metrics on disk.
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("runs/*/metrics.jsonl")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err[-2000:]
    first = json.loads(out)
    assert first["stopped_by"] == "signal"  # Ctrl-C in the terminal
    stopped_at = first["total_steps"]
    project = Project.open(tmp_path)
    try:
        (run,) = project.list_runs()
        assert run.status == "stopped"
        (stopped_model,) = project.list_models()
    finally:
        project.close()
    rows_before = read_metrics(Path(run.run_dir) / "metrics.jsonl")

    # Nothing but the total may change; a completed run needs a new total.
    assert cli.main(["train", "--resume", run.id, "--env", "Acrobot-v1",
                     "--project", str(tmp_path)]) == 2  # fmt: skip
    assert "keeps its settings" in capsys.readouterr().err
    target = stopped_at + 200
    argv = ["train", "--resume", run.id, "--project", str(tmp_path), "--quiet"]
    assert cli.main([*argv, "--steps", str(target)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["resumed_from"]["step"] == stopped_at
    assert summary["stopped_by"] == "steps" and summary["total_steps"] >= target
    rows = read_metrics(Path(run.run_dir) / "metrics.jsonl")
    steps = [r["step"] for r in rows]
    times = [r["time"] for r in rows]
    assert steps == sorted(steps) and times == sorted(times)
    assert steps[len(rows_before)] > stopped_at  # carried on, not restarted
    project = Project.open(tmp_path)
    try:
        again = project.get_run(run.id)
        assert again.status == "completed" and again.config["total_steps"] == target
        assert again.summary["resumed_from"]["step"] == stopped_at
        # one model per run: the resumed run updated the one it registered
        (model,) = project.list_models()
        assert model.id == stopped_model.id and model.source_run == run.id
        assert Path(model.path).is_file() and model.created > stopped_model.created
    finally:
        project.close()
    assert cli.main(argv) == 2
    assert "already completed" in capsys.readouterr().err
