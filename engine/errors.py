"""Errors the engine reports to users as one readable sentence."""

from __future__ import annotations


class EngineError(Exception):
    """A failure whose message is a sentence meant for the user, not a bug."""


class ConfigError(EngineError):
    """A configuration value that cannot work; ``field`` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class ProjectError(EngineError):
    """The project folder is missing, unwritable or damaged."""


class UnknownRunError(EngineError):
    """A run id that the open project does not know."""
