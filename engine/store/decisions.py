"""The decisions of ``POST /agents/{name}/act``: which version was chosen,
which answered, whether it fell back and why, and how long it took, one row
per request in ``data/agents.sqlite`` (WAL), so versions can be compared on
live traffic.

Its own file, as ``data/trajectories.sqlite`` is: a busy act route must
neither wait on the project's lock nor make an open studio reload its runs.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

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
"""


class DecisionLog:
    """Thread-safe: one connection behind a lock."""

    def __init__(self, project_dir: Path) -> None:
        path = project_dir / DB_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, timeout=10)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
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
    ) -> None:
        """One request: ``chosen`` the version routing picked (``role``:
        ``candidate`` or ``current``), ``served`` the one that answered
        (None: none did), ``reason`` why it fell back or failed."""
        fallback = served is not None and served != chosen
        with self._lock, self._db:
            self._db.execute(
                "INSERT INTO decisions (agent, time, request_key, chosen, role,"
                " served, fallback, reason, latency_ms)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
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
                ),
            )

    def outcomes(self, agent: str) -> dict[int, dict[str, Any]]:
        """Per version routing chose: requests, errors (no answer at all),
        fallbacks, answers served, mean latency (ms) and the last fallback's
        reason."""
        with self._lock:
            rows = self._db.execute(
                "SELECT chosen, COUNT(*), SUM(served IS NULL), SUM(fallback),"
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
                "SELECT time, request_key, chosen, role, served, fallback, reason,"
                " latency_ms FROM decisions WHERE agent = ? ORDER BY id DESC"
                " LIMIT ?",
                (agent, limit),
            )
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
