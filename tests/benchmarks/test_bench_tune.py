"""Sweep scale-out: the same 16-trial PPO CartPole study (seeded, no
pruning, so every trial does the same work) finished by one ``tune`` worker
and by two, wall time of the whole command each, in the same run. Target
(issue 13): two workers take at most 0.6 of one worker's time."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRIALS = 16


def _sweep(project: Path, workers: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its workers)."""
    argv = [
        sys.executable, "-m", "engine", "tune", "--env", "CartPole-v1",
        "--algo", "PPO", "--trials", str(TRIALS), "--steps", "4096",
        "--search", "learning_rate=1e-4:3e-3:log", "--search", "gamma",
        "--set", "eval_episodes=5", "--seed", "1",
        "--prune-startup", str(TRIALS), "--project", str(project),
        "--workers", str(workers),
    ]  # fmt: skip
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        argv,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["finished"] == TRIALS
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return seconds, cpu


def test_bench_two_sweep_workers_against_one(tmp_path: Path) -> None:
    load_before = os.getloadavg()[0]
    one, one_cpu = _sweep(tmp_path / "one", 1)
    two, two_cpu = _sweep(tmp_path / "two", 2)
    ratio = two / one
    # Other processes on the machine take cores from the two workers.
    print(
        f"load average (1 min) before {load_before:.1f}, after "
        f"{os.getloadavg()[0]:.1f}; cores the sweep got: one worker "
        f"{one_cpu / one:.2f}, two workers {two_cpu / two:.2f}"
    )
    print(
        f"{TRIALS}-trial sweep (PPO CartPole, 4096 steps a trial): one worker "
        f"{one:.1f} s, two workers {two:.1f} s; two/one = {ratio:.2f} "
        f"(lower is better; target <= 0.6) on {os.cpu_count()} cores"
    )
    assert ratio <= 0.6
