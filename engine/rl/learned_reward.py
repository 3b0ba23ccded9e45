"""A learned reward for stable-baselines3 runs: each step's reward becomes
the env's plus ``weight`` times p(good) of the (observation, action) under a
control reward model trained on manual labels
(:mod:`engine.llm.reward_model`).

Applied inside each env after SB3's ``Monitor``, so episode returns,
evaluations and success rates stay the env's own; ``info`` carries both
parts (``env_reward``, ``learned_reward``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from engine.errors import ConfigError

META_FILE = "reward_model.json"


def check_model(
    path: str, field_name: str = "learned_reward", project_dir: str | None = None
) -> str:
    """The folder of a control reward model (a relative path is the
    project's); ConfigError with one sentence otherwise (read without
    loading torch: validation runs in the supervisor)."""
    folder = Path(path).expanduser()
    if not folder.is_absolute() and project_dir:
        folder = Path(project_dir) / folder
    try:
        meta = json.loads((folder / META_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ConfigError(
            field_name,
            f"{folder} is not a reward model (no readable {META_FILE}); train "
            "one with reward.train.",
        ) from None
    if not isinstance(meta, dict) or meta.get("kind") != "control":
        raise ConfigError(
            field_name,
            f"{folder} is a text reward model; an SB3 run needs a control one "
            "(trained on observations).",
        )
    return str(folder.resolve())


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
        from engine.llm.reward_model import ControlScorer, load_scorer

        super().__init__(env)
        scorer = load_scorer(check_model(model))
        assert isinstance(scorer, ControlScorer)
        self.scorer = scorer
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
