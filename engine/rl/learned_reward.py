"""A learned reward for stable-baselines3 runs: each step's reward becomes
the env's plus ``weight`` times p(good) of the (observation, action) under a
control reward model trained on manual labels
(:mod:`engine.llm.reward_model`).

Applied inside each env after SB3's ``Monitor``, so episode returns,
evaluations and success rates stay the env's own; ``info`` carries both
parts (``env_reward``, ``learned_reward``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from engine import untrusted
from engine.errors import ConfigError, EngineError, quoted
from engine.store.atomic import read_small_text

META_FILE = "reward_model.json"
WEIGHTS_FILE = "mlp.pt"
WEIGHTS_MAX_BYTES = 512 * 2**20
"""The largest ``mlp.pt`` loaded (the widest MLP reward.train makes holds
under 100 MiB)."""


def check_model(
    path: str, field_name: str = "learned_reward", project_dir: str | None = None
) -> str:
    """The folder of a control reward model (a relative path is the
    project's); ConfigError with one sentence otherwise (read without
    loading torch: validation runs in the supervisor)."""
    folder = Path(path).expanduser()
    if not folder.is_absolute() and project_dir:
        folder = Path(project_dir) / folder
    name = quoted(str(folder))
    try:
        meta = untrusted.loads(
            read_small_text(folder / META_FILE, f"{name}/{META_FILE}"), META_FILE
        )
    except (EngineError, untrusted.UntrustedDataError):
        raise ConfigError(
            field_name,
            f"{name} is not a reward model (no readable {META_FILE}); train "
            "one with reward.train.",
        ) from None
    if not isinstance(meta, dict) or meta.get("kind") != "control":
        raise ConfigError(
            field_name,
            f"{name} is a text reward model; an SB3 run needs a control one "
            "(trained on observations).",
        )
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigError(
            field_name,
            f"{name} has no {WEIGHTS_FILE} (the control reward model's "
            "weights); train it again with reward.train.",
        )
    if weights.stat().st_size > WEIGHTS_MAX_BYTES:
        raise ConfigError(
            field_name,
            f"{name}/{WEIGHTS_FILE} is larger than "
            f"{WEIGHTS_MAX_BYTES // 2**20} MiB, too large for a control reward "
            "model's weights.",
        )
    return str(folder.resolve())


def load_control_scorer(path: str, field_name: str = "learned_reward") -> Any:
    """The :class:`~engine.llm.reward_model.ControlScorer` of a checked
    folder (:func:`check_model`); ConfigError with one sentence when its
    weights cannot be loaded: torch reads them with ``weights_only``, so a
    file holding any other pickle (code to run) is refused, not run."""
    from engine.llm.reward_model import ControlScorer, load_scorer

    folder = check_model(path, field_name)
    try:
        scorer = load_scorer(folder)
    except ConfigError:
        raise
    except Exception as exc:  # a foreign file fails in many ways
        lines = str(exc).strip().splitlines()
        why = f" ({quoted(lines[0])})" if lines else ""
        raise ConfigError(
            field_name,
            f"{quoted(folder)}/{WEIGHTS_FILE} is not a control reward model's "
            f"weights: {type(exc).__name__}{why}; train it again with reward.train.",
        ) from None
    assert isinstance(scorer, ControlScorer)
    return scorer


def _plain(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return [_plain(value[k]) for k in sorted(value)]
    return value


class LearnedRewardWrapper(gym.Wrapper):
    def __init__(self, env: gym.Env, model: str, weight: float = 1.0) -> None:
        super().__init__(env)
        self.scorer = load_control_scorer(model)
        self.weight = float(weight)
        self._obs: Any = None

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._obs = obs
        return obs, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        learned = self.scorer.score(_plain(self._obs), _plain(action))
        self._obs = obs
        info = {**info, "env_reward": float(reward), "learned_reward": learned}
        return obs, float(reward) + self.weight * learned, terminated, truncated, info
