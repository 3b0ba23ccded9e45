"""Paths built from names stay inside their root.

Every name or id that becomes part of a path (a model, data set or trace
name, a node id) is checked against the one pattern, ``engine.flow.PATH_NAME``,
and the path it makes is resolved (symbolic links followed) and must lie
inside its root. A violation is a ``ConfigError`` naming the field, raised
before anything is written. :func:`link_out` finds the folders of a root
that lead out of it (a project checks its own when it opens and before
each run).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from engine.errors import ConfigError, quoted
from engine.flow import path_name_problem

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, empty: str = "model") -> str:
    """A display name (``PPO CartPole-v1 · brisk-otter``) as one part of a
    file name: letters, digits, ``.``, ``-`` and ``_`` (``empty`` when none
    is left)."""
    return _UNSAFE.sub("-", name).strip("-.") or empty


def checked_name(field: str, value: object) -> str:
    """``value`` when it may be one part of a path, else a ConfigError."""
    problem = path_name_problem(f"The {field}", value)
    if problem:
        raise ConfigError(field, problem)
    assert isinstance(value, str)
    return value


def chosen_path(
    project_dir: str | os.PathLike[str], out: str, field: str = "out"
) -> Path:
    """The file or folder a job's ``out`` setting names: an absolute path as
    it is (the user chose it in a file dialog); a relative one is taken from
    the project folder and must stay inside it (else a ConfigError naming
    ``field``), and not under a file."""
    path = Path(out).expanduser()
    path = path if path.is_absolute() else inside(project_dir, path, field)
    for folder in path.parents:  # the nearest that exists must be a folder
        if folder.exists():
            if not folder.is_dir():
                raise ConfigError(
                    field,
                    f"The {field} {quoted(str(out))} lies under {quoted(str(folder))}, "
                    "which is a file, not a folder.",
                )
            break
    return path


def inside(
    root: str | os.PathLike[str], path: str | os.PathLike[str], field: str
) -> Path:
    """``path`` (relative ones are taken from ``root``) when it resolves to a
    place inside ``root``, symbolic links followed; else a ConfigError."""
    base = Path(root)
    target = base / path
    if "\0" in str(target):
        raise ConfigError(field, f"The {field} must not contain a NUL character.")
    try:
        real_root = base.resolve()
        real = target.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, a name too long
        raise ConfigError(
            field,
            f"The {field} {quoted(str(path))} cannot be resolved "
            f"({getattr(exc, 'strerror', None) or type(exc).__name__}).",
        ) from None
    if real != real_root and not real.is_relative_to(real_root):
        raise ConfigError(
            field,
            f"The {field} {quoted(str(path))} leads outside {base} (to {real}); "
            "it must stay inside.",
        )
    return target


def child(
    root: str | os.PathLike[str],
    folder: str,
    name: object,
    field: str,
    suffix: str = "",
) -> Path:
    """``root/<folder>/<name><suffix>`` for a checked ``name``, proven inside
    ``root`` (the project: a ``folder`` that links out is refused too)."""
    return inside(root, Path(folder, checked_name(field, name) + suffix), field)


def link_out(
    root: str | os.PathLike[str],
    paths: Iterable[str],
    folders: Iterable[str] = (),
) -> tuple[str, Path] | None:
    """The first of ``paths`` (relative to ``root``), or entry directly in
    one of ``folders``, that resolves outside ``root`` (a symbolic link to
    elsewhere, dangling or not), with where it leads; None when all stay in.

    Only links are resolved in ``folders`` (``os.scandir`` tells them apart
    without a ``stat``), so a folder of thousands of runs costs a listing.
    """
    real_root = Path(root).resolve()

    def outside(path: Path) -> Path | None:
        try:
            real = path.resolve()
        except (OSError, RuntimeError):  # a loop: it cannot be written either
            return path
        inside = real == real_root or real.is_relative_to(real_root)
        return None if inside else real

    for rel in paths:
        path = real_root / rel
        if os.path.lexists(path) and (real := outside(path)) is not None:
            return rel, real
    for folder in folders:
        try:
            entries = list(os.scandir(real_root / folder))
        except OSError:  # missing, or not a folder: nothing in it to check
            continue
        for entry in entries:
            if entry.is_symlink() and (real := outside(Path(entry.path))) is not None:
                return f"{folder}/{entry.name}", real
    return None
