"""Reading JSON and files that may be hostile: bounded, finite, shallow.

Standard library only: the protocol decoder, the flow format and the GUI use
it. Everything the engine reads from outside (protocol lines, env specs,
flows, project files) goes through :func:`loads` or :func:`check`, so a value
that would crash or starve a reader is refused with one sentence naming
where it is:

* NaN and Infinity (JSON extensions Python accepts) and numbers too large to
  be finite;
* integers beyond 64 bits (Python refuses to parse more than 4,300 digits
  with a raw ``ValueError``; smaller giants make arithmetic crawl);
* nesting deeper than :data:`MAX_DEPTH` (Python's parser raises
  ``RecursionError`` near 1,000 levels);
* strings that are not valid Unicode text (lone surrogates cannot be written
  as UTF-8 or used in a path).

Files are read only when they are regular files, up to a size limit, so a
path to ``/dev/zero``, a FIFO or a giant file is an error, not a hang.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

MAX_DEPTH = 64
"""Deepest nesting of lists and objects accepted anywhere."""
MAX_INT = 2**63 - 1
"""Largest integer magnitude accepted (a signed 64-bit value)."""
MAX_FILE_BYTES = 16 * 1024 * 1024
"""Default size limit of a document file (env spec, flow, project record)."""


class UntrustedDataError(ValueError):
    """A value or file refused by these limits. ``field`` is the JSON path
    of the culprit (``nodes[2].params.lr``), empty for the whole document."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class _Refused:
    """A parsed number that must be refused; reported with its path by the walk."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _parse_int(text: str) -> int | _Refused:
    # Cheap length test first: int() of a 100,000-digit string is slow.
    if len(text.lstrip("-")) > 19:
        return _Refused(text)
    value = int(text)
    return value if abs(value) <= MAX_INT else _Refused(text)


def _parse_float(text: str) -> float | _Refused:
    value = float(text)
    return value if value - value == 0.0 else _Refused(text)


def loads(text: str | bytes, what: str = "The text") -> Any:
    """Parse JSON ``text``; :class:`UntrustedDataError` (one sentence that
    starts with ``what``) if it is not JSON or breaks a limit."""
    if isinstance(text, bytes | bytearray):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise UntrustedDataError("", f"{what} is not UTF-8 text.") from None
    try:
        data = json.loads(
            text,
            parse_int=_parse_int,
            parse_float=_parse_float,
            parse_constant=_Refused,
        )
    except json.JSONDecodeError as exc:
        raise UntrustedDataError(
            "",
            f"{what} is not valid JSON (line {exc.lineno}, column {exc.colno}: "
            f"{exc.msg}).",
        ) from None
    except RecursionError:
        raise UntrustedDataError(
            "", f"{what} is nested too deeply (at most {MAX_DEPTH} levels)."
        ) from None
    check(data, what)
    return data


def check(value: Any, what: str = "The value") -> None:
    """Refuse ``value`` (parsed JSON or a dict built in memory) unless it is
    plain JSON within the limits; the sentence names the field at fault."""
    stack: list[tuple[Any, str, int]] = [(value, "", 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, dict):
            if depth >= MAX_DEPTH:
                _refuse(what, path, f"is nested deeper than {MAX_DEPTH} levels")
            for key, child in item.items():
                if not isinstance(key, str):
                    _refuse(what, path, "has a key that is not text")
                _check_text(what, path, key)
                stack.append((child, f"{path}.{key}" if path else key, depth + 1))
        elif isinstance(item, list | tuple):
            if depth >= MAX_DEPTH:
                _refuse(what, path, f"is nested deeper than {MAX_DEPTH} levels")
            for i, child in enumerate(item):
                stack.append((child, f"{path}[{i}]", depth + 1))
        elif isinstance(item, str):
            _check_text(what, path, item)
        elif isinstance(item, bool) or item is None:
            continue
        elif isinstance(item, int):
            if abs(item) > MAX_INT:
                _refuse(what, path, "has an integer too large (at most 2^63 - 1)")
        elif isinstance(item, float):
            if item - item != 0.0:
                _refuse(what, path, "is not a finite number (NaN, Infinity)")
        elif isinstance(item, _Refused):
            if item.text.lstrip("-").isdigit():
                _refuse(what, path, "has an integer too large (at most 2^63 - 1)")
            _refuse(what, path, f"is not a finite number ({_short(item.text)})")
        else:
            _refuse(what, path, f"holds a {type(item).__name__}, not a JSON value")


def _check_text(what: str, path: str, text: str) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        _refuse(what, path, "has text that is not valid Unicode (a lone surrogate)")


def _short(text: str) -> str:
    return text if len(text) <= 20 else f"{text[:8]}...{text[-4:]}, {len(text)} chars"


def _refuse(what: str, path: str, problem: str) -> None:
    where = f"'{path}'" if path else "the document"
    raise UntrustedDataError(path, f"{what}: {where} {problem}.")


def read_file(
    path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES
) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes.

    :class:`UntrustedDataError` (``what`` names the file in the sentence) if
    it is missing, not a regular file (a folder, a device, a FIFO), larger
    than ``limit`` or unreadable.
    """
    p = Path(path)
    try:
        info = p.stat()
    except FileNotFoundError:
        raise UntrustedDataError("", f"{what} does not exist.") from None
    except (OSError, ValueError) as exc:
        raise UntrustedDataError(
            "", f"{what} cannot be read ({_reason(exc)})."
        ) from None
    if stat.S_ISDIR(info.st_mode):
        raise UntrustedDataError("", f"{what} is a folder, not a file.")
    if not stat.S_ISREG(info.st_mode):
        raise UntrustedDataError("", f"{what} is not a regular file.")
    if info.st_size > limit:
        raise UntrustedDataError("", f"{what} is larger than {_size(limit)}.")
    try:
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise UntrustedDataError(
            "", f"{what} cannot be read ({_reason(exc)})."
        ) from None
    if len(data) > limit:  # it grew while we looked
        raise UntrustedDataError("", f"{what} is larger than {_size(limit)}.")
    return data


def load_file(
    path: str | os.PathLike[str], what: str, limit: int = MAX_FILE_BYTES
) -> Any:
    """:func:`read_file`, then :func:`loads`."""
    return loads(read_file(path, what, limit), what)


def _reason(exc: BaseException) -> str:
    return str(getattr(exc, "strerror", None) or exc)


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):g} MiB" if n >= 1024 * 1024 else f"{n:,} bytes"
