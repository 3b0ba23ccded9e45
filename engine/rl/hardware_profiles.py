"""Hardware profiles: named sets of the ``rl.train`` settings that depend on
the machine (:data:`PROFILE_SETTINGS`).

A run names one in its ``hardware_profile`` setting; validation
(:func:`engine.rl.config.validate`) writes the profile's settings into the
run's config, except those the run gives itself, and lists what it applied in
the run's notes. Three profiles are built in (:data:`BUILTIN`): ``auto``
fixes nothing (every setting follows the detected hardware and the preset,
as without a profile), ``cpu`` trains on the CPU alone whatever GPUs there
are, and ``gpu`` on the machine's GPU, refused where none is detected. A
user saves their own in ``hardware_profiles.json`` in the user's config
folder (:func:`profiles_file`), written atomically; a malformed file or entry
is one sentence, and the other profiles stay usable.

GPUs are found by :func:`engine.hardware.detect_gpus` (NVML or
``nvidia-smi``, never torch; cached per process), only for the ``gpu``
profile and for previews. This module reads no other ``rl.train`` setting:
the values a profile holds are checked by the caller
(:func:`engine.rl.config.check_profile_settings`), which knows the settings.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import untrusted
from engine.contract import atomic_write_json
from engine.errors import ConfigError, quoted

PROFILE_SETTINGS = ("device", "torch_threads", "n_envs", "backend")
"""The ``rl.train`` settings a hardware profile may fix."""
BUILTIN = ("auto", "cpu", "gpu")
DEFAULT_PROFILE = "auto"
PROFILES_FILE_NAME = "hardware_profiles.json"
PROFILES_FORMAT = 1
NAME_PATTERN = r"[A-Za-z][A-Za-z0-9_.\-]{0,39}"
"""What a saved profile's name may be: a letter, then up to 39 letters,
digits, ``_``, ``.`` or ``-``."""

Check = Callable[[str, Mapping[str, Any]], dict[str, Any]]
"""Checks a profile's settings (profile name, settings), returning them
coerced or raising ConfigError (see :func:`engine.rl.config.check_profile_settings`)."""


@dataclass(frozen=True)
class Profile:
    name: str
    settings: dict[str, Any]
    """The settings it fixes (keys of :data:`PROFILE_SETTINGS`)."""
    description: str
    builtin: bool = False


@dataclass(frozen=True)
class SavedProfiles:
    """The user's saved profiles as read, and what is wrong with the file."""

    profiles: dict[str, Profile] = field(default_factory=dict)
    """The usable ones, by name."""
    entries: dict[str, Any] = field(default_factory=dict)
    """Every entry of the file as read, usable or not (kept when saving)."""
    problems: tuple[str, ...] = ()
    """One sentence per malformed entry, or one for a malformed file."""
    readable: bool = True
    """False when the file itself cannot be read as profiles: saving would
    lose them, so it is refused."""


def user_config_dir() -> Path:
    """The user's RL Studio config folder: ``$XDG_CONFIG_HOME/rl-studio``
    (``~/.config/rl-studio``), ``%APPDATA%\\rl-studio`` on Windows,
    ``~/Library/Application Support/rl-studio`` on macOS."""
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or str(Path.home() / "AppData" / "Roaming")
    elif sys.platform == "darwin":
        base = str(Path.home() / "Library" / "Application Support")
    else:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rl-studio"


def profiles_file() -> Path:
    """Where the user's saved hardware profiles are kept."""
    return user_config_dir() / PROFILES_FILE_NAME


def name_problem(name: object) -> str:
    """Why ``name`` cannot be a saved profile's name ('' when it can)."""
    if not isinstance(name, str) or not re.fullmatch(NAME_PATTERN, name):
        return (
            f"A hardware profile's name must be a letter followed by up to 39 "
            f"letters, digits, '_', '.' or '-', not {quoted(name)}."
        )
    if name in BUILTIN:
        return (
            f"{quoted(name)} is a built-in hardware profile; save yours under "
            "another name."
        )
    return ""


def _entry_problem(name: str, entry: Any) -> str:
    problem = name_problem(name)
    if problem:
        return problem
    if not isinstance(entry, dict):
        return f"The saved hardware profile {quoted(name)} is not a set of settings."
    for key, value in entry.items():
        if key not in PROFILE_SETTINGS:
            return (
                f"The saved hardware profile {quoted(name)} sets {quoted(key)}, "
                f"which a profile cannot set (only {', '.join(PROFILE_SETTINGS)})."
            )
        if not isinstance(value, str | int) or isinstance(value, bool):
            return (
                f"The saved hardware profile {quoted(name)} sets {key} to "
                f"{quoted(value)}, which is neither text nor a whole number."
            )
    return ""


def load_saved(path: Path | None = None) -> SavedProfiles:
    """The user's saved profiles (none when the file does not exist)."""
    path = profiles_file() if path is None else path
    if not path.exists():
        return SavedProfiles()
    try:
        data = untrusted.load_file(path, f"The hardware profiles file {path}")
    except untrusted.UntrustedDataError as exc:
        return SavedProfiles(problems=(str(exc),), readable=False)
    entries = data.get("profiles") if isinstance(data, dict) else None
    if not isinstance(entries, dict):
        return SavedProfiles(
            problems=(
                f"The hardware profiles file {path} holds no 'profiles' object; "
                "fix or remove it to use saved profiles.",
            ),
            readable=False,
        )
    profiles: dict[str, Profile] = {}
    problems: list[str] = []
    for name, entry in entries.items():
        problem = _entry_problem(name, entry)
        if problem:
            problems.append(problem)
            continue
        profiles[name] = Profile(name, dict(entry), "saved by you")
    return SavedProfiles(profiles, dict(entries), tuple(problems))


def save_profile(
    name: str, settings: Mapping[str, Any], check: Check, path: Path | None = None
) -> Path:
    """Save (or replace) the profile ``name`` fixing ``settings``, after
    ``check``; the file's other entries are kept as they are. Returns the
    file. A ConfigError naming ``hardware_profile`` when the name or a
    setting cannot be, or the file is malformed (it is left untouched)."""
    path = profiles_file() if path is None else path
    problem = name_problem(name)
    if problem:
        raise ConfigError("hardware_profile", problem)
    if not settings:
        raise ConfigError(
            "hardware_profile",
            f"The hardware profile {quoted(name)} needs at least one setting "
            f"({', '.join(PROFILE_SETTINGS)}).",
        )
    problem = _entry_problem(name, dict(settings))
    if problem:
        raise ConfigError("hardware_profile", problem)
    checked = check(name, settings)
    saved = load_saved(path)
    if not saved.readable:
        raise ConfigError(
            "hardware_profile",
            f"{saved.problems[0].rstrip('.')}; fix or remove it before saving a "
            "profile, so that the profiles it holds are not lost.",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = {**saved.entries, name: checked}
    atomic_write_json(path, {"format": PROFILES_FORMAT, "profiles": entries})
    return path


def builtin_profiles(gpu_backend: str | None) -> dict[str, Profile]:
    """The built-in profiles; ``gpu_backend`` is the detected GPU's
    (``cuda`` or ``mps``; None: no GPU, and the ``gpu`` profile then fixes
    ``cuda``, to be refused by :func:`find`)."""
    return {
        "auto": Profile(
            "auto",
            {},
            "derived from the detected hardware and the preset",
            builtin=True,
        ),
        "cpu": Profile(
            "cpu",
            {"device": "cpu", "backend": "auto"},
            "the CPU only, threads from its cores",
            builtin=True,
        ),
        "gpu": Profile(
            "gpu",
            {"device": gpu_backend or "cuda", "backend": "auto"},
            "the machine's GPU",
            builtin=True,
        ),
    }


def detected_gpu_backend() -> str | None:
    """The backend (``cuda``, ``mps``) of the largest detected GPU; None
    without one. Detection is cached per process (no torch import)."""
    from engine.hardware import detect_gpus

    gpus = detect_gpus()
    if not gpus:
        return None
    return max(gpus, key=lambda g: g.memory_total_bytes).backend


def all_profiles(
    saved: SavedProfiles | None = None, gpu_backend: str | None = None
) -> dict[str, Profile]:
    """Built-in then saved profiles, by name."""
    saved = load_saved() if saved is None else saved
    return {**builtin_profiles(gpu_backend), **saved.profiles}


def gpu_problem(gpu_backend: str | None) -> str:
    """Why the ``gpu`` profile cannot be used here ('' when it can)."""
    if gpu_backend is None:
        return (
            "The gpu hardware profile needs a GPU, and none was detected on this "
            "machine; choose auto or cpu."
        )
    return ""


def find(name: object, saved: SavedProfiles | None = None) -> Profile:
    """The profile ``name``; a ConfigError naming ``hardware_profile`` when
    there is none or it cannot run here (``gpu`` without a GPU)."""
    saved = load_saved() if saved is None else saved
    if name == "gpu":
        backend = detected_gpu_backend()
        problem = gpu_problem(backend)
        if problem:
            raise ConfigError("hardware_profile", problem)
        return builtin_profiles(backend)["gpu"]
    known = all_profiles(saved)
    if isinstance(name, str) and name in known:
        return known[name]
    why = f" ({'; '.join(saved.problems)})" if saved.problems else ""
    raise ConfigError(
        "hardware_profile",
        f"Unknown hardware profile {quoted(name)}; choose one of "
        f"{', '.join(known)}{why}.",
    )


def apply_profile(
    name: object, given: Mapping[str, Any], check: Check
) -> tuple[dict[str, Any], list[str]]:
    """The settings of the profile ``name`` a run gets, checked: those
    ``given`` does not hold (not None), as a setting the run gives wins.
    Returns (those settings, the notes saying so for the run log)."""
    profile = find(name)
    applied = {k: v for k, v in profile.settings.items() if given.get(k) is None}
    kept = sorted(k for k in profile.settings if k not in applied)
    checked = check(profile.name, applied)
    if not applied:
        # Nothing to say (a validated config gives them all: validating it
        # again adds no note).
        return {}, []
    parts = ", ".join(f"{k} {value}" for k, value in checked.items())
    note = f"hardware profile {quoted(profile.name)} set {parts}"
    if kept:
        note += f" (the run's own {', '.join(kept)} kept)"
    return checked, [note]
