"""What validation learns of an environment by building it once: its action
and observation kinds and whether it masks actions (:func:`inspect_env`), and
the designed envs of a project registered first (:func:`register_designed_envs`).
An unknown id is refused in one sentence naming the closest known ones.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, quoted


@dataclass(frozen=True)
class EnvInfo:
    """What validation learns by building the environment once."""

    env_id: str
    action_kind: str
    """``discrete`` (Discrete, MultiDiscrete, MultiBinary), ``continuous``
    (Box) or ``other``."""
    action_space: str
    observation_kind: str
    """``dict``, ``image`` or ``vector``."""
    has_action_masks: bool


def register_designed_envs(project_dir: str | os.PathLike[str] | None) -> None:
    """Register the project's designed envs (``rlstudio/<name>-v0``) with
    Gymnasium when the ``engine.envs`` package provides them, and the env
    families' (ale-py's Atari games), as every job process must."""
    from engine.envs.families import load_families

    load_families()
    if project_dir is None:
        return
    try:
        spec = importlib.util.find_spec("engine.envs")
    except (ImportError, ValueError):
        return
    if spec is None:
        return
    module = importlib.import_module("engine.envs")
    register = getattr(module, "register_project_envs", None)
    if callable(register):
        try:
            register(Path(project_dir))
        except OSError as exc:  # a name too long, a file in the way
            raise ConfigError(
                "project_dir",
                f"The project folder {quoted(str(project_dir))} cannot be read "
                f"({exc.strerror or exc}).",
            ) from None


def unknown_env_message(env_id: str, known: list[str]) -> str:
    close = difflib.get_close_matches(env_id, known, n=3, cutoff=0.6)
    if not close:
        lowered = {k.lower(): k for k in known}
        close = [
            lowered[m]
            for m in difflib.get_close_matches(
                env_id.lower(), list(lowered), n=3, cutoff=0.5
            )
        ]
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
    return f"Unknown environment {quoted(env_id)}{hint}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0].rstrip(".")


def inspect_env(env_id: str, env_kwargs: dict[str, Any]) -> EnvInfo:
    """Build the environment once to learn its spaces; ConfigError on failure."""
    import gymnasium as gym
    from gymnasium import error as gym_error
    from gymnasium import spaces

    from engine.envs.families import EnvFamilyError, check_loads, load_families

    load_families()  # the Atari games, registered by ale-py
    if env_id not in gym.registry:
        raise ConfigError("env", unknown_env_message(env_id, sorted(gym.registry)))
    try:
        check_loads(env_id)
    except EnvFamilyError as exc:
        raise ConfigError("env", str(exc)) from None
    try:
        env = gym.make(env_id, **env_kwargs)
    except gym_error.DependencyNotInstalled as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        first = first.rstrip(".") + "." if first else "see the log."
        raise ConfigError(
            "env",
            f"Environment {quoted(env_id)} needs a package that is not "
            f"installed: {first}",
        ) from exc
    except (ImportError, OSError) as exc:  # a simulator's module or library
        raise ConfigError(
            "env",
            f"Environment {quoted(env_id)} cannot be made: its simulator failed "
            f"to load ({type(exc).__name__}: {_first_line(exc)}).",
        ) from exc
    except TypeError as exc:
        raise ConfigError(
            "env_kwargs",
            f"Environment {quoted(env_id)} does not accept these arguments: {exc}.",
        ) from exc
    except gym_error.Error as exc:
        raise ConfigError(
            "env", f"Environment {quoted(env_id)} cannot be made: {exc}."
        ) from exc
    try:
        act = env.action_space
        obs = env.observation_space
        if isinstance(act, spaces.Discrete | spaces.MultiDiscrete | spaces.MultiBinary):
            action_kind = "discrete"
        elif isinstance(act, spaces.Box):
            action_kind = "continuous"
        else:
            action_kind = "other"
        if isinstance(obs, spaces.Dict):
            observation_kind = "dict"
        elif (
            isinstance(obs, spaces.Box)
            and len(obs.shape) == 3
            and obs.dtype.name == "uint8"
        ):
            observation_kind = "image"
        else:
            observation_kind = "vector"
        try:
            has_masks = callable(env.get_wrapper_attr("action_masks"))
        except AttributeError:
            has_masks = False
        return EnvInfo(
            env_id=env_id,
            action_kind=action_kind,
            action_space=type(act).__name__,
            observation_kind=observation_kind,
            has_action_masks=has_masks,
        )
    finally:
        env.close()
