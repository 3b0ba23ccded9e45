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
from engine.rl import hardware_profiles
from engine.rl.config import (
    ALGO_CONFIGS,
    DEFAULT_TOTAL_STEPS,
    TrainConfig,
    check_profile_settings,
    default_n_envs,
    default_torch_threads,
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
        elif info.name == "hardware_profile":
            saved = hardware_profiles.load_saved()
            previews = profile_previews(hp_algo, preset, saved)
            item["type"] = "choice"
            item["choices"] = list(previews)
            # What each profile sets, for the form to show the chosen one's.
            item["profiles"] = previews
            if saved.problems:
                item["note"] = " ".join(saved.problems)
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


def profile_previews(
    algo: str,
    preset: dict[str, Any],
    saved: hardware_profiles.SavedProfiles | None = None,
) -> dict[str, dict[str, Any]]:
    """Each hardware profile (built-in, then saved) by name: its
    ``description``, why it cannot be used here (``problem``, '' when it
    can) and ``settings``, the rows ``{"name", "value", "source"}`` of what
    a run of ``algo`` with ``preset`` gets from it: the profile's value, the
    preset's or the hardware's. The rows for language models (``llm_*``)
    are what :func:`engine.hardware.recommend` derives for the profile's
    device. Cheap after the first call: hardware detection is cached."""
    from engine.hardware import detect, recommend

    saved = hardware_profiles.load_saved() if saved is None else saved
    info = detect()
    gpu = max(info.gpus, key=lambda g: g.memory_total_bytes, default=None)
    backend = gpu.backend if gpu is not None else None
    if gpu is None:
        auto_device = "auto (cpu: no GPU detected)"
    else:
        auto_device = f"auto ({gpu.backend} for image policies, cpu for MLP)"
    n_envs = (
        (preset["n_envs"], "preset")
        if preset.get("n_envs") is not None
        else (default_n_envs(algo), "hardware")
    )
    derived = {
        "device": (auto_device, "hardware"),
        "torch_threads": (default_torch_threads(), "hardware"),
        "n_envs": n_envs,
        "backend": ("auto", "default"),
    }
    out: dict[str, dict[str, Any]] = {}
    for name, profile in hardware_profiles.all_profiles(saved, backend).items():
        fixed = profile.settings
        device = str(fixed.get("device", "auto"))
        rows = [
            {"name": key, "value": fixed[key], "source": "profile"}
            if key in fixed
            else {"name": key, "value": value, "source": source}
            for key, (value, source) in derived.items()
        ]
        on_gpu = gpu is not None and device != "cpu"
        llm = recommend(
            info.gpus if on_gpu else [],
            info.cpu_physical_cores,
            info.cpu_logical_cores,
            info.cpu_bf16,
        )
        rows += [
            {"name": key, "value": value, "source": "hardware"}
            for key, value in (
                ("llm_precision", llm.dtype),
                ("llm_batch_size", llm.batch_size),
                ("llm_lora_rank", llm.lora_rank),
            )
        ]
        description = profile.description
        if name == "gpu" and gpu is not None:
            description = f"{description} ({gpu.name})"
        problem = hardware_profiles.gpu_problem(backend) if name == "gpu" else ""
        if not profile.builtin:
            try:
                check_profile_settings(name, fixed)
            except ConfigError as exc:
                problem = str(exc)
        out[name] = {"description": description, "problem": problem, "settings": rows}
    return out


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
