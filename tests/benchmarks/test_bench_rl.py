"""Benchmark: the ``rl.train`` job against a bare stable-baselines3 script.

Same algorithm, hyperparameters (RL Zoo's CartPole-v1 PPO settings, the
studio's preset), seed, env count and torch threads, measured in one process
in alternating rounds: each round runs both, the order flipping every round
so that a machine getting busier or quieter hits both alike, and the figure
is the median of the rounds' studio/bare throughput ratios. The studio run
includes everything it adds: the metrics writer and metrics.jsonl,
TensorBoard files, the per-step callback (progress, stop), reproduce.json and
the final checkpoint. Evaluation is off in the compared runs (the bare
script does none); a third run each round, the studio with evaluation on its
default schedule (every 10,000 steps, 10 episodes), gives what evaluation
costs: the share of that run's wall time spent in ``Trainer.evaluate``, the
median of the rounds (the throughput ratio between runs is printed too, but
single runs here differ by up to 20 %).

Run: .venv/bin/pytest tests/benchmarks/test_bench_rl.py -s -o addopts=""
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.jobs.context import JobContext
from engine.rl.config import TrainConfig, validate
from engine.rl.train import model_kwargs, run
from engine.settings import load
from tests.benchmarks.time_to_target import Tuned, race, times_reached

STEPS = 20_000
ROUNDS = 9
TARGET_RATIO = 0.99  # studio throughput at least 99 % of bare SB3 (median)
TARGET_EVAL_COST = 0.05  # evaluation on the default schedule costs at most 5 %


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


EVALUATING: list[float] = []
"""Seconds spent in ``Trainer.evaluate`` by the studio runs, one a call."""


def run_studio(folder: Path, cfg: dict[str, Any]) -> tuple[int, float, float]:
    """(steps, wall seconds, CPU seconds of this process)."""
    run_dir = folder / "runs" / f"bench-{time.monotonic_ns()}"
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    return summary["total_steps"], time.perf_counter() - t0, time.process_time() - c0


def timed_evaluations(monkeypatch: pytest.MonkeyPatch) -> None:
    """Time every ``Trainer.evaluate`` call (the episodes, the metrics, the
    best model's save and the stop conditions) into :data:`EVALUATING`."""
    from engine.rl.train import Trainer

    evaluate = Trainer.evaluate

    def timed(self: Trainer) -> bool:
        t0 = time.perf_counter()
        try:
            return evaluate(self)
        finally:
            EVALUATING.append(time.perf_counter() - t0)

    monkeypatch.setattr(Trainer, "evaluate", timed)


def run_bare(cfg: dict[str, Any], folder: Path) -> tuple[int, float, float]:
    """What a user would write by hand with the same settings."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    t0, c0 = time.perf_counter(), time.process_time()
    torch.set_num_threads(cfg["torch_threads"])
    env = make_vec_env("CartPole-v1", n_envs=cfg["n_envs"], seed=cfg["seed"])
    hyper = load(TrainConfig, cfg).hyperparameters
    kwargs = model_kwargs(hyper, env.action_space)
    model = PPO("MlpPolicy", env, seed=cfg["seed"], device="cpu", verbose=0, **kwargs)
    model.learn(STEPS)
    model.save(folder / f"bare-{time.monotonic_ns()}.zip")
    env.close()
    return int(model.num_timesteps), time.perf_counter() - t0, time.process_time() - c0


def ratio_text(ratio: float) -> str:
    """``0.97 (3 % slower)``: which way the studio/bare ratio goes."""
    percent = abs(ratio - 1.0) * 100
    way = "slower" if ratio < 1.0 else "faster"
    return f"{ratio:.3f} ({percent:.1f} % {way})"


@pytest.mark.timeout(2400)  # 30 runs of 20,000 steps; slow on a loaded machine
def test_bench_rl_train_overhead(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timed_evaluations(monkeypatch)
    cfg = studio_config()
    with_eval = studio_config(eval_every_steps=TrainConfig.eval_every_steps)
    run_bare(cfg, tmp_path)  # warm-up: imports, first optimizer (torch._dynamo)
    run_studio(tmp_path, cfg)
    run_studio(tmp_path, with_eval)
    runs: dict[str, Callable[[], tuple[int, float, float]]] = {
        "bare": lambda: run_bare(cfg, tmp_path),
        "studio": lambda: run_studio(tmp_path, cfg),
        "eval": lambda: run_studio(tmp_path, with_eval),
    }
    wall: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    shares: list[float] = []  # each evaluated run's seconds in evaluation
    for round_ in range(ROUNDS):
        order = list(runs) if round_ % 2 == 0 else list(reversed(runs))
        for name in order:
            EVALUATING.clear()
            steps, seconds, cpu_seconds = runs[name]()
            wall[name].append(steps / seconds)
            cpu[name].append(steps / cpu_seconds)
            if name == "eval":
                shares.append(sum(EVALUATING) / seconds)

    def median_ratio(of: list[float], to: list[float]) -> float:
        return statistics.median(a / b for a, b in zip(of, to, strict=True))

    studio, bare = wall["studio"], wall["bare"]
    ratios = [s / b for s, b in zip(studio, bare, strict=True)]
    ratio = statistics.median(ratios)
    # What evaluation costs, measured inside each evaluated run (the same
    # machine state for both parts): separate runs of the same settings
    # differ by up to 20 % here, which the ratio between runs cannot resolve.
    eval_cost = statistics.median(shares)
    between_runs = 1.0 - median_ratio(wall["eval"], studio)
    print()
    print(
        f"BENCH rl.train PPO CartPole-v1: studio throughput / bare SB3 = "
        f"{ratio_text(ratio)}; median of {ROUNDS} alternating rounds "
        f"(load average {os.getloadavg()[0]:.2f} at the end)"
    )
    print(
        f"  studio {statistics.median(studio):,.0f} steps/s, bare SB3 "
        f"{statistics.median(bare):,.0f} steps/s (medians); {STEPS} steps, "
        f"{cfg['n_envs']} envs, {cfg['torch_threads']} torch thread(s)"
    )
    print(
        "  per round: "
        + ", ".join(f"{s:,.0f}/{b:,.0f}" for s, b in zip(studio, bare, strict=True))
        + " steps/s; ratios "
        + ", ".join(f"{r:.3f}" for r in ratios)
        + f"; per CPU second {ratio_text(median_ratio(cpu['studio'], cpu['bare']))}"
    )
    # Other processes slow single rounds down at random; the fastest round of
    # each is the least disturbed, so its ratio is a check on the median.
    print(f"  fastest rounds: {ratio_text(max(studio) / max(bare))}")
    print(
        f"  evaluation every {with_eval['eval_every_steps']:,} steps "
        f"({with_eval['eval_episodes']} episodes) takes {eval_cost:.1%} of an "
        f"evaluated run (median of {ROUNDS}: "
        + ", ".join(f"{x:.1%}" for x in shares)
        + f"); target <= {TARGET_EVAL_COST:.0%}. Between runs: {between_runs:.1%} "
        f"of the throughput (per CPU second "
        f"{1.0 - median_ratio(cpu['eval'], cpu['studio']):.1%})"
    )
    assert ratio >= TARGET_RATIO
    assert eval_cost <= TARGET_EVAL_COST


SEEDS = (0, 1, 2, 3, 4)
TARGET_TIME_RATIO = 0.8  # issue 13: studio preset / RL Zoo settings, wall time
CARTPOLE = Tuned(
    env="CartPole-v1",
    algo="PPO",
    target=475.0,
    budget=100_000,
    zoo={  # hyperparams/ppo.yml
        "n_envs": 8,
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": "lin_1e-3",
        "clip_range": "lin_0.2",
    },
)


@pytest.mark.timeout(2400)
def test_bench_rl_time_to_reward_475(tmp_path: Path) -> None:
    """Issue 13: wall time to eval mean reward 475 on CartPole-v1, the
    studio's default preset against RL Zoo's settings as a bare script with
    the same evaluation schedule (median of 5 seeds, alternating; a run that
    never reaches it counts its full time)."""
    ratio, studio, zoo = race(tmp_path, CARTPOLE, SEEDS, "rl default preset")
    print(f"  target preset/zoo <= {TARGET_TIME_RATIO}")
    assert times_reached(studio) >= times_reached(zoo)
    assert ratio <= TARGET_TIME_RATIO
