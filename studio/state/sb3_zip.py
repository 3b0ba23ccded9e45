"""What a stable-baselines3 ``.zip`` says about its policy, read without torch.

An SB3 save is a zip whose ``data`` entry is JSON: hyperparameters, the
number of timesteps trained, and the spaces (their pickles plus readable
fields such as ``_shape``, ``n``, ``dtype``). The algorithm itself is not
stored, so it is inferred from the hyperparameters present and the policy
class. Only ``zipfile`` and ``json`` are used: the GUI never imports torch.
"""

from __future__ import annotations

import json
import re
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Hyperparameters shown in the details panel when the zip holds them.
SHOWN_HYPERPARAMETERS = (
    "learning_rate",
    "gamma",
    "n_steps",
    "batch_size",
    "n_epochs",
    "gae_lambda",
    "ent_coef",
    "buffer_size",
    "learning_starts",
    "train_freq",
    "tau",
    "exploration_final_eps",
)


@dataclass
class Sb3Info:
    """The readable facts of an SB3 zip."""

    algo: str = ""
    """Inferred algorithm (``PPO``, ``DQN``, ...); empty when unsure."""
    policy_class: str = ""
    num_timesteps: int = 0
    """Environment steps the policy was trained for."""
    observation_space: str = ""
    action_space: str = ""
    sb3_version: str = ""
    n_envs: int = 0
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    system_info: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Sb3ZipError(ValueError):
    """The file is not a readable SB3 zip; the message is one sentence."""


def _space_text(space: Any) -> str:
    if not isinstance(space, dict):
        return ""
    kind = str(space.get(":type:", ""))
    match = re.search(r"\.(\w+)'>", kind)
    name = match.group(1) if match else kind
    if name == "Discrete":
        return f"Discrete({space.get('n', '?')})"
    if name == "MultiDiscrete":
        return f"MultiDiscrete({space.get('nvec', '?')})"
    shape = space.get("_shape")
    dtype = space.get("dtype", "")
    if isinstance(shape, list):
        dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
        return f"{name}(({dims}), {dtype})"
    return name


def _policy_class(data: dict[str, Any]) -> str:
    policy = data.get("policy_class")
    if not isinstance(policy, dict):
        return ""
    init = str(policy.get("__init__", ""))
    match = re.search(r"function (\w+)\.__init__", init)
    return match.group(1) if match else ""


def infer_algo(data: dict[str, Any], policy_class: str = "") -> str:
    """The algorithm that saved ``data`` (from its hyperparameters)."""
    module = str((data.get("policy_class") or {}).get("__module__", ""))
    if "Maskable" in policy_class or "maskable" in module:
        return "MaskablePPO"
    if "Recurrent" in policy_class:
        return "RecurrentPPO"
    # sb3-contrib's own policy modules, then what only one algorithm saves
    for name, algo in (("tqc", "TQC"), ("crossq", "CrossQ"), ("ars", "ARS")):
        if f"sb3_contrib.{name}." in module:
            return algo
    if "n_delta" in data:
        return "ARS"
    if "cg_max_steps" in data:
        return "TRPO"
    if "clip_range" in data and "n_steps" in data:
        return "PPO"
    if "n_steps" in data and "gae_lambda" in data:
        return "A2C"
    if "exploration_final_eps" in data or "target_update_interval" in data:
        return "QRDQN" if "QRDQN" in policy_class else "DQN"
    if "target_policy_noise" in data:
        return "TD3"
    if "target_entropy" in data or "ent_coef" in data:
        return "SAC"
    return ""


def _scalar(value: Any) -> Any:
    """A hyperparameter as a readable value (schedules and pickles as text)."""
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if isinstance(value, list) and len(value) <= 4:
        return value
    if isinstance(value, dict):
        if "value_schedule" in value:  # SB3 writes the schedule it wraps
            return str(value["value_schedule"])[:80]
        if ":type:" in value:
            # "<class 'stable_baselines3.common.utils.LinearSchedule'>" and
            # its fields: written as SB3 writes a wrapped schedule.
            name = str(value[":type:"]).rsplit(".", 1)[-1].rstrip("'>")
            fields = ", ".join(
                f"{k}={v}" for k, v in value.items() if not str(k).startswith(":")
            )
            return f"{name}({fields})"[:80]
    return str(value)[:80]


def read_sb3_zip(path: str | Path) -> Sb3Info:
    """Read an SB3 zip's ``data`` entry; :class:`Sb3ZipError` if unreadable."""
    path = Path(path)
    try:
        with zipfile.ZipFile(path) as zf:
            names = set(zf.namelist())
            if "data" not in names:
                raise Sb3ZipError(f"{path.name} has no 'data' entry; not an SB3 save.")
            data = json.loads(zf.read("data").decode("utf-8"))
            version = ""
            if "_stable_baselines3_version" in names:
                version = zf.read("_stable_baselines3_version").decode().strip()
            system_info = ""
            if "system_info.txt" in names:
                system_info = zf.read("system_info.txt").decode("utf-8", "replace")
    except Sb3ZipError:
        raise
    except FileNotFoundError:
        raise Sb3ZipError(f"The policy file {path} does not exist.") from None
    except (zipfile.BadZipFile, OSError):
        raise Sb3ZipError(f"{path.name} is not a readable zip file.") from None
    except (ValueError, UnicodeDecodeError):
        raise Sb3ZipError(f"The 'data' entry of {path.name} is not JSON.") from None
    if not isinstance(data, dict):
        raise Sb3ZipError(f"The 'data' entry of {path.name} is not a JSON object.")
    policy = _policy_class(data)
    return Sb3Info(
        algo=infer_algo(data, policy),
        policy_class=policy,
        num_timesteps=int(data.get("num_timesteps") or 0),
        observation_space=_space_text(data.get("observation_space")),
        action_space=_space_text(data.get("action_space")),
        sb3_version=version,
        n_envs=int(data.get("n_envs") or 0),
        hyperparameters={
            k: _scalar(data[k]) for k in SHOWN_HYPERPARAMETERS if k in data
        },
        system_info=system_info,
    )
