"""Benchmark: a python-kind env through its process (RemoteEnv) against the
same class imported and stepped in the caller's process.

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_env_process.py -s -o addopts=""``

The env is gymnasium's CartPole, named in a user's env file. Each step
through the proxy is one JSON line each way over pipes, so the proxy is
slower per step; the figure says by how much (best of several interleaved
rounds; compare the ratio, not the absolute numbers).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from engine.envs.remote import RemoteEnv

pytestmark = pytest.mark.bench

USER_FILE = "from gymnasium.envs.classic_control.cartpole import CartPoleEnv as Pole\n"


def _loop(env: object, actions: list[int]) -> float:
    env.reset(seed=0)  # type: ignore[attr-defined]
    step, reset = env.step, env.reset  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    for a in actions:
        _, _, term, trunc, _ = step(a)
        if term or trunc:
            reset()
    return time.perf_counter() - t0


def test_bench_proxy_against_direct(tmp_path: Path) -> None:
    (tmp_path / "pole.py").write_text(USER_FILE)
    proxy, direct = RemoteEnv(tmp_path / "pole.py", "Pole"), CartPoleEnv()
    actions = np.random.default_rng(0).integers(2, size=20_000).tolist()
    best_p = best_d = float("inf")
    try:
        for _ in range(3):
            best_p = min(best_p, _loop(proxy, actions))
            best_d = min(best_d, _loop(direct, actions))
    finally:
        proxy.close()
    p_rate, d_rate = len(actions) / best_p, len(actions) / best_d
    print(
        f"\nBENCH python env process: proxy {p_rate:,.0f} steps/s, "
        f"direct {d_rate:,.0f} steps/s, proxy/direct {p_rate / d_rate:.3f} "
        f"({best_p / len(actions) * 1e6:.1f} vs {best_d / len(actions) * 1e6:.1f} "
        "us a step)"
    )
    assert p_rate > 1000


def _ppo_rate(env: object, steps: int) -> float:
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", env, n_steps=512, batch_size=128, n_epochs=2, seed=0)
    t0 = time.perf_counter()
    model.learn(steps)
    return steps / (time.perf_counter() - t0)


def test_bench_ppo_proxy_against_direct(tmp_path: Path) -> None:
    """The same PPO run on the env through its process and imported here."""
    import torch

    torch.set_num_threads(1)
    (tmp_path / "pole.py").write_text(USER_FILE)
    p_rate = d_rate = 0.0
    for _ in range(2):  # interleaved, best of two (the first pays warm-up)
        d_rate = max(d_rate, _ppo_rate(CartPoleEnv(), 4096))
        proxy = RemoteEnv(tmp_path / "pole.py", "Pole")
        try:
            p_rate = max(p_rate, _ppo_rate(proxy, 4096))
        finally:
            proxy.close()
    print(
        f"\nBENCH python env process PPO: proxy {p_rate:,.0f} steps/s, "
        f"direct {d_rate:,.0f} steps/s, proxy/direct {p_rate / d_rate:.2f}"
    )
