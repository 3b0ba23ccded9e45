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
        """Each frame's channels (1: grey)."""
        self.observation_space = gym.spaces.Box(
            np.repeat(space.low, n, axis=-1),
            np.repeat(space.high, n, axis=-1),
            dtype=space.dtype,
        )
        # The last n frames in a ring, each whole: shifting a stacked
        # array by a channel is a strided, overlapping copy (about 96 us a
        # step for 84x84x4, where writing a frame and joining the ring's
        # frames in order takes 17 us).
        self.frames = np.zeros((n, *space.shape), space.dtype)
        self.newest = n - 1

    def reset(self, **kwargs: Any) -> Any:
        self.frames[...] = 0
        self.newest = len(self.frames) - 1
        return super().reset(**kwargs)

    def observation(self, observation: Any) -> Any:
        n = len(self.frames)
        self.newest = (self.newest + 1) % n
        self.frames[self.newest] = observation
        order = [(self.newest + 1 + k) % n for k in range(n)]  # oldest first
        return np.concatenate([self.frames[i] for i in order], axis=-1)
