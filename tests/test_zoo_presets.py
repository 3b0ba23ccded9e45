"""Presets from RL Zoo's hyperparameter files (engine.rl.zoo_presets): read
as data from the installed rl_zoo3 without importing it, resolved for
Gymnasium 1.x's ids and the Atari games, with their provenance."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from engine.rl import config as rlconfig
from engine.rl import zoo_presets
from engine.rl.config import preset_for, preset_provenance, validate

pytestmark = pytest.mark.skipif(
    zoo_presets.hyperparams_folder() is None,
    reason="rl_zoo3 is not installed (make setup installs it with --no-deps)",
)


def test_an_env_rl_zoo_tunes_under_an_older_version_gets_its_settings() -> None:
    preset = preset_for("HalfCheetah-v5", "PPO")
    # ppo.yml's HalfCheetah-v4, its policy_kwargs read into settings.
    assert preset["n_steps"] == 512 and preset["learning_rate"] == 2.0633e-05
    assert preset["vec_normalize"] is True and preset["total_steps"] == 1_000_000
    assert preset["net_arch"] == [256, 256]  # dict(pi=[256, 256], vf=[256, 256])
    assert preset["activation"] == "relu" and preset["ortho_init"] is False
    version = zoo_presets.zoo_version()
    assert preset_provenance("HalfCheetah-v5", "PPO") == (
        "The built-in preset for PPO on HalfCheetah-v5: RL Zoo settings (rl_zoo3 "
        f"{version}'s hyperparams/ppo.yml, entry 'HalfCheetah-v4' for "
        "HalfCheetah-v5, not tuned here)."
    )
    cfg = validate({"env": "HalfCheetah-v5", "algo": "PPO", "seed": 1})
    assert cfg["hyperparameters"]["n_epochs"] == 20 and cfg["vec_normalize"] is True


@pytest.mark.parametrize("env_id", ["PongNoFrameskip-v4", "ALE/Breakout-v5"])
def test_every_atari_game_gets_rl_zoos_atari_entry(env_id: str) -> None:
    cfg = validate({"env": env_id, "algo": "PPO", "seed": 1})
    hp = cfg["hyperparameters"]
    assert (cfg["policy"], cfg["n_envs"], cfg["total_steps"]) == (
        "CnnPolicy",
        8,
        10_000_000,
    )
    assert (hp["n_steps"], hp["batch_size"], hp["n_epochs"]) == (128, 256, 4)
    assert (hp["learning_rate"], hp["learning_rate_schedule"]) == (2.5e-4, "linear")
    assert (hp["clip_range"], hp["clip_range_schedule"]) == (0.1, "linear")
    assert hp["net_arch"] == []  # SB3's CnnPolicy: the CNN's features to the heads
    # The wrappers and frame stack are the family's (engine.envs.families),
    # so they are not "left out".
    where = preset_provenance(env_id, "PPO")
    assert "entry 'atari'" in where and "not carried over" not in where


def test_what_has_no_equivalent_here_is_named_in_the_provenance() -> None:
    assert preset_for("BipedalWalker-v3", "TD3")["net_arch"] == [400, 300]
    assert preset_provenance("BipedalWalker-v3", "TD3").endswith(
        "not tuned here; not carried over: noise_std, noise_type)."
    )
    ars = preset_for("Pendulum-v1", "ARS")  # LinearPolicy: no hidden layer
    assert (ars["policy"], ars["net_arch"]) == ("MlpPolicy", [16])
    validate({"env": "Pendulum-v1", "algo": "ARS", "seed": 1})


def test_the_bundled_presets_win_and_rl_zoo_fills_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # LunarLander's bundled PPO preset (RL Zoo's, reviewed here) is used.
    assert "rl-baselines3-zoo's published" in preset_provenance("LunarLander-v3", "PPO")
    assert "hyperparams/ppo.yml" in preset_provenance("LunarLanderContinuous-v3", "PPO")
    # Without rl_zoo3 installed the others are simply absent.
    monkeypatch.setattr(zoo_presets, "zoo_entries", lambda algo: {})
    assert preset_for("HalfCheetah-v5", "PPO") == {}
    assert preset_provenance("HalfCheetah-v5", "PPO").startswith(
        "There is no built-in preset for PPO on HalfCheetah-v5"
    )


def test_policy_kwargs_are_read_as_data_never_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry: dict[str, Any] = {
        "policy": "MlpPolicy",
        "learning_rate": "lin_7.3e-4",
        "normalize": "{'norm_obs': True, 'norm_reward': False}",
        "policy_kwargs": "dict(log_std_init=-2, net_arch=dict(pi=[64], qf=[400, 300]),"
        " activation_fn=nn.Tanh, optimizer_class=__import__('os').system)",
    }
    monkeypatch.setattr(zoo_presets, "zoo_entries", lambda algo: {"Fake-v1": entry})
    known = {*rlconfig.TRAIN_FIELDS, *rlconfig.fields_of(rlconfig.CrossQConfig)}
    preset = zoo_presets.zoo_preset("Fake-v1", "CrossQ", known)
    assert preset is not None
    assert preset["net_arch"] == [64] and preset["critic_net_arch"] == [400, 300]
    assert (preset["learning_rate"], preset["learning_rate_schedule"]) == (
        7.3e-4,
        "linear",
    )
    assert preset["activation"] == "tanh" and preset["log_std_init"] == -2
    # A call is never evaluated: only literals, nn.<activation> and dict(...).
    assert preset["provenance"]["detail"].endswith(
        "not carried over: normalize, policy_kwargs.optimizer_class"
    )


def test_rl_zoo3_is_never_imported() -> None:
    code = (
        "import sys\n"
        "from engine.rl.config import preset_for\n"
        "assert preset_for('HalfCheetah-v5', 'SAC')\n"
        "print('rl_zoo3' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False"
