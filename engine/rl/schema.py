"""The parameter form of an ``rl.train`` run, generated from the config
dataclasses so the form never drifts from what ``validate`` accepts.

Hyperparameter fields are named ``hyperparameters.<name>``, the same path
``ConfigError`` uses, so an engine error lands on its field in the form.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from engine.rl.config import (
    ACTIVATIONS,
    ALGO_CONFIGS,
    DEFAULT_TOTAL_STEPS,
    SCHEDULES,
    TrainConfig,
    field_docs,
    preset_for,
)

COMMON_ENVS = (
    "CartPole-v1",
    "MountainCar-v0",
    "Acrobot-v1",
    "Pendulum-v1",
    "FrozenLake-v1",
    "Taxi-v3",
    "LunarLander-v3",
)
RUN_FIELDS = (
    "env",
    "algo",
    "total_steps",
    "seed",
    "n_envs",
    "eval_every_steps",
    "eval_episodes",
    "checkpoint_every_steps",
    "keep_checkpoints",
    "target_eval_reward",
    "convergence_patience",
    "device",
    "name",
)
MINIMUMS = {
    "total_steps": 1,
    "n_envs": 1,
    "eval_every_steps": 0,
    "eval_episodes": 1,
    "checkpoint_every_steps": 0,
    "keep_checkpoints": 1,
    "convergence_patience": 1,
    "seed": 0,
}


def _kind(annotation: Any, default: Any) -> tuple[str | None, bool]:
    """Form type for a dataclass field, and whether ``None`` is allowed."""
    text = str(annotation)
    optional = "None" in text
    base = text.replace("| None", "").replace("None |", "").strip()
    if isinstance(default, bool) or base == "bool":
        return "bool", optional
    if base == "int":
        return "int", optional
    if base == "float" or base == "int | float":
        return "float", optional
    if base == "str":
        return "str", optional
    if typing.get_origin(annotation) is None and isinstance(default, int | float):
        return ("float" if isinstance(default, float) else "int"), optional
    return None, optional  # lists, dicts: not editable in a form


def _field(
    name: str, kind: str, default: Any, doc: str, optional: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "type": kind, "default": default, "help": doc}
    if optional:
        out["optional"] = True
    return out


def schema(values: dict[str, Any]) -> list[dict[str, Any]]:
    env = str(values.get("env") or "CartPole-v1")
    algo = str(values.get("algo") or "auto")
    hp_algo = algo if algo in ALGO_CONFIGS else "PPO"
    preset = preset_for(env, hp_algo)
    docs = field_docs(TrainConfig)
    fields: list[dict[str, Any]] = []
    for f in dataclasses.fields(TrainConfig):
        if f.name not in RUN_FIELDS:
            continue
        default = preset.get(f.name, f.default)
        if default is dataclasses.MISSING:
            default = None
        doc = docs.get(f.name, "")
        if f.name == "env":
            item = _field("env", "str", env, doc, False)
            item["suggestions"] = list(COMMON_ENVS)
        elif f.name == "algo":
            item = _field("algo", "choice", algo, doc, False)
            item["choices"] = ["auto", *ALGO_CONFIGS]
        elif f.name == "device":
            item = _field("device", "choice", default, doc, False)
            item["choices"] = ["auto", "cpu", "cuda", "mps"]
        else:
            kind, optional = _kind(f.type, default)
            if kind is None:
                continue
            if f.name == "total_steps" and default is None:
                default = DEFAULT_TOTAL_STEPS
            item = _field(f.name, kind, default, doc, optional)
            if f.name in MINIMUMS:
                item["min"] = MINIMUMS[f.name]
        item["group"] = "Run"
        fields.append(item)
    cls = ALGO_CONFIGS[hp_algo]
    hp_docs = field_docs(cls)
    for f in dataclasses.fields(cls):
        default = (
            f.default_factory()
            if f.default_factory is not dataclasses.MISSING
            else f.default
        )
        default = preset.get(f.name, default)
        kind, optional = _kind(f.type, default)
        if kind is None or isinstance(default, list | dict | tuple):
            continue
        item = _field(
            f"hyperparameters.{f.name}",
            kind,
            default,
            hp_docs.get(f.name, ""),
            optional,
        )
        item["title"] = f.name
        item["group"] = f"{hp_algo} hyperparameters"
        if kind == "str" and default in ACTIVATIONS:
            item.update(type="choice", choices=list(ACTIVATIONS))
        elif kind == "str" and default in SCHEDULES:
            item.update(type="choice", choices=list(SCHEDULES))
        fields.append(item)
    return fields
