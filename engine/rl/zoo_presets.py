"""RL Zoo's published hyperparameters as presets, read as data.

RL Baselines3 Zoo ships its tuned settings in the ``rl_zoo3`` package
(``rl_zoo3/hyperparams/<algo>.yml``, one entry per env id, ``atari`` for
every Atari game). The files are found through the installed distribution's
metadata and read with ``yaml.safe_load``; ``rl_zoo3`` itself is never
imported, so its own dependencies (moviepy, which pins an old Pillow, the
Hub integration, table writers) need not be installed: ``make setup``
installs it with ``--no-deps``, and without it these presets are simply
absent.

:func:`zoo_preset` turns one entry into a preset shaped like the bundled ones
(:mod:`engine.rl.presets`: TrainConfig keys and hyperparameters mixed, and a
``provenance`` naming the file, entry and release, and what could not be
carried over). The bundled presets win where they have an entry; these fill
every other env and algorithm RL Zoo covers (``engine.rl.config``).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Collection
from importlib import metadata
from pathlib import Path
from typing import Any

DISTRIBUTION = "rl_zoo3"
SOURCE = "RL Zoo settings"
"""The provenance ``source`` of these presets (as the bundled RL Zoo ones)."""

ALGO_FILES = {
    "PPO": "ppo",
    "A2C": "a2c",
    "DQN": "dqn",
    "SAC": "sac",
    "TD3": "td3",
    "RecurrentPPO": "ppo_lstm",
    "TQC": "tqc",
    "TRPO": "trpo",
    "QRDQN": "qrdqn",
    "ARS": "ars",
    "CrossQ": "crossq",
}
"""RL Studio's algorithm names -> RL Zoo's hyperparameter file stems."""

ATARI_ENTRY = "atari"
"""RL Zoo's entry for every Atari game."""

_RENAMED = {
    "n_timesteps": "total_steps",
    "normalize": "vec_normalize",
}
"""RL Zoo keys whose setting has another name here."""
_SCHEDULED = ("learning_rate", "clip_range")
"""Keys RL Zoo may give as ``lin_<start>``: a linear decay from the value."""
_ACTIVATIONS = {"Tanh": "tanh", "ReLU": "relu", "ELU": "elu", "LeakyReLU": "leaky_relu"}
_POLICIES = {
    "MlpLstmPolicy": "MlpPolicy",
    "CnnLstmPolicy": "CnnPolicy",
    "MultiInputLstmPolicy": "MultiInputPolicy",
}
"""RecurrentPPO's policy names -> the policy kind (train adds the LSTM)."""
_APPLIED_BY_FAMILY = {
    "env_wrapper": ["stable_baselines3.common.atari_wrappers.AtariWrapper"],
    "frame_stack": 4,
}
"""An Atari entry's preprocessing, which engine.envs.families applies to
every Atari game anyway."""
_VERSION = re.compile(r"^(?P<name>.+)-v(?P<version>\d+)$")


def hyperparams_folder() -> Path | None:
    """RL Zoo's installed ``hyperparams`` folder, None when ``rl_zoo3`` is
    not installed (found without importing it)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    folder = Path(str(dist.locate_file("rl_zoo3/hyperparams")))
    return folder if folder.is_dir() else None


@functools.cache
def zoo_version() -> str | None:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def zoo_entries(algo: str) -> dict[str, dict[str, Any]]:
    """RL Zoo's entries for ``algo`` (env id or ``atari`` -> settings), {}
    when the file or the package is missing."""
    import importlib

    yaml = importlib.import_module("yaml")  # untyped (no stubs): by name
    folder = hyperparams_folder()
    stem = ALGO_FILES.get(algo)
    if folder is None or stem is None or not (folder / f"{stem}.yml").is_file():
        return {}
    data = yaml.safe_load((folder / f"{stem}.yml").read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, dict)}


def zoo_entry_name(env_id: str, algo: str) -> str | None:
    """Which of RL Zoo's entries applies to ``env_id``: its own; ``atari``
    for an Atari game; else the newest other version of the same env
    (RL Zoo tunes MuJoCo's ``HalfCheetah-v4``; Gymnasium 1.x adds v5)."""
    entries = zoo_entries(algo)
    if env_id in entries:
        return env_id
    from engine.envs.families import ATARI, family

    if family(env_id) == ATARI:
        return ATARI_ENTRY if ATARI_ENTRY in entries else None
    match = _VERSION.match(env_id)
    if match is None:
        return None
    versions = [
        (int(m["version"]), key)
        for key in entries
        if (m := _VERSION.match(key)) and m["name"] == match["name"]
    ]
    return max(versions)[1] if versions else None


def zoo_preset(env_id: str, algo: str, known: Collection[str]) -> dict[str, Any] | None:
    """RL Zoo's settings for ``algo`` on ``env_id`` as a preset (None when it
    has none): its keys renamed to the settings ``known`` here, learning-rate
    and clip-range schedules split into value and schedule, its
    ``policy_kwargs`` read into settings, and a ``provenance`` record that
    names the file and entry and lists what could not be carried over."""
    name = zoo_entry_name(env_id, algo)
    if name is None:
        return None
    entry = zoo_entries(algo)[name]
    preset: dict[str, Any] = {}
    left_out: list[str] = []
    for key, value in entry.items():
        if name == ATARI_ENTRY and _APPLIED_BY_FAMILY.get(key) == value:
            continue
        if key == "policy_kwargs":
            left_out += _read_policy_kwargs(value, preset, known)
            continue
        setting = _RENAMED.get(key, key)
        if setting not in known or not _carried(key, value, preset):
            left_out.append(key)
    if preset.get("policy") == "CnnPolicy":
        # RL Zoo leaves the layers after the CNN to SB3, whose CnnPolicy has
        # none (the features go straight to the heads).
        preset.setdefault("net_arch", [])
    file = f"{ALGO_FILES[algo]}.yml"
    detail = f"rl_zoo3 {zoo_version()}'s hyperparams/{file}, entry {name!r}"
    if name not in (env_id, ATARI_ENTRY):
        detail += f" for {env_id}"
    detail += ", not tuned here"
    if left_out:
        detail += f"; not carried over: {', '.join(sorted(set(left_out)))}"
    preset["provenance"] = {"source": SOURCE, "detail": detail}
    return preset


def _carried(key: str, value: Any, preset: dict[str, Any]) -> bool:
    """Put RL Zoo's ``key: value`` into ``preset``; False when its value
    has no equivalent here."""
    if key == "n_timesteps":
        preset["total_steps"] = int(value)
    elif key == "normalize":
        if not isinstance(value, bool):  # a dict or string of VecNormalize options
            return False
        preset["vec_normalize"] = value
    elif key == "policy" and value == "LinearPolicy":  # ARS's: no hidden layer
        preset["policy"] = "MlpPolicy"
        preset.setdefault("net_arch", [])
    elif key == "policy":
        preset["policy"] = _POLICIES.get(str(value), str(value))
    elif key in _SCHEDULED and isinstance(value, str):
        if not value.startswith("lin_"):
            return False
        preset[key] = float(value.removeprefix("lin_"))
        preset[f"{key}_schedule"] = "linear"
    elif isinstance(value, bool | int | float | str | list) or value is None:
        preset[key] = value
    else:
        return False
    return True


def _read_policy_kwargs(
    text: Any, preset: dict[str, Any], known: Collection[str]
) -> list[str]:
    """Read RL Zoo's ``policy_kwargs: "dict(net_arch=[64, 64], ...)"`` into
    ``preset``; the names of the arguments left out."""
    try:
        call = ast.parse(str(text).strip(), mode="eval").body
    except SyntaxError:
        return ["policy_kwargs"]
    if not isinstance(call, ast.Call) or getattr(call.func, "id", "") != "dict":
        return ["policy_kwargs"]
    left_out: list[str] = []
    for keyword in call.keywords:
        name, node = keyword.arg or "", keyword.value
        if name == "activation_fn" and isinstance(node, ast.Attribute):
            if node.attr in _ACTIVATIONS and "activation" in known:
                preset["activation"] = _ACTIVATIONS[node.attr]
                continue
        elif name == "net_arch":
            if _net_arch(node, preset, known):
                continue
        elif name in known:
            try:
                preset[name] = ast.literal_eval(node)
                continue
            except ValueError:
                pass
        left_out.append(f"policy_kwargs.{name}")
    return left_out


def _net_arch(node: ast.expr, preset: dict[str, Any], known: Collection[str]) -> bool:
    """``net_arch=[...]``, or ``dict(pi=[...], vf=[...])`` with equal
    networks, or ``dict(pi=..., qf=...)`` where a critic has its own
    (``critic_net_arch``)."""
    if isinstance(node, ast.List):
        preset["net_arch"] = ast.literal_eval(node)
        return True
    if not isinstance(node, ast.Call) or getattr(node.func, "id", "") != "dict":
        return False
    parts = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    if set(parts) == {"pi", "vf"} and parts["pi"] == parts["vf"]:
        preset["net_arch"] = parts["pi"]
        return True
    if set(parts) == {"pi", "qf"}:
        if parts["pi"] == parts["qf"]:
            preset["net_arch"] = parts["pi"]
            return True
        if "critic_net_arch" in known:
            preset["net_arch"], preset["critic_net_arch"] = parts["pi"], parts["qf"]
            return True
    return False
