"""A private PostgreSQL server for the tests: a cluster made with ``initdb``
in a temporary folder, listening on 127.0.0.1 on a free port, stopped and
removed at the end of the session (``make pg-deps`` installs PostgreSQL;
without its binaries the tests that need it skip, saying so).

As root (CI), the cluster belongs to the ``postgres`` user, which the
server insists on; otherwise to the user running the tests.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from itertools import count
from pathlib import Path

import pytest

START_TIMEOUT_S = 60


def binaries() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl`` (the newest installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PgServer:
    """One cluster; :meth:`stop` and :meth:`start` take it away and bring it
    back (the same data and port) for the fault tests."""

    def __init__(
        self, bin_dir: Path, durable: bool = False, settings: tuple[str, ...] = ()
    ) -> None:
        """``durable``: PostgreSQL's own settings, every commit synced to
        disk (benchmarks); otherwise ``fsync=off`` (tests: faster, and a
        server killed still loses nothing committed, only a machine would).
        ``settings``: more server settings (``name=value``)."""
        self.bin = bin_dir
        self.durable = durable
        self.settings = settings
        self.root = Path(tempfile.mkdtemp(prefix="rl-studio-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._owner = "postgres" if os.geteuid() == 0 else ""
        self._names = count(1)
        if self._owner:
            entry = pwd.getpwnam(self._owner)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self._as_owner(
            [
                *(str(self.bin / "initdb"), "-D", str(self.data)),
                *("-A", "trust", "-U", "postgres", "--no-sync"),
            ]
        )
        self.start()

    def _as_owner(self, argv: list[str]) -> None:
        if self._owner:
            argv = ["su", self._owner, "-c", subprocess.list2cmdline(argv)]
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=START_TIMEOUT_S
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stderr or done.stdout}")

    def start(self) -> None:
        """Start the server and wait until it accepts connections (``-w``)."""
        options = (
            f"-p {self.port} -k {self.data} -c listen_addresses=127.0.0.1"
            " -c max_connections=200" + ("" if self.durable else " -c fsync=off")
        ) + "".join(f" -c {setting}" for setting in self.settings)
        self._as_owner(
            [
                *(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options),
                *("-l", str(self.data / "server.log"), "-w", "start"),
            ]
        )

    def stop(self, mode: str = "fast") -> None:
        """Stop it the way an operator's restart does (``fast``: open
        sessions are ended, their transactions rolled back; ``immediate``:
        no checkpoint either, for a cluster about to be removed)."""
        pg_ctl = str(self.bin / "pg_ctl")
        self._as_owner([pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop"])

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self) -> str:
        """A fresh, empty database's URL."""
        import psycopg

        name = f"t{os.getpid()}_{next(self._names)}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def close(self) -> None:
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    bin_dir = binaries()
    if bin_dir is None:
        pytest.skip(
            "PostgreSQL is not installed (no initdb under /usr/lib/postgresql "
            "or on PATH); `make pg-deps` installs it."
        )
    server = PgServer(bin_dir)
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_url(postgres: PgServer) -> str:
    """A fresh database on the session's server."""
    return postgres.new_database()
