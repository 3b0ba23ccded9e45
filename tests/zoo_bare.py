"""RL Zoo's training as a bare stable-baselines3 script: what the studio's
``train`` is compared with, for speed (tests/benchmarks/test_bench_zoo.py)
and for sameness (tests/test_zoo_same_training.py). The script builds the
envs as RL Zoo does (``make_vec_env``; for Atari ``make_atari_env``, whose
``AtariWrapper`` is the studio's, then ``VecFrameStack(4)``) and takes the
studio's validated settings as JSON (:func:`bare_config`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from engine.envs.families import ATARI, family
from engine.rl.config import TrainConfig, validate
from engine.rl.train import ON_POLICY_ARGS, resolve_device
from engine.settings import load

FIXED = {"eval_every_steps": 0, "checkpoint_every_steps": 0}
"""The bare script neither evaluates nor checkpoints on the way."""

BARE = """
import json, sys
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_atari_env, make_vec_env
from stable_baselines3.common.vec_env import VecFrameStack

cfg = json.loads(sys.argv[1])
torch.set_num_threads(cfg["torch_threads"])
if cfg["atari"]:  # as RL Zoo builds them: AtariWrapper, then a stack of 4
    import ale_py, gymnasium as gym
    gym.register_envs(ale_py)
    env = make_atari_env(cfg["env"], n_envs=cfg["n_envs"], seed=cfg["seed"])
    env = VecFrameStack(env, 4)
else:
    env = make_vec_env(cfg["env"], n_envs=cfg["n_envs"], seed=cfg["seed"])
kw = cfg["kwargs"]
for key in ("learning_rate", "clip_range"):
    if isinstance(kw[key], dict):  # RL Zoo's lin_<value>
        kw[key] = lambda progress, v=kw[key]["linear"]: progress * v
kw["policy_kwargs"]["activation_fn"] = {"tanh": torch.nn.Tanh, "relu": torch.nn.ReLU}[
    kw["policy_kwargs"].pop("activation")
]
model = PPO(cfg["policy"], env, seed=cfg["seed"], device=cfg["device"], verbose=0, **kw)
model.learn(cfg["steps"])
model.save(cfg["out"])
print(model.num_timesteps)
"""


def studio_settings(
    env_id: str, steps: int, seed: int = 0, **hyperparameters: Any
) -> dict[str, Any]:
    """The studio's validated PPO settings (the env's bundled preset, with
    ``hyperparameters`` over it), neither evaluating nor checkpointing."""
    return validate(
        {
            "env": env_id,
            "algo": "PPO",
            "seed": seed,
            "total_steps": steps,
            "hyperparameters": hyperparameters,
            **FIXED,
        }
    )


def studio_command(
    cfg: dict[str, Any], project: Path, **hyperparameters: Any
) -> list[str]:
    """``rl-studio-engine train`` with ``cfg``'s env, steps, seed, envs, torch
    threads and :data:`FIXED`, and ``hyperparameters`` over the preset."""
    sets = {
        **hyperparameters,
        **{key: cfg[key] for key in ("n_envs", "torch_threads", *FIXED)},
    }
    return [
        sys.executable, "-m", "engine", "train", "--env", cfg["env"],
        "--algo", "PPO", "--steps", str(cfg["total_steps"]),
        "--seed", str(cfg["seed"]), "--quiet", "--project", str(project),
        *(item for key, value in sets.items() for item in ("--set", f"{key}={value}")),
    ]  # fmt: skip


def bare_config(cfg: dict[str, Any], out: Path) -> dict[str, Any]:
    """The studio's settings as the bare script takes them (JSON)."""
    hp = cfg["hyperparameters"]

    def scheduled(key: str) -> Any:
        value = hp[key]
        return {"linear": value} if hp[f"{key}_schedule"] == "linear" else value

    kwargs = {name: hp[name] for name in ON_POLICY_ARGS.split()}
    kwargs.update(
        learning_rate=scheduled("learning_rate"),
        clip_range=scheduled("clip_range"),
        batch_size=hp["batch_size"],
        n_epochs=hp["n_epochs"],
        gamma=hp["gamma"],
        target_kl=hp["target_kl"],
        use_sde=hp["use_sde"],
        sde_sample_freq=hp["sde_sample_freq"],
        policy_kwargs={
            "net_arch": hp["net_arch"],
            "activation": hp["activation"],
            "ortho_init": hp["ortho_init"],
        },
    )
    return {
        "env": cfg["env"],
        "atari": family(cfg["env"]) == ATARI,
        "n_envs": cfg["n_envs"],
        "seed": cfg["seed"],
        "torch_threads": cfg["torch_threads"],
        "device": resolve_device(load(TrainConfig, cfg)),
        "policy": cfg["policy"],
        "steps": cfg["total_steps"],
        "kwargs": kwargs,
        "out": str(out),
    }
