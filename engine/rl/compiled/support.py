"""What the ``jax`` backend trains, for validation to ask without importing
JAX (it runs in the supervisor too): :func:`engine.rl.config.jax_problem`
checks a run against it; and where it keeps what later runs reuse."""

from __future__ import annotations

import os
from pathlib import Path

BACKENDS = ("auto", "sb3", "jax")
"""``auto``: ``jax`` where it can train the run and the run is long enough to
pay for compiling (:data:`AUTO_JAX_MIN_STEPS`), else ``sb3``."""

ALGOS = ("PPO", "MaskablePPO")
"""What the compiled PPO trains: MaskablePPO is PPO with the env's action
masks applied to the logits."""

AUTO_JAX_MIN_STEPS = 100_000
"""The shortest run ``auto`` compiles: compiling takes about 5 s on a CPU,
which SB3 spends on about 10,000 CartPole steps; below this the saving is
too small to be worth a second code path."""


def cache_root() -> Path:
    """The user's cache folder for the backend: JAX's compiled programs and
    the SB3 model templates (``$XDG_CACHE_HOME/rl-studio``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rl-studio"
