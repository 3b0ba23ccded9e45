"""Errors the engine reports to users as one readable sentence."""

from __future__ import annotations

import re
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
    that sends a 5,000-character name does not get it echoed back whole (an
    int too long for Python to print says how many digits it has)."""
    # Over 77 digits (str() refuses an int past 4,300).
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value.bit_length() > 256
    ):
        return f"a number of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        text = repr(value)
    except (ValueError, RecursionError):
        return f"a {type(value).__name__} too large to show"
    if len(text) > limit:
        return text[: limit - 1] + "…"
    return text


MAX_ERROR_CHARS = 1000
"""The longest error sentence sent, whatever a value it quotes."""
_LONG_QUOTE = re.compile(
    rf"'[^'\n]{{{MAX_QUOTED_CHARS + 1},}}'|\"[^\"\n]{{{MAX_QUOTED_CHARS + 1},}}\""
)
# + 4: a quoted value cut above (200 characters and "...") is not cut again
_LONG_WORD = re.compile(rf"[^\s'\"]{{{MAX_QUOTED_CHARS + 4},}}")


def bounded(message: str) -> str:
    """``message`` with each quoted value, and each unquoted run of text
    without a space, over 200 characters cut (the engine's sentences quote
    what they were given; a client that sent 5,000 characters does not get
    them back), and at most :data:`MAX_ERROR_CHARS` long. Every sentence the
    engine sends goes through it: the HTTP service's, the protocol's error
    replies and the command line's."""
    if len(message) <= 2 * MAX_QUOTED_CHARS:
        return message

    def cut(match: re.Match[str]) -> str:
        text = match[0]
        return (
            f"{text[: MAX_QUOTED_CHARS + 1]}...{text[0]} ({len(text) - 2:,} characters)"
        )

    message = _LONG_QUOTE.sub(cut, message)
    message = _LONG_WORD.sub(
        lambda m: f"{m[0][:MAX_QUOTED_CHARS]}... ({len(m[0]):,} characters)", message
    )
    if len(message) > MAX_ERROR_CHARS:
        message = message[: MAX_ERROR_CHARS - 3].rstrip() + "..."
    return message
