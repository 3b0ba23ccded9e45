"""Preview a designed env: run a few episodes and describe what happened.

The designer's Preview panel shows the return distribution, episode lengths,
success rate, a frame viewer (rendered envs) and a step-by-step trace table
(observation, action, reward breakdown) for workflow envs. :func:`preview`
computes all of it as JSON data; frames go to a ``.npz`` file (uint8 array
``frames`` of shape (n, height, width, 3)) because big things travel as
paths. An env that cannot draw is played without frames and
``frames_note`` says why in one sentence (:mod:`engine.envs.render`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine.contract import FRAME_BUDGET_BYTES

Policy = Callable[[Any, Any], int]
"""``policy(observation, env) -> action``."""
EpisodeCallback = Callable[[int, dict[str, Any]], None]
"""``on_episode(index, {"return", "length", "success"})`` after each episode."""


@dataclass(frozen=True)
class PreviewConfig:
    episodes: int = 20
    """Episodes to run."""
    seed: int = 0
    """Seed of the first episode's reset and of the random policy."""
    trace_episodes: int = 1
    """Episodes whose every step goes into the trace table."""
    max_trace_steps: int = 500
    """Trace rows kept at most (steps)."""
    frames: int = 0
    """Frames (rgb_array renders) of the first episode to save; 0 = none."""


def random_policy(seed: int) -> Policy:
    """Uniform over valid actions when the env has ``action_masks()``."""
    rng = np.random.default_rng(seed)

    def act(obs: Any, env: Any) -> Any:
        masks = getattr(env.unwrapped, "action_masks", None)
        if masks is not None:
            return int(rng.choice(np.flatnonzero(masks())))
        space = env.action_space
        space.seed(int(rng.integers(2**31)))
        return space.sample()

    return act


def _jsonable(x: Any) -> Any:
    if isinstance(x, np.ndarray):
        return x.tolist()
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def preview(
    spec_or_id: Any,
    config: PreviewConfig | None = None,
    policy: Policy | None = None,
    frames_path: str | Path | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_episode: EpisodeCallback | None = None,
) -> dict[str, Any]:
    """Run episodes of an env (id, spec, document or file) and summarize them.

    Returns ``{"env_id", "seed", "episodes": [{"return", "length", "success"}],
    "return_mean", "return_std", "length_mean", "success_rate",
    "observation_labels", "action_names", "observation_space",
    "action_space", "trace": [{"episode", "step",
    "observation", "action", "action_name", "reward", "reward_breakdown",
    "status", "terminated", "truncated", "text"}], "frames": path|None,
    "frames_note": sentence|None}`` (``frames_note``: why frames were asked
    for and none could be drawn).
    """
    from engine.envs.registry import make, registered_id
    from engine.envs.render import (
        cannot_draw,
        frame_problem,
        make_for_frames,
        render_failure,
    )

    cfg = config or PreviewConfig()
    note: str | None = None
    env_id = registered_id(spec_or_id)
    if cfg.frames and frames_path is not None:
        made = make_for_frames(env_id)
        env, note = made.env, made.note
        drawing = note is None
    else:
        env, drawing = make(env_id), False
    raw = env.unwrapped
    act = policy or random_policy(cfg.seed)
    labels = raw.observation_labels() if hasattr(raw, "observation_labels") else None
    names = getattr(getattr(raw, "model", None), "tool_names", None)
    if names is None and hasattr(raw, "rows"):
        from engine.envs.grid import ACTION_NAMES

        names = list(ACTION_NAMES)
    episodes: list[dict[str, Any]] = []
    trace: list[dict[str, Any]] = []
    frames: list[np.ndarray] = []
    frame_bytes = 0

    def draw() -> None:
        """One frame of the first episode; the first failure ends drawing, and
        so does :data:`~engine.contract.FRAME_BUDGET_BYTES`."""
        nonlocal drawing, note, frame_bytes
        if not drawing or len(frames) >= cfg.frames:
            return
        try:
            frame = env.render()
        except Exception as exc:
            why: str | None = render_failure(exc)
        else:
            why = frame_problem(frame)
        if why is None:
            frame_bytes += frame.nbytes
            if frame_bytes > FRAME_BUDGET_BYTES and frames:
                drawing = False
            else:
                frames.append(frame)
            return
        drawing = False
        note = cannot_draw(env_id, why)

    for ep in range(cfg.episodes):
        if should_stop is not None and should_stop():
            break
        obs, info = env.reset(seed=cfg.seed + ep)
        if ep == 0:
            draw()
        total, length, done, success = 0.0, 0, False, False
        while not done:
            action = act(obs, env)
            next_obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            total += float(reward)
            length += 1
            success = bool(info.get("is_success", False))
            if ep < cfg.trace_episodes and len(trace) < cfg.max_trace_steps:
                a = _jsonable(action)
                trace.append(
                    {
                        "episode": ep,
                        "step": length,
                        "observation": _jsonable(obs),
                        "action": a,
                        "action_name": names[a]
                        if names and isinstance(a, int)
                        else None,
                        "reward": float(reward),
                        "reward_breakdown": _jsonable(info.get("reward_breakdown", {})),
                        "status": info.get("status"),
                        "terminated": bool(terminated),
                        "truncated": bool(truncated),
                        "text": raw.render_text()
                        if hasattr(raw, "render_text")
                        else None,
                    }
                )
            if ep == 0:
                draw()
            obs = next_obs
        episodes.append({"return": total, "length": length, "success": success})
        if on_episode is not None:
            on_episode(ep, episodes[-1])
    env.close()
    returns = np.array([e["return"] for e in episodes]) if episodes else np.zeros(0)
    lengths = np.array([e["length"] for e in episodes]) if episodes else np.zeros(0)
    out_frames = None
    if frames and frames_path is not None:
        out_frames = str(frames_path)
        Path(out_frames).parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out_frames, frames=np.stack(frames))
    return {
        "env_id": env.spec.id if env.spec else None,
        "seed": cfg.seed,
        "episodes": episodes,
        "return_mean": float(returns.mean()) if len(returns) else None,
        "return_std": float(returns.std()) if len(returns) else None,
        "length_mean": float(lengths.mean()) if len(lengths) else None,
        "success_rate": float(np.mean([e["success"] for e in episodes]))
        if episodes
        else None,
        "observation_labels": labels,
        "action_names": names,
        "observation_space": str(env.observation_space),
        "action_space": str(env.action_space),
        "trace": trace,
        "frames": out_frames,
        "frames_note": note,
    }
