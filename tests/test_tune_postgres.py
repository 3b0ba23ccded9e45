"""Sweeps with ``--storage postgresql://...`` on a real PostgreSQL server
(``pg_server``): commands starting together on a new database make its
tables once, and a sweep's two workers share the study there."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest

from engine.rl import tune_storage

REPO = Path(__file__).resolve().parents[1]


def _open(url: str, barrier: Any) -> None:
    barrier.wait(timeout=30)
    tune_storage.open_storage(url).engine.dispose()


def test_commands_opening_a_new_database_together_make_its_tables_once(
    pg_url: str,
) -> None:
    context = multiprocessing.get_context("fork")
    barrier = context.Barrier(2)
    procs = [context.Process(target=_open, args=(pg_url, barrier)) for _ in range(2)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * 2
    # psycopg 3 behind the plain URL (SQLAlchemy would ask for psycopg2).
    storage = tune_storage.open_storage(pg_url)
    assert storage.engine.dialect.driver == "psycopg"
    storage.engine.dispose()


@pytest.mark.slow
def test_a_sweep_with_two_workers_on_postgresql(tmp_path: Path, pg_url: str) -> None:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "engine", "tune", "--env", "CartPole-v1"),
            *("--algo", "PPO", "--trials", "2", "--steps", "512", "--workers", "2"),
            *("--study", "pg", "--storage", pg_url, "--project", str(tmp_path / "p")),
            *("--search", "learning_rate=1e-4:1e-2:log", "--set", "eval_episodes=2"),
        ],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["storage"] == pg_url and summary["finished"] == 2
    study = optuna.load_study(
        study_name="pg", storage=tune_storage.open_storage(pg_url)
    )
    assert len(study.get_trials()) == 2
    runs = {t.user_attrs["run_id"] for t in study.get_trials()}
    assert len(runs) == 2
