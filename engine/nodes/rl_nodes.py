"""Reinforcement-learning nodes: train a stable-baselines3 agent, evaluate a
policy.

The ``policy`` value that travels along links::

    {"file": ".../runs/<flow-run>/nodes/train/checkpoints/step-.../model.zip",
     "extra_files": [".../vecnormalize.pkl"], "algo": "PPO", "name": "PPO CartPole-v1",
     "env": {<the env reference it was trained on>}, "vec_normalize": false,
     "total_steps": 20000, "seed": 0, "metrics": {...}, "run_dir": "..."}

The ``report`` of Evaluate::

    {"env": "CartPole-v1", "episodes": 10, "deterministic": true,
     "mean_reward": 212.4, "std_reward": 31.0, "min_reward": ..., "max_reward": ...,
     "mean_length": 212.4, "success_rate": null, "rewards": [...]}

``success_rate`` is the fraction of episodes whose last ``info`` says
``is_success`` (designed workflow envs do); ``null`` when the env never
reports it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.flow import ParamSpec, PortSpec
from engine.jobs.context import STOP_REASONS
from engine.nodes.base import (
    NodeError,
    NodeResult,
    NodeRun,
    json_object_check,
    parse_json_object,
)
from engine.nodes.registry import node_type
from engine.rl.config import ALGO_CONFIGS, SEED_MAX, TrainConfig
from engine.settings import (
    FieldInfo,
    as_dict,
    fields_of,
    load,
    param_spec,
    param_specs,
    parse_list_text,
    setting,
)

HP_GROUP = "Hyperparameters"


@dataclass(frozen=True)
class EvaluateConfig:
    """The parameters of the Evaluate node: how a policy is played."""

    episodes: int = setting(10, min=1, max=100_000, unit="episodes")
    """Episodes to play."""
    deterministic: bool = True
    """Take the most likely action instead of sampling."""
    seed: int = setting(0, min=0, max=SEED_MAX)
    """Seed of the evaluation environment."""
    max_episode_steps: int = setting(0, min=0, unit="steps")
    """End an episode after this many steps; 0: the env's own limit."""


RUN_PARAMS = tuple(
    name
    for name, info in fields_of(TrainConfig).items()
    if info.form and info.structure is None and name != "env"
)
"""The run settings the Train node has a parameter for (the run dialog's
flat ones; a curriculum goes in its settings JSON)."""
# Settings the Train node sets from its own parameters or inputs; the
# "settings" JSON may carry any other rl.train setting.
_OWN_SETTINGS = (
    *RUN_PARAMS,
    "env",
    "env_kwargs",
    "hyperparameters",
    "project_dir",
    "notes",
)


def _hyperparameter_fields() -> dict[str, list[FieldInfo]]:
    """Every algorithm's hyperparameters by name (first declaration first)."""
    out: dict[str, list[FieldInfo]] = {}
    for cls in ALGO_CONFIGS.values():
        for name, info in fields_of(cls).items():
            out.setdefault(name, []).append(info)
    return out


HYPERPARAMETERS = _hyperparameter_fields()


def _hyperparameter_param(infos: list[FieldInfo]) -> ParamSpec:
    """One parameter for a hyperparameter of one or more algorithms: empty
    (None) leaves it to the preset or the algorithm's default. Typed as the
    dataclasses declare it; as text where they disagree (``ent_coef``: a
    number for PPO, ``auto`` or a number for SAC) or for a list of widths."""
    first = infos[0]
    same = all(
        (i.kind, i.min, i.max, i.exclusive_min, i.exclusive_max, i.choices)
        == (
            first.kind,
            first.min,
            first.max,
            first.exclusive_min,
            first.exclusive_max,
            first.choices,
        )
        for i in infos
    )
    if same and first.kind != "list[int]":
        return param_spec(first, default=None, optional=True, group=HP_GROUP)
    return ParamSpec(
        first.name,
        "str",
        None,
        help=first.help,
        label=first.label,
        optional=True,
        group=HP_GROUP,
    )


def _hyperparameter_value(name: str, value: Any) -> Any:
    """A text-typed hyperparameter parameter as the job takes it."""
    if not isinstance(value, str):
        return value
    if any(i.kind == "list[int]" for i in HYPERPARAMETERS[name]):
        return parse_list_text(value, f"hyperparameters.{name}")
    try:
        return float(value)
    except ValueError:
        return value


def train_config(node: NodeRun) -> dict[str, Any]:
    """The ``rl.train`` config for this node (not yet validated): the
    parameters the user changed from the job's defaults, so the engine keeps
    choosing the rest (presets, rollout sizes fitted to the budget)."""
    p = node.params
    env = node.input("env")
    settings = parse_json_object(p["settings"], "settings")
    for key in settings:
        if key in _OWN_SETTINGS:
            raise NodeError(
                f"settings must not set {key!r}; it has its own parameter or input."
            )
    infos = fields_of(TrainConfig)
    run = {k: p[k] for k in RUN_PARAMS if p[k] != infos[k].default}
    hyper = {
        k: _hyperparameter_value(k, p[k])
        for k in HYPERPARAMETERS
        if p.get(k) not in (None, "")
    }
    return {
        **settings,
        **run,
        "env": env["id"],
        "env_kwargs": dict(env.get("kwargs", {})),
        "hyperparameters": hyper,
        "project_dir": str(node.project_dir),
    }


@node_type(
    "rl.train",
    title="Train (SB3)",
    category="Reinforcement learning",
    inputs=(PortSpec("env", "env", help="The environment to train on."),),
    outputs=(PortSpec("policy", "policy", help="The trained policy (model.zip)."),),
    params=(
        *(param_spec(fields_of(TrainConfig)[name]) for name in RUN_PARAMS),
        *(_hyperparameter_param(infos) for infos in HYPERPARAMETERS.values()),
        ParamSpec(
            "settings",
            "str",
            "{}",
            help='Other training settings as a JSON object, e.g. {"vec_normalize": '
            'true, "convergence_window": 3}.',
            label="Settings (JSON)",
        ),
    ),
    check=json_object_check("settings"),
    version=2,
)
def train(node: NodeRun) -> NodeResult:
    """Train a stable-baselines3 or sb3-contrib agent (PPO, A2C, DQN, SAC,
    TD3, MaskablePPO, RecurrentPPO, TQC, TRPO, QRDQN, ARS, CrossQ) on the
    linked environment; live curves go to the flow run's metrics."""
    from engine.rl.config import check
    from engine.rl.train import train as run_training

    env = node.input("env")
    cfg = check(train_config(node))
    ctx = node.job_context("rl.train", as_dict(cfg))
    try:
        summary = run_training(ctx, cfg)
    finally:
        ctx.close()
    models = summary.get("models") or []
    if not models:
        raise NodeError("Training ended without a model.")
    model = models[0]
    policy = {
        "file": model["file"],
        "extra_files": list(model.get("extra_files", [])),
        "algo": summary.get("algo", cfg.algo),
        "name": model.get("name", ""),
        "env": env,
        "vec_normalize": bool(cfg.vec_normalize),
        "total_steps": summary.get("total_steps"),
        "seed": cfg.seed,
        "metrics": dict(model.get("metrics", {})),
        "run_dir": str(node.work_dir),
    }
    return NodeResult(
        outputs={"policy": policy},
        summary={
            k: summary.get(k)
            for k in (
                "total_steps",
                "best_eval_reward",
                "last_eval_reward",
                "stopped_by",
            )
        },
        files=[policy["file"], *policy["extra_files"]],
        stopped=summary.get("stopped_by") in STOP_REASONS,
    )


@node_type(
    "rl.evaluate",
    title="Evaluate policy",
    category="Reinforcement learning",
    inputs=(
        PortSpec("policy", "policy", help="The policy to evaluate."),
        PortSpec(
            "env",
            "env",
            required=False,
            help="Evaluate on this environment instead of the training one.",
        ),
    ),
    outputs=(
        PortSpec(
            "report", "report", help="Mean reward, success rate, episode lengths."
        ),
    ),
    params=param_specs(EvaluateConfig, fields_of(EvaluateConfig)),
)
def evaluate(node: NodeRun) -> NodeResult:
    """Play the policy for a number of episodes and report mean reward and
    success rate."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.monitor import Monitor
    from stable_baselines3.common.vec_env import DummyVecEnv

    from engine.envs.families import wrap
    from engine.rl.env_info import register_designed_envs
    from engine.rl.policy import evaluate as play
    from engine.rl.policy import load_policy

    policy = node.input("policy")
    env_ref = node.inputs.get("env") or policy["env"]
    p = load(EvaluateConfig, node.params)
    episodes = p.episodes
    register_designed_envs(node.project_dir)
    env_id, kwargs = env_ref["id"], dict(env_ref.get("kwargs", {}))
    max_steps = p.max_episode_steps

    def make() -> Any:
        env = gym.make(env_id, **kwargs)
        if max_steps:
            env = gym.wrappers.TimeLimit(env, max_episode_steps=max_steps)
        # Monitor counts the game's own episodes and rewards; above it, the
        # observations the policy was trained on (an Atari game's frames).
        return wrap(Monitor(env), training=False)

    model = load_policy(policy["file"], project_dir=node.project_dir)
    if model.notice:
        node.log(model.notice)
    venv: Any = DummyVecEnv([make])
    model.check_env(venv, repr(env_id))

    def on_episode(index: int, reward: float, _length: int) -> None:
        node.metrics(index + 1, {"eval/episode_reward": reward})
        node.progress(index + 1, episodes, "playing", "episodes")

    venv.seed(p.seed)
    node.progress(0, episodes, "playing", "episodes")
    try:
        result = play(
            model,
            venv,
            episodes=episodes,
            deterministic=p.deterministic,
            masked=model.masked,
            should_stop=lambda: node.should_stop,
            on_episode=on_episode,
        )
    finally:
        venv.close()
    if result.stopped:
        return NodeResult(outputs={}, stopped=True)
    rewards, lengths, successes = result.rewards, result.lengths, result.successes
    arr = np.asarray(rewards, dtype=float)
    report = {
        "env": env_id,
        "policy_file": policy["file"],
        "episodes": episodes,
        "deterministic": p.deterministic,
        "mean_reward": _finite(arr.mean()),
        "std_reward": _finite(arr.std()),
        "min_reward": _finite(arr.min()),
        "max_reward": _finite(arr.max()),
        "mean_length": _finite(float(np.mean(lengths))),
        "success_rate": (sum(successes) / len(successes)) if successes else None,
        "rewards": [_finite(r) for r in rewards],
    }
    return NodeResult(
        outputs={"report": report},
        summary={
            "mean_reward": report["mean_reward"],
            "std_reward": report["std_reward"],
            "success_rate": report["success_rate"],
        },
    )


def _finite(value: Any) -> float | None:
    v = float(value)
    return round(v, 6) if math.isfinite(v) else None
