"""Frame stacking inside one env, as ``VecFrameStack`` does across a vector.

Stacking in the env rather than in the vector means every player of a
policy (training's evaluation, Play, preview, a recording) builds the same
observations through :func:`engine.envs.families.wrap`; a vector wrapper
exists only where SB3 trains.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class FrameStack(gym.ObservationWrapper[Any, Any, Any]):
    """The last ``n`` image observations stacked on the channel axis, zeros
    before an episode's first (what ``VecFrameStack(n)`` gives)."""

    def __init__(self, env: Any, n: int) -> None:
        super().__init__(env)
        space = env.observation_space
        self.channels = int(space.shape[-1])
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low, n, axis=-1),
            np.repeat(space.high, n, axis=-1),
            dtype=space.dtype,
        )
        self.stack = np.zeros(self.observation_space.shape, space.dtype)

    def reset(self, **kwargs: Any) -> Any:
        self.stack[...] = 0
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> Any:
        c = self.channels
        self.stack[..., :-c] = self.stack[..., c:]
        self.stack[..., -c:] = observation
        return self.stack.copy()
