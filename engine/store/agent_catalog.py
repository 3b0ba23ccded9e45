"""The agents a project serves: each agent's versions (the models it acts
with, numbered ``v1``, ``v2``, ...), its routing (``pin``, ``candidate``,
``rollout``) and the settings that say how it is served (the project's
:data:`SERVING_KEY`, each agent's under :data:`AGENT_KEY_PREFIX`).

They live in the agents store beside the decision and promotion logs
(``data/agents.sqlite``, :mod:`engine.store.decisions`), or in the
PostgreSQL database the stores share (:mod:`engine.store.database`), so
that several service processes, each with its own project folder as on
several machines, see the same agents, versions, pins, rollouts and
switches. A version row carries what serving and the gate read without the
project's catalog: the model's id, kind, path (relative to the project
folder that registered it), env, algo, base and metrics. A version whose
files are not in a project folder is listed there all the same; acting
with it there is the service's one sentence.

Numbering is safe when processes add versions at once: every write of
several statements takes the store's write transaction (``BEGIN
IMMEDIATE`` on SQLite) and, on PostgreSQL, one advisory lock
(:data:`LOCK`): versions are added once per training, so one lock for all
agents costs nothing and leaves no race between agents either (one model
is one version: ``model_id`` is unique).

Projects made before this store kept all of it in ``studio.sqlite``;
:meth:`AgentCatalog.adopt` takes it in once (``Project`` calls it on its
first look at its agents), idempotently: a model already a version is
skipped, so processes starting together, or a migration cut short and
done again, add nothing twice.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.errors import ProjectError
from engine.store.database import Schema, open_database
from engine.store.decisions import DB_FILE
from engine.store.paths import checked_name

log = logging.getLogger(__name__)

SERVING_KEY = "serving"
"""The setting holding the project's ``ServingSettings``
(:mod:`engine.store.promotion`)."""
AGENT_KEY_PREFIX = "agent-settings:"
"""An agent's ``AgentSettings`` live under this prefix and its name."""
LOCK = "agent catalog"
"""The PostgreSQL advisory lock of the catalog's writes of several
statements."""
MODEL_FACT_COLUMNS = {
    "name": "TEXT NOT NULL",
    "kind": "TEXT NOT NULL",
    "path": "TEXT NOT NULL",
    "created": "REAL NOT NULL",
    "source_run": "TEXT",
    "env": "TEXT NOT NULL DEFAULT ''",
    "algo": "TEXT NOT NULL DEFAULT ''",
    "base": "TEXT NOT NULL DEFAULT ''",
    "metrics": "TEXT NOT NULL DEFAULT '{}'",
    "size_bytes": "INTEGER NOT NULL DEFAULT 0",
}
"""A model's facts and their columns' declarations: the catalog's
``versions`` and the project's ``models`` (``engine.store.project``) hold
the same facts of a model."""
VERSION_FACTS = tuple(MODEL_FACT_COLUMNS)
"""A version's model facts, named as ``ModelRecord``'s fields; ``path`` is
relative to the project folder, ``metrics`` a dict."""
MODEL_FACTS_DDL = ",\n".join(f"    {n} {d}" for n, d in MODEL_FACT_COLUMNS.items())
"""The facts' column definitions, one a line, for a ``CREATE TABLE``."""
CONFIG_FIELDS = ("pin", "candidate", "rollout", "updated")

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS agents (
    name TEXT PRIMARY KEY,
    pin INTEGER,
    candidate INTEGER,
    rollout INTEGER NOT NULL DEFAULT 0,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS versions (
    agent TEXT NOT NULL,
    version INTEGER NOT NULL,
    model_id TEXT NOT NULL UNIQUE,
{MODEL_FACTS_DDL},
    PRIMARY KEY (agent, version)
);
CREATE TABLE IF NOT EXISTS serving_settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    updated REAL NOT NULL
);
"""

SCHEMA = Schema(DB_FILE, _SCHEMA)

Facts = Mapping[str, Any]
"""A version's :data:`VERSION_FACTS`."""


class AgentCatalog:
    """Thread-safe: one connection behind a lock."""

    def __init__(self, project_dir: Path, database: str | None = None) -> None:
        """``database``: a PostgreSQL URL (default:
        :func:`engine.store.database.configured`, else the project's SQLite
        file)."""
        self._db = open_database(project_dir, SCHEMA, database)
        self._lock = threading.Lock()

    @property
    def database(self) -> str:
        """Where the catalog is, as messages name it."""
        return self._db.name

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------ versions
    def add_version(self, agent: str, model_id: str, facts: Facts) -> int:
        """Make the model ``model_id`` (its :data:`VERSION_FACTS`) the next
        version of ``agent``; a model already a version of it keeps its
        number, one of another agent is a ProjectError."""
        with self._lock, self._db.transaction(lock=LOCK):
            found = self._version_of(model_id)
            if found is not None:
                if found[0] != agent:
                    raise ProjectError(
                        f"The model {model_id} is already v{found[1]} of agent "
                        f"{found[0]!r}."
                    )
                return found[1]
            number = self._next(agent)
            self._insert(agent, number, model_id, facts)
            return number

    def refresh(self, model_id: str, facts: Facts) -> None:
        """A version's model was replaced (a resumed run updates it): its
        facts follow."""
        sets = ", ".join(f"{f} = ?" for f in VERSION_FACTS)
        with self._lock:
            self._db.execute(
                f"UPDATE versions SET {sets} WHERE model_id = ?",
                (*_row(facts), model_id),
            )

    def remove(self, model_id: str) -> None:
        """The model was deleted: it is no version any more."""
        with self._lock:
            self._db.execute("DELETE FROM versions WHERE model_id = ?", (model_id,))

    def versions(self, agent: str) -> list[dict[str, Any]]:
        """The agent's versions, oldest first: ``agent``, ``version``, the
        model's ``id`` and the :data:`VERSION_FACTS`."""
        with self._lock:
            cur = self._db.execute(
                f"SELECT agent, version, model_id AS id, {', '.join(VERSION_FACTS)}"
                " FROM versions WHERE agent = ? ORDER BY version",
                (agent,),
            )
            rows = _dicts(cur)
        for row in rows:
            row["metrics"] = json.loads(row["metrics"] or "{}")
        return rows

    def numbers(self) -> dict[str, tuple[str, int]]:
        """Every version's ``(agent, version)`` by its model's id."""
        with self._lock:
            rows = self._db.execute(
                "SELECT model_id, agent, version FROM versions"
            ).fetchall()
        return {str(m): (str(a), int(v)) for m, a, v in rows}

    def fingerprint(self) -> tuple[Any, ...]:
        """What moves whenever any process adds, removes or renumbers a
        version or changes a routing or a setting (PostgreSQL has no
        ``data_version`` to watch): :meth:`Project.changed_elsewhere`
        compares it."""
        with self._lock:
            row = self._db.execute(
                "SELECT (SELECT COUNT(*) FROM versions),"
                " (SELECT COALESCE(SUM(version), 0) FROM versions),"
                " (SELECT MAX(updated) FROM agents),"
                " (SELECT MAX(updated) FROM serving_settings)"
            ).fetchone()
        return tuple(row)

    def names(self) -> list[str]:
        """The agents: those with versions or routing, sorted."""
        with self._lock:
            rows = self._db.execute(
                "SELECT DISTINCT agent FROM versions UNION SELECT name FROM agents"
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    # ------------------------------------------------------------- routing
    def config(self, agent: str) -> dict[str, Any]:
        """``pin``, ``candidate``, ``rollout`` and ``updated`` (None: never
        set)."""
        with self._lock:
            row = self._db.execute(
                "SELECT pin, candidate, rollout, updated FROM agents WHERE name = ?",
                (agent,),
            ).fetchone()
        if row is None:
            return {"pin": None, "candidate": None, "rollout": 0, "updated": None}
        return dict(zip(CONFIG_FIELDS, row, strict=True))

    def set_config(
        self, agent: str, *, pin: int | None, candidate: int | None, rollout: int
    ) -> None:
        checked_name("agent", agent)
        sql = self._db.upsert_sql("agents", ("name", *CONFIG_FIELDS), ("name",))
        with self._lock:
            self._db.execute(sql, (agent, pin, candidate, rollout, time.time()))

    # ------------------------------------------------------------ settings
    def setting(self, key: str) -> dict[str, Any]:
        """A JSON object stored under ``key`` (empty when never set)."""
        with self._lock:
            row = self._db.execute(
                "SELECT value FROM serving_settings WHERE key = ?", (key,)
            ).fetchone()
        value = json.loads(row[0]) if row else {}
        return value if isinstance(value, dict) else {}

    def set_setting(self, key: str, value: Mapping[str, Any]) -> None:
        sql = self._db.upsert_sql(
            "serving_settings", ("key", "value", "updated"), ("key",)
        )
        with self._lock:
            self._db.execute(sql, (key, json.dumps(dict(value)), time.time()))

    # ----------------------------------------------------------- migration
    def adopt(
        self,
        versions: Iterable[tuple[str, int, str, Facts]],
        configs: Iterable[tuple[str, int | None, int | None, int, float]],
        settings: Mapping[str, str],
    ) -> int:
        """Take in what an older project kept in ``studio.sqlite``, in one
        write transaction: its versions (``agent``, ``version``, model id,
        facts; a model already a version is skipped; a number another
        model took is replaced by the agent's next), its routing rows and
        its settings (JSON text by key; rows the catalog has are kept).
        The versions added."""
        added = 0
        with self._lock, self._db.transaction(lock=LOCK):
            for agent, number, model_id, facts in versions:
                if self._version_of(model_id) is not None:
                    continue
                taken = self._db.execute(
                    "SELECT model_id FROM versions WHERE agent = ? AND version = ?",
                    (agent, number),
                ).fetchone()
                if taken is not None:
                    old, number = number, self._next(agent)
                    log.warning(
                        "v%d of agent %s is model %s in the agents store, so "
                        "model %s becomes v%d",
                        old,
                        agent,
                        taken[0],
                        model_id,
                        number,
                    )
                self._insert(agent, number, model_id, facts)
                added += 1
            insert = self._db.insert_ignore_sql("agents", ("name", *CONFIG_FIELDS))
            self._db.executemany(insert, [tuple(c) for c in configs])
            insert = self._db.insert_ignore_sql(
                "serving_settings", ("key", "value", "updated")
            )
            now = time.time()
            self._db.executemany(
                insert, [(k, v, now) for k, v in sorted(settings.items())]
            )
        if added:
            log.info("took %d agent versions into %s", added, self.database)
        return added

    # ------------------------------------------------------------- private
    def _version_of(self, model_id: str) -> tuple[str, int] | None:
        row = self._db.execute(
            "SELECT agent, version FROM versions WHERE model_id = ?", (model_id,)
        ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    def _next(self, agent: str) -> int:
        (last,) = self._db.execute(
            "SELECT COALESCE(MAX(version), 0) FROM versions WHERE agent = ?",
            (agent,),
        ).fetchone()
        return int(last) + 1

    def _insert(self, agent: str, number: int, model_id: str, facts: Facts) -> None:
        self._db.execute(
            f"INSERT INTO versions (agent, version, model_id,"
            f" {', '.join(VERSION_FACTS)}) VALUES (?, ?, ?"
            f"{', ?' * len(VERSION_FACTS)})",
            (agent, number, model_id, *_row(facts)),
        )


_OPTIONAL = {"source_run": None, "env": "", "algo": "", "base": "", "size_bytes": 0}
"""The facts a version may leave out, and their values then."""


def _row(facts: Facts) -> tuple[Any, ...]:
    """The facts as the columns hold them (``metrics`` as JSON text)."""
    return tuple(
        json.dumps(facts.get(f) or {})
        if f == "metrics"
        else facts.get(f, _OPTIONAL[f])
        if f in _OPTIONAL
        else facts[f]
        for f in VERSION_FACTS
    )


def _dicts(cur: Any) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
