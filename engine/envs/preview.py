"""Preview a designed env: run a few episodes and describe what happened.

The designer's Preview panel shows the return distribution, episode lengths,
success rate, a frame viewer (rendered envs) and a step-by-step trace table
(observation, action, reward breakdown) for workflow envs. :func:`preview`
computes all of it as JSON data; frames go to a ``.npz`` file (uint8 array
``frames`` of shape (n, height, width, 3)) because big things travel as
paths. An env that cannot draw is played without frames and
``frames_note`` says why in one sentence (:mod:`engine.envs.render`).

The screen is what a person sees; an env whose observation is an image (an
Atari game's stack of 84x84 grey frames) also saves, in the same file, the
observation of each step whose frame is kept: what the agent is given
(:func:`observation_frames` says under which key and what its channels are).
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
    "frames_note": sentence|None, "observation_frames": {...}|None}``
    (``frames_note``: why frames were asked for and none could be drawn;
    ``observation_frames``: where the frames file holds the observations of
    an image env, :func:`observation_frames`).
    """
    from engine.envs.registry import make, registered_id
    from engine.envs.render import make_for_frames

    cfg = config or PreviewConfig()
    env_id = registered_id(spec_or_id)
    if cfg.frames and frames_path is not None:
        made = make_for_frames(env_id)
        env = made.env
        recorder = _FrameRecorder(env, env_id, cfg.frames, made.note)
    else:
        env = make(env_id)
        recorder = _FrameRecorder(env, env_id, 0, None)
    raw = env.unwrapped
    act = policy or random_policy(cfg.seed)
    labels = raw.observation_labels() if hasattr(raw, "observation_labels") else None
    names = _action_names(raw)
    episodes: list[dict[str, Any]] = []
    trace: list[dict[str, Any]] = []
    for ep in range(cfg.episodes):
        if should_stop is not None and should_stop():
            break
        episodes.append(
            _play_episode(
                env, ep, cfg, act, names, trace, recorder if ep == 0 else None
            )
        )
        if on_episode is not None:
            on_episode(ep, episodes[-1])
    env.close()
    frames = recorder.save(frames_path)
    return {
        "env_id": env.spec.id if env.spec else None,
        "seed": cfg.seed,
        "episodes": episodes,
        **_episode_stats(episodes),
        "observation_labels": labels,
        "action_names": names,
        "observation_space": str(env.observation_space),
        "action_space": str(env.action_space),
        "trace": trace,
        "frames": frames,
        "frames_note": recorder.note,
        "observation_frames": recorder.described if frames else None,
    }


OBSERVATIONS_KEY = "observations"
"""The frames file's array of the agent's observations, (n, h, w, c) uint8."""


def observation_frames(env: Any) -> dict[str, Any] | None:
    """How ``env``'s observations are saved beside its frames, or None when
    they are not images (a uint8 ``Box`` of shape (h, w, c) or (h, w)).

    ``{"key": "observations", "stack": frames on the channel axis, "channels":
    channels a frame (1 grey, 3 RGB), "text": "stack of 4 grey frames, oldest
    first"}``; the stack is read from the env's :class:`FrameStack`, so any
    stacked image env reads right, not only the Atari games.
    """
    from engine.envs.frame_stack import FrameStack

    space = env.observation_space
    shape: tuple[int, ...] = tuple(getattr(space, "shape", None) or ())
    if getattr(space, "dtype", None) != np.uint8 or len(shape) not in (2, 3):
        return None
    channels = int(shape[2]) if len(shape) == 3 else 1
    stack, per_frame = 1, channels
    layer = env
    while layer is not None:
        if isinstance(layer, FrameStack):
            per_frame = layer.channels
            stack = channels // per_frame
            break
        layer = getattr(layer, "env", None)
    kind = {1: "grey", 3: "RGB"}.get(per_frame, f"{per_frame}-channel")
    return {
        "key": OBSERVATIONS_KEY,
        "stack": stack,
        "channels": per_frame,
        "text": f"stack of {stack} {kind} frames, oldest first"
        if stack > 1
        else f"one {kind} frame",
    }


class _FrameRecorder:
    """Frames of one episode, at most ``limit``: the first failure to draw
    ends drawing (``note`` says why), and so does
    :data:`~engine.contract.FRAME_BUDGET_BYTES`."""

    def __init__(self, env: Any, env_id: str, limit: int, note: str | None) -> None:
        self.env = env
        self.env_id = env_id
        self.limit = limit
        self.note = note
        self.drawing = limit > 0 and note is None
        self.frames: list[np.ndarray] = []
        self.described = observation_frames(env)
        """How the observations are saved; None: they are not images."""
        self.observations: list[np.ndarray] = []
        """The agent's observation at each frame kept (image envs only)."""
        self.frame_bytes = 0

    def draw(self, obs: Any) -> None:
        """Draw the screen as it is now, ``obs`` being what the agent sees."""
        from engine.envs.render import cannot_draw, frame_problem, render_failure

        if not self.drawing or len(self.frames) >= self.limit:
            return
        try:
            frame = self.env.render()
        except Exception as exc:
            why: str | None = render_failure(exc)
        else:
            why = frame_problem(frame)
        if why is None:
            seen = np.array(obs, np.uint8) if self.described else None
            if seen is not None and seen.ndim == 2:
                seen = seen[..., None]  # one channel, as (h, w, c) says
            self.frame_bytes += frame.nbytes + (0 if seen is None else seen.nbytes)
            if self.frame_bytes > FRAME_BUDGET_BYTES and self.frames:
                self.drawing = False
            else:
                self.frames.append(frame)
                if seen is not None:
                    self.observations.append(seen)
            return
        self.drawing = False
        self.note = cannot_draw(self.env_id, why)

    def save(self, path: str | Path | None) -> str | None:
        """Write the frames drawn to ``path`` (``.npz``); the path, or None
        when there are none."""
        if not self.frames or path is None:
            return None
        out = str(path)
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        arrays: dict[str, Any] = {"frames": np.stack(self.frames)}
        if self.observations:
            arrays[OBSERVATIONS_KEY] = np.stack(self.observations)
        np.savez_compressed(out, **arrays)
        return out


def _action_names(raw: Any) -> list[str] | None:
    """The names of a workflow's tools or a grid's moves; None for others."""
    names = getattr(getattr(raw, "model", None), "tool_names", None)
    if names is None and hasattr(raw, "rows"):
        from engine.envs.grid import ACTION_NAMES

        names = list(ACTION_NAMES)
    return names


def _play_episode(
    env: Any,
    ep: int,
    cfg: PreviewConfig,
    act: Policy,
    names: list[str] | None,
    trace: list[dict[str, Any]],
    recorder: _FrameRecorder | None,
) -> dict[str, Any]:
    """Play episode ``ep`` to its end, adding its first steps to ``trace``
    and its frames to ``recorder`` when given; its return, length and
    success."""
    raw = env.unwrapped
    obs, info = env.reset(seed=cfg.seed + ep)
    # A saved policy (a LoadedPolicy) forgets the last episode: a recurrent
    # one's memory.
    start_episode = getattr(act, "start_episode", None)
    if start_episode is not None:
        start_episode()
    if recorder is not None:
        recorder.draw(obs)
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
                    "observation": _trace_observation(obs),
                    "action": a,
                    "action_name": names[a] if names and isinstance(a, int) else None,
                    "reward": float(reward),
                    "reward_breakdown": _jsonable(info.get("reward_breakdown", {})),
                    "status": info.get("status"),
                    "terminated": bool(terminated),
                    "truncated": bool(truncated),
                    "text": raw.render_text() if hasattr(raw, "render_text") else None,
                }
            )
        if recorder is not None:
            recorder.draw(next_obs)
        obs = next_obs
    return {"return": total, "length": length, "success": success}


TRACE_ARRAY_MAX = 256
"""Numbers of an observation the trace holds; a bigger one (an image, an
Atari game's stacked 84x84x4 frames) is named by its shape and type."""


def _trace_observation(obs: Any) -> Any:
    """The observation as a trace row holds it: itself, or for an array of
    over :data:`TRACE_ARRAY_MAX` numbers, ``"uint8 84x84x4"``."""
    if isinstance(obs, np.ndarray) and obs.size > TRACE_ARRAY_MAX:
        return f"{obs.dtype} {'x'.join(str(n) for n in obs.shape)}"
    return _jsonable(obs)


def _episode_stats(episodes: list[dict[str, Any]]) -> dict[str, float | None]:
    """Mean and spread of the returns, mean length and success rate (None
    for each without episodes)."""
    returns = np.array([e["return"] for e in episodes]) if episodes else np.zeros(0)
    lengths = np.array([e["length"] for e in episodes]) if episodes else np.zeros(0)
    return {
        "return_mean": float(returns.mean()) if len(returns) else None,
        "return_std": float(returns.std()) if len(returns) else None,
        "length_mean": float(lengths.mean()) if len(lengths) else None,
        "success_rate": float(np.mean([e["success"] for e in episodes]))
        if episodes
        else None,
    }
