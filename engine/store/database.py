"""The databases the stores run on: SQLite, embedded (one file per store
under ``data/``, the default), or one PostgreSQL database that several
service processes share (``serve-http --database postgresql://...``, the
project setting :data:`SETTING_KEY`, or ``$RL_STUDIO_DATABASE``).

This module is the one place that knows the two dialects: connecting,
placeholders (the stores write ``?``; psycopg wants ``%s``), ``INSERT OR
IGNORE`` / ``OR REPLACE`` against ``ON CONFLICT``, autoincrement ids and
``REAL`` (single precision in PostgreSQL), row locks and advisory locks,
and schema creation under ``pg_advisory_lock`` so that processes starting
together on a new database do not race on ``CREATE TABLE``. One statement
elsewhere is PostgreSQL's alone, and says why: the trajectory store's
append, a data-modifying ``WITH`` (one round trip a request; SQLite has
none).

The trajectories, the decision log (with the promotion log), the agents
(their versions, routing and serving settings:
:mod:`engine.store.agent_catalog`) and the labels move to PostgreSQL; the
project's catalog (``studio.sqlite``: runs, models, lineage) stays in the
project folder with the files it indexes.

A PostgreSQL server that goes away makes the operation under way fail with
:class:`DatabaseUnavailable` (one sentence; HTTP 503): its transaction was
rolled back by the server, so nothing is half-written. The next operation
connects again, so the store recovers by itself once the server is back.

Standard library only: :mod:`engine.store.labels`, which the GUI imports,
opens its store here; psycopg is loaded only when a URL names PostgreSQL.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SQLITE = "sqlite"
POSTGRESQL = "postgresql"
URL_SCHEMES = ("postgresql", "postgres")
SETTING_KEY = "database"
"""The project setting naming the database: ``{"url": "postgresql://..."}``
(``Project.setting``; ``rl-studio-engine store use``)."""
ENV = "RL_STUDIO_DATABASE"
"""A PostgreSQL URL that overrides the project setting in this process and
the job processes it starts (``serve-http --database`` sets it)."""
CONNECT_TIMEOUT_S = 5
"""How long connecting to a PostgreSQL server may take before the store
says it cannot be reached."""


class DatabaseError(Exception):
    """A database that cannot be used; the message is one sentence."""


class DatabaseUnavailable(DatabaseError):
    """The database cannot be reached now (a server stopped, a network
    gone): the operation was not done; the same request may succeed later."""


def is_url(target: str | os.PathLike[str]) -> bool:
    """Whether ``target`` names a PostgreSQL database rather than a file."""
    return isinstance(target, str) and urlsplit(target).scheme in URL_SCHEMES


def shown(url: str) -> str:
    """``url`` without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def checked_url(url: str, field: str = "database") -> str:
    """``url`` when it names a PostgreSQL database; otherwise one sentence."""
    if not is_url(url) or not urlsplit(url).path.strip("/"):
        raise DatabaseError(
            f"{field} must be a PostgreSQL URL such as "
            f"postgresql://user@host:5432/dbname, not {url!r}."
        )
    return url


def configured(project_dir: str | os.PathLike[str], given: str | None = None) -> str:
    """The PostgreSQL URL the project's stores use, or '' for its SQLite
    files: ``given``, else ``$RL_STUDIO_DATABASE``, else the project
    setting :data:`SETTING_KEY`."""
    if given:
        return checked_url(given)
    if os.environ.get(ENV, "").strip():
        return checked_url(os.environ[ENV].strip(), ENV)
    url = _project_setting(Path(project_dir)).get("url", "")
    return checked_url(url, "The project's database setting") if url else ""


def setting_row(key: str) -> str:
    """The key of the ``meta`` row of ``studio.sqlite`` holding the project
    setting ``key`` (``Project.setting``)."""
    return f"setting:{key}"


def _project_setting(project_dir: Path) -> dict[str, Any]:
    """The setting as ``Project.setting(SETTING_KEY)`` reads it, read here
    without opening the project: the labels store is opened by the GUI with
    a folder alone."""
    import json

    path = project_dir / "studio.sqlite"
    if not path.is_file():
        return {}
    db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=10.0)
    try:
        row = db.execute(
            "SELECT value FROM meta WHERE key = ?", (setting_row(SETTING_KEY),)
        ).fetchone()
    except sqlite3.OperationalError:  # no meta table yet
        row = None
    finally:
        db.close()
    value = json.loads(row[0]) if row else {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True)
class Schema:
    """A store's tables: its SQLite file under the project and its DDL
    (SQLite's dialect), from which the rest is read."""

    sqlite_file: str
    ddl: str
    migrate: Callable[[Database], None] | None = None
    """Adds what a database made by an older version lacks."""
    tables: tuple[str, ...] = field(init=False)
    counted: tuple[str, ...] = field(init=False)
    """Tables whose ``id`` is an autoincrement."""

    def __post_init__(self) -> None:
        tables = re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", self.ddl)
        counted = re.findall(
            r"CREATE TABLE IF NOT EXISTS (\w+) \(\s*id INTEGER PRIMARY KEY"
            r" AUTOINCREMENT",
            self.ddl,
        )
        object.__setattr__(self, "tables", tuple(tables))
        object.__setattr__(self, "counted", tuple(counted))


def lock_id(name: str) -> int:
    """A PostgreSQL advisory lock's 64-bit key for ``name``, the same in
    every process (``hash()`` is salted per process)."""
    digest = hashlib.blake2b(name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@lru_cache(maxsize=512)
def _pyformat(sql: str) -> str:
    """The stores' ``?`` placeholders as psycopg's ``%s`` (a literal ``%``
    doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _postgres_ddl(schema: str) -> list[str]:
    """SQLite DDL as PostgreSQL statements: autoincrement ids, double
    precision for ``REAL`` (PostgreSQL's is single: a time would lose its
    seconds), no ``WITHOUT ROWID``."""
    schema = schema.replace(
        "INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY"
    )
    schema = re.sub(r"\bREAL\b", "DOUBLE PRECISION", schema)
    schema = schema.replace(") WITHOUT ROWID", ")")
    return [s.strip() for s in schema.split(";") if s.strip()]


def _sentence(exc: BaseException) -> str:
    """A driver's error as a clause: its first line, no final stop."""
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__).strip().rstrip(".")


class Database:
    """One connection to a store's database, SQLite or PostgreSQL, with the
    few operations that differ between them. Not thread-safe: a store holds
    its own lock around it. Statements are written for SQLite (``?``
    placeholders). The connection commits each statement by itself (a
    write of one statement needs no more: on PostgreSQL, no ``BEGIN`` and
    ``COMMIT`` round trips); a write of several runs inside
    :meth:`transaction`."""

    def __init__(
        self, target: str | os.PathLike[str], schema: Schema, create: bool = True
    ) -> None:
        """``target``: a SQLite file or a PostgreSQL URL. The ``schema`` is
        created where missing, then migrated, under one advisory lock on
        PostgreSQL (unless ``create`` is False: another connection did)."""
        migrate = schema.migrate
        self.dialect = POSTGRESQL if is_url(target) else SQLITE
        self.target = str(target)
        self._conn: Any = None
        self._in_transaction = False
        if self.dialect == SQLITE:
            db = sqlite3.connect(
                self.target, check_same_thread=False, timeout=10, isolation_level=None
            )
            self._conn = db
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.executescript(schema.ddl)
            if migrate is not None:
                migrate(self)
            return
        self._psycopg = _psycopg()
        self._connect()
        if not create:
            return
        with self.transaction(lock="rl-studio schema"):
            for statement in _postgres_ddl(schema.ddl):
                self.execute(statement)
            if migrate is not None:
                migrate(self)

    @property
    def name(self) -> str:
        """The database as messages name it (no password)."""
        return shown(self.target) if self.dialect == POSTGRESQL else self.target

    # ------------------------------------------------------------- dialect
    @property
    def for_update(self) -> str:
        """Appended to a ``SELECT`` of a row about to be updated: PostgreSQL
        locks it against another process's transaction (SQLite's write
        transaction holds the whole file already)."""
        return " FOR UPDATE" if self.dialect == POSTGRESQL else ""

    @property
    def insertion_order(self) -> str:
        """The column that orders rows as they were inserted, for tables
        keyed by text: SQLite's ``rowid``, PostgreSQL's primary key ``id``."""
        return "rowid" if self.dialect == SQLITE else "id"

    def upsert_sql(self, table: str, columns: Sequence[str], key: Sequence[str]) -> str:
        """Insert a row or replace the one with the same ``key``."""
        cols, marks = ", ".join(columns), ", ".join("?" * len(columns))
        if self.dialect == SQLITE:
            return f"INSERT OR REPLACE INTO {table} ({cols}) VALUES ({marks})"
        updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in columns if c not in key)
        return (
            f"INSERT INTO {table} ({cols}) VALUES ({marks})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"
        )

    def insert_ignore_sql(self, table: str, columns: Sequence[str]) -> str:
        """Insert a row unless one with the same key is there."""
        cols, marks = ", ".join(columns), ", ".join("?" * len(columns))
        if self.dialect == SQLITE:
            return f"INSERT OR IGNORE INTO {table} ({cols}) VALUES ({marks})"
        return f"INSERT INTO {table} ({cols}) VALUES ({marks}) ON CONFLICT DO NOTHING"

    def columns(self, table: str) -> list[str]:
        """The columns ``table`` has, in order (none: no such table)."""
        if self.dialect == SQLITE:
            return [r[1] for r in self.execute(f"PRAGMA table_info({table})")]
        rows = self.execute(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND table_name = ?"
            " ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        return [str(r[0]) for r in rows]

    def reset_ids(self, table: str) -> None:
        """After rows were copied with their ids: the next autoincrement id
        follows the largest (SQLite's AUTOINCREMENT does so by itself)."""
        if self.dialect == POSTGRESQL:
            self.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'),"
                f" COALESCE((SELECT MAX(id) FROM {table}), 0) + 1, false)"
            )

    # ---------------------------------------------------------- statements
    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """Run one statement; its cursor (rows as tuples, ``description``)."""
        if self.dialect == SQLITE:
            return self._conn.execute(sql, params)
        # A read, or the first statement of a transaction, is sent again
        # once on a fresh connection when the old one was found dead (a
        # server restarted since): the server has not done it.
        retry = not self._in_transaction and sql.lstrip()[:6].upper() in (
            "SELECT",
            "BEGIN",
        )
        return self._pg(lambda c: c.execute(_pyformat(sql), params), retry)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        if self.dialect == SQLITE:
            self._conn.executemany(sql, rows)
            return
        rows = list(rows)
        if rows:
            self._pg(lambda c: c.cursor().executemany(_pyformat(sql), rows), False)

    @contextmanager
    def transaction(
        self, lock: str | None = None, *, synced: bool = True
    ) -> Iterator[None]:
        """One write transaction: committed at the end, rolled back on an
        exception. SQLite takes the write lock at once (``BEGIN
        IMMEDIATE``); on PostgreSQL ``lock`` names an advisory lock held
        until the end, serialising the processes that take it, and
        ``synced=False`` does not wait for the commit to reach the disk
        (``synchronous_commit``: a crash of the machine may lose the last
        fraction of a second, as SQLite's ``synchronous=NORMAL`` may; a
        crash of the process loses nothing), for records that are not
        acknowledged to anyone."""
        if self._in_transaction:
            raise RuntimeError("transactions do not nest")
        self.execute("BEGIN IMMEDIATE" if self.dialect == SQLITE else "BEGIN")
        self._in_transaction = True
        try:
            if not synced and self.dialect == POSTGRESQL:
                self.execute("SET LOCAL synchronous_commit = off")
            if lock is not None and self.dialect == POSTGRESQL:
                self.execute("SELECT pg_advisory_xact_lock(?)", (lock_id(lock),))
            yield
            self.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise
        finally:
            self._in_transaction = False

    @contextmanager
    def hold(self, lock: str, wait: bool = True) -> Iterator[bool]:
        """A PostgreSQL advisory lock held across transactions (until the
        block ends, or the connection dies with its process); yields whether
        it was taken (always, when ``wait``). Nothing on SQLite, where one
        process writes a store's file at a time."""
        if self.dialect == SQLITE:
            yield True
            return
        key = lock_id(lock)
        if wait:
            self.execute("SELECT pg_advisory_lock(?)", (key,))
            taken = True
        else:
            taken = bool(
                self.execute("SELECT pg_try_advisory_lock(?)", (key,)).fetchone()[0]
            )
        try:
            yield taken
        finally:
            if taken and not self._conn.closed and not self._conn.broken:
                self.execute("SELECT pg_advisory_unlock(?)", (key,))

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    # ---------------------------------------------------------- PostgreSQL
    def _connect(self) -> None:
        try:
            self._conn = self._psycopg.connect(
                self.target, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S
            )
        except self._psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: BaseException) -> DatabaseUnavailable:
        return DatabaseUnavailable(
            f"The database {self.name} cannot be reached ({_sentence(exc)}); "
            "nothing was written, so try again once it is back."
        )

    def _pg(self, run: Callable[[Any], Any], retry: bool) -> Any:
        errors = (self._psycopg.OperationalError, self._psycopg.InterfaceError)
        if self._conn.closed or self._conn.broken:
            if self._in_transaction:
                raise self._unavailable(RuntimeError("the connection was lost"))
            self._connect()
        try:
            return run(self._conn)
        except errors as exc:
            if not (self._conn.closed or self._conn.broken):
                raise  # the statement failed, the connection is fine
            if not retry:
                raise self._unavailable(exc) from None
        self._connect()
        try:
            return run(self._conn)
        except errors as exc:
            if self._conn.closed or self._conn.broken:
                raise self._unavailable(exc) from None
            raise

    def _rollback(self) -> None:
        # A dead connection's transaction died with it on the server.
        if self.dialect == SQLITE or not (self._conn.closed or self._conn.broken):
            self._conn.execute("ROLLBACK")


class Pool:
    """Connections to one database, each used by one thread at a time: a
    single one for SQLite (its one writer at a time serialises them anyway,
    as the lock around one connection did), up to ``size`` for PostgreSQL,
    where concurrent requests then run side by side and their commits are
    synced to disk together."""

    def __init__(
        self, target: str | os.PathLike[str], schema: Schema, size: int
    ) -> None:
        first = Database(target, schema)
        self.dialect = first.dialect
        self._target, self._schema = target, schema
        self._size = size if first.dialect == POSTGRESQL else 1
        self._idle = [first]
        self._open = 1
        self._free = threading.Condition()

    @contextmanager
    def connection(self) -> Iterator[Database]:
        """A connection for this thread alone until the block ends."""
        with self._free:
            while not self._idle and self._open >= self._size:
                self._free.wait()
            db = self._idle.pop() if self._idle else None
            if db is None:
                self._open += 1
        if db is None:
            try:
                db = Database(self._target, self._schema, create=False)
            except BaseException:
                with self._free:
                    self._open -= 1
                    self._free.notify()
                raise
        try:
            yield db
        finally:
            with self._free:
                self._idle.append(db)
                self._free.notify()

    def close(self) -> None:
        """Close the idle connections (all, once the users are done)."""
        with self._free:
            while self._idle:
                self._idle.pop().close()
                self._open -= 1


def _psycopg() -> Any:
    """psycopg, loaded only for PostgreSQL (by name: this module stays
    importable, and cheap, where only SQLite is used: the GUI)."""
    try:
        return importlib.import_module("psycopg")
    except ImportError:
        raise DatabaseError(
            "A PostgreSQL database needs psycopg: pip install 'psycopg[binary]'."
        ) from None


def open_database(
    project_dir: str | os.PathLike[str], schema: Schema, database: str | None = None
) -> Database:
    """A store's database: the PostgreSQL one :func:`configured` names, or
    the project's SQLite file (its folder made)."""
    url = configured(project_dir, database)
    return Database(url or sqlite_path(project_dir, schema), schema)


def open_pool(
    project_dir: str | os.PathLike[str],
    schema: Schema,
    size: int,
    database: str | None = None,
) -> Pool:
    """:func:`open_database` as a :class:`Pool` of up to ``size``."""
    url = configured(project_dir, database)
    return Pool(url or sqlite_path(project_dir, schema), schema, size)


def sqlite_path(project_dir: str | os.PathLike[str], schema: Schema) -> Path:
    """The store's SQLite file in the project (its folder made)."""
    path = Path(project_dir) / schema.sqlite_file
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


COPY_BATCH_ROWS = 1000


def copy_store(source: Database, target: Database, schema: Schema) -> dict[str, int]:
    """Copy the rows of ``schema``'s tables from ``source`` to ``target``
    (each table in one transaction), skipping rows whose key the target
    holds already, so that copying again adds only what is missing; a table
    without a key is copied only into an empty one. Rows copied per table."""
    copied: dict[str, int] = {}
    for table in schema.tables:
        have = set(target.columns(table))
        columns = [c for c in source.columns(table) if c in have]
        names = [f'"{c}"' for c in columns]
        keyed = _has_key(schema.ddl, table)
        if not keyed and target.execute(f"SELECT 1 FROM {table} LIMIT 1").fetchone():
            copied[table] = 0
            continue
        insert = target.insert_ignore_sql(table, names)
        before = target.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        rows = source.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall()
        with target.transaction():
            for start in range(0, len(rows), COPY_BATCH_ROWS):
                target.executemany(insert, rows[start : start + COPY_BATCH_ROWS])
        if table in schema.counted:
            target.reset_ids(table)
        after = target.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
        copied[table] = int(after) - int(before)
    return copied


def _has_key(ddl: str, table: str) -> bool:
    """Whether ``table`` has a primary key in ``ddl``."""
    found = re.search(rf"CREATE TABLE IF NOT EXISTS {table} \((.*?)\n\)", ddl, re.S)
    return bool(found and "PRIMARY KEY" in found.group(1))
