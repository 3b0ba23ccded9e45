"""A main window for tests that drive the whole studio on a real engine."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QSettings

from studio.engine_client import EngineClient
from studio.main_window import MainWindow
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState

COOPERATIVE_STOP_TIMEOUT_S = 120.0


def build_main_window(qtbot, tmp_path: Path) -> MainWindow:  # type: ignore[no-untyped-def]
    """A main window whose engine client is not started yet, with its settings
    in ``tmp_path``; closing it asks nothing. Stop ``win.session.client``
    when done."""
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    # A stop a test clicks is a cooperative one (a checkpoint saved, the
    # summary reported). On a loaded CI machine a niced job once took longer
    # than the 10 s default to save and exit, was stopped by force and
    # reported no summary; a test of the forced stop sets its own timeout.
    settings.stop_timeout_s = COOPERATIVE_STOP_TIMEOUT_S
    session = Session(EngineClient(), ProjectState(), settings)
    win = MainWindow(session, settings)
    win.confirm_quit = False
    qtbot.addWidget(win)
    return win


def start_on_project(  # type: ignore[no-untyped-def]
    qtbot, win: MainWindow, project: Path, *, create: bool = False
) -> None:
    """Start the engine and open ``project``; returns once it is open."""
    with qtbot.waitSignal(win.session.project_opened, timeout=30_000):
        win.session.client.start()
        win.session.open_project(str(project), create=create)
