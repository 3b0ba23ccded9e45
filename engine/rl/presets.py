"""The built-in presets of ``rl.train``, read from ``resources/presets/``.

A preset is the settings a run of one algorithm on one environment starts
from (:class:`~engine.rl.config.TrainConfig` fields and the algorithm's
hyperparameters mixed, as a project preset holds them) and its
``provenance``: where the values come from, shown where presets are chosen,
in ``train --help`` and in each run's log.

The files are data, one per environment (``<env id with / as ->.json``),
because presets change one environment at a time: a sweep that retunes
Acrobot rewrites one small file, and its diff is that environment's alone.
Each file holds::

    {"format": 1, "env": "Taxi-v3", "aliases": ["Taxi-v4"],
     "note": "why these values (optional)",
     "notes": {"PPO": "how this preset differs from RL Zoo's (optional)"},
     "presets": {"PPO": {"provenance": {...} or "hand-set", "n_envs": 8, ...}}}

``aliases`` are other ids of the same task (Gymnasium 1.x renamed Taxi-v3),
mapped to the same presets. A ``provenance`` given as a string names a
shared record of ``sources.json`` (RL Zoo's published settings, hand-set
ones), declared there once. ``note`` and ``notes`` are for the reader of the
file (what JSON cannot hold as comments) and are not loaded.

The files travel with the ``resources`` package (``package-data`` in
``pyproject.toml``) and are found like the bundled examples, through
:func:`resources.resource_path`. They are read once, on first use, and
checked: a malformed file is a bug in RL Studio, reported as one sentence
naming the file and the key at fault (:class:`BundledPresetError`).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from resources import resource_path

PRESETS_FORMAT = 1
"""Format version of the bundled preset files."""
SOURCES_FILE = "sources.json"
"""The file of shared provenance records, named by the presets that use them."""

Presets = dict[str, dict[str, dict[str, Any]]]
"""env id -> algo -> preset (TrainConfig keys and hyperparameters mixed, and
``provenance``)."""


class BundledPresetError(EngineError):
    """A bundled preset file that cannot be read: a bug in RL Studio."""


def presets_folder() -> Path:
    """Where the bundled preset files are, in a checkout or an installed copy."""
    return resource_path("presets")


def file_stem(env_id: str) -> str:
    """The name (without ``.json``) of the file holding ``env_id``'s presets."""
    return env_id.replace("/", "-")


@functools.cache
def builtin_presets() -> Presets:
    """Every built-in preset, read from :func:`presets_folder` once.

    The same mutable dict is returned on every call: a benchmark that races
    an environment without its preset takes the entry out and puts it back
    (``tests/benchmarks/time_to_target.py``)."""
    return load_presets(presets_folder())


def load_presets(folder: Path) -> Presets:
    """The presets of the files in ``folder`` (``sources.json`` and one file
    per environment), in file-name order; a :class:`BundledPresetError`
    naming the file and key when one is malformed."""
    sources = _read_sources(folder / SOURCES_FILE)
    presets: Presets = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == SOURCES_FILE:
            continue
        record = _read_object(path)
        env_id = record.get("env")
        if not isinstance(env_id, str) or not env_id:
            raise _malformed(path, "env", "must be an environment id")
        if path.stem != file_stem(env_id):
            raise _malformed(path, "env", f"must match the file name {path.name!r}")
        aliases = record.get("aliases", [])
        if not isinstance(aliases, list) or not all(
            isinstance(a, str) and a for a in aliases
        ):
            raise _malformed(path, "aliases", "must be a list of environment ids")
        by_algo = _read_presets(path, record.get("presets"), sources)
        for name in (env_id, *aliases):
            if name in presets:
                raise _malformed(path, "env", f"repeats {name!r}, given before")
            presets[name] = by_algo
    return presets


def _read_sources(path: Path) -> dict[str, dict[str, Any]]:
    sources = _read_object(path).get("sources")
    if not isinstance(sources, dict) or not all(
        isinstance(v, dict) and isinstance(v.get("source"), str)
        for v in sources.values()
    ):
        raise _malformed(path, "sources", "must map names to records with a 'source'")
    return sources


def _read_presets(
    path: Path, value: Any, sources: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    if not isinstance(value, dict) or not value:
        raise _malformed(path, "presets", "must map algorithm names to presets")
    by_algo: dict[str, dict[str, Any]] = {}
    for algo, preset in value.items():
        key = f"presets.{algo}"
        if not isinstance(preset, dict):
            raise _malformed(path, key, "must be an object of settings")
        where = preset.get("provenance")
        if isinstance(where, str):
            if where not in sources:
                raise _malformed(
                    path,
                    f"{key}.provenance",
                    f"names {where!r}, which {SOURCES_FILE} does not hold",
                )
            where = sources[where]
        if not isinstance(where, dict) or not isinstance(where.get("source"), str):
            raise _malformed(
                path,
                f"{key}.provenance",
                f"must be a record with a 'source' or a name from {SOURCES_FILE}",
            )
        by_algo[algo] = {**preset, "provenance": where}
    return by_algo


def _read_object(path: Path) -> dict[str, Any]:
    """The JSON object in ``path`` at the current format."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BundledPresetError(
            f"The bundled preset file {path} cannot be read ({exc}); "
            "RL Studio's installation is damaged."
        ) from None
    if not isinstance(record, dict):
        raise BundledPresetError(
            f"The bundled preset file {path} does not hold a JSON object; "
            "RL Studio's installation is damaged."
        )
    if record.get("format") != PRESETS_FORMAT:
        raise _malformed(path, "format", f"must be {PRESETS_FORMAT}")
    return record


def _malformed(path: Path, key: str, problem: str) -> BundledPresetError:
    return BundledPresetError(
        f"The bundled preset file {path} is malformed: {key!r} {problem}."
    )
