"""The parameter form of an ``rl.train`` run, generated from the config
dataclasses (:mod:`engine.settings` reads their metadata) so the form never
drifts from what ``validate`` accepts.

Hyperparameter fields are named ``hyperparameters.<name>``, the same path
``ConfigError`` uses, so an engine error lands on its field in the form.
Defaults are the environment's preset where it has one (or the project
preset the ``preset`` field names, which the field offers); a client sends only
the fields the user changed, so the engine keeps fitting the rest (rollout
sizes to the step budget and the hardware).

A designed env with difficulty settings (a workflow or grid env of the
project) gets a ``curriculum`` field: an ``object`` field
(:func:`engine.settings.structure_form_field`) whose stage table has a
column per difficulty setting of the env's kind; other envs get none.
"""

from __future__ import annotations

from typing import Any

from engine.envs.curriculum import DIFFICULTY
from engine.errors import ConfigError, EngineError
from engine.rl.config import (
    ALGO_CONFIGS,
    DEFAULT_TOTAL_STEPS,
    TrainConfig,
    load_preset,
    preset_for,
    preset_names,
    preset_provenance,
)
from engine.settings import fields_of, form_field, form_type, structure_form_field

COMMON_ENVS = (
    "CartPole-v1",
    "MountainCar-v0",
    "Acrobot-v1",
    "Pendulum-v1",
    "FrozenLake-v1",
    "Taxi-v4",  # Gymnasium 1.x; Taxi-v3 is gone
    "LunarLander-v3",
)
HP_PREFIX = "hyperparameters."


def schema(values: dict[str, Any]) -> list[dict[str, Any]]:
    env = str(values.get("env") or "CartPole-v1")
    algo = str(values.get("algo") or "auto")
    hp_algo = algo if algo in ALGO_CONFIGS else "PPO"
    preset = preset_for(env, hp_algo)
    project_dir = values.get("project_dir")
    chosen = ""  # the project preset in use ('' = the built-in one)
    if values.get("preset") and project_dir:
        try:
            record = load_preset(project_dir, str(values["preset"]))
        except ConfigError:
            record = None  # the validator says why when the run is started
        if record is not None and (record["env"], record["algo"]) == (env, hp_algo):
            preset = dict(record["settings"])
            chosen = str(values["preset"])
    fields: list[dict[str, Any]] = []
    difficulty = difficulty_kind(env, project_dir)
    for info in fields_of(TrainConfig).values():
        if info.name == "curriculum" and difficulty is not None:
            stages = {"stages": DIFFICULTY[difficulty]}
            fields.append(structure_form_field(info, rows=stages))
            continue
        if not info.form or form_type(info) is None:
            continue
        default = preset.get(info.name, info.default)
        if info.name == "env":
            default = env
        elif info.name == "algo":
            default = algo
        elif info.name == "total_steps" and default is None:
            default = DEFAULT_TOTAL_STEPS
        item = form_field(info, default=default)
        if info.name == "env":
            item["suggestions"] = list(COMMON_ENVS)
        elif info.name == "preset":
            item["suggestions"] = ["", *preset_names(project_dir)]
            # Where the defaults below come from, shown under the field.
            item["note"] = preset_provenance(env, hp_algo, project_dir, chosen)
        fields.append(item)
    for info in fields_of(ALGO_CONFIGS[hp_algo]).values():
        if not info.form or form_type(info) is None:
            continue
        fields.append(
            form_field(
                info,
                name=HP_PREFIX + info.name,
                default=preset.get(info.name, info.default),
                group=f"{hp_algo} hyperparameters",
            )
        )
    return fields


def difficulty_kind(env: str, project_dir: Any) -> str | None:
    """The kind of the designed env ``env`` (in the project) when that kind
    has difficulty settings (a curriculum applies), else None."""
    from engine.envs.spec import designed_spec_file, read_spec_json

    try:
        path = designed_spec_file(env, project_dir)
        kind = read_spec_json(path).get("kind") if path is not None else None
    except EngineError:
        return None  # the validator says why when the run is started
    return kind if isinstance(kind, str) and kind in DIFFICULTY else None
