"""Errors the engine reports to users as one readable sentence."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class EngineError(Exception):
    """A failure whose message is a sentence meant for the user, not a bug."""


class ConfigError(EngineError):
    """A configuration value that cannot work; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def with_defaults(
    config: Mapping[str, Any], defaults: Mapping[str, Any], job: str
) -> dict[str, Any]:
    """``defaults`` overridden by ``config``: a job's settings, every one
    present. A setting the job does not know is a ConfigError naming it
    ("Unknown setting 'x' for ``job``.")."""
    unknown = set(config) - set(defaults)
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(name, f"Unknown setting {quoted(name)} for {job}.")
    return {**defaults, **config}


class ProjectError(EngineError):
    """The project folder is missing, unwritable or damaged."""


class UnknownRunError(EngineError):
    """A run id that the open project does not know."""


MAX_QUOTED_CHARS = 200
"""The most characters of a value given from outside that a sentence quotes."""


def quoted(value: object, limit: int = MAX_QUOTED_CHARS) -> str:
    """``repr(value)`` for a sentence, cut to ``limit`` characters: a client
    that sends a 5,000-character name does not get it echoed back whole."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text):,} characters)"
