"""What the ``jax`` backend trains, for validation to ask without importing
JAX (it runs in the supervisor too): :func:`engine.rl.config.jax_problem`
checks a run against it."""

from __future__ import annotations

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
