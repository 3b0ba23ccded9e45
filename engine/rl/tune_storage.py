"""A sweep's Optuna RDB storage: opened with heartbeats, its SQLite file
made by one command at a time, written ahead, refused in one sentence when
damaged or in memory (:func:`open_storage`, :func:`storage_failures`).
``postgresql://`` goes through psycopg 3 (the driver the project installs),
its tables made under a PostgreSQL advisory lock."""

from __future__ import annotations

import contextlib
import logging
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError, quoted

if TYPE_CHECKING:
    import optuna


HEARTBEAT_S = 20
"""Seconds between a running trial's heartbeats."""

GRACE_S = 120
"""A running trial whose last heartbeat is older than this is failed (its
worker is gone); well above HEARTBEAT_S, as a loaded machine or a locked
SQLite file may delay a heartbeat."""

CREATION_TRIES = 5
"""Attempts at opening a storage whose tables another command is making at
the same moment (where no lock file serializes them)."""


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("sqlalchemy").setLevel(logging.ERROR)


def open_storage(
    url: str,
    *,
    checked: bool = False,
    heartbeat_s: int = HEARTBEAT_S,
    grace_s: int = GRACE_S,
) -> optuna.storages.RDBStorage:
    """The RDB storage at ``url``, with heartbeats every ``heartbeat_s``
    seconds and trials failed after ``grace_s`` without one; ``checked``:
    the command that started this worker made and checked its tables, so
    the worker skips that (a second of start-up each). An EngineError in one
    sentence when it cannot be opened (a bad URL, a missing driver, a folder
    that is not there, a server that does not answer, an SQLite database in
    memory, a file that is not one). Two commands opening a new storage at
    once make its tables one after the other (:func:`_creating`)."""
    import optuna

    quiet_optuna()
    plain, url = url, sqlalchemy_url(url)
    database = _sqlite_database(url)
    if database is not None and _in_memory(url, database):
        raise EngineError(
            f"The storage {quoted(url)} is an SQLite database in memory, which the "
            "sweep's worker processes cannot share; give a file, such as "
            "sqlite:///path/sweeps.db."
        )
    # Workers share a SQLite file: wait for its lock instead of failing.
    kwargs = {"connect_args": {"timeout": 60}} if database is not None else {}

    def make() -> optuna.storages.RDBStorage:
        with (
            warnings.catch_warnings(),
            _creating(database, skip=checked),
            _creating_on_server(plain, skip=checked),
        ):
            # Heartbeats are marked experimental since Optuna 2.9.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs=kwargs,
                skip_compatibility_check=checked,
                skip_table_creation=checked,
                heartbeat_interval=heartbeat_s,
                grace_period=grace_s,
            )
            if database is not None:
                _write_ahead(storage)
        return storage

    existed = database is not None and Path(database).is_file()
    try:
        for _ in range(CREATION_TRIES - 1):
            try:
                storage = make()
                break
            except Exception as exc:
                if not _lost_creation_race(exc):
                    raise
                # Another command made tables between our look and our write
                # (a server database, or no lock file); look again.
        else:
            storage = make()
        if existed and not checked:
            _check_intact(storage)
        return storage
    except Exception as exc:  # SQLAlchemy and drivers raise many kinds
        if database is not None and _damaged(exc):
            raise EngineError(_damaged_sentence(database)) from None
        text = _first_line(exc)
        why = f" ({quoted(text)})" if text else ""
        raise EngineError(
            f"The storage {quoted(plain)} cannot be opened{why}; give an RDB URL "
            "such as sqlite:///path/sweeps.db or postgresql://host/db."
        ) from None


DAMAGED = ("file is not a database", "database disk image is malformed")
"""What SQLite says of a file that is not a whole database."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised from (Optuna wraps SQLAlchemy's,
    which wraps the driver's)."""
    out = [exc]
    while (cause := out[-1].__cause__ or out[-1].__context__) and len(out) < 10:
        out.append(cause)
    return out


def _damaged(exc: BaseException) -> bool:
    return any(words in str(e) for e in _chain(exc) for words in DAMAGED)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _damaged_sentence(database: str) -> str:
    return (
        f"The storage file {quoted(database)} is not an SQLite database (damaged, "
        "or another kind of file); it is left as it is: move it away or give "
        "another --storage."
    )


def _check_intact(storage: optuna.storages.RDBStorage) -> None:
    """Refuse an SQLite file SQLite finds damaged (``PRAGMA quick_check``,
    milliseconds for a sweep's file): a damaged page deep in the file broke
    the sweep later, in the middle of its trials."""
    import sqlalchemy

    with storage.engine.connect() as connection:
        verdict = connection.execute(sqlalchemy.text("PRAGMA quick_check")).scalar()
    if verdict != "ok":
        raise sqlalchemy.exc.DatabaseError(
            "PRAGMA quick_check", None, Exception(DAMAGED[1])
        )


@contextlib.contextmanager
def storage_failures(url: str) -> Iterator[None]:
    """A failure of the study's storage while it is used (a damaged SQLite
    page read, a server gone) as an EngineError with one sentence, instead of
    Optuna's ``StorageInternalError``."""
    import optuna
    import sqlalchemy

    try:
        yield
    except (
        optuna.exceptions.StorageInternalError,
        sqlalchemy.exc.SQLAlchemyError,
    ) as exc:
        database = _sqlite_database(url)
        if database and _damaged(exc):
            raise EngineError(_damaged_sentence(database)) from None
        why = _first_line(_chain(exc)[-1]) or type(exc).__name__
        raise EngineError(
            f"The storage {quoted(url)} failed ({quoted(why)})."
        ) from None


def sqlalchemy_url(url: str) -> str:
    """SQLAlchemy's URL for a storage URL: a plain ``postgresql://`` (as
    libpq and ``serve-http --database`` take it) names psycopg 3, which the
    project installs, where SQLAlchemy would pick psycopg2."""
    from engine.store.database import URL_SCHEMES

    for scheme in URL_SCHEMES:
        if url.startswith(f"{scheme}://"):
            return "postgresql+psycopg://" + url.removeprefix(f"{scheme}://")
    return url


@contextlib.contextmanager
def _creating_on_server(url: str, *, skip: bool) -> Iterator[None]:
    """Hold a PostgreSQL advisory lock while a storage's tables are made,
    as :func:`_creating` holds a lock file for SQLite: two commands starting
    at once on a new database race on ``alembic_version``. Nothing for other
    URLs (or when the server cannot be reached: the storage says why)."""
    from engine.store import database

    if skip or not database.is_url(url):
        yield
        return
    import psycopg

    try:
        conn = psycopg.connect(
            url, autocommit=True, connect_timeout=database.CONNECT_TIMEOUT_S
        )
    except psycopg.Error:
        yield
        return
    with conn:
        conn.execute(
            "SELECT pg_advisory_lock(%s)", (database.lock_id("optuna schema"),)
        )
        yield  # the lock ends with the session


def _lost_creation_race(exc: Exception) -> bool:
    """Whether ``exc`` says another process made the storage's tables or
    stamped their version first."""
    import sqlalchemy

    text = str(exc)
    return isinstance(exc, sqlalchemy.exc.IntegrityError) or (
        isinstance(exc, sqlalchemy.exc.OperationalError) and "already exists" in text
    )


def _sqlite_database(url: str) -> str | None:
    """The database of an SQLite URL (``''`` for ``sqlite://``), None for
    another kind of URL or one that does not parse."""
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # left to the storage, which says why
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    return parsed.database or ""


def _in_memory(url: str, database: str) -> bool:
    """Whether an SQLite URL names a database in memory: ``sqlite://``,
    ``sqlite:///:memory:``, ``file::memory:`` or ``mode=memory``."""
    return (
        database in ("", ":memory:") or ":memory:" in database or ("mode=memory" in url)
    )


@contextlib.contextmanager
def _creating(database: str | None, *, skip: bool) -> Iterator[None]:
    """Hold a lock file next to an SQLite database while its tables are
    made (and their version stamped): two commands starting at once on a
    new file both created the tables and one died with ``IntegrityError``
    on ``alembic_version``. Without ``fcntl`` (Windows), or for server
    databases, a creation that lost the race is retried once instead."""
    if skip or database is None:
        yield
        return
    lock = Path(database + ".lock")
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        handle = open(lock, "a")  # noqa: SIM115 (held across the yield)
    except OSError:
        yield  # no folder for it: the storage says why it cannot open
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_ahead(storage: optuna.storages.RDBStorage) -> None:
    """Every connection to the SQLite file in write-ahead-log mode with
    normal syncing: the watcher's reads no longer block the workers'
    writes, and a commit (a report, a heartbeat) syncs the disk at
    checkpoints only; a trial's storage calls take half the time. A commit
    survives a crash of its process; a power cut may lose the last few."""
    import sqlalchemy

    def on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(storage.engine, "connect", on_connect)
    # Connections made before (the table check) reconnect in that mode.
    storage.engine.dispose()


def _default_storage_file(project_dir: Path) -> Path:
    return project_dir / "data" / "sweeps.db"


def default_storage(project_dir: Path) -> str:
    return f"sqlite:///{_default_storage_file(project_dir)}"


def existing_storage(
    storage_arg: str, project_dir: Path
) -> optuna.storages.RDBStorage | None:
    """The storage given (``storage_arg``, opened: a bad URL is refused at
    once), else the project's default one when it exists; None when neither
    (opening the default would make it)."""
    if storage_arg:
        return open_storage(storage_arg)
    if _default_storage_file(project_dir).exists():
        return open_storage(default_storage(project_dir))
    return None
