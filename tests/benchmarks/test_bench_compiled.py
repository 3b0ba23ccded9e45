"""Benchmark: ``rl.train`` on the ``jax`` backend against the ``sb3`` backend.

Issue 27's settings on CartPole-v1 (4 envs x 128 steps, 4 epochs of 4
minibatches, 64x64 tanh, learning rate 2.5e-4 annealed, clip 0.2, entropy
0.01), no evaluation and no periodic checkpoint in either run, each through
the whole ``rl.train`` job in this process. Throughput once running is
measured from the runs' own metrics rows (steps and wall time between the
first and the last update), so it leaves out imports, env checks and the
compilation; the whole-run times are printed beside it. A second jax run with
the same shapes shows what the persistent compilation cache saves: its time
to the first metrics row against the first run's.

Run: .venv/bin/pytest tests/benchmarks/test_bench_compiled.py -s -o addopts=""
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.context import JobContext
from engine.rl.config import validate
from engine.rl.train import run
from engine.store.metrics import read_metrics

pytest.importorskip("jax")

JAX_STEPS = 500_000
SB3_STEPS = 100_000
TARGET_THROUGHPUT = 15.0  # jax steps/s over sb3 steps/s, issue 27
TARGET_WARM_START = 0.3  # a cached run's time to its first row / a cold run's


def config(backend: str, steps: int) -> dict[str, Any]:
    return validate(
        {
            "env": "CartPole-v1",
            "algo": "PPO",
            "backend": backend,
            "total_steps": steps,
            "seed": 0,
            "n_envs": 4,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            "hyperparameters": {
                "n_steps": 128,
                "batch_size": 128,
                "n_epochs": 4,
                "learning_rate": 2.5e-4,
                "learning_rate_schedule": "linear",
                "clip_range": 0.2,
                "clip_range_schedule": "constant",
                "ent_coef": 0.01,
                "gamma": 0.99,
                "gae_lambda": 0.95,
                "net_arch": [64, 64],
                "activation": "tanh",
            },
        }
    )


def timed_run(folder: Path, cfg: dict[str, Any]) -> dict[str, float]:
    run_dir = folder / "runs" / f"bench-{time.monotonic_ns()}"
    start = time.time()
    t0 = time.perf_counter()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    wall = time.perf_counter() - t0
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in r]
    first, last = rows[0], rows[-1]
    # metrics rows carry seconds since the run's context opened
    return {
        "wall_s": wall,
        "steps": float(summary["total_steps"]),
        "first_row_s": float(first["time"]),
        "steps_per_s": (last["step"] - first["step"]) / (last["time"] - first["time"]),
        "final_return": float(last.get("rollout/ep_rew_mean", float("nan"))),
        "start": start,
    }


@pytest.mark.timeout(1800)
def test_compiled_ppo_against_sb3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cache of this benchmark's own, so that the first run compiles.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cold = timed_run(tmp_path, config("jax", JAX_STEPS))
    warm = timed_run(tmp_path, config("jax", JAX_STEPS))
    sb3 = timed_run(tmp_path, config("sb3", SB3_STEPS))
    throughput = warm["steps_per_s"] / sb3["steps_per_s"]
    warm_start = warm["first_row_s"] / cold["first_row_s"]
    print()
    for name, r in (("jax cold", cold), ("jax warm", warm), ("sb3", sb3)):
        print(
            f"{name:9} {r['steps']:>9,.0f} steps in {r['wall_s']:6.1f} s, "
            f"{r['steps_per_s']:>9,.0f} steps/s once running, first row after "
            f"{r['first_row_s']:5.1f} s, final ep_rew_mean {r['final_return']:.0f}"
        )
    print(
        f"throughput once running, jax / sb3 = {throughput:.1f} "
        f"(target >= {TARGET_THROUGHPUT:g})"
    )
    sb3_500k = sb3["wall_s"] * JAX_STEPS / SB3_STEPS
    print(
        f"whole run of {JAX_STEPS:,} steps, jax warm / sb3 (extrapolated from "
        f"{SB3_STEPS:,}) = {warm['wall_s'] / sb3_500k:.3f}"
    )
    print(
        f"time to the first metrics row, warm cache / cold = {warm_start:.2f} "
        f"(target <= {TARGET_WARM_START:g})"
    )
    assert cold["final_return"] > 150  # it learns
    assert throughput >= TARGET_THROUGHPUT
