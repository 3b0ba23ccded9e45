"""The decisions of ``POST /agents/{name}/act``: which version was chosen,
which answered (a version, the base model or the rule policy), whether it
fell back and why, and how long it took, one row per request in
``data/agents.sqlite`` (WAL), so versions can be compared on live traffic.

The same file keeps the promotion log (:data:`PROMOTION_ACTIONS`): every
gate decision, manual promotion and rollback, with who and why. The log is
the promotion state: :mod:`engine.store.promotion` replays it. The agents
themselves, their versions and serving settings are there too
(:mod:`engine.store.agent_catalog`).

Its own file, as ``data/trajectories.sqlite`` is: a busy act route must
neither wait on the project's lock nor make an open studio reload its runs.
Or a PostgreSQL database that several service processes share
(:mod:`engine.store.database`): deciding promotions takes an advisory lock
per agent there, as ``BEGIN IMMEDIATE`` takes SQLite's file.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.store.database import Database, Schema, open_database

DB_FILE = "data/agents.sqlite"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    time REAL NOT NULL,
    request_key TEXT NOT NULL DEFAULT '',
    chosen INTEGER NOT NULL,
    role TEXT NOT NULL,
    served INTEGER,
    fallback INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    latency_ms REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS decisions_agent ON decisions (agent, chosen);
CREATE TABLE IF NOT EXISTS promotions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    agent TEXT NOT NULL,
    time REAL NOT NULL,
    version INTEGER NOT NULL,
    action TEXT NOT NULL,
    "by" TEXT NOT NULL,
    reason TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS promotions_agent ON promotions (agent, id);
"""

ANSWERED_BY = ("version", "base", "rule")
"""What answered a request: an agent's version, the base model or the rule
policy ('' in the log: nothing did)."""
PROMOTION_ACTIONS = ("promoted", "refused", "promote", "rollback")
"""The gate promoted a version or refused it (it stays a candidate); a
person promoted one or rolled the current one back."""


# ------------------------------------------------------ the promotion state
@dataclass
class GateState:
    """The promotion log replayed."""

    decided: set[int] = field(default_factory=set)
    promoted: list[int] = field(default_factory=list)
    """Promoted versions in the order they were promoted, the current one
    last; a rollback takes the last off."""
    status: dict[int, str] = field(default_factory=dict)
    """``promoted``, ``candidate`` or ``rolled back``."""
    reason: dict[int, str] = field(default_factory=dict)
    """The last sentence said of each version."""

    @property
    def current(self) -> int | None:
        return self.promoted[-1] if self.promoted else None

    @property
    def previous(self) -> int | None:
        return self.promoted[-2] if len(self.promoted) > 1 else None


def replay(log: list[dict[str, Any]]) -> GateState:
    state = GateState()
    for entry in log:
        version, action = int(entry["version"]), entry["action"]
        state.decided.add(version)
        state.reason[version] = entry["reason"]
        if action in ("promoted", "promote"):
            if version in state.promoted:
                state.promoted.remove(version)
            state.promoted.append(version)
            state.status[version] = "promoted"
        elif action == "refused":
            state.status[version] = "candidate"
        elif action == "rollback" and state.promoted and state.promoted[-1] == version:
            state.promoted.pop()
            state.status[version] = "rolled back"
    return state


def promoted_version(project_dir: Path, agent: str) -> int | None:
    """The version promoted last, as the log says (read only)."""
    log = DecisionLog(project_dir)
    try:
        return replay(log.promotions(agent)).current
    finally:
        log.close()


def _migrate(db: Database) -> None:
    if "answered_by" not in db.columns("decisions"):  # a log from before fallbacks
        db.execute(
            "ALTER TABLE decisions ADD COLUMN answered_by TEXT NOT NULL"
            " DEFAULT 'version'"
        )


SCHEMA = Schema(DB_FILE, _SCHEMA, _migrate)


class DecisionLog:
    """Thread-safe: one connection behind a lock."""

    def __init__(self, project_dir: Path, database: str | None = None) -> None:
        """``database``: a PostgreSQL URL (default:
        :func:`engine.store.database.configured`, else the project's SQLite
        file)."""
        self._db = open_database(project_dir, SCHEMA, database)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def record(
        self,
        agent: str,
        *,
        key: str,
        chosen: int,
        role: str,
        served: int | None,
        reason: str,
        latency_ms: float,
        answered_by: str = "version",
    ) -> None:
        """One request: ``chosen`` the version routing picked (``role``:
        ``candidate``, ``current`` or ``switched off``; 0 when the switch
        chose none), ``served`` the version that answered (None: none did),
        ``answered_by`` what answered (:data:`ANSWERED_BY`, '' for nothing),
        ``reason`` each fallback's cause."""
        assert answered_by in (*ANSWERED_BY, ""), answered_by
        fallback = answered_by != "version" or served != chosen
        # Not synced on PostgreSQL: a request's statistics, answered
        # already; waiting for the disk would slow every act by a sync.
        with self._lock, self._db.transaction(synced=False):
            self._db.execute(
                "INSERT INTO decisions (agent, time, request_key, chosen, role,"
                " served, fallback, reason, latency_ms, answered_by)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    agent,
                    time.time(),
                    key,
                    chosen,
                    role,
                    served,
                    int(fallback),
                    reason,
                    latency_ms,
                    answered_by,
                ),
            )

    def outcomes(self, agent: str) -> dict[int, dict[str, Any]]:
        """Per version routing chose: requests, errors (no answer at all),
        fallbacks, answers served, mean latency (ms) and the last fallback's
        reason."""
        with self._lock:
            rows = self._db.execute(
                "SELECT chosen, COUNT(*), SUM(CASE WHEN answered_by = '' THEN 1 END),"
                " SUM(fallback),"
                " AVG(latency_ms) FROM decisions WHERE agent = ? GROUP BY chosen",
                (agent,),
            ).fetchall()
            served = dict(
                self._db.execute(
                    "SELECT served, COUNT(*) FROM decisions WHERE agent = ?"
                    " AND served IS NOT NULL GROUP BY served",
                    (agent,),
                ).fetchall()
            )
            reasons = dict(
                self._db.execute(
                    "SELECT chosen, reason FROM decisions WHERE id IN (SELECT MAX(id)"
                    " FROM decisions WHERE agent = ? AND reason != ''"
                    " GROUP BY chosen)",
                    (agent,),
                ).fetchall()
            )
        out: dict[int, dict[str, Any]] = {}
        for chosen, count, errors, fallbacks, latency in rows:
            out[chosen] = {
                "requests": count,
                "errors": errors or 0,
                "fallbacks": fallbacks or 0,
                "mean_latency_ms": round(latency or 0.0, 3),
                "last_reason": reasons.get(chosen, ""),
            }
        for version, count in served.items():
            out.setdefault(
                version,
                {
                    "requests": 0,
                    "errors": 0,
                    "fallbacks": 0,
                    "mean_latency_ms": None,
                    "last_reason": "",
                },
            )["served"] = count
        for entry in out.values():
            entry.setdefault("served", 0)
        return out

    def recent(self, agent: str, limit: int = 100) -> list[dict[str, Any]]:
        with self._lock:
            cur = self._db.execute(
                "SELECT time, request_key, chosen, role, served, answered_by,"
                " fallback, reason, latency_ms FROM decisions WHERE agent = ?"
                " ORDER BY id DESC"
                " LIMIT ?",
                (agent, limit),
            )
            return _dicts(cur)

    def answered_by(self, agent: str) -> dict[str, int]:
        """Requests per :data:`ANSWERED_BY` (and '' for none)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT answered_by, COUNT(*) FROM decisions WHERE agent = ?"
                " GROUP BY answered_by",
                (agent,),
            ).fetchall()
        return {str(k): int(n) for k, n in rows}

    # ------------------------------------------------------------ promotions
    def promotions(self, agent: str) -> list[dict[str, Any]]:
        """The agent's promotion log, oldest first."""
        with self._lock:
            return self._promotions(agent)

    def _promotions(self, agent: str) -> list[dict[str, Any]]:
        cur = self._db.execute(
            'SELECT time, version, action, "by", reason FROM promotions'
            " WHERE agent = ? ORDER BY id",
            (agent,),
        )
        return _dicts(cur)

    def append_promotions(
        self,
        agent: str,
        decide: Callable[[list[dict[str, Any]]], list[tuple[int, str, str, str]]],
    ) -> list[dict[str, Any]]:
        """Read the agent's log, let ``decide`` return the entries to add
        (``version``, ``action``, ``by``, ``reason``) and add them, in one
        write transaction: two processes deciding at once (the service and
        the command line) see each other's entries. The log after."""
        with self._lock:
            with self._db.transaction(lock=f"promotions:{agent}"):
                entries = decide(self._promotions(agent))
                now = time.time()
                for version, action, by, reason in entries:
                    assert action in PROMOTION_ACTIONS, action
                    self._db.execute(
                        'INSERT INTO promotions (agent, time, version, action, "by",'
                        " reason) VALUES (?,?,?,?,?,?)",
                        (agent, now, version, action, by, reason),
                    )
            return self._promotions(agent)


def _dicts(cur: Any) -> list[dict[str, Any]]:
    """A query's rows as dicts by column name."""
    cols = [d[0] for d in cur.description]
    return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
