"""A studio project on disk: a folder, with its SQLite catalog.

```
project/
  studio.sqlite            runs, models, lineage (SQLite, WAL)
  envs/<name>.env.json     designed environments
  flows/<name>.flow.json   workflow graphs
  runs/<run-id>/           config.json, metrics.jsonl, log.txt, result.json, ...
  models/<model-id>/       registered model files
  data/                    trajectories, datasets
```

Several processes write the database (SQLite serialises them): the
supervisor of each engine on the project (a studio's, ``serve-http``'s), a
headless ``rl-studio-engine train`` or ``run``, sweep workers, and a job that
went on headless after its studio died. Job processes otherwise write their
own run folder. Labels and trajectories have databases of their own under
``data/``; so do the agents, their versions and the settings that say how
they are served (:mod:`engine.store.agent_catalog`, which a PostgreSQL
database may hold for several projects), which a model's row here does not
repeat. The database is the index; the run folders are the truth: a run
whose row says ``running`` but whose process is gone is reconciled from its
``result.json`` or marked ``interrupted`` (``engine.jobs.reconcile``).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

from engine import contract, protocol
from engine.errors import ConfigError, ProjectError, UnknownRunError
from engine.store.agent_catalog import (
    AGENT_KEY_PREFIX,
    MODEL_FACTS_DDL,
    SERVING_KEY,
    VERSION_FACTS,
    AgentCatalog,
)
from engine.store.atomic import (
    atomic_write_json,
    remove_stale_temp_files,
    temp_path,
)
from engine.store.database import DatabaseError, setting_row
from engine.store.paths import checked_name, child, link_out

SCHEMA_VERSION = 4
"""2: models carry ``agent`` and ``version``; the ``agents`` table.
3: runs carry ``tags`` and a ``note``.
4: agents, versions and their serving settings move to the agents store
(:mod:`engine.store.agent_catalog`); 2's columns and table, and the
settings' ``meta`` rows, are read once (:data:`ADOPTED_KEY`) and kept."""
ADOPTED_KEY = "agents_adopted"
"""The ``meta`` row saying this project's agents of ``studio.sqlite`` were
taken into the agents store (taking them again would add nothing: it only
saves looking)."""
VERSIONED_KINDS = ("sb3-policy", "hf-merged", "lora-adapter", "hf", "ollama")
"""Model kinds an agent can act with: the last one a run for a named agent
registers becomes that agent's next version."""
FOLDERS = ("envs", "flows", "runs", "models", "data")
_DATABASES = (
    "studio.sqlite",
    "data/trajectories.sqlite",
    "data/agents.sqlite",
    "data/labels.sqlite",
    "data/sweeps.db",
)
WRITTEN_PATHS = (
    *FOLDERS,
    "data/traces",
    "data/datasets",
    "data/flow-cache",
    "data/reward_models",
    *(db + suffix for db in _DATABASES for suffix in ("", "-wal", "-shm", "-journal")),
)
"""What the engine writes in a project: none may lead outside it (a link
to elsewhere would have runs write there). Other entries of ``data/`` are
the user's (a mock data file an env reads may well be a link)."""
WRITTEN_FOLDERS = ("runs", "models", "data/flow-cache")
"""Folders whose every entry the engine made: none may lead outside either."""
_JSON_FIELDS = ("config", "summary", "tags")
"""Run fields stored as JSON text."""
ACTIVE_STATUSES = contract.ACTIVE_STATUSES
FINAL_STATUSES = contract.FINAL_STATUSES
log = logging.getLogger(__name__)

# Joined, not an f-string: the runs table's defaults hold braces.
_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    ended REAL,
    pid INTEGER,
    exit_code INTEGER,
    signal INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    config TEXT NOT NULL DEFAULT '{}',
    summary TEXT NOT NULL DEFAULT '{}',
    progress_done REAL NOT NULL DEFAULT 0,
    progress_total REAL NOT NULL DEFAULT 0,
    tags TEXT NOT NULL DEFAULT '[]',
    note TEXT NOT NULL DEFAULT ''
);
CREATE TABLE IF NOT EXISTS models (
    id TEXT PRIMARY KEY,
"""
    + MODEL_FACTS_DDL
    + """
);
CREATE TABLE IF NOT EXISTS lineage (
    parent TEXT NOT NULL,
    child TEXT NOT NULL,
    relation TEXT NOT NULL,
    PRIMARY KEY (parent, child, relation)
);
"""
)
_MIGRATIONS = {
    # table -> columns added since version 1, with their declarations
    "runs": (
        ("tags", "TEXT NOT NULL DEFAULT '[]'"),
        ("note", "TEXT NOT NULL DEFAULT ''"),
    ),
}


@dataclass
class RunRecord:
    id: str
    name: str
    kind: str
    status: str
    created: float
    started: float | None = None
    ended: float | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    reason: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    progress_done: float = 0.0
    progress_total: float = 0.0
    tags: list[str] = field(default_factory=list)
    """The user's labels for the run (``run.annotate``), to find it by."""
    note: str = ""
    """The user's words about the run."""
    run_dir: str = ""

    def to_dict(self) -> contract.RunRow:
        return cast(contract.RunRow, asdict(self))


@dataclass
class ModelRecord:
    id: str
    name: str
    kind: str
    path: str
    created: float
    source_run: str | None = None
    env: str = ""
    algo: str = ""
    base: str = ""
    metrics: dict[str, Any] = field(default_factory=dict)
    size_bytes: int = 0
    agent: str = ""
    """The named agent this model is a version of ('' = none; the agents
    store's)."""
    version: int = 0
    """Its version for that agent (1, 2, ...; 0 = none)."""

    def to_dict(self) -> contract.ModelRow:
        return cast(contract.ModelRow, asdict(self))


_MODEL_COLUMNS = ("id", *VERSION_FACTS)
"""The columns of ``models``: :class:`ModelRecord`'s fields but its agent
and version, the agents store's."""


def _version_facts(columns: Sequence[Any]) -> dict[str, Any]:
    """A ``models`` row's :data:`VERSION_FACTS` columns as a version's facts
    (its metrics decoded)."""
    facts = dict(zip(VERSION_FACTS, columns, strict=True))
    facts["metrics"] = json.loads(facts["metrics"] or "{}")
    return facts


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns a project made by an older version lacks."""
    for table, columns in _MIGRATIONS.items():
        have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
        for name, declaration in columns:
            if name not in have:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {name} {declaration}")


OldAgents = tuple[
    list[tuple[str, int, str, dict[str, Any]]],
    list[tuple[str, int | None, int | None, int, float]],
    dict[str, str],
]
"""What :meth:`engine.store.agent_catalog.AgentCatalog.adopt` takes in."""


def _old_agents(db: sqlite3.Connection) -> OldAgents | None:
    """What a project made before the agents store kept of its agents in
    ``studio.sqlite``: versions (``models``' ``agent`` and ``version``
    columns, schema 2), routing (its ``agents`` table) and the serving
    settings' ``meta`` rows; None once they were taken in."""
    if db.execute("SELECT 1 FROM meta WHERE key = ?", (ADOPTED_KEY,)).fetchone():
        return None

    def columns(table: str) -> list[str]:
        return [r[1] for r in db.execute(f"PRAGMA table_info({table})")]

    versions = []
    if "version" in columns("models"):
        cur = db.execute(
            f"SELECT agent, version, {', '.join(_MODEL_COLUMNS)} FROM models"
            " WHERE agent != '' AND version > 0 ORDER BY agent, version"
        )
        for agent, number, model_id, *facts in cur.fetchall():
            versions.append((agent, number, model_id, _version_facts(facts)))
    configs = (
        db.execute(
            "SELECT name, pin, candidate, rollout, updated FROM agents"
        ).fetchall()
        if columns("agents")
        else []
    )
    rows = db.execute(
        "SELECT key, value FROM meta WHERE key = ? OR key LIKE ?",
        (setting_row(SERVING_KEY), setting_row(AGENT_KEY_PREFIX) + "%"),
    ).fetchall()
    settings = {str(k).removeprefix(setting_row("")): str(v) for k, v in rows}
    return versions, configs, settings


def new_id(prefix: str = "") -> str:
    """Sortable, readable and unique: ``20261123-091502-3fa2``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime())
    return f"{prefix}{stamp}-{secrets.token_hex(2)}"


def check_writable(path: Path) -> None:
    """Refuse a folder we cannot (or must not) write to, with one sentence."""
    # Root ignores permission bits, so honour the read-only mark explicitly:
    # a user who made the folder read-only means it.
    mode = path.stat().st_mode
    if not os.access(path, os.W_OK) or mode & 0o222 == 0:
        raise ProjectError(
            f"The project folder {path} is read-only; choose a folder you can write to."
        )
    probe = path / f".write-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ProjectError(
            f"The project folder {path} cannot be written to ({exc.strerror})."
        ) from None


def check_contained(root: Path) -> None:
    """Refuse, in one sentence, a project a folder of which the engine
    writes (:data:`WRITTEN_PATHS`, the entries of :data:`WRITTEN_FOLDERS`)
    resolves outside it: runs, caches and models would be written there."""
    found = link_out(root, WRITTEN_PATHS, WRITTEN_FOLDERS)
    if found is not None:
        rel, real = found
        raise ProjectError(
            f"{rel} in the project {root} leads outside it (to {real}); "
            "the engine writes there, so make it a folder inside the project."
        )


class Project:
    """An open project folder. Thread-safe: one connection behind a lock."""

    def __init__(self, path: Path, db: sqlite3.Connection) -> None:
        self.path = path
        self._db = db
        self._lock = threading.RLock()
        self._data_version: object = None
        self._catalog: AgentCatalog | None = None

    # ----------------------------------------------------------- opening
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        create: bool = False,
        examples: Path | None = None,
    ) -> Project:
        """Open the project at ``path``; with ``create`` make it if missing,
        copying ``examples`` (a folder laid out like a project) into it."""
        root = Path(path).expanduser()
        if not str(path).strip():
            raise ProjectError("No project folder was given.")
        try:
            fresh = not (root / "studio.sqlite").exists()
            exists = root.exists()
        except OSError as exc:  # a name too long, a permission on the way
            raise ProjectError(
                f"The project folder {root} cannot be used ({exc.strerror})."
            ) from None
        if not exists:
            if not create:
                raise ProjectError(f"The project folder {root} does not exist.")
            try:
                root.mkdir(parents=True)
            except OSError as exc:
                raise ProjectError(
                    f"The project folder {root} cannot be created ({exc.strerror})."
                ) from None
        if not root.is_dir():
            raise ProjectError(f"{root} is a file, not a project folder.")
        if fresh and not create and any(root.iterdir()):
            raise ProjectError(
                f"{root} is not an RL Studio project (it has no studio.sqlite)."
            )
        check_contained(root)
        check_writable(root)
        for name in FOLDERS:
            (root / name).mkdir(exist_ok=True)
        remove_stale_temp_files(root)
        try:
            db = sqlite3.connect(
                root / "studio.sqlite", check_same_thread=False, timeout=10
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(_SCHEMA)
            _migrate(db)
            db.execute(
                "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            db.commit()
        except sqlite3.DatabaseError as exc:
            raise ProjectError(
                f"The project database {root / 'studio.sqlite'} is damaged ({exc})."
            ) from None
        project = cls(root, db)
        if fresh and examples is not None and examples.is_dir():
            project.copy_examples(examples)
        return project

    def close(self) -> None:
        with self._lock:
            self._db.close()
            if self._catalog is not None:
                self._catalog.close()

    def changed_elsewhere(self) -> bool:
        """True when another connection (a headless ``rl-studio-engine train``
        or ``run``) committed since the last call (SQLite's ``data_version``
        counts only others' commits), or the open agents store changed (a
        service of another folder may share it)."""
        with self._lock:
            version: object = self._db.execute("PRAGMA data_version").fetchone()[0]
            if self._catalog is not None:
                version = (version, self._catalog.fingerprint())
        seen, self._data_version = self._data_version, version
        return seen is not None and version != seen

    @property
    def name(self) -> str:
        return self.path.name

    def copy_examples(self, examples: Path) -> list[Path]:
        """Copy bundled examples (laid out like a project) without overwriting."""
        copied = []
        for src in sorted(examples.rglob("*")):
            if not src.is_file() or src.name.startswith((".", "__")):
                continue
            dst = self.path / src.relative_to(examples)
            if dst.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            copied.append(dst)
        return copied

    # --------------------------------------------------------------- runs
    def run_dir(self, run_id: str) -> Path:
        """``runs/<run_id>``; a ConfigError for an id that is no file name
        (ids come from the database and from requests)."""
        return self.path / "runs" / checked_name("run id", run_id)

    def create_run(
        self, kind: str, config: dict[str, Any], name: str = ""
    ) -> RunRecord:
        """Make the run folder with its ``config.json`` and a ``queued`` row."""
        run_id = new_id()
        run_dir = self.run_dir(run_id)
        check_contained(self.path)  # a link may have appeared since the open
        run_dir.mkdir(parents=True)
        record = RunRecord(
            id=run_id,
            name=name or f"{kind} {run_id}",
            kind=kind,
            status="queued",
            created=time.time(),
            config=config,
            run_dir=str(run_dir),
        )
        atomic_write_json(
            run_dir / contract.CONFIG_FILE,
            {"run_id": run_id, "kind": kind, "name": record.name, "config": config},
        )
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO runs (id, name, kind, status, created, config)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    record.name,
                    kind,
                    "queued",
                    record.created,
                    json.dumps(config),
                ),
            )
        return record

    _RUN_FIELDS = frozenset(RunRecord.__dataclass_fields__) - {"id", "run_dir"}

    def update_run(self, run_id: str, **fields: Any) -> None:
        bad = set(fields) - self._RUN_FIELDS
        if bad:
            raise ValueError(f"unknown run fields: {sorted(bad)}")
        values = [json.dumps(v) if k in _JSON_FIELDS else v for k, v in fields.items()]
        sets = ", ".join(f"{k} = ?" for k in fields)
        with self._lock, self._db:
            cur = self._db.execute(
                f"UPDATE runs SET {sets} WHERE id = ?", (*values, run_id)
            )
        if cur.rowcount == 0:
            raise UnknownRunError(f"There is no run {run_id!r} in this project.")

    def annotate_run(self, run_id: str, tags: Iterable[str], note: str) -> RunRecord:
        """Set a run's tags and note, both replaced; a ConfigError naming
        ``tags`` or ``note`` when they exceed the bounds of ``run.annotate``
        (nothing is written then), an UnknownRunError for an unknown id."""
        cleaned = protocol.clean_tags(tags)
        problem = protocol.annotation_problem(cleaned, note)
        if problem is not None:
            raise ConfigError(*problem)
        self.update_run(run_id, tags=cleaned, note=note)
        return self.get_run(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
            cols = self._columns("runs")
        if row is None:
            raise UnknownRunError(f"There is no run {run_id!r} in this project.")
        return self._run_from_row(dict(zip(cols, row, strict=True)))

    def run_names(self) -> list[str]:
        """Every run's name, without reading the rest of its row (a new run's
        unique name is drawn against them)."""
        with self._lock:
            rows = self._db.execute("SELECT name FROM runs").fetchall()
        return [str(name) for (name,) in rows]

    def list_runs(self) -> list[RunRecord]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM runs ORDER BY created").fetchall()
            cols = self._columns("runs")
        return [self._run_from_row(dict(zip(cols, r, strict=True))) for r in rows]

    def _run_from_row(self, row: dict[str, Any]) -> RunRecord:
        row["config"] = json.loads(row["config"] or "{}")
        row["summary"] = json.loads(row["summary"] or "{}")
        tags = json.loads(row["tags"] or "[]")
        # Written by this module only; a hand-edited value is dropped, not fatal.
        row["tags"] = (
            [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []
        )
        return RunRecord(**row, run_dir=str(self.run_dir(row["id"])))

    def _columns(self, table: str) -> list[str]:
        return [r[1] for r in self._db.execute(f"PRAGMA table_info({table})")]

    # ------------------------------------------------------------- models
    def register_model(
        self,
        *,
        name: str,
        kind: str,
        files: list[Path],
        source_run: str | None = None,
        env: str = "",
        algo: str = "",
        base: str = "",
        metrics: dict[str, Any] | None = None,
        parents: Iterable[str] = (),
        replace: str | None = None,
    ) -> ModelRecord:
        """Store ``files`` (files or folders) in ``models/<id>/`` and index them.

        The first file is the model's main path. One a job wrote into a
        fresh folder of :func:`new_model_folder` is adopted where it lies
        (the model is stored once); the others are copied in. With
        ``replace`` (a model id) that model's files and facts are replaced,
        keeping its id and lineage (a resumed run updates its model). Lineage
        links the source run and ``parents`` (other model ids) to the model.
        """
        if not files:
            raise ValueError("a model needs at least one file")
        for f in files:
            if not Path(f).exists():
                raise ProjectError(f"The model file {f} does not exist.")
        adopted = self._adoptable(Path(files[0]))
        model_id = replace or adopted or new_id("m-")
        folder = self.path / "models" / model_id
        if adopted is not None:
            staged = self.path / "models" / adopted
            extra = [Path(f) for f in files[1:] if Path(f).parent != staged]
        else:
            staged = temp_path(folder, "copy")
            staged.mkdir(parents=True)
            extra = [Path(f) for f in files]
        try:
            for src in extra:
                if src.is_dir():
                    shutil.copytree(src, staged / src.name)
                else:
                    shutil.copy2(src, staged / src.name)
            if staged != folder:
                _swap_in(staged, folder)  # the model appears whole or not at all
        except BaseException:
            if adopted is None:
                shutil.rmtree(staged, ignore_errors=True)
            raise
        main_path = folder / Path(files[0]).name
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        record = ModelRecord(
            id=model_id,
            name=name,
            kind=kind,
            path=str(main_path),
            created=time.time(),
            source_run=source_run,
            env=env,
            algo=algo,
            base=base,
            metrics=metrics or {},
            size_bytes=size,
        )
        row = (
            name,
            kind,
            str(main_path.relative_to(self.path)),
            record.created,
            source_run,
            env,
            algo,
            base,
            json.dumps(record.metrics),
            size,
            model_id,
        )
        with self._lock, self._db:
            if replace is not None:
                self._db.execute(
                    "UPDATE models SET name = ?, kind = ?, path = ?, created = ?,"
                    " source_run = ?, env = ?, algo = ?, base = ?, metrics = ?,"
                    " size_bytes = ? WHERE id = ?",
                    row,
                )
            else:
                self._db.execute(
                    "INSERT INTO models (name, kind, path, created, source_run, env,"
                    " algo, base, metrics, size_bytes, id)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                    row,
                )
            links = [(p, model_id, "derived") for p in parents if p != model_id]
            if source_run:
                links.append((source_run, model_id, "trained"))
            self._db.executemany(
                "INSERT OR IGNORE INTO lineage VALUES (?, ?, ?)", links
            )
        return record

    def _registered_folder(self, path: Path) -> tuple[str, bool] | None:
        """``(folder id, registered)`` when ``path`` lies in a model folder
        ``models/<id>/`` of this project; None elsewhere."""
        try:
            rel = path.resolve().relative_to((self.path / "models").resolve())
        except (OSError, ValueError):
            return None
        if len(rel.parts) < 2 or not rel.parts[0].startswith("m-"):
            return None
        with self._lock:
            known = self._db.execute(
                "SELECT 1 FROM models WHERE id = ?", (rel.parts[0],)
            ).fetchone()
        return rel.parts[0], known is not None

    def _adoptable(self, main: Path) -> str | None:
        """The id of the unregistered ``models/<id>/`` folder ``main`` lies
        directly in (written there by a job through :func:`new_model_folder`)."""
        found = self._registered_folder(main)
        if (
            found is None
            or found[1]
            or main.resolve().parent.parent != ((self.path / "models").resolve())
        ):
            return None
        return found[0]

    def register_run_models(
        self, run_id: str, summary: dict[str, Any]
    ) -> tuple[list[str], list[str]]:
        """Register every model a job listed in its summary's ``models``.

        Each entry: ``name``, ``kind``, ``file`` (the main file or folder),
        optional ``extra_files``, ``env``, ``algo``, ``base``, ``metrics``,
        ``parents``. Returns the new model ids and one sentence per entry
        that could not be registered (the others still are).

        A parent naming the ``file`` of an earlier entry of the same summary
        (a flow run's merge naming the adapter its Fine-tune node trained)
        becomes that model's id, so the lineage links the two models. So
        does a parent inside the project that an earlier run registered (a
        flow re-run whose Fine-tune node came from the cache): registering
        copies a model to ``models/<id>/<its name>``, and exactly one
        registered model may carry that name.
        """
        ids: list[str] = []
        problems: list[str] = []
        by_file: dict[str, str] = {}
        by_name: dict[str, list[str]] | None = None

        def parent_id(parent: str) -> str:
            nonlocal by_name
            key = _path_key(parent)
            if key in by_file:
                return by_file[key]
            if not Path(key).is_relative_to(_path_key(str(self.path))):
                return parent  # a base model outside the project: never copied
            folder = self._registered_folder(Path(key))
            if folder is not None and folder[1]:
                return folder[0]  # a file of a registered model's folder
            if by_name is None:
                by_name = {}
                for m in self.list_models():
                    by_name.setdefault(Path(m.path).name, []).append(m.id)
            found = by_name.get(Path(key).name, [])
            return found[0] if len(found) == 1 else parent

        # A resumed run lists again the models its first part registered:
        # they are updated, not registered a second time.
        earlier = {
            (m.name, m.kind): m.id for m in self.list_models() if m.source_run == run_id
        }
        for entry in summary.get("models", []) or []:
            try:
                files = [Path(entry["file"]), *map(Path, entry.get("extra_files", []))]
                key = (str(entry.get("name", run_id)), str(entry.get("kind", "model")))
                replaced = earlier.pop(key, None)
                record = self.register_model(
                    replace=replaced,
                    name=str(entry.get("name", run_id)),
                    kind=str(entry.get("kind", "model")),
                    files=files,
                    source_run=run_id,
                    env=str(entry.get("env", "")),
                    algo=str(entry.get("algo", "")),
                    base=str(entry.get("base", "")),
                    metrics=dict(entry.get("metrics", {})),
                    parents=[parent_id(str(x)) for x in entry.get("parents", [])],
                )
                if replaced is not None:  # a version's facts follow its model's
                    rel = Path(record.path).relative_to(self.path)
                    facts = {**asdict(record), "path": str(rel)}
                    self.agent_catalog.refresh(record.id, facts)
                ids.append(record.id)
                by_file[_path_key(str(entry["file"]))] = record.id
            except (KeyError, TypeError, OSError, ProjectError) as exc:
                problems.append(f"Could not register a model of run {run_id}: {exc}")
        agent = self._run_agent(run_id)
        if agent and ids:
            models = {m.id: m for m in self.list_models()}
            actable = [i for i in ids if models[i].kind in VERSIONED_KINDS]
            if actable and not models[actable[-1]].version:
                self.add_version(agent, actable[-1])
        return ids, problems

    def _run_agent(self, run_id: str) -> str:
        with self._lock:
            row = self._db.execute(
                "SELECT config FROM runs WHERE id = ?", (run_id,)
            ).fetchone()
        config = json.loads(row[0] or "{}") if row else {}
        agent = config.get("agent", "") if isinstance(config, dict) else ""
        return agent if isinstance(agent, str) else ""

    # ------------------------------------------------------------ settings
    def setting(self, key: str) -> dict[str, Any]:
        """A project setting stored in the ``meta`` table (a JSON object;
        empty when never set)."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM meta WHERE key = ?", (setting_row(key),)
            ).fetchone()
        value = json.loads(row[0]) if row else {}
        return value if isinstance(value, dict) else {}

    def set_setting(self, key: str, value: dict[str, Any]) -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                (setting_row(key), json.dumps(value)),
            )

    # ------------------------------------------------------------- agents
    @property
    def agent_catalog(self) -> AgentCatalog:
        """The agents store, opened on first use. Its first open for a
        project made by an older version takes in the agents
        ``studio.sqlite`` held (the store skips what it has: processes
        doing so together add nothing twice)."""
        with self._lock:
            if self._catalog is None:
                catalog = AgentCatalog(self.path)
                try:
                    old = _old_agents(self._db)
                    if old is not None:
                        catalog.adopt(*old)
                        with self._db:
                            self._db.execute(
                                "INSERT OR IGNORE INTO meta VALUES (?, '1')",
                                (ADOPTED_KEY,),
                            )
                except BaseException:
                    catalog.close()
                    raise
                self._catalog = catalog
            return self._catalog

    def add_version(self, agent: str, model_id: str) -> ModelRecord:
        """Make the registered model ``model_id`` the next version of
        ``agent`` (``v1``, ``v2``, ...); a model already a version of an
        agent keeps it."""
        checked_name("agent", agent)
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(VERSION_FACTS)} FROM models WHERE id = ?",
                (model_id,),
            ).fetchone()
        if row is None:
            raise ProjectError(f"There is no model {model_id!r} in this project.")
        version = self.agent_catalog.add_version(agent, model_id, _version_facts(row))
        return next(m for m in self.versions(agent) if m.version == version)

    def versions(self, agent: str) -> list[ModelRecord]:
        """The agent's versions, oldest first, whichever project registered
        them (a model of another project's folder has its path there
        under this one: :meth:`model_here` tells)."""
        rows = self.agent_catalog.versions(agent)
        return [ModelRecord(**{**r, "path": str(self.path / r["path"])}) for r in rows]

    def model_here(self, model_id: str) -> bool:
        """Whether ``model_id`` is registered in this project (a version may
        be another project's)."""
        with self._lock:
            found = self._db.execute("SELECT 1 FROM models WHERE id = ?", (model_id,))
            return found.fetchone() is not None

    def list_models(self) -> list[ModelRecord]:
        return self._models(self.agent_catalog.numbers())

    def _models(self, numbers: Mapping[str, tuple[str, int]]) -> list[ModelRecord]:
        """The models, with their agent and version as ``numbers`` (by model
        id) says."""
        with self._lock:
            rows = self._db.execute(
                f"SELECT {', '.join(_MODEL_COLUMNS)} FROM models ORDER BY created"
            ).fetchall()
        out = []
        for r in rows:
            row = dict(zip(_MODEL_COLUMNS, r, strict=True))
            row["metrics"] = json.loads(row["metrics"] or "{}")
            row["path"] = str(self.path / row["path"])
            agent, version = numbers.get(row["id"], ("", 0))
            out.append(ModelRecord(**row, agent=agent, version=version))
        return out

    def lineage(self, node_id: str) -> list[tuple[str, str, str]]:
        """Every (parent, child, relation) link touching ``node_id``'s ancestry."""
        with self._lock:
            rows = self._db.execute(
                """
                WITH RECURSIVE up(id) AS (
                    SELECT ? UNION SELECT parent FROM lineage JOIN up ON child = up.id
                )
                SELECT parent, child, relation FROM lineage
                WHERE child IN (SELECT id FROM up)
                """,
                (node_id,),
            ).fetchall()
        return [tuple(r) for r in rows]

    def delete_model(self, model_id: str) -> ModelRecord:
        """Remove a registered model: its folder, its row and the links that
        made it. Atomic: the folder is renamed aside first (a ``temp_path``
        of purpose ``deleted``, which ``remove_stale_temp_files`` sweeps if
        the removal is cut short), so the model is either whole and listed or
        gone."""
        record = next((m for m in self.list_models() if m.id == model_id), None)
        if record is None:
            raise ProjectError(f"There is no model {model_id!r} in this project.")
        folder = self.path / "models" / model_id
        doomed = temp_path(folder, "deleted")
        if folder.exists():
            try:
                folder.rename(doomed)
            except OSError as exc:
                raise ProjectError(
                    f"The model folder {folder} cannot be removed ({exc.strerror})."
                ) from None
        with self._lock, self._db:
            self._db.execute("DELETE FROM models WHERE id = ?", (model_id,))
            self._db.execute("DELETE FROM lineage WHERE child = ?", (model_id,))
        self.agent_catalog.remove(model_id)
        shutil.rmtree(doomed, ignore_errors=True)
        return record

    # ------------------------------------------------------- documents
    def list_documents(self, folder: str, suffix: str) -> list[dict[str, Any]]:
        """Env specs or flows: name, path, modified time, and the JSON's
        ``kind``/``description`` when it parses (a broken file is listed with
        its error, so the user can find and fix it)."""
        docs = []
        for p in sorted((self.path / folder).glob(f"*{suffix}")):
            entry: dict[str, Any] = {
                "name": p.name[: -len(suffix)],
                "path": str(p),
                "modified": p.stat().st_mtime,
            }
            data = contract.read_json_object(p)
            if data is None:
                entry["error"] = "The file is not valid JSON."
            else:
                entry["kind"] = str(data.get("kind", ""))
                entry["description"] = str(data.get("description", ""))
            docs.append(entry)
        return docs

    def snapshot(self) -> contract.ProjectSnapshot:
        try:
            models = self.list_models()
        except DatabaseError as exc:
            # The project opens without its agents' versions while their
            # shared database cannot be reached.
            log.warning("%s", exc)
            models = self._models({})
        return {
            "path": str(self.path),
            "name": self.name,
            "envs": self.list_documents("envs", ".env.json"),
            "flows": self.list_documents("flows", ".flow.json"),
            "runs": [r.to_dict() for r in self.list_runs()],
            "models": [m.to_dict() for m in models],
        }


def new_model_folder(project_dir: str | os.PathLike[str], name: str) -> Path:
    """Where a job writes a model folder it makes in the project:
    ``models/<new id>/<name>``. Registering it adopts the folder as it lies,
    so the model is stored once (older versions wrote ``models/<name>`` and
    registered a copy; projects holding such folders stay readable)."""
    return child(project_dir, f"models/{new_id('m-')}", name, "name")


def _swap_in(staged: Path, folder: Path) -> None:
    """Rename ``staged`` to ``folder``, replacing an older ``folder`` whole."""
    aside = temp_path(folder, "replaced") if folder.exists() else None
    if aside is not None:
        folder.rename(aside)
    try:
        staged.rename(folder)
    except BaseException:
        if aside is not None:
            aside.rename(folder)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def _path_key(path: str) -> str:
    """A file path compared as written by different jobs (``~``, ``..``,
    trailing slashes)."""
    return os.path.normpath(os.path.abspath(os.path.expanduser(path)))


def process_owns_run(run: RunRecord) -> bool:
    """Whether the process recorded for ``run`` still runs it: alive, not a
    zombie, and started before the run did (so not a reused pid)."""
    if not run.pid or not run.started:
        return False
    import psutil

    try:
        proc = psutil.Process(run.pid)
        return bool(
            proc.status() != psutil.STATUS_ZOMBIE
            and proc.create_time() <= run.started + 1.0
        )
    except psutil.Error:
        return False
