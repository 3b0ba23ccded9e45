"""Sweeps on the ``jax`` backend: trials that differ only in the compiled
program's values (learning rate, clip range, entropy, gamma, GAE lambda...)
and seeds train together as one ``vmap``-ed program, each still a trial and
a run of the project, each computing what it would alone; a signal stops
them all with their checkpoints."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jax")

from test_compiled_training import LoggedContext, _run

from engine.rl import tune_space, tune_trials
from engine.store.metrics import read_metrics
from engine.store.project import Project

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SMALL = ["--set", "backend=jax", "--set", "n_envs=4", "--set", "n_steps=128",
         "--set", "batch_size=128", "--set", "eval_episodes=2",
         "--seed", "7"]  # fmt: skip


def _tune(project: Path, *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "engine", "tune", "--env", "CartPole-v1", "--algo",
         "PPO", "--project", str(project), "--workers", "1", *SMALL, *argv],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip


def _settings(**over: Any) -> tune_space.SweepSettings:
    base = tune_space.SweepSettings(
        env="CartPole-v1", algo="PPO", steps=1024, trials=12,
        search=(tune_space.Dimension("learning_rate", "float", 1e-4, 1e-2),
                tune_space.Dimension("gamma", "float", 0.9, 0.999)),
        fixed={"backend": "jax"}, hyperparameters={},
    )  # fmt: skip
    return dataclasses.replace(base, **over)


def _train_runs(project: Path) -> list[Any]:
    store = Project.open(project)
    try:
        return sorted(
            (r for r in store.list_runs() if r.kind == "rl.train"),
            key=lambda r: r.run_dir,
        )
    finally:
        store.close()


def test_which_sweeps_train_their_trials_together() -> None:
    assert tune_trials.compiled_slots(_settings()) == 12
    assert (
        tune_trials.compiled_slots(_settings(trials=40))
        == tune_trials.COMPILED_SLOTS_MAX
    )
    # a shape of the program searched, another backend, or a trial's own CPU time
    n_steps = tune_space.Dimension("n_steps", "int", 64, 2048)
    assert tune_trials.compiled_slots(_settings(search=(n_steps,))) == 1
    assert tune_trials.compiled_slots(_settings(fixed={"backend": "sb3"})) == 1
    assert tune_trials.compiled_slots(_settings(objective="time_to_target")) == 1


def test_trials_train_together_each_a_run_computing_what_it_would_alone(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    proc = _tune(project, "--trials", "2", "--steps", "2048", "--study", "lr",
                 "--search", "learning_rate=1e-4:1e-2:log")  # fmt: skip
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads(out)
    assert summary["completed"] == 2
    runs = _train_runs(project)
    assert len(runs) == 2 and all(r.status == "completed" for r in runs)
    for run in runs:
        log = (Path(run.run_dir) / "log.txt").read_text()
        assert "other trials of the sweep as one vmap-ed program" in log, log
        assert (Path(run.run_dir) / "checkpoints").is_dir()
    # One trial trained again alone, in this process: the same updates.
    first = runs[0]
    config = json.loads((Path(first.run_dir) / "config.json").read_text())["config"]
    alone_dir, _ = _run(tmp_path / "alone", "a", config, ctx_cls=LoggedContext)

    def returns(run_dir: Path) -> list[float]:
        rows = read_metrics(run_dir / "metrics.jsonl")
        return [r["train/value_loss"] for r in rows if "train/value_loss" in r]

    together, alone = returns(Path(first.run_dir)), returns(alone_dir)
    assert len(together) == len(alone) == 4
    assert together == pytest.approx(alone, rel=1e-4)


def test_a_signal_stops_every_trial_training_together_with_its_checkpoint(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    proc = _tune(project, "--trials", "2", "--steps", "5000000", "--study", "long",
                 "--search", "gamma=0.9:0.999", "--set", "checkpoint_every_steps=0",
                 # the first evaluation far off, so no target reward ends a
                 # trial before the signal (CartPole's preset stops at 475)
                 "--set", "eval_every_steps=2000000")  # fmt: skip
    deadline = time.monotonic() + 240

    def both_training() -> bool:
        rows = [
            read_metrics(m)
            for m in (project / "runs").glob("*/metrics.jsonl")
            if m.stat().st_size
        ]
        return len(rows) == 2 and all(any("train/loss" in r for r in x) for x in rows)

    while not ((project / "runs").is_dir() and both_training()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "timed out waiting for both trials"
        time.sleep(0.2)
    # SIGTERM, which tune always handles: a shell running the suite in the
    # background hands its children SIGINT ignored, and Python keeps it so.
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    runs = _train_runs(project)
    assert len(runs) == 2, err[-3000:]
    for run in runs:
        assert run.status == "stopped", (run.status, err[-3000:])
        assert list((Path(run.run_dir) / "checkpoints").glob("step-*/model.zip"))
