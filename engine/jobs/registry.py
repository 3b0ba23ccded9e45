"""The kinds of job the supervisor can start, by name.

Entries are ``module:function`` strings so that the supervisor never imports
heavy libraries: the job function is imported in the job process, the
validator (quick, may import gymnasium) in the supervisor before the process
starts.

* job function: ``run(ctx: JobContext) -> dict`` — the run's summary.
* validator: ``validate(config: dict) -> dict`` — the normalized config with
  every default filled in; raises ``engine.errors.ConfigError`` naming the
  field for anything that cannot work.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError


@dataclass(frozen=True)
class JobKind:
    name: str
    entry: str
    """``module:function`` run in the job process."""
    validator: str | None = None
    """``module:function`` run in the supervisor before the process starts."""
    description: str = ""
    resumable: bool = False


JOB_KINDS: dict[str, JobKind] = {}


def register(kind: JobKind) -> JobKind:
    JOB_KINDS[kind.name] = kind
    return kind


register(
    JobKind(
        name="selftest",
        entry="engine.jobs.selftest:run",
        validator="engine.jobs.selftest:validate",
        description="Checks the engine end to end: progress, metrics, logs, stop.",
        resumable=True,
    )
)


def get_kind(name: str) -> JobKind:
    try:
        return JOB_KINDS[name]
    except KeyError:
        known = ", ".join(sorted(JOB_KINDS))
        raise ConfigError("kind", f"Unknown job kind {name!r}; known kinds: {known}.")


def load(ref: str) -> Callable[..., Any]:
    module_name, _, attr = ref.partition(":")
    module = importlib.import_module(module_name)
    fn: Callable[..., Any] = getattr(module, attr)
    return fn


def validate_config(kind_name: str, config: dict[str, Any]) -> dict[str, Any]:
    kind = get_kind(kind_name)
    if kind.validator is None:
        return dict(config)
    result: dict[str, Any] = load(kind.validator)(dict(config))
    return result


register(
    JobKind(
        name="rl.train",
        entry="engine.rl.train:run",
        validator="engine.rl.config:validate",
        description="Trains a stable-baselines3 agent (PPO, A2C, DQN, SAC, TD3, "
        "MaskablePPO) on a Gymnasium or designed environment.",
        resumable=True,
    )
)
