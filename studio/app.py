"""``rl-studio``: start the desktop app (or render a screenshot and exit)."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()

WORKSPACE_CHOICES = ("environments", "workflows", "training", "models")

QT_ENVIRONMENT = {
    # Qt's raster engine hands a large fill (an image drawn with opacity, a
    # gradient, 96 spans or more) to a pool of threads and waits for them.
    # With both cores training, each hand-off waited for a core: the GUI
    # thread stalled up to 191 ms for 50 ms of its own work (three PPO runs,
    # tests/benchmarks/test_bench_gui_stall.py); filling on the GUI thread
    # itself, 53-55 ms.
    "QT_NO_GUI_THREADPOOL": "1",
}
"""Qt's environment variables the studio runs under, set before Qt starts."""


def prepare_qt_environment() -> None:
    """Set :data:`QT_ENVIRONMENT` (before the QApplication is made)."""
    os.environ.update(QT_ENVIRONMENT)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rl-studio", description="RL Studio: train agents with RL and ship them."
    )
    parser.add_argument(
        "--project", type=Path, help="project folder to open (created if missing)"
    )
    parser.add_argument(
        "--screenshot",
        type=Path,
        metavar="FILE.png",
        help="render the window offscreen to FILE.png and exit",
    )
    parser.add_argument(
        "--workspace", choices=WORKSPACE_CHOICES, help="workspace to show"
    )
    parser.add_argument(
        "files",
        nargs="*",
        type=Path,
        metavar="FILE",
        help="workflows (.flow.json) and environments (.env.json) to open",
    )
    parser.add_argument(  # the older spelling of FILE
        "--open", type=Path, action="append", default=[], help=argparse.SUPPRESS
    )
    parser.add_argument(
        "--theme",
        choices=("light", "dark", "system"),
        help="colours for this start (View → Theme changes them for good)",
    )
    parser.add_argument(
        "--size",
        type=_window_size,
        metavar="WIDTHxHEIGHT",
        help="the window's size in pixels, e.g. 1024x700 (screenshots)",
    )
    parser.add_argument(
        "--install-desktop",
        action="store_true",
        help="install the launcher and icon for the current user, then exit",
    )
    parser.add_argument(
        "--exit-when-shown",
        action="store_true",
        help="print the seconds from launch to window shown, then exit (benchmark)",
    )
    return parser


def _window_size(text: str) -> tuple[int, int]:
    width, _, height = text.lower().partition("x")
    try:
        size = int(width), int(height)
    except ValueError:
        size = (0, 0)
    if min(size) < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a size; write WIDTHxHEIGHT in pixels, e.g. 1024x700."
        )
    return size


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_intermixed_args(argv)
    if args.install_desktop:
        from studio.desktop import install_desktop_entry

        print(install_desktop_entry())
        return 0
    prepare_qt_environment()
    if args.screenshot or args.exit_when_shown:
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from studio.platform_check import missing_packages, sentence, uses_xcb

    # Qt aborts on a missing xcb library, naming the wrong package.
    if uses_xcb() and (missing := missing_packages()):
        print(sentence(missing), file=sys.stderr)
        return 1

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from studio.engine_client import EngineClient
    from studio.main_window import MainWindow, app_icon
    from studio.qt_exit import shutdown_qt
    from studio.session import Session
    from studio.settings import Settings
    from studio.state.project_state import ProjectState

    existing = QApplication.instance()
    app = existing if isinstance(existing, QApplication) else QApplication(sys.argv[:1])
    app.setApplicationName("RL Studio")
    app.setOrganizationName("RLStudio")
    app.setDesktopFileName("rl-studio")
    app.setWindowIcon(app_icon())

    settings = Settings()
    from studio.theme import apply_theme

    apply_theme(args.theme or settings.theme)
    if args.project is not None:
        project, create = str(args.project.expanduser().resolve()), True
    elif settings.last_project:
        project, create = settings.last_project, False
    else:
        project, create = str(settings.default_project), True

    client = EngineClient()
    client.environment = settings.engine_environment()
    state = ProjectState()
    session = Session(client, state, settings)
    window = MainWindow(session, settings)
    if args.workspace:
        window.set_workspace(args.workspace)
    if args.size:
        window.resize(*args.size)
    files = [*args.open, *args.files]
    if files:
        paths = [path.expanduser().resolve() for path in files]
        _open_when_ready(window, session, paths)

    def start_engine() -> None:
        client.start()
        session.open_project(project, create=create)

    if args.exit_when_shown:
        window.show()
        app.processEvents()
        shown_s, cpu_s = time.perf_counter() - _T0, time.process_time()
        print(f'{{"shown_s": {shown_s:.4f}, "cpu_s": {cpu_s:.4f}}}', flush=True)
        return 0
    if args.screenshot:
        start_engine()
        return _screenshot(app, window, session, args.screenshot)

    window.show()
    # The engine (a second Python process) and the project start once the
    # window has been shown: they competed with it for the CPU at launch.
    QTimer.singleShot(0, start_engine)
    # A launch that names where to go (a workspace, a file) skips the welcome.
    if settings.show_welcome and not (args.workspace or files):
        window.show_welcome()
    code = app.exec()
    client.stop(keep_runs=window.keep_runs_on_quit)
    shutdown_qt()
    return int(code)


def _open_when_ready(window, session, paths: list[Path]) -> None:  # type: ignore[no-untyped-def]
    """Open flow and env files in their editors once the project is loaded
    (the last one named is shown)."""

    def open_them(*_: object) -> None:
        session.project_opened.disconnect(open_them)
        for path in paths:
            window.open_file(path)

    session.project_opened.connect(open_them)


def _screenshot(app, window, session, path: Path) -> int:  # type: ignore[no-untyped-def]
    """Show the window once the project is loaded (or failed), grab it."""
    from PySide6.QtCore import QEventLoop, QTimer

    from studio.qt_exit import shutdown_qt

    loop = QEventLoop()
    session.project_opened.connect(lambda *_: QTimer.singleShot(300, loop.quit))
    session.project_failed.connect(lambda *_: QTimer.singleShot(300, loop.quit))
    QTimer.singleShot(30_000, loop.quit)
    window.confirm_quit = False
    # No one answers questions here: a pending restore question would wait
    # forever (the autosave copies stay for the next session).
    for workspace in window.workspaces.values():
        document = getattr(workspace, "document", None)
        if document is not None:
            document.unattended = True
    window.show()
    loop.exec()
    _settle_plots(app, window)
    path.parent.mkdir(parents=True, exist_ok=True)
    ok = window.grab().save(str(path))
    session.client.stop()
    shutdown_qt()
    if not ok:
        print(f"rl-studio: could not write the screenshot {path}.", file=sys.stderr)
        return 1
    print(path)
    return 0


def _settle_plots(app, window, timeout_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    """Let live plots draw what they hold (they take big series in over a few
    timer ticks) and their grid lay out, so the picture shows the real thing."""
    from PySide6.QtCore import QEventLoop, QTimer

    from widgets.live_plot import LivePlotPanel

    deadline = time.monotonic() + timeout_s
    panels = window.findChildren(LivePlotPanel)
    while time.monotonic() < deadline and any(p.pending_redraws() for p in panels):
        loop = QEventLoop()
        QTimer.singleShot(50, loop.quit)
        loop.exec()
    app.processEvents()


if __name__ == "__main__":
    raise SystemExit(main())
