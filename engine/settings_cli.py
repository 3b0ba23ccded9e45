"""Command-line options derived from a job's config dataclass.

A job's settings are declared once, in its config dataclass (type, default,
range, unit, and the help in the field's docstring). A command offers some of
them as options of their own, named after the setting (``max_frames`` is
``--max-frames``), and takes any other with ``--set KEY=VALUE``; neither
lists a type, default or help again. Stdlib only, like
:mod:`engine.settings`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from engine.errors import EngineError, quoted
from engine.settings import FieldInfo, fields_of

_TYPES: dict[str, type] = {"int": int, "float": float, "str": str}


def flag_of(name: str) -> str:
    """``max_frames`` → ``--max-frames``."""
    return "--" + name.replace("_", "-")


def _help(info: FieldInfo) -> str:
    first = info.help.split(". ")[0].strip().rstrip(".").replace("``", "")
    unit = f", in {info.unit}" if info.unit else ""
    default = "" if info.default in (None, "") else f"; default {info.default}"
    # argparse formats help with %: a literal one is doubled
    return f"{first}{unit}{default}".replace("%", "%%")


def add_setting_options(
    parser: argparse.ArgumentParser,
    cls: type,
    names: Iterable[str],
    *,
    flags: Mapping[str, str] | None = None,
    required: Collection[str] = (),
) -> None:
    """An option for each setting ``names`` of the config dataclass ``cls``:
    its type, default and help from the declaration; a bool setting is
    ``--name`` / ``--no-name``. ``flags`` renames an option (the setting
    ``eval_episodes`` offered as ``--episodes``); ``required`` ones must be
    given."""
    fields = fields_of(cls)
    for name in names:
        info = fields[name]
        flag = (flags or {}).get(name, flag_of(name))
        common: dict[str, Any] = {"dest": name}
        if name in required:
            common.update(required=True, help=_help(replace(info, default=None)))
        else:
            common.update(default=info.default, help=_help(info))
        if info.kind == "bool":
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, **common)
        elif info.kind in _TYPES:
            metavar = flag.lstrip("-").replace("-", "_").upper()
            parser.add_argument(flag, type=_TYPES[info.kind], metavar=metavar, **common)
        else:  # a list or structure setting is given with --set, as JSON
            raise TypeError(f"{cls.__name__}.{name} ({info.kind}) has no option form")


def setting_values(args: argparse.Namespace, names: Iterable[str]) -> dict[str, Any]:
    """The values of the options :func:`add_setting_options` added."""
    return {name: getattr(args, name) for name in names}


def add_set_option(
    parser: argparse.ArgumentParser, what: str = "any other setting of the job"
) -> None:
    """``--set KEY=VALUE`` (repeatable, into ``settings``): ``what`` it sets."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="settings",
        help=f"{what} (repeatable)",
    )


def set_items(items: Iterable[str]) -> Iterator[tuple[str, str]]:
    """Each ``--set KEY=VALUE`` item as ``(key, value text)``; an item
    without a key and ``=`` is one sentence."""
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise EngineError(f"--set takes key=value, not {quoted(item)}.")
        yield key, raw


def set_value(raw: str, info: FieldInfo | None) -> Any:
    """A ``--set`` value read as its setting ``info`` is declared: as it is
    for a text setting (``name=007``), else as JSON when it parses
    (``1e-3``, ``true``, ``[64,64]``), as text otherwise."""
    if info is not None and info.kind == "str" and not info.numeric_text:
        return raw
    try:
        return json.loads(raw)
    # Not JSON, or JSON Python cannot hold (an int of over 4,300 digits,
    # lists nested past the recursion limit): text.
    except (ValueError, RecursionError):
        return raw


def parse_sets(
    items: list[str], cls: type, own_options: dict[str, str]
) -> dict[str, Any]:
    """``key=value`` items as settings of the config dataclass ``cls``, each
    value read by :func:`set_value`. ``own_options`` maps the settings that
    have their own option to it."""
    fields = fields_of(cls)
    out: dict[str, Any] = {}
    for key, raw in set_items(items):
        if key in own_options:
            raise EngineError(f"Give {key} with {own_options[key]}, not with --set.")
        info = fields.get(key)
        if info is None or not info.form:
            known = ", ".join(n for n, f in fields.items() if f.form)
            raise EngineError(f"--set {key}: no such setting; the settings: {known}.")
        out[key] = set_value(raw, info)
    return out
