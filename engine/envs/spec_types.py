"""The spec types every designed-env module shares: :class:`EnvSpec`,
:class:`Problem`, :class:`SpecError`.

They live below both :mod:`engine.envs.spec` (loading, migration, field
checks) and the kind modules whose checks the spec module runs
(:mod:`engine.envs.workflow_model`), so neither imports the other in a
circle. :mod:`engine.envs.spec` re-exports them.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.contract import env_id
from engine.envs.schema import FORMAT_VERSION
from engine.errors import ConfigError

Severity = Literal["error", "warning", "info"]


class SpecError(ConfigError):
    """A spec that cannot be compiled; ``field`` is the JSON path of the culprit."""


@dataclass(frozen=True)
class Problem:
    """One finding about a spec, shown on the field at ``path``."""

    severity: Severity
    path: str
    """JSON path of the field, e.g. ``workflow.transitions[3].to`` ('' = whole spec)."""
    message: str
    """One sentence for the user."""
    check: str = "spec"
    """Which check found it: spec, gymnasium_check_env, sb3_check_env, ..."""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class EnvSpec:
    """A parsed, migrated spec. ``body`` is the kind-specific part."""

    name: str
    kind: str
    body: dict[str, Any]
    description: str = ""
    format: int = FORMAT_VERSION
    source: Path | None = None
    """The file it was read from, if any; relative paths resolve against it."""
    migrated_from: int | None = None
    """The format found on disk when it was older than :data:`FORMAT_VERSION`."""
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def env_id(self) -> str:
        return env_id(self.name)

    @property
    def base_dirs(self) -> list[Path]:
        """Folders that relative paths in the spec resolve against, in order:
        the project (the parent of ``envs/``), then the spec's own folder."""
        if self.source is None:
            return [Path.cwd()]
        folder = self.source.resolve().parent
        return (
            [folder.parent, folder]
            if folder.name == "envs"
            else [folder, folder.parent]
        )

    def resolve(self, relative: str) -> Path:
        """The first existing file for ``relative``, else its path in the project."""
        p = Path(relative).expanduser()
        if p.is_absolute():
            return p
        for base in self.base_dirs:
            if path_exists(base / p):
                return base / p
        return self.base_dirs[0] / p

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            self.kind: copy.deepcopy(self.body),
        }
        return out

    def fingerprint(self) -> str:
        """Changes when the spec or a file it references changes."""
        h = hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode())
        h.update(str(self.source).encode())
        for rel in _referenced_files(self):
            p = self.resolve(rel)
            h.update(str(p).encode())
            if path_exists(p):
                st = p.stat()
                h.update(f"{st.st_mtime_ns}:{st.st_size}".encode())
        return h.hexdigest()[:16]


def path_exists(path: Path, *, file: bool = False) -> bool:
    """Whether ``path`` exists (is a file); False, not an error, for a name
    the OS refuses (too long, a NUL byte)."""
    try:
        return path.is_file() if file else path.exists()
    except (OSError, ValueError):
        return False


def _referenced_files(spec: EnvSpec) -> list[str]:
    if spec.kind == "workflow":
        data = spec.body.get("tasks", {}).get("data")
        return [data] if isinstance(data, str) else []
    if spec.kind == "python":
        f = spec.body.get("file")
        return [f] if isinstance(f, str) else []
    return []
