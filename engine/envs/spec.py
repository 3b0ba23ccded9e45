"""Designed-environment specs: load, migrate, check the fields.

A spec file ``<name>.env.json`` holds ``{"format": 1, "name", "kind",
"description", <kind>: {...}}`` (see :mod:`engine.envs.schema`). Files of an
older format are migrated on load by the functions in :data:`MIGRATIONS`
(version N -> N + 1); the file itself is only rewritten when the caller saves.

Every problem carries the JSON path of the field that causes it, so the
designer can show it on that field and the command line can name it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import untrusted
from engine.contract import (
    ENV_NAMESPACE,
    SPEC_SUFFIX,
    env_name,
    read_json_object,
    spec_file,
)
from engine.envs.schema import FORMAT_VERSION, KINDS, join_path, schema_problems
from engine.envs.spec_types import (
    EnvSpec,
    Problem,
    SpecError,
    path_exists,
)
from engine.errors import EngineError
from engine.store.paths import checked_name, inside

# ---------------------------------------------------------------- migrations


def _migrate_0_to_1(data: dict[str, Any]) -> dict[str, Any]:
    """Format 0 (pre-release): flat fields, ``type`` instead of ``kind``,
    workflow ``states``/``actions``/``initial_state``/``terminal_states`` and
    transitions ``{state, action, next, p}``."""
    out: dict[str, Any] = {
        "format": 1,
        "name": data.get("name", ""),
        "kind": data.get("type", data.get("kind", "")),
        "description": data.get("description", ""),
    }
    kind = out["kind"]
    if not isinstance(kind, str):
        raise SpecError("kind", f"kind must be text, not {type(kind).__name__}.")
    body = {
        k: v
        for k, v in data.items()
        if k not in ("version", "format", "name", "type", "kind", "description")
    }
    if kind == "workflow":
        renames = {
            "states": "statuses",
            "initial_state": "start",
            "terminal_states": "terminal",
            "success_states": "success",
        }
        body = {renames.get(k, k): v for k, v in body.items()}
        body["tools"] = [
            a if isinstance(a, dict) else {"name": a} for a in body.pop("actions", [])
        ]
        transitions = []
        for t in body.get("transitions", []):
            new = {"from": t.get("state"), "tool": t.get("action"), "to": t.get("next")}
            if "p" in t:
                new["probability"] = t["p"]
            transitions.append(new)
        body["transitions"] = transitions
        if "rewards" in body:
            r = body["rewards"]
            body["rewards"] = {
                k2: r[k0]
                for k0, k2 in (
                    ("step", "per_step"),
                    ("states", "status"),
                    ("invalid_action", "invalid_tool"),
                    ("success", "success_bonus"),
                )
                if k0 in r
            }
    out[kind] = body
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _migrate_0_to_1,
}
"""``MIGRATIONS[n]`` turns a format-n document into format n + 1."""


def spec_format(data: dict[str, Any]) -> int:
    """The format of a raw document; files without ``format`` are format 0."""
    version = data.get("format", data.get("version", 0))
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise SpecError("format", f"format must be a whole number, not {version!r}.")
    return version


def migrate(data: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Bring ``data`` to :data:`FORMAT_VERSION`; returns it and the old format."""
    version = spec_format(data)
    if version > FORMAT_VERSION:
        raise SpecError(
            "format",
            f"The spec has format {version}, newer than this RL Studio reads "
            f"({FORMAT_VERSION}); update RL Studio.",
        )
    start = version
    data = copy.deepcopy(data)
    while version < FORMAT_VERSION:
        try:
            data = MIGRATIONS[version](data)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # An old file of a shape that format never had.
            raise SpecError(
                "format",
                f"The spec of format {version} cannot be brought up to date: its "
                f"content is not laid out as format {version} was ({exc}).",
            ) from None
        version += 1
    return data, start


# ---------------------------------------------------------------- loading


def read_spec_json(path: str | Path) -> dict[str, Any]:
    """Read a spec file as JSON; a missing or malformed file raises EngineError."""
    p = Path(path)
    try:
        data = untrusted.load_file(p, f"The spec file {p}")
    except untrusted.UntrustedDataError as exc:
        raise SpecError(exc.field, str(exc)) from None
    if not isinstance(data, dict):
        raise EngineError(f"The spec file {p} must hold a JSON object.")
    return data


def parse_spec(
    data: dict[str, Any], source: str | Path | None = None
) -> tuple[EnvSpec | None, list[Problem]]:
    """Migrate and check ``data``; returns the spec (None if it cannot be
    built) and every problem found, errors and warnings."""
    try:
        untrusted.check(data, "The spec")
        data, old = migrate(data)
    except untrusted.UntrustedDataError as exc:
        return None, [Problem("error", exc.field, str(exc))]
    except SpecError as exc:
        return None, [Problem("error", exc.field, str(exc))]
    problems = [Problem("error", p, m) for p, m in schema_problems(data)]
    if any(p.path in ("", "name", "kind") for p in problems):
        return None, problems
    kind = data["kind"]
    if kind not in data:
        return None, problems
    spec = EnvSpec(
        name=data["name"],
        kind=kind,
        body=data[kind],
        description=data.get("description", ""),
        source=Path(source) if source is not None else None,
        migrated_from=old if old != FORMAT_VERSION else None,
    )
    for other in KINDS:
        if other != kind and other in data:
            problems.append(
                Problem("warning", other, f"'{other}' is ignored for a {kind} env.")
            )
    if not any(p.path.startswith(kind) for p in problems):
        problems.extend(kind_problems(spec))
    return spec, problems


def kind_problems(spec: EnvSpec) -> list[Problem]:
    """Field checks beyond the schema: names that must exist, probabilities, ..."""
    if spec.kind == "workflow":
        from engine.envs.workflow_model import workflow_problems

        return workflow_problems(spec)
    if spec.kind == "grid":
        return grid_problems(spec)
    if spec.kind == "python":
        f = spec.resolve(spec.body["file"])
        if not path_exists(f, file=True):
            return [Problem("error", "python.file", f"python.file {f} does not exist.")]
    return []


def designed_spec_file(env_id: str, project_dir: str | Path | None) -> Path | None:
    """The spec file of the designed env ``env_id`` (``rlstudio/<name>-v0``)
    in the project, if there is one: ``envs/<name>.env.json``, else the spec
    whose ``name`` it is (a file may be named otherwise). A name that cannot
    be a file name, or a file that links out of the project, is a ConfigError
    naming ``env``: a shared flow cannot point at a spec elsewhere."""
    name = env_name(env_id)
    if name is None or project_dir is None:
        return None
    path = spec_file(project_dir, checked_name("env", name))
    inside(project_dir, path.relative_to(project_dir), "env")
    if path.is_file():
        return path
    for candidate in sorted(path.parent.glob(f"*{SPEC_SUFFIX}")):
        data = read_json_object(candidate)
        if data is not None and data.get("name") == name:
            return candidate
    return None


def load_spec(path: str | Path) -> EnvSpec:
    """Read, migrate and check a spec file.

    Raises EngineError for a missing or malformed file and SpecError (with
    ``field``) for the first error in its content.
    """
    spec, problems = parse_spec(read_spec_json(path), source=path)
    for p in problems:
        if p.severity == "error":
            raise SpecError(p.path, f"{Path(path).name}: {p.message}")
    assert spec is not None
    return spec


def coerce_spec(
    spec: EnvSpec | dict[str, Any] | str | Path, source: str | Path | None = None
) -> EnvSpec:
    """An EnvSpec from a spec, a raw document (its relative paths resolved
    from ``source``, the file it was read from, as :func:`parse_spec` does)
    or a file path."""
    if isinstance(spec, EnvSpec):
        return spec
    if isinstance(spec, dict):
        built, problems = parse_spec(spec, source=source)
        for p in problems:
            if p.severity == "error":
                raise SpecError(p.path, p.message)
        assert built is not None
        return built
    return load_spec(spec)


# ---------------------------------------------------------------- grid checks


def grid_problems(spec: EnvSpec) -> list[Problem]:
    body = spec.body
    rows, cols = body["size"]
    out: list[Problem] = []

    def cell_ok(cell: list[int], where: str) -> bool:
        if cell[0] >= rows or cell[1] >= cols:
            out.append(
                Problem(
                    "error",
                    where,
                    f"{where} {cell} lies outside the {rows}x{cols} grid.",
                )
            )
            return False
        return True

    walls = set()
    for i, c in enumerate(body.get("walls", [])):
        if cell_ok(c, f"grid.walls[{i}]"):
            walls.add(tuple(c))
    if cell_ok(body["start"], "grid.start") and tuple(body["start"]) in walls:
        out.append(Problem("error", "grid.start", "grid.start is on a wall."))
    for key in ("goals", "traps"):
        for i, c in enumerate(body.get(key, [])):
            where = f"grid.{key}[{i}]"
            if cell_ok(c, where) and tuple(c) in walls:
                out.append(Problem("error", where, f"{where} {c} is on a wall."))
    for i, item in enumerate(body.get("cell_rewards", [])):
        cell_ok(item["cell"], f"grid.cell_rewards[{i}].cell")
    return out


__all__ = [
    "ENV_NAMESPACE",
    "MIGRATIONS",
    "SPEC_SUFFIX",
    "EnvSpec",
    "Problem",
    "SpecError",
    "coerce_spec",
    "designed_spec_file",
    "join_path",
    "load_spec",
    "migrate",
    "parse_spec",
    "read_spec_json",
]
