"""Benchmark: time to a target eval reward for the built-in presets tuned by
a sweep (issue 13), against RL Zoo's published settings run as a bare
stable-baselines3 script (the race in time_to_target.py).

Two seed sets are measured: the benchmark's seeds and held-out seeds; the
sweeps' trials used neither (a sweep's trial n is seeded with the study's
seed + n, 13 and up). CartPole-v1 has its own benchmark in test_bench_rl.py.

Run: .venv/bin/pytest tests/benchmarks/test_bench_presets.py -s -o addopts=""
"""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.rl.presets import builtin_presets
from tests.benchmarks.time_to_target import (
    Designed,
    Tuned,
    race,
    race_defaults,
    times_reached,
)

BENCH_SEEDS = (0, 1, 2)
HELD_OUT_SEEDS = (5, 6, 7)

TUNED = (
    Tuned(
        env="Acrobot-v1",
        algo="PPO",
        target=-100.0,
        budget=100_000,
        zoo={  # hyperparams/ppo.yml
            "n_envs": 16,
            "normalize": True,
            "n_steps": 256,
            "gae_lambda": 0.94,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
    ),
    Tuned(
        env="MountainCar-v0",
        algo="PPO",
        target=-110.0,  # gymnasium's reward threshold ("solved")
        budget=1_000_000,  # RL Zoo's n_timesteps
        zoo={  # hyperparams/ppo.yml
            "n_envs": 16,
            "normalize": True,
            "n_steps": 16,
            "gae_lambda": 0.98,
            "gamma": 0.99,
            "n_epochs": 4,
            "ent_coef": 0.0,
        },
    ),
    Tuned(
        env="Pendulum-v1",
        algo="SAC",
        target=-200.0,
        budget=20_000,
        zoo={"learning_rate": 1e-3},  # hyperparams/sac.yml; SB3's defaults else
    ),
)


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
    assert "study" in builtin_presets()[case.env][case.algo]["provenance"]
    ratio, studio, zoo = race(tmp_path, case, seeds, "preset")
    assert times_reached(studio) >= times_reached(zoo)
    assert ratio < 1.0


# --------------------------------------------------------------------------
# Bundled designed envs: RL Zoo has no settings for them, so the preset races
# the engine's defaults, what a run got before the preset (race_defaults).
# Held-out seeds only: the sweeps' trials were seeded 13-22.
# --------------------------------------------------------------------------

DESIGNED_SEEDS = (0, 1, 2)

DESIGNED = (
    # 1 less 0.01 a step for an issue finished, nothing for one failed: a
    # mean of 0.8 over 10 evaluation episodes needs 9 of them finished.
    Designed(
        env="rlstudio/jira_release_pipeline-v0",
        algo="MaskablePPO",
        target=0.8,
        budget=40_000,
    ),
    # The goal pays 1 (and the cell on the way 0.1, once) less 0.01 a step, a
    # trap -1: a mean of 0.7 over 10 episodes needs about 9 at the goal.
    Designed(env="rlstudio/maze-v0", algo="PPO", target=0.7, budget=40_000),
)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("case", DESIGNED, ids=[c.env for c in DESIGNED])
def test_bench_designed_env_preset_against_defaults(
    tmp_path: Path, case: Designed
) -> None:
    """Issue 13: a sweep-tuned preset for a bundled designed env reaches its
    target in less wall time than the engine's defaults (median over the
    seeds), and as often."""
    assert "study" in builtin_presets()[case.env][case.algo]["provenance"]
    ratio, tuned, default = race_defaults(tmp_path, case, DESIGNED_SEEDS, "preset")
    assert times_reached(tuned) >= times_reached(default)
    assert ratio < 1.0


BORROWED = (
    # Status shaping plus a success bonus: a finished issue earns 0.85-0.97,
    # so 0.8 needs (nearly) every one of the 10 finished.
    Designed("rlstudio/jira_status_update-v0", "MaskablePPO", 0.8, 20_000),
    Designed("rlstudio/jira_issue_resolution-v0", "MaskablePPO", 0.8, 20_000),
    # A bonus of 0.5: the shortest handling of the comment earns 0.44.
    Designed("rlstudio/jira_comment_management-v0", "MaskablePPO", 0.4, 20_000),
)


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("case", BORROWED, ids=[c.env for c in BORROWED])
def test_bench_borrowed_preset_against_defaults(tmp_path: Path, case: Designed) -> None:
    """Issue 13: the release pipeline's settings, reused unswept on an
    easier Jira env, reach its target in less wall time than the engine's
    defaults (mostly by evaluating sooner; their provenance says so)."""
    assert builtin_presets()[case.env][case.algo]["provenance"]["source"] == "hand-set"
    ratio, tuned, default = race_defaults(tmp_path, case, DESIGNED_SEEDS, "borrowed")
    assert times_reached(tuned) >= times_reached(default)
    assert ratio < 1.0
