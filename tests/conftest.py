"""Test settings shared by every test: offscreen Qt, no user files touched."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

# Before anything imports Qt: render offscreen, and keep settings, launchers
# and default projects inside a throwaway home.
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
_HOME = Path(tempfile.mkdtemp(prefix="rl-studio-test-home-"))
os.environ["XDG_CONFIG_HOME"] = str(_HOME / ".config")
os.environ["XDG_DATA_HOME"] = str(_HOME / ".local" / "share")
os.environ["HOME"] = str(_HOME)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# SB3's learn() without a logger of ours (as tests call it) makes a folder
# ``SB3-<date>`` in the temp folder; here it goes into the throwaway home
# (inherited by the processes tests start).
os.environ["SB3_LOGDIR"] = str(_HOME / "sb3-logs")

sys.path.insert(0, str(Path(__file__).parent))

from studio.app import prepare_qt_environment  # noqa: E402

prepare_qt_environment()  # as the studio runs: tests and benchmarks alike

import pytest  # noqa: E402

# A private PostgreSQL server (session-wide) and a fresh database on it.
from pg_server import pg_url, postgres  # noqa: E402, F401
from PySide6.QtCore import QStandardPaths  # noqa: E402

QStandardPaths.setTestModeEnabled(True)


@pytest.fixture(autouse=True, scope="session")
def engine_job_kinds() -> None:
    """The studio's catalog of job kinds, as an engine's hello fills it: a
    test that builds studio state without starting an engine still lists
    runs by their kind's group and label."""
    from engine.jobs.registry import kinds
    from studio.state.job_kinds import JOB_KINDS

    JOB_KINDS.update({k.name: k.catalog_entry() for k in kinds().values()})


@pytest.fixture
def project_dir(tmp_path: Path) -> Path:
    """A path where a fresh project may be created."""
    return tmp_path / "project"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Tear Qt down while Python is alive (see ``studio.qt_exit``): a run
    that passed must not die at exit."""
    from studio.qt_exit import shutdown_qt

    shutdown_qt()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the throwaway home (last, after every test and teardown)."""
    shutil.rmtree(_HOME, ignore_errors=True)
