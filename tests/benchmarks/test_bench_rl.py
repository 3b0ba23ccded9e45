"""Benchmark: the ``rl.train`` job against a bare stable-baselines3 script.

Same algorithm, hyperparameters (RL Zoo's CartPole-v1 PPO settings, the
studio's preset), seed, env count and torch threads, measured in one process,
interleaved, best of ``ROUNDS``. The studio run includes everything it adds:
the metrics writer and metrics.jsonl, TensorBoard files, the per-step
callback, reproduce.json and the final checkpoint. Evaluation is off in the
compared runs (the bare script does none); one more studio run with periodic
evaluation is reported for information.

Run: .venv/bin/pytest tests/benchmarks/test_bench_rl.py -s -o addopts=""
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.context import JobContext
from engine.rl.config import validate
from engine.rl.train import model_kwargs, run

STEPS = 20_000
ROUNDS = 3
TARGET_RATIO = 0.90  # studio steps/s at least 90 % of bare SB3


def studio_config(**extra: Any) -> dict[str, Any]:
    return validate(
        {
            "env": "CartPole-v1",
            "algo": "PPO",
            "total_steps": STEPS,
            "seed": 0,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            **extra,
        }
    )


def run_studio(folder: Path, cfg: dict[str, Any]) -> tuple[int, float, float]:
    """(steps, wall seconds, CPU seconds of this process)."""
    run_dir = folder / "runs" / f"bench-{time.monotonic_ns()}"
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    return summary["total_steps"], time.perf_counter() - t0, time.process_time() - c0


def run_bare(cfg: dict[str, Any], folder: Path) -> tuple[int, float, float]:
    """What a user would write by hand with the same settings."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    t0, c0 = time.perf_counter(), time.process_time()
    torch.set_num_threads(cfg["torch_threads"])
    env = make_vec_env("CartPole-v1", n_envs=cfg["n_envs"], seed=cfg["seed"])
    kwargs = model_kwargs("PPO", cfg["hyperparameters"], env.action_space)
    model = PPO("MlpPolicy", env, seed=cfg["seed"], device="cpu", verbose=0, **kwargs)
    model.learn(STEPS)
    model.save(folder / f"bare-{time.monotonic_ns()}.zip")
    env.close()
    return int(model.num_timesteps), time.perf_counter() - t0, time.process_time() - c0


@pytest.mark.timeout(1800)  # 8 runs of 20,000 steps; slow on a loaded machine
def test_bench_rl_train_overhead(tmp_path: Path) -> None:
    cfg = studio_config()
    run_bare(cfg, tmp_path)  # warm-up: imports, first optimizer (torch._dynamo)
    studio: list[float] = []
    bare: list[float] = []
    studio_cpu: list[float] = []
    bare_cpu: list[float] = []
    for _ in range(ROUNDS):
        steps, wall, cpu = run_bare(cfg, tmp_path)
        bare.append(steps / wall)
        bare_cpu.append(steps / cpu)
        steps, wall, cpu = run_studio(tmp_path, cfg)
        studio.append(steps / wall)
        studio_cpu.append(steps / cpu)
    best_studio, best_bare = max(studio), max(bare)
    ratio = best_studio / best_bare
    cpu_ratio = max(studio_cpu) / max(bare_cpu)
    print()
    print(
        f"BENCH rl.train PPO CartPole-v1: studio {best_studio:,.0f} steps/s, "
        f"bare SB3 {best_bare:,.0f} steps/s, ratio {ratio:.2f}"
    )
    print(
        f"  {STEPS} steps, {cfg['n_envs']} envs, "
        f"{cfg['torch_threads']} torch thread(s), best of {ROUNDS} interleaved "
        "rounds; wall steps/s per round: studio "
        f"{[round(x) for x in studio]}, bare {[round(x) for x in bare]}; "
        f"per CPU second ratio {cpu_ratio:.2f}"
    )
    with_eval = studio_config(eval_every_steps=5_000, eval_episodes=10)
    steps, wall, _cpu = run_studio(tmp_path, with_eval)
    print(
        "  for information, with eval every 5,000 steps (10 episodes): "
        f"studio {steps / wall:,.0f} steps/s, "
        f"{steps / wall / best_bare:.2f} of bare SB3 without eval"
    )
    assert ratio >= TARGET_RATIO
