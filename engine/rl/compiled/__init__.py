"""The ``jax`` training backend of ``rl.train``: PPO whose rollouts, GAE and
updates are one XLA program, over environments written as JAX functions.

This package's ``__init__`` imports nothing heavy, so validation can ask
whether an env compiles without importing JAX; the modules below it import
JAX at the top and are imported only by a run on the ``jax`` backend.
"""

from typing import Any

TWIN_IDS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1")
"""Gymnasium ids with a compiled twin (``engine.rl.compiled.envs.TWINS``)."""


COMPILED_KINDS = ("grid", "workflow")
"""Designed env kinds that compile from their spec
(``engine.rl.compiled.envs.grid_twin`` and ``workflow_twin``)."""


def designed_kind(env_id: str) -> str | None:
    """The kind of the designed env registered as ``env_id`` (``grid``,
    ``workflow``, ``python``...), None for any other env."""
    from gymnasium.envs.registration import registry

    spec = registry.get(env_id)
    doc: Any = spec.kwargs.get("spec") if spec is not None else None
    kind = doc.get("kind") if isinstance(doc, dict) else None
    return kind if isinstance(kind, str) else None


def compiles(env_id: str) -> bool:
    """Whether ``env_id`` has a compiled twin."""
    return env_id in TWIN_IDS or designed_kind(env_id) in COMPILED_KINDS
