"""A training run that starts from a saved or downloaded policy
(``rl.train``'s ``start_from``, engine.rl.start_from): the same weights
before any update, the lineage, the model's normalization statistics, and
each refusal in one sentence before a process starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.rl.config import TrainConfig, validate
from engine.settings import load
from engine.store.project import Project

HUB_SOURCE = "hf://rl-zoo/ppo-CartPole-v1@0123abcd"
RUN = {
    "total_steps": 256,
    "seed": 3,
    "n_envs": 2,
    "eval_every_steps": 0,
    "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
}


def _save_ppo(folder: Path, steps: int, *, normalize: bool = False) -> Path:
    """A PPO CartPole policy trained ``steps`` steps, with the
    ``state.json`` (and ``vecnormalize.pkl``) training writes beside it."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    folder.mkdir(parents=True)
    venv: Any = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    if normalize:
        venv = VecNormalize(venv)
    model = PPO(
        "MlpPolicy", venv, n_steps=64, batch_size=64, n_epochs=1, seed=0, verbose=0
    )
    if steps:
        model.learn(steps)
    model.save(folder / "model.zip")
    if normalize:
        venv.save(str(folder / "vecnormalize.pkl"))
    state = {"env": "CartPole-v1", "algo": "PPO"}
    (folder / "state.json").write_text(json.dumps(state))
    return folder / "model.zip"


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 256-step PPO CartPole policy."""
    return _save_ppo(tmp_path_factory.mktemp("saved") / "agent", 256)


@pytest.fixture
def hub_project(tmp_path: Path, saved: Path) -> tuple[Path, str]:
    """A project holding ``saved`` as a Hub download registers it: an
    ``sb3-policy`` whose lineage names the repository, ``state.json``
    beside it."""
    project = Project.open(tmp_path / "project", create=True)
    try:
        record = project.register_model(
            name="ppo-CartPole-v1",
            kind="sb3-policy",
            files=[saved, saved.with_name("state.json")],
            env="CartPole-v1",
            algo="PPO",
            base="rl-zoo/ppo-CartPole-v1@0123abcd",
            parents=[HUB_SOURCE],
        )
    finally:
        project.close()
    return tmp_path / "project", record.id


def _observations(n: int) -> np.ndarray:
    import gymnasium as gym

    space = gym.make("CartPole-v1").observation_space
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, size=(n, *space.shape)).astype(np.float32)


def test_a_downloaded_agent_continues_with_its_weights_and_lineage(
    hub_project: tuple[Path, str], capfd: pytest.CaptureFixture[str]
) -> None:
    from engine.rl.policy import load_policy
    from engine.rl.train import Trainer, train

    project_dir, parent_id = hub_project
    # By its name, with no env or algorithm: the model gives them.
    cfg = validate(
        {**RUN, "start_from": "ppo-CartPole-v1", "project_dir": str(project_dir)}
    )
    parent_file = project_dir / "models" / parent_id / "model.zip"
    assert cfg["start_from"] == str(parent_file.resolve())
    assert (cfg["env"], cfg["algo"], cfg["vec_normalize"]) == (
        "CartPole-v1",
        "PPO",
        False,
    )
    assert validate(cfg) == cfg  # checking a checked config changes nothing

    # Before any update the run's policy is the saved one: the same actions.
    ctx = JobContext("r0", project_dir / "runs" / "r0", "rl.train", cfg, events=None)
    trainer = Trainer(ctx, load(TrainConfig, cfg))
    trainer.ensure_built()
    obs = _observations(100)
    before, _ = load_policy(parent_file).predict(obs, deterministic=True)
    built, _ = trainer.model.predict(obs, deterministic=True)
    trainer.venv.close()
    ctx.close()
    assert np.array_equal(before, built)

    # Trained on as a new run: its own steps, its model's parent the agent.
    ctx = JobContext("r1", project_dir / "runs" / "r1", "rl.train", cfg, events=None)
    summary = train(ctx, load(TrainConfig, cfg))
    ctx.close()
    assert 256 <= summary["total_steps"] < 512
    assert summary["started_from"] == cfg["start_from"]
    project = Project.open(project_dir)
    try:
        (model_id,), problems = project.register_run_models("r1", summary)
        links = set(project.lineage(model_id))
    finally:
        project.close()
    assert problems == []
    assert {(parent_id, model_id, "derived"), (HUB_SOURCE, parent_id, "derived")} <= (
        links
    )
    assert "(256 steps trained before)" in capfd.readouterr().err  # the run log


def test_the_models_normalization_statistics_come_along(tmp_path: Path) -> None:
    from engine.rl.policy import VECNORMALIZE_FILE
    from engine.rl.safe_pickle import loads
    from engine.rl.train import Trainer

    model = _save_ppo(tmp_path / "agent", 128, normalize=True)
    cfg = validate({**RUN, "start_from": str(model)})
    assert cfg["vec_normalize"] is True  # the model's, as none was given
    ctx = JobContext("r0", tmp_path / "r0", "rl.train", cfg, events=None)
    trainer = Trainer(ctx, load(TrainConfig, cfg))
    trainer.ensure_built()
    kept = vars(loads((model.parent / VECNORMALIZE_FILE).read_bytes(), "stats"))
    assert np.array_equal(trainer.venv.obs_rms.mean, kept["obs_rms"].mean)
    assert trainer.venv.obs_rms.count == kept["obs_rms"].count
    trainer.venv.close()
    ctx.close()


@pytest.fixture(scope="module")
def recurrent(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sb3_contrib import RecurrentPPO

    folder = tmp_path_factory.mktemp("recurrent")
    model = RecurrentPPO(
        "MlpLstmPolicy",
        "CartPole-v1",
        n_steps=32,
        batch_size=32,
        policy_kwargs={"lstm_hidden_size": 8},
        verbose=0,
    )
    model.save(folder / "model.zip")
    return folder / "model.zip"


def _refusal(config: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        validate({**RUN, "hyperparameters": {}, **config})
    message = str(caught.value)
    assert message.count(". ") == 0 and message.endswith(".")  # one sentence
    return caught.value


def test_each_refusal_is_one_sentence(
    tmp_path: Path, saved: Path, recurrent: Path, hub_project: tuple[Path, str]
) -> None:
    project_dir, _ = hub_project
    unknown = _refusal({"start_from": "m-nosuch", "project_dir": str(project_dir)})
    assert unknown.field == "start_from" and "neither a model file" in str(unknown)
    missing = _refusal({"start_from": str(tmp_path / "gone.zip")})
    assert "does not exist" in str(missing)
    other = _refusal({"start_from": str(saved), "algo": "A2C"})
    assert "trained by PPO, not A2C" in str(other)
    family = _refusal({"start_from": str(saved), "algo": "DQN"})
    assert family.field == "start_from" and "trained by PPO" in str(family)
    spaces = _refusal({"start_from": str(saved), "env": "Acrobot-v1"})
    assert "takes observations" in str(spaces)
    # A bare zip (no state.json beside it) names no env: the run gives it.
    bare = {"start_from": str(recurrent), "env": "CartPole-v1"}
    memory = _refusal({**bare, "algo": "PPO"})
    assert "recurrent policy" in str(memory)
    normalized = _refusal({"start_from": str(saved), "vec_normalize": True})
    assert normalized.field == "vec_normalize"
    jax = _refusal({"start_from": str(saved), "backend": "jax"})
    assert jax.field == "start_from" and "jax backend" in str(jax)
    # A recurrent policy continues where the run is recurrent.
    cfg = validate({**RUN, **bare, "hyperparameters": {}})
    assert cfg["algo"] == "RecurrentPPO"
