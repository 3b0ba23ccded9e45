"""Files open in the studio as a desktop user expects (issue 29, item 6):
``rl-studio FILE…``, a file dropped on the window, and a launcher and file
types installed so a double-click in a file manager opens them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDropEvent
from studio_harness import build_main_window, start_on_project

from resources import resource_path
from studio.app import build_parser
from studio.desktop import install_desktop_entry
from studio.main_window import MainWindow

EXAMPLES = Path(resource_path("examples"))


def test_files_are_named_on_the_command_line() -> None:
    args = build_parser().parse_intermixed_args(
        ["a.flow.json", "--theme", "dark", "b.env.json", "--open", "c.flow.json"]
    )
    assert [*args.open, *args.files] == [
        Path("c.flow.json"),
        Path("a.flow.json"),
        Path("b.env.json"),
    ]


def test_the_launcher_takes_files_and_declares_their_types(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    launcher = install_desktop_entry()
    lines = launcher.read_text().splitlines()
    (exec_line,) = [line for line in lines if line.startswith("Exec=")]
    assert exec_line.endswith(" -m studio %F")
    (mime_line,) = [line for line in lines if line.startswith("MimeType=")]
    types = [t for t in mime_line.removeprefix("MimeType=").split(";") if t]
    package = (tmp_path / "mime" / "packages" / "rl-studio.xml").read_text()
    for mime_type, glob in zip(types, ("*.flow.json", "*.env.json"), strict=True):
        assert f'type="{mime_type}"' in package and f'pattern="{glob}"' in package


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    yield win
    win.session.client.stop()


def _drop(window: MainWindow, *paths: Path) -> QDropEvent:
    data = QMimeData()
    data.setUrls([QUrl.fromLocalFile(str(p)) for p in paths])
    event = QDropEvent(
        QPointF(10, 10),
        Qt.DropAction.CopyAction,
        data,
        Qt.MouseButton.LeftButton,
        Qt.KeyboardModifier.NoModifier,
    )
    window.dropEvent(event)
    return event


def test_a_dropped_flow_or_env_opens_in_its_editor(
    window: MainWindow, tmp_path: Path
) -> None:
    flow_file = shutil.copy(EXAMPLES / "flows" / "cartpole_ppo.flow.json", tmp_path)
    env_file = shutil.copy(EXAMPLES / "envs" / "maze.env.json", tmp_path)
    assert _drop(window, Path(flow_file)).isAccepted()
    assert window.current_workspace() == "workflows"
    assert Path(window.workspaces["workflows"].model.path) == Path(flow_file)
    _drop(window, Path(env_file))
    assert window.current_workspace() == "environments"
    assert window.workspaces["environments"].path == Path(env_file)


def test_a_file_it_cannot_open_is_one_sentence(
    window: MainWindow, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a flow")
    assert not window.open_file(notes)
    assert window.banner.text() == (
        "notes.txt is neither a workflow (.flow.json) nor an environment (.env.json)."
    )
    assert not window.open_file(tmp_path / "gone.flow.json")
    assert "does not exist" in window.banner.text()
    assert not _drop(window, notes).isAccepted()  # a drop of it is refused
