"""Benchmark: time to a target eval reward for the built-in presets tuned by
a sweep (issue 13), against RL Zoo's published settings run as a bare
stable-baselines3 script.

For each tuned env: the studio's default preset (``validate`` of env and
algo alone, stopping at the target) against RL Zoo's hyperparameters
(rl-baselines3-zoo hyperparams/*.yml) with SB3's own EvalCallback and
reward-threshold stop on the studio's evaluation schedule. The two
alternate, the order flipping every seed, so a machine getting busier or
quieter hits both alike; the figure is the ratio of the medians of wall
seconds (CPU seconds printed beside: other processes on a shared machine
bend wall time more). A run that never reaches the target counts its full
time. Two seed sets are measured: the benchmark's seeds and held-out seeds;
the sweeps' trials used neither (a sweep's trial n is seeded with the
study's seed + n, 13 and up).

CartPole-v1 has its own benchmark in test_bench_rl.py.

Run: .venv/bin/pytest tests/benchmarks/test_bench_presets.py -s -o addopts=""
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.context import JobContext
from engine.rl.config import PRESETS, validate
from engine.rl.train import run

BENCH_SEEDS = (0, 1, 2)
HELD_OUT_SEEDS = (5, 6, 7)


@dataclass(frozen=True)
class Tuned:
    """A tuned preset and the RL Zoo settings it replaced."""

    env: str
    algo: str
    target: float
    budget: int
    """Most environment steps of either run (its full time counts when the
    target is not reached)."""
    zoo: dict[str, Any] = field(default_factory=dict)
    """RL Zoo's hyperparameters as SB3 keyword arguments, plus ``n_envs``
    and ``normalize``."""


TUNED = (
    Tuned(
        env="Acrobot-v1",
        algo="PPO",
        target=-100.0,
        budget=100_000,
        zoo={
            "n_envs": 16,
            "normalize": True,
            "n_steps": 256,
            "gae_lambda": 0.94,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
    ),
)

Outcome = tuple[float, int, bool, float]
"""(wall seconds, steps, reached the target, CPU seconds of this process)."""


def studio_to_target(folder: Path, case: Tuned, seed: int) -> Outcome:
    """The studio's built-in preset, stopping at the target."""
    cfg = validate(
        {
            "env": case.env,
            "algo": case.algo,
            "seed": seed,
            "total_steps": case.budget,
            "target_eval_reward": case.target,
            "checkpoint_every_steps": 0,
        }
    )
    run_dir = folder / "runs" / f"target-{seed}-{time.monotonic_ns()}"
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    wall = time.perf_counter() - t0
    reached = summary.get("stopped_by") == "target"
    return wall, int(summary["total_steps"]), reached, time.process_time() - c0


def zoo_to_target(case: Tuned, seed: int, eval_every: int, episodes: int) -> Outcome:
    """RL Zoo's settings as a bare SB3 script, evaluating like the studio."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import (
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize

    assert case.algo == "PPO", "only PPO presets are tuned so far"
    kwargs = dict(case.zoo)
    n_envs, normalize = kwargs.pop("n_envs"), kwargs.pop("normalize", False)
    t0, c0 = time.perf_counter(), time.process_time()
    torch.set_num_threads(1)
    env: VecEnv = make_vec_env(case.env, n_envs=n_envs, seed=seed)
    eval_env: VecEnv = make_vec_env(case.env, n_envs=1, seed=seed + 10_000)
    if normalize:  # rl_zoo3: VecNormalize with the algorithm's gamma
        env = VecNormalize(env, gamma=kwargs["gamma"])
        eval_env = VecNormalize(
            eval_env, gamma=kwargs["gamma"], training=False, norm_reward=False
        )
    model = PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
    stop = StopTrainingOnRewardThreshold(reward_threshold=case.target, verbose=0)
    callback = EvalCallback(
        eval_env,
        callback_on_new_best=stop,
        eval_freq=max(1, eval_every // n_envs),
        n_eval_episodes=episodes,
        deterministic=True,
        verbose=0,
    )
    model.learn(case.budget, callback=callback)
    reached = callback.best_mean_reward >= case.target
    env.close()
    eval_env.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, int(model.num_timesteps), reached, cpu


def _way(ratio: float) -> str:
    return f"{abs(1 - ratio) * 100:.0f} % {'less' if ratio < 1 else 'more'} time"


@pytest.mark.timeout(3600)
@pytest.mark.parametrize(
    "seeds", [BENCH_SEEDS, HELD_OUT_SEEDS], ids=["bench", "held_out"]
)
@pytest.mark.parametrize("case", TUNED, ids=[c.env for c in TUNED])
def test_bench_preset_time_to_target(
    tmp_path: Path, case: Tuned, seeds: tuple[int, ...]
) -> None:
    """Issue 13: a sweep-tuned preset reaches its target in less wall time
    than RL Zoo's settings as a bare script (median over the seeds)."""
    assert "study" in PRESETS[case.env][case.algo]["provenance"]
    defaults = validate({"env": case.env, "algo": case.algo})
    every, episodes = defaults["eval_every_steps"], defaults["eval_episodes"]
    # Warm-up, not counted: the first torch optimizer imports torch._dynamo.
    zoo_to_target(
        Tuned(case.env, case.algo, case.target, 2_000, case.zoo), 99, every, episodes
    )
    studio: list[Outcome] = []
    zoo: list[Outcome] = []
    for i, seed in enumerate(seeds):
        for which in ("zoo", "studio") if i % 2 == 0 else ("studio", "zoo"):
            if which == "zoo":
                zoo.append(zoo_to_target(case, seed, every, episodes))
            else:
                studio.append(studio_to_target(tmp_path, case, seed))
            # Each run as it ends: a loaded machine makes the whole long.
            w, n, ok, c = (zoo if which == "zoo" else studio)[-1]
            print(
                f"  {which} seed {seed}: {w:.1f} s ({c:.1f} CPU s) / {n:,} "
                f"steps{'' if ok else ' (not reached)'}",
                flush=True,
            )
    s_med = statistics.median(w for w, _, _, _ in studio)
    z_med = statistics.median(w for w, _, _, _ in zoo)
    ratio = s_med / z_med
    cpu_ratio = statistics.median(c for *_, c in studio) / statistics.median(
        c for *_, c in zoo
    )
    print()
    print(
        f"BENCH preset time to eval reward {case.target:g} on {case.env} "
        f"({case.algo}, seeds {seeds[0]}-{seeds[-1]}): studio tuned preset "
        f"{s_med:.1f} s, RL Zoo settings bare SB3 {z_med:.1f} s (median, "
        f"alternating; eval every {every:,} steps, {episodes} episodes); "
        f"tuned/zoo = {ratio:.2f} (lower is better; {_way(ratio)}); CPU "
        f"seconds tuned/zoo = {cpu_ratio:.2f}; load average (1 min) "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for name, rows in (("tuned", studio), ("zoo", zoo)):
        print(
            f"  {name}: "
            + ", ".join(
                f"{w:.1f} s ({c:.1f} CPU s) / {n:,} steps"
                + ("" if ok else " (not reached)")
                for w, n, ok, c in rows
            )
        )
    assert sum(ok for _, _, ok, _ in studio) >= sum(ok for _, _, ok, _ in zoo)
    assert ratio < 1.0
