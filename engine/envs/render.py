"""Frames of an env: ``rgb_array`` renders, headless, and one sentence when an
env cannot draw them.

Gymnasium's classic-control and toy-text envs draw with pygame (the
``gymnasium[classic-control,toy-text]`` dependency); SDL is pointed at its
dummy video and audio drivers so no display, X server or sound card is
needed (:data:`HEADLESS`). Where frames cannot be had (no ``rgb_array``
render mode, a missing renderer, a render that is no image) the run goes on
without them and :func:`cannot_draw` says why, for the run's log and the
studio's frame viewer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

HEADLESS = {
    "SDL_VIDEODRIVER": "dummy",
    "SDL_AUDIODRIVER": "dummy",
    "PYGAME_HIDE_SUPPORT_PROMPT": "1",
}
"""Environment variables that let pygame draw without a display; a value the
user set wins."""

RGB_ARRAY = "rgb_array"


def headless() -> None:
    """Set :data:`HEADLESS` in this process (before pygame is imported)."""
    for key, value in HEADLESS.items():
        os.environ.setdefault(key, value)


def cannot_draw(env_id: str, why: str) -> str:
    """The one sentence: ``CartPole-v1 cannot draw frames: pygame is not
    installed (pip install "gymnasium[classic-control]").``"""
    return f"{env_id} cannot draw frames: {why.rstrip('.')}."


def render_failure(exc: BaseException) -> str:
    """Why a ``render()`` call failed, as the end of :func:`cannot_draw`'s
    sentence (a missing pygame named with the command that installs it)."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    missing = getattr(exc, "name", None) or getattr(exc.__cause__, "name", None)
    if "pygame" in text.lower() or missing == "pygame":
        return 'pygame is not installed (pip install "gymnasium[classic-control]")'
    return (
        f"its render failed ({type(exc).__name__}: {text})"
        if text
        else (f"its render failed ({type(exc).__name__})")
    )


def frame_problem(frame: Any) -> str | None:
    """Why ``frame`` is not an RGB image (None when it is one)."""
    if not isinstance(frame, np.ndarray):
        return f"its rgb_array render gave {type(frame).__name__}, not an image"
    if frame.ndim != 3 or frame.shape[-1] not in (3, 4) or 0 in frame.shape:
        return f"its rgb_array render gave an array of shape {frame.shape}"
    return None


def declared_render_modes(env_id: str) -> list[str] | None:
    """The render modes the registered class of ``env_id`` declares in its
    ``metadata`` (None when only an instance can tell: a factory function as
    entry point, a metadata property)."""
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    try:
        entry = gym.spec(env_id).entry_point
        creator = entry if callable(entry) else load_env_creator(str(entry))
    except Exception:  # gym.make will say what is wrong with the id
        return None
    metadata = getattr(creator, "metadata", None)
    if not isinstance(metadata, dict):
        return None
    modes = metadata.get("render_modes")
    return [str(m) for m in modes] if isinstance(modes, list | tuple) else None


@dataclass
class FrameEnv:
    """An env made for frames: ``note`` says why it cannot draw (then it was
    made without a render mode)."""

    env: Any
    note: str | None = None


def make_for_frames(env_id: str, **kwargs: Any) -> FrameEnv:
    """``gym.make(env_id, render_mode="rgb_array")`` where the env can draw;
    otherwise the env made without a render mode and the sentence why; an
    Atari game with the preprocessing its policies play with."""
    from engine.envs.families import check_loads, wrap

    headless()
    check_loads(env_id)
    made = _make_for_frames(env_id, **kwargs)
    made.env = wrap(made.env, training=False)
    return made


def _make_for_frames(env_id: str, **kwargs: Any) -> FrameEnv:
    import warnings

    import gymnasium as gym

    declared = declared_render_modes(env_id)
    if declared is not None and RGB_ARRAY not in declared:
        return FrameEnv(gym.make(env_id, **kwargs), _no_mode(env_id, declared))
    try:
        with warnings.catch_warnings():
            # gymnasium warns about a mode outside the metadata; checked below.
            warnings.simplefilter("ignore")
            env = gym.make(env_id, render_mode=RGB_ARRAY, **kwargs)
    except TypeError:  # the env class takes no render_mode
        return FrameEnv(
            gym.make(env_id, **kwargs),
            cannot_draw(env_id, "it takes no render_mode argument"),
        )
    modes = [str(m) for m in (env.metadata or {}).get("render_modes", [])]
    if RGB_ARRAY in modes:
        return FrameEnv(env)
    env.close()
    return FrameEnv(gym.make(env_id, **kwargs), _no_mode(env_id, modes))


def _no_mode(env_id: str, modes: list[str]) -> str:
    listed = ", ".join(modes) if modes else "none"
    return cannot_draw(env_id, f"it has no rgb_array render mode (its modes: {listed})")
