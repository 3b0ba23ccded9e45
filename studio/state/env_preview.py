"""What the designer's Preview panel and its "Train this environment" button
need to know, without Qt: which of the project's policies can play a spec,
which algorithm suits it, and how a ``preview.json`` reads as table rows, a
one-line summary, and frames (the screen, and what the agent sees of it).

A designed env registers as ``rlstudio/<name>-v0``; a model records the env
it was trained on as that id, as the spec's file, or (for a ``gymnasium``
spec) as the plain Gymnasium id it wraps.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from engine.contract import (
    ENVS_FOLDER,
    FRAME_BUDGET_BYTES,
    SPEC_SUFFIX,
    env_id,
    env_name,
)

M = TypeVar("M", bound=Mapping[str, Any])

POLICY_KIND = "sb3-policy"
SB3_ALGOS = (
    "PPO",
    "A2C",
    "DQN",
    "SAC",
    "TD3",
    "MaskablePPO",
    "RecurrentPPO",
    "TQC",
    "TRPO",
    "QRDQN",
    "ARS",
    "CrossQ",
)
"""The algorithms of rl.train (engine.rl.config.ALGO_CONFIGS, which the
studio does not import)."""
PREVIEW_FRAMES = 200
"""Frames of the first episode rendered at most (a 600x400 CartPole frame is
720 kB raw; 200 of them compress to a few MB)."""
GRID_CELL_PX = 16
"""Pixels per grid cell in a grid env's ``rgb_array`` render."""


def grid_preview_frames(rows: int, cols: int) -> int:
    """Frames to ask of a grid env: :data:`PREVIEW_FRAMES`, fewer for a big
    grid (a 256x256 grid renders 50 MB frames), at least one."""
    frame_bytes = max(1, rows * cols) * GRID_CELL_PX**2 * 3
    return max(1, min(PREVIEW_FRAMES, FRAME_BUDGET_BYTES // frame_bytes))


def env_refs(spec: dict[str, Any], path: str | Path | None) -> set[str]:
    """Every way a model's ``env`` may name this spec."""
    name = str(spec.get("name", ""))
    refs = {env_id(name), f"{ENVS_FOLDER}/{name}{SPEC_SUFFIX}"}
    if path is not None:
        refs.add(str(path))
        refs.add(str(Path(path).resolve()))
    if spec.get("kind") == "gymnasium":
        base = (spec.get("gymnasium") or {}).get("id")
        if isinstance(base, str) and base:
            refs.add(base)
    return refs


def matching_policies(
    models: Sequence[M], spec: dict[str, Any], path: str | Path | None
) -> list[M]:
    """The project's SB3 policies trained on this env, newest first."""
    refs = env_refs(spec, path)
    found = [
        m
        for m in models
        if m.get("kind") == POLICY_KIND
        and str(m.get("env", "")) in refs
        and str(m.get("algo", "")) in SB3_ALGOS
        and m.get("path")
    ]
    return sorted(found, key=lambda m: float(m.get("created") or 0), reverse=True)


def action_kind(action_space: str | None) -> str:
    """``discrete``, ``continuous`` or ``unknown`` from a space's repr
    (``Discrete(4)``, ``Box(-1.0, 1.0, (1,), float32)``)."""
    text = (action_space or "").strip()
    if text.startswith(("Discrete", "MultiDiscrete", "MultiBinary")):
        return "discrete"
    if text.startswith("Box"):
        return "continuous"
    return "unknown"


def suggest_algo(kind: str, action_space: str | None = None) -> str:
    """MaskablePPO where actions are masked (every workflow env), SAC for
    continuous actions, PPO otherwise (discrete, or not known yet: PPO
    handles both)."""
    if kind == "workflow":
        return "MaskablePPO"
    if kind == "grid":
        return "PPO"
    return "SAC" if action_kind(action_space) == "continuous" else "PPO"


def train_env(spec: dict[str, Any]) -> str:
    """The env id a training run should name.

    A ``gymnasium`` spec that only names an id trains on that id itself, so
    that RL Zoo's tuned preset for it applies; one with keyword arguments or
    its own step limit trains on its designed id, which carries them.
    """
    if spec.get("kind") == "gymnasium":
        body = spec.get("gymnasium") or {}
        base = body.get("id")
        if (
            isinstance(base, str)
            and base
            and not body.get("kwargs")
            and body.get("max_episode_steps") is None
        ):
            return base
    return env_id(str(spec.get("name", "")))


def train_config(
    spec: dict[str, Any], action_space: str | None = None
) -> dict[str, Any]:
    """The initial values of the New training run dialog for this spec."""
    return {
        "env": train_env(spec),
        "algo": suggest_algo(str(spec.get("kind", "")), action_space),
    }


# ---------------------------------------------------------------- results


def _short(value: Any, limit: int = 80) -> str:
    if isinstance(value, list):
        text = ", ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in value)
    else:
        text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def trace_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per traced step: episode, step, action (by name), reward and
    its breakdown by rule, the status reached, and the observation (labelled
    where the env names its features)."""
    names = data.get("action_names") or []
    labels = data.get("observation_labels") or []
    rows = []
    for i, step in enumerate(data.get("trace") or []):
        action = step.get("action_name")
        if action is None:
            a = step.get("action")
            action = names[a] if isinstance(a, int) and 0 <= a < len(names) else a
        breakdown = {
            k: float(v)
            for k, v in (step.get("reward_breakdown") or {}).items()
            if _number(v) is not None and v != 0
        }
        obs = step.get("observation")
        labelled = ""
        if isinstance(obs, list) and len(obs) == len(labels):
            labelled = "\n".join(
                f"{label} = {value:.4g}"
                if isinstance(value, float)
                else f"{label} = {value}"
                for label, value in zip(labels, obs, strict=True)
            )
        end = (
            "terminated"
            if step.get("terminated")
            else "truncated"
            if step.get("truncated")
            else ""
        )
        rows.append(
            {
                "id": str(i),
                "episode": int(step.get("episode", 0)) + 1,
                "step": int(step.get("step", i + 1)),
                "action": _short(action, 40),
                "reward": float(step.get("reward") or 0.0),
                "breakdown": ", ".join(f"{k} {v:+.3g}" for k, v in breakdown.items()),
                "status": " · ".join(
                    x for x in (str(step.get("status") or ""), end) if x
                ),
                "observation": _short(obs),
                "observation_labelled": labelled,
                "text": str(step.get("text") or ""),
            }
        )
    return rows


def summary(data: dict[str, Any]) -> dict[str, Any]:
    """Numbers for the summary line: episodes, return mean/std/min/max, mean
    length, success rate (None when the env has no notion of success)."""
    eps = data.get("episodes") or []
    returns = [float(e["return"]) for e in eps]
    env = str(data.get("env_id") or "")
    # Only designed envs say what success is; elsewhere 0 % would mislead.
    designed = env_name(env) is not None
    return {
        "episodes": len(eps),
        "return_mean": data.get("return_mean"),
        "return_std": data.get("return_std"),
        "return_min": min(returns) if returns else None,
        "return_max": max(returns) if returns else None,
        "length_mean": data.get("length_mean"),
        "success_rate": data.get("success_rate") if designed else None,
        "seed": data.get("seed"),
        "returns": returns,
        "lengths": [int(e["length"]) for e in eps],
    }


AGENT_VIEW_TIP = (
    "What the policy is given at the frame shown, drawn pixel for pixel: "
    "the frames stacked in its observation, oldest first."
)
"""The tooltip of an agent's view (the designer's Preview, Models' Play)."""


@dataclass(frozen=True)
class PreviewFrames:
    """A preview's frames file as read: the screen and, for an env whose
    observations are images, the observation at each frame."""

    frames: np.ndarray
    """The screen, (n, h, w, 3) uint8."""
    observations: np.ndarray | None
    """What the agent is given at each frame, (n, h, w, c) uint8; None when
    the observations are not images."""
    channels: int
    """Channels a frame of the stack has (1 grey, 3 RGB)."""
    text: str
    """What the channel axis holds (``stack of 4 grey frames, oldest first``)."""


def load_frames(data: Mapping[str, Any]) -> PreviewFrames | None:
    """The frames a ``preview.json`` names, read; None without a file. The
    observations are read under the key the engine names
    (``observation_frames``), so the studio spells it nowhere."""
    path = data.get("frames")
    if not path or not Path(path).is_file():
        return None
    described = data.get("observation_frames")
    key = described.get("key") if isinstance(described, dict) else None
    with np.load(path) as npz:
        frames = npz["frames"]
        observations = npz[key] if key and key in npz.files else None
    if observations is None or not isinstance(described, dict):
        return PreviewFrames(frames, None, 1, "")
    return PreviewFrames(
        frames,
        observations,
        int(described.get("channels") or 1),
        str(described.get("text") or ""),
    )
