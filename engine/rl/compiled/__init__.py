"""The ``jax`` training backend of ``rl.train``: PPO whose rollouts, GAE and
updates are one XLA program, over environments written as JAX functions.

This package's ``__init__`` imports nothing heavy, so validation can ask
whether an env compiles without importing JAX; the modules below it import
JAX at the top and are imported only by a run on the ``jax`` backend.
"""

from typing import Any

TWIN_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1")
"""Gymnasium ids with a compiled twin (``engine.rl.compiled.envs.TWINS``)."""


def is_designed_grid(env_id: str) -> bool:
    """Whether ``env_id`` is a registered designed ``grid`` env, which
    compiles from its spec (``engine.rl.compiled.envs.grid_twin``)."""
    from gymnasium.envs.registration import registry

    spec = registry.get(env_id)
    doc: Any = spec.kwargs.get("spec") if spec is not None else None
    return isinstance(doc, dict) and doc.get("kind") == "grid"
