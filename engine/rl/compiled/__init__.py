"""The ``jax`` training backend of ``rl.train``: PPO whose rollouts, GAE and
updates are one XLA program, over environments written as JAX functions.

This package's ``__init__`` imports nothing heavy, so validation can ask
whether an env compiles without importing JAX; the modules below it import
JAX at the top and are imported only by a run on the ``jax`` backend.
"""

TWIN_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1")
"""Gymnasium ids with a compiled twin (``engine.rl.compiled.envs.TWINS``)."""
