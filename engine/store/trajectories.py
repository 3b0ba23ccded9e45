"""Recorded trajectories: what an operating agent did, step by step.

An agent (a control policy or a language model at work elsewhere) reports
each step as it happens; the step is committed to SQLite
(``data/trajectories.sqlite``, WAL) before it is acknowledged, so a crash of
the recording process loses no acknowledged step. When the trajectory ends
it becomes one episode line of ``data/traces/agent-<agent>.jsonl`` in the
trace format of :mod:`engine.llm.rollouts` (``messages``, ``completion``,
``action``, ``reward``, ``state`` per step; ``return``, ``success`` per
episode), so the studio's traces view shows it and the dataset builder
(SFT, KTO, DPO, GRPO) reads it as it reads rollouts.

The database is its own file, not ``studio.sqlite``: ingesting hundreds of
steps a second must neither wait on the project's lock nor make an open
studio reload its run list at every commit. Or it is a PostgreSQL database
(:mod:`engine.store.database`) that several service processes share: a
request's steps are one statement there (their indices claimed by an
``UPDATE`` of the trajectory's row, which locks it, and the steps inserted
with them: one round trip, committed by itself), its end
numbers the episode under an advisory lock on the trace file, and its
writer holds an advisory lock on it until the line is written, so a
process starting beside it does not write that line too.

Durability: a line is appended (flushed, fsync'ed) only after the end is
committed, and marked exported after; a crash between the two is repaired
when the store opens (the line is written unless the file has it), and a
torn last line is cut off first so that the next line is not glued to it.
``synchronous=NORMAL``: a process crash loses nothing committed; a power cut
may lose the last commits.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from engine.errors import ConfigError, EngineError, quoted
from engine.store.database import POSTGRESQL, Database, Schema, open_pool
from engine.store.paths import checked_name, child

DB_FILE = "data/trajectories.sqlite"
TRACE_PREFIX = "agent-"
"""Trace files of recorded trajectories: ``data/traces/agent-<agent>.jsonl``
(apart from the ``llm.collect`` rollouts, which may overwrite theirs)."""
END_STATUSES = ("completed", "failed", "error", "timeout", "abandoned")
"""How a trajectory may end; ``completed`` is a success, ``timeout`` a
truncation."""
MAX_TEXT_CHARS = 200
"""The longest ``scenario``, ``window`` or ``env``."""
POOL_SIZE = 8
"""Connections a store opens to a PostgreSQL database at most: so many
requests run at once, their commits synced together (SQLite: one)."""
MAX_BATCH_STEPS = 1000
"""The most steps one :meth:`TrajectoryStore.add_steps` call takes."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS trajectories (
    id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    scenario TEXT NOT NULL DEFAULT '',
    "window" TEXT NOT NULL DEFAULT '',
    env TEXT NOT NULL DEFAULT '',
    meta TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL DEFAULT 'open',
    created REAL NOT NULL,
    ended REAL,
    steps INTEGER NOT NULL DEFAULT 0,
    reward_sum REAL NOT NULL DEFAULT 0,
    total_reward REAL,
    episode INTEGER,
    trace_file TEXT NOT NULL DEFAULT '',
    exported INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS trajectories_agent ON trajectories (agent, created);
CREATE TABLE IF NOT EXISTS trajectory_steps (
    trajectory TEXT NOT NULL,
    t INTEGER NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (trajectory, t)
) WITHOUT ROWID;
"""

SCHEMA = Schema(DB_FILE, _SCHEMA)

_COLUMNS = (
    "id",
    "agent",
    "scenario",
    "window",
    "env",
    "meta",
    "status",
    "created",
    "ended",
    "steps",
    "total_reward",
    "episode",
    "trace_file",
    "exported",
)
_SELECT = ", ".join(f'"{c}"' for c in _COLUMNS)
"""The columns as a select list, quoted: ``window`` is a keyword of
PostgreSQL."""


class UnknownTrajectoryError(EngineError):
    """An id the store does not know."""


class TrajectoryEndedError(EngineError):
    """A step or an end for a trajectory that ended already."""


def _json(field: str, value: Any) -> str:
    """``value`` as stored: JSON text, refused (one sentence naming
    ``field``) when JSON cannot hold it or it holds text that is not valid
    Unicode (a lone surrogate, which could be stored but never sent back as
    UTF-8)."""
    try:
        text = json.dumps(
            value, allow_nan=False, ensure_ascii=False, separators=(",", ":")
        )
    except ValueError:
        raise ConfigError(
            field, f"{field} must not hold NaN or Infinity (JSON has neither)."
        ) from None
    except TypeError as exc:
        raise ConfigError(field, f"{field} cannot be stored as JSON ({exc}).") from None
    _unicode(field, text)
    return text


def _unicode(field: str, text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise ConfigError(
                field,
                f"{field} holds text that is not valid Unicode (a lone surrogate).",
            ) from None


def _text(field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(field, f"{field} must be text, not {quoted(value)}.")
    if len(value) > MAX_TEXT_CHARS:
        raise ConfigError(
            field, f"{field} must be at most {MAX_TEXT_CHARS} characters long."
        )
    _unicode(field, value)
    return value


def _reward(field: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(field, f"{field} must be a number, not {quoted(value)}.")
    if not math.isfinite(value):
        raise ConfigError(
            field, f"{field} must be a finite number, not {quoted(value)}."
        )
    return float(value)


def _messages(prompt: Any) -> list[dict[str, str]]:
    """A step's prompt as chat messages (text is one user message)."""
    if prompt is None:
        return []
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and all(
        isinstance(m, dict)
        and isinstance(m.get("role"), str)
        and isinstance(m.get("content"), str)
        for m in prompt
    ):
        return [{"role": m["role"], "content": m["content"]} for m in prompt]
    raise ConfigError(
        "prompt",
        "prompt must be text or a list of {role, content} messages.",
    )


_STEP_KEYS = ("state", "action", "reward", "prompt", "completion", "valid", "info")


def _lower(sentence: str) -> str:
    return sentence[:1].lower() + sentence[1:]


def _tool_of(action: Any) -> str | None:
    """The tool an action names: the action itself when text, or the
    ``type`` of an ``{type, params}`` object (the trajectory recorder's
    shape)."""
    if isinstance(action, str):
        return action
    if isinstance(action, dict) and isinstance(action.get("type"), str):
        return str(action["type"])
    return None


class _Checked(NamedTuple):
    """A step checked: its reward and its row's JSON text."""

    reward: float
    data: str


def _step(
    state: Any = None,
    action: Any = None,
    reward: Any = 0.0,
    prompt: Any = None,
    completion: str | None = None,
    valid: bool = True,
    info: dict[str, Any] | None = None,
) -> _Checked:
    """One step checked, as its trace line holds it (but ``t``, its index,
    the key of its row)."""
    reward = _reward("reward", reward)
    try:
        if completion is not None and not isinstance(completion, str):
            raise ConfigError("completion", "completion must be text.")
        step: dict[str, Any] = {
            "messages": _messages(prompt),
            "completion": completion or "",
            "tool": _tool_of(action),
            "action": action,
            "parsed": True,
            "valid": bool(valid),
            "reward": reward,
            "reward_breakdown": {},
            # GRPO rows read a dict state; anything else is kept under a key.
            "state": state
            if isinstance(state, dict) or state is None
            else {"observation": state},
        }
        if info:
            step["info"] = info
        # The whole step at once: checking each field first made JSON text
        # of it twice (a fifth of a step's cost). Only a step refused is
        # checked field by field, to name the field at fault.
        return _Checked(reward, _json("step", step))
    except ConfigError:
        for name, value in (("state", state), ("action", action), ("info", info)):
            _json(name, value)
        if completion is not None and not isinstance(completion, str):
            raise ConfigError("completion", "completion must be text.") from None
        _json("completion", completion)
        _json("prompt", prompt)
        raise


class TrajectoryStore:
    """The project's recorded trajectories. Thread-safe: each call takes a
    connection of its own from the pool (SQLite's one, in turn)."""

    def __init__(
        self,
        project_dir: str | os.PathLike[str],
        *,
        recover: bool = True,
        database: str | None = None,
    ) -> None:
        """``recover``: write the trace lines a crashed writer left unwritten
        (False for a reader beside the writing service, which might be
        between its commit and its line). ``database``: a PostgreSQL URL
        (default: :func:`engine.store.database.configured`, else the
        project's SQLite file)."""
        self.project_dir = Path(project_dir)
        try:
            self._pool = open_pool(self.project_dir, SCHEMA, POOL_SIZE, database)
        except sqlite3.DatabaseError as exc:
            raise EngineError(
                f"The trajectory database {self.project_dir / DB_FILE} is damaged "
                f"({exc})."
            ) from None
        self.recovered = self._export_pending() if recover else []
        """Ended trajectories whose trace line was written when the store
        opened (their writer died before it could)."""

    def close(self) -> None:
        self._pool.close()

    # ---------------------------------------------------------- recording
    def start(
        self,
        agent: str,
        *,
        scenario: str = "",
        window: str = "",
        env: str = "",
        meta: dict[str, Any] | None = None,
    ) -> str:
        """A new open trajectory of ``agent``; its id."""
        checked_name("agent", agent)
        row = (
            f"t-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}",
            agent,
            _text("scenario", scenario),
            _text("window", window),
            _text("env", env),
            _json("meta", meta or {}),
            time.time(),
            str(self._trace_path(agent).relative_to(self.project_dir)),
        )
        with self._pool.connection() as db:
            db.execute(
                "INSERT INTO trajectories"
                ' (id, agent, scenario, "window", env, meta, created, trace_file)'
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                row,
            )
        return row[0]

    def add_step(
        self,
        trajectory_id: str,
        *,
        state: Any = None,
        action: Any = None,
        reward: float = 0.0,
        prompt: Any = None,
        completion: str | None = None,
        valid: bool = True,
        info: dict[str, Any] | None = None,
    ) -> int:
        """Append one step; its index ``t`` once it is committed."""
        step = _step(state, action, reward, prompt, completion, valid, info)
        return self._append(trajectory_id, [step])

    def add_steps(self, trajectory_id: str, steps: list[dict[str, Any]]) -> int:
        """Append steps (each with :meth:`add_step`'s keywords) in one
        transaction, all or none; the index ``t`` of the first. A bad step
        is a ConfigError naming it (``steps[3].reward``)."""
        if not steps:
            raise ConfigError("steps", "steps must hold at least one step.")
        if len(steps) > MAX_BATCH_STEPS:
            raise ConfigError(
                "steps", f"steps must hold at most {MAX_BATCH_STEPS:,} steps."
            )
        records = []
        for i, given in enumerate(steps):
            if not isinstance(given, dict):
                field = f"steps[{i}]"
                raise ConfigError(field, f"{field} must be a JSON object.")
            try:
                unknown = sorted(set(given) - set(_STEP_KEYS))
                if unknown:
                    raise ConfigError(
                        unknown[0], f"Unknown field {quoted(unknown[0])}."
                    )
                records.append(_step(**given))
            except ConfigError as exc:
                field = f"steps[{i}].{exc.field}"
                raise ConfigError(field, f"{field}: {_lower(str(exc))}") from None
        return self._append(trajectory_id, records)

    def _append(self, trajectory_id: str, steps: list[_Checked]) -> int:
        # A step's JSON holds no ``t``: its index is the row's key, claimed
        # below and put back by _steps, so the text is made before the
        # index is known.
        data = [s.data for s in steps]
        reward = sum(s.reward for s in steps)
        with self._pool.connection() as db:
            if db.dialect == POSTGRESQL:
                first = self._append_one_statement(db, trajectory_id, data, reward)
            else:
                first = self._append_in_transaction(db, trajectory_id, data, reward)
            if first is None:
                status, _ = self._status(db, trajectory_id)
                raise TrajectoryEndedError(
                    f"The trajectory {trajectory_id} has ended ({status}); "
                    "it takes no more steps."
                )
        return first

    @staticmethod
    def _append_in_transaction(
        db: Database, trajectory_id: str, data: list[str], reward: float
    ) -> int | None:
        """SQLite: claim the indices, then insert the steps, in one write
        transaction; the first index, or None (no open trajectory)."""
        with db.transaction():
            # Counting the steps first claims their indices and locks the
            # row (another writer's steps wait) in one statement.
            claimed = db.execute(
                "UPDATE trajectories SET steps = steps + ?,"
                " reward_sum = reward_sum + ? WHERE id = ? AND status = 'open'"
                " RETURNING steps",
                (len(data), reward, trajectory_id),
            ).fetchone()
            if claimed is None:
                return None
            first = int(claimed[0]) - len(data)
            db.executemany(
                "INSERT INTO trajectory_steps VALUES (?, ?, ?)",
                [(trajectory_id, first + i, d) for i, d in enumerate(data)],
            )
        return first

    @staticmethod
    def _append_one_statement(
        db: Database, trajectory_id: str, data: list[str], reward: float
    ) -> int | None:
        """PostgreSQL: the claim and the insert as one statement (a
        data-modifying ``WITH``), atomic and committed by itself: one round
        trip to the server, where a transaction of its own costs four
        (``BEGIN``, the claim, the insert, ``COMMIT``). The claim's row lock
        makes another process's steps wait for this commit and then number
        theirs after these. The first index, or None (no open trajectory:
        nothing inserted)."""
        claimed = db.execute(
            "WITH claimed AS (UPDATE trajectories SET steps = steps + ?,"
            " reward_sum = reward_sum + ? WHERE id = ? AND status = 'open'"
            " RETURNING id, steps - ? AS first),"
            " inserted AS (INSERT INTO trajectory_steps (trajectory, t, data)"
            " SELECT claimed.id, claimed.first + s.i - 1, s.step::text"
            " FROM claimed, json_array_elements(?::json) WITH ORDINALITY"
            " AS s(step, i))"
            " SELECT first FROM claimed",
            # One JSON array of the steps' texts, which ``json`` (unlike
            # ``jsonb``) hands back element by element as sent; a text[]
            # parameter costs psycopg a regex escape of every quote.
            (len(data), reward, trajectory_id, len(data), f"[{','.join(data)}]"),
        ).fetchone()
        return None if claimed is None else int(claimed[0])

    def end(
        self,
        trajectory_id: str,
        *,
        status: str,
        total_reward: float | None = None,
    ) -> dict[str, Any]:
        """End a trajectory and write its episode line; its row."""
        if status not in END_STATUSES:
            raise ConfigError(
                "status",
                f"status must be one of {', '.join(END_STATUSES)}, "
                f"not {quoted(status)}.",
            )
        if total_reward is not None:
            total_reward = _reward("total_reward", total_reward)
        with self._pool.connection() as db, db.hold(f"trajectory:{trajectory_id}"):
            # Held until the line is written: a process that starts now
            # leaves this line to this one (see _export_pending).
            trace_file = self._get(db, trajectory_id)["trace_file"]
            with db.transaction(lock=f"trace:{trace_file}"):
                current, _ = self._status(db, trajectory_id, lock=True)
                if current != "open":
                    raise TrajectoryEndedError(
                        f"The trajectory {trajectory_id} has ended already ({current})."
                    )
                db.execute(
                    "UPDATE trajectories SET status = ?, ended = ?,"
                    " total_reward = COALESCE(?, reward_sum),"
                    " episode = (SELECT COALESCE(MAX(episode) + 1, 0)"
                    "  FROM trajectories WHERE trace_file ="
                    "  (SELECT trace_file FROM trajectories WHERE id = ?))"
                    " WHERE id = ?",
                    (status, time.time(), total_reward, trajectory_id, trajectory_id),
                )
            self._export(db, trajectory_id, check_file=False)
        return self.get(trajectory_id)

    # ------------------------------------------------------------ reading
    def get(self, trajectory_id: str, with_steps: bool = False) -> dict[str, Any]:
        with self._pool.connection() as db:
            out = self._get(db, trajectory_id)
            if with_steps:
                out["steps_data"] = list(self._steps(db, trajectory_id))
        return out

    def _get(self, db: Database, trajectory_id: str) -> dict[str, Any]:
        row = db.execute(
            f"SELECT {_SELECT} FROM trajectories WHERE id = ?",
            (trajectory_id,),
        ).fetchone()
        if row is None:
            raise UnknownTrajectoryError(
                f"There is no trajectory {quoted(trajectory_id)} in this project."
            )
        return self._row(row)

    def list_trajectories(
        self, agent: str = "", status: str = "", limit: int = 1000
    ) -> list[dict[str, Any]]:
        """The latest ``limit`` trajectories (oldest first), of ``agent`` and
        ``status`` when given (``open`` for those still recording)."""
        where, args = [], []
        if agent:
            where.append("agent = ?")
            args.append(agent)
        if status:
            where.append("status = ?")
            args.append(status)
        sql = f"SELECT {_SELECT} FROM trajectories"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._pool.connection() as db:
            sql += f" ORDER BY created DESC, {db.insertion_order} DESC LIMIT ?"
            rows = db.execute(sql, (*args, limit)).fetchall()
        return [self._row(r) for r in reversed(rows)]

    def counts(self, agent: str = "", since: float = 0.0) -> dict[str, int]:
        """Ended trajectories (of ``agent`` when given): ``total``; ``new``
        (ended after ``since``) and their distinct ``scenarios``; ``open``
        ones; and what ended in the last hour and day (``last_hour``,
        ``last_day``, ``steps_last_hour``)."""
        now = time.time()
        with self._pool.connection() as db:
            row = db.execute(
                "SELECT SUM(CASE WHEN status != 'open' THEN 1 END),"
                " SUM(CASE WHEN status != 'open' AND ended > ? THEN 1 END),"
                " COUNT(DISTINCT CASE WHEN status != 'open' AND ended > ?"
                " THEN scenario END),"
                " SUM(CASE WHEN status = 'open' THEN 1 END),"
                " SUM(CASE WHEN status != 'open' AND ended > ? THEN 1 END),"
                " SUM(CASE WHEN status != 'open' AND ended > ? THEN 1 END),"
                " SUM(CASE WHEN status != 'open' AND ended > ? THEN steps END)"
                " FROM trajectories WHERE (? = '' OR agent = ?)",
                (since, since, now - 3600.0, now - 86400.0, now - 3600.0)
                + (agent,) * 2,
            ).fetchone()
        keys = (
            "total",
            "new",
            "scenarios",
            "open",
            "last_hour",
            "last_day",
            "steps_last_hour",
        )
        return {k: int(v or 0) for k, v in zip(keys, row, strict=True)}

    def _row(self, row: tuple[Any, ...]) -> dict[str, Any]:
        out = dict(zip(_COLUMNS, row, strict=True))
        out["meta"] = json.loads(out["meta"] or "{}")
        out["exported"] = bool(out["exported"])
        return out

    def _status(
        self, db: Database, trajectory_id: str, lock: bool = False
    ) -> tuple[str, int]:
        """Status and steps; ``lock``: the row is locked until the
        transaction ends (another process adds no step meanwhile)."""
        row = db.execute(
            "SELECT status, steps FROM trajectories WHERE id = ?"
            + (db.for_update if lock else ""),
            (trajectory_id,),
        ).fetchone()
        if row is None:
            raise UnknownTrajectoryError(
                f"There is no trajectory {quoted(trajectory_id)} in this project."
            )
        return str(row[0]), int(row[1])

    def _steps(self, db: Database, trajectory_id: str) -> Iterator[dict[str, Any]]:
        for t, data in db.execute(
            "SELECT t, data FROM trajectory_steps WHERE trajectory = ? ORDER BY t",
            (trajectory_id,),
        ):
            step: dict[str, Any] = json.loads(data)
            # Rows written before the index left the JSON hold it already.
            step["t"] = t
            yield step

    # ------------------------------------------------------------- traces
    def _trace_path(self, agent: str) -> Path:
        return child(
            self.project_dir, "data/traces", TRACE_PREFIX + agent, "agent", ".jsonl"
        )

    def episode(self, trajectory_id: str) -> dict[str, Any]:
        """The trajectory as a trace episode (the line its file gets)."""
        with self._pool.connection() as db:
            return self._episode(db, trajectory_id)

    def _episode(self, db: Database, trajectory_id: str) -> dict[str, Any]:
        row = self._get(db, trajectory_id)
        steps = list(self._steps(db, trajectory_id))
        status = row["status"]
        return {
            "episode": row["episode"],
            "trajectory_id": row["id"],
            "env": row["env"],
            "task_id": row["scenario"],
            "seed": None,
            "policy": f"agent:{row['agent']}",
            "agent": row["agent"],
            "scenario": row["scenario"],
            "window": row["window"],
            "meta": row["meta"],
            "steps": steps,
            "return": row["total_reward"],
            "length": len(steps),
            "success": status == "completed",
            "truncated": status == "timeout",
            "status": status,
            "created": row["created"],
            "ended": row["ended"],
        }

    def _export(self, db: Database, trajectory_id: str, check_file: bool) -> None:
        """Append the episode line (unless ``check_file`` finds it in the
        file already), then mark it exported. Called with the lock held."""
        episode = self._episode(db, trajectory_id)
        path = self.project_dir / self._get(db, trajectory_id)["trace_file"]
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            if not (check_file and _has_trajectory(path, trajectory_id)):
                _append_line(path, json.dumps(episode, separators=(",", ":")) + "\n")
        except OSError as exc:
            raise EngineError(
                f"The trajectory {trajectory_id} ended, but its trace line could "
                f"not be written to {path} ({exc.strerror or exc}); it is written "
                "when the service starts again."
            ) from None
        db.execute(
            "UPDATE trajectories SET exported = 1 WHERE id = ?", (trajectory_id,)
        )

    def _export_pending(self) -> list[str]:
        done = []
        with self._pool.connection() as db:
            pending = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM trajectories WHERE status != 'open'"
                    " AND exported = 0 ORDER BY ended"
                ).fetchall()
            ]
            for trajectory_id in pending:
                # Not one whose writer (another process on the same
                # PostgreSQL database) is alive and about to write it.
                with db.hold(f"trajectory:{trajectory_id}", wait=False) as free:
                    if free and not self._get(db, trajectory_id)["exported"]:
                        self._export(db, trajectory_id, check_file=True)
                        done.append(trajectory_id)
        return done


def _append_line(path: Path, line: str) -> None:
    """Append ``line`` durably, after cutting off a torn last line. The
    file is locked meanwhile: processes sharing a PostgreSQL database may
    append to one trace file, and one's cut must not meet another's line."""
    with open(path, "ab+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)  # released when the file closes
        size = fh.seek(0, os.SEEK_END)
        if size:
            fh.seek(size - 1)
            if fh.read(1) != b"\n":
                fh.seek(0)
                data = fh.read()
                fh.truncate(data.rfind(b"\n") + 1)
        fh.seek(0, os.SEEK_END)
        fh.write(line.encode("utf-8"))
        fh.flush()
        os.fsync(fh.fileno())


def _has_trajectory(path: Path, trajectory_id: str) -> bool:
    if not path.is_file():
        return False
    needle = f'"trajectory_id":"{trajectory_id}"'.encode()
    with open(path, "rb") as fh:
        return any(needle in line and line.endswith(b"\n") for line in fh)
