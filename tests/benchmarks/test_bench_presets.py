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

from engine.rl.config import PRESETS
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
    assert "study" in PRESETS[case.env][case.algo]["provenance"]
    ratio, studio, zoo = race(tmp_path, case, seeds, "preset")
    assert times_reached(studio) >= times_reached(zoo)
    assert ratio < 1.0


# --------------------------------------------------------------------------
# A sweep's best trial not yet adopted: it replaces the built-in preset (and
# moves to TUNED with its provenance) once this passes on both seed sets.
# --------------------------------------------------------------------------

CANDIDATES = (
    # The sweep 'dqn-mountaincar-time-to-minus120' (seeds 13-16), best trial
    # #3: 174.8 CPU s to -120 at 100,000 steps; on held-out seeds 5-7 it
    # reached -120 on seed 5 only, RL Zoo's settings on seed 6 only, so it
    # is not adopted (the preset's provenance gives the runs). The target is
    # RL Zoo's own reported mean for these settings (-120 +- 25);
    # gymnasium's -110 is beyond it. Even -120 was missed by RL Zoo's
    # settings on 2 of these 3 seeds: a next race wants more seeds or an
    # easier target (-130), else it times the budget, not the learning.
    Tuned(
        env="MountainCar-v0",
        algo="DQN",
        target=-120.0,
        budget=120_000,
        zoo={  # hyperparams/dqn.yml
            "learning_rate": 4e-3,
            "batch_size": 128,
            "buffer_size": 10_000,
            "learning_starts": 1000,
            "gamma": 0.98,
            "target_update_interval": 600,
            "train_freq": 16,
            "gradient_steps": 8,
            "exploration_fraction": 0.2,
            "exploration_final_eps": 0.07,
            "policy_kwargs": {"net_arch": [256, 256]},
        },
        preset={
            "eval_every_steps": 5_000,
            "hyperparameters": {
                "net_arch": [64, 64],
                "gradient_steps": 4,
                "learning_rate": 3.23e-3,
                "target_update_interval": 300,
                "exploration_fraction": 0.059,
            },
        },
    ),
)


@pytest.mark.timeout(7200)  # six runs of up to 120,000 DQN steps
@pytest.mark.parametrize(
    "seeds", [BENCH_SEEDS, HELD_OUT_SEEDS], ids=["bench", "held_out"]
)
@pytest.mark.parametrize("case", CANDIDATES, ids=[c.env for c in CANDIDATES])
def test_bench_candidate_time_to_target(
    tmp_path: Path, case: Tuned, seeds: tuple[int, ...]
) -> None:
    """Issue 13: a sweep's best trial, over the built-in preset (still RL
    Zoo's settings), reaches the target in less wall time than RL Zoo's
    settings as a bare script (median over the seeds), and as often."""
    assert "study" not in PRESETS[case.env][case.algo]["provenance"]
    ratio, studio, zoo = race(tmp_path, case, seeds, "candidate")
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
    assert "study" in PRESETS[case.env][case.algo]["provenance"]
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
    assert PRESETS[case.env][case.algo]["provenance"]["source"] == "hand-set"
    ratio, tuned, default = race_defaults(tmp_path, case, DESIGNED_SEEDS, "borrowed")
    assert times_reached(tuned) >= times_reached(default)
    assert ratio < 1.0
