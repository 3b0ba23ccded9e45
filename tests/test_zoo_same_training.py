"""The studio trains what RL Zoo's settings train bare (issue 31): the same
seed and settings through ``rl-studio-engine train`` and through a bare
stable-baselines3 script built as RL Zoo builds it (tests/zoo_bare.py) end
with the same weights, to the bit. So a learning figure of the studio's
(tests/benchmarks/test_bench_zoo.py) is the preset's, not the studio's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from zoo_bare import BARE, bare_config, studio_command, studio_settings

ROOT = Path(__file__).resolve().parents[1]

CASES = {
    # RL Zoo's PPO preset (16 envs, batch 64, 4 epochs, ...) with rollouts of
    # 64 steps an env: two updates in 2,048 steps.
    "LunarLander-v3": (2 * 16 * 64, {"n_steps": 64}),
    # RL Zoo's atari entry (CnnPolicy, 8 envs, frame stack 4): one update.
    "PongNoFrameskip-v4": (8 * 128, {}),
}


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, check=False)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("env_id", list(CASES))
def test_the_studio_ends_with_the_bare_scripts_weights(
    env_id: str, tmp_path: Path
) -> None:
    from stable_baselines3 import PPO

    steps, hyperparameters = CASES[env_id]
    cfg = studio_settings(env_id, steps, seed=3, **hyperparameters)
    bare_zip = tmp_path / "bare.zip"
    _run([sys.executable, "-c", BARE, json.dumps(bare_config(cfg, bare_zip))])
    project = tmp_path / "project"
    _run(studio_command(cfg, project, **hyperparameters))
    (run_dir,) = (project / "runs").iterdir()
    (studio_zip,) = run_dir.rglob("model.zip")

    bare, studio = PPO.load(bare_zip), PPO.load(studio_zip)
    assert studio.num_timesteps == bare.num_timesteps >= steps
    # Adam keeps state only once it has stepped: both trained.
    assert studio.policy.optimizer.state_dict()["state"]
    expected, got = bare.policy.state_dict(), studio.policy.state_dict()
    assert list(got) == list(expected)
    for name, tensor in expected.items():
        assert got[name].equal(tensor), f"{env_id}: {name} differs"
