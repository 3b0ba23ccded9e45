"""The Environments workspace's Import Jira mock data… button on a real engine
(issue 32, item 4): a mock data file becomes a workflow env that opens in
the designer and joins the list; bad mock data is one sentence in the
banner, nothing written, the open env kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QFileDialog

from studio.engine_client import EngineClient
from studio.environments.workspace import EnvironmentsWorkspace
from studio.session import Session
from studio.settings import Settings
from studio.state.project_state import ProjectState

REPO = Path(__file__).resolve().parents[1]
MOCK = REPO / "resources" / "examples" / "data" / "jira_mock_data.json"


@pytest.fixture
def workspace(qtbot, tmp_path: Path) -> Iterator[EnvironmentsWorkspace]:  # type: ignore[no-untyped-def]
    engine = EngineClient(auto_restart=False)
    with qtbot.waitSignal(engine.hello_received, timeout=20_000):
        engine.start()
    settings = Settings(
        QSettings(str(tmp_path / "settings.ini"), QSettings.Format.IniFormat)
    )
    session = Session(engine, ProjectState(), settings)
    ws = EnvironmentsWorkspace(session)
    ws.restore_decider = lambda path, auto: pytest.fail("unexpected restore prompt")
    ws.confirm_discard = lambda name: True
    qtbot.addWidget(ws)
    with qtbot.waitSignal(ws.document_opened, timeout=20_000):
        session.open_project(str(tmp_path / "project"), create=True)
    ws.show()
    yield ws
    engine.stop()


def choose(monkeypatch: pytest.MonkeyPatch, path: Path) -> list[str]:
    """The file dialog answers ``path``; the folder it started in is kept."""
    started: list[str] = []

    def answer(parent: Any, title: str, folder: str, filters: str) -> tuple[str, str]:
        started.append(folder)
        return str(path), filters

    monkeypatch.setattr(QFileDialog, "getOpenFileName", answer)
    return started


def test_the_button_imports_mock_data_and_opens_the_env(
    qtbot, workspace: EnvironmentsWorkspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = workspace
    project = ws.envs_dir().parent
    started = choose(monkeypatch, MOCK)
    qtbot.mouseClick(ws.env_list.import_jira_button, Qt.MouseButton.LeftButton)
    made = project / "envs" / "jira_mock_data.env.json"
    qtbot.waitUntil(lambda: ws.path == made, timeout=20_000)
    assert started == [str(project / "data")]
    assert ws.model.kind == "workflow" and ws.model.name == "jira_mock_data"
    issues = len(json.loads(MOCK.read_text())["issues"])
    assert ws.banner.text() == (
        f"Imported {issues} issues and 6 statuses as jira_mock_data."
    )
    assert (project / "data" / "jira" / "jira_mock_data.json").is_file()
    qtbot.waitUntil(
        lambda: str(made) in {d["path"] for d in ws._state.envs}, timeout=20_000
    )

    # Unknown statuses: one sentence, nothing written, the env kept open.
    bad = json.loads(MOCK.read_text())
    bad["issues"][0]["status"] = "Escalated"
    file = project / "bad.json"
    file.write_text(json.dumps(bad))
    before = sorted(p.name for p in (project / "envs").iterdir())
    choose(monkeypatch, file)
    qtbot.mouseClick(ws.env_list.import_jira_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: "Escalated" in ws.banner.text(), timeout=20_000)
    assert ws.banner.text().startswith(
        f"The mock data file bad.json's issue {bad['issues'][0]['id']!r} has the "
        "status 'Escalated', which its valid_transitions do not know"
    )
    assert ws.banner.level == "error"
    assert sorted(p.name for p in (project / "envs").iterdir()) == before
    assert ws.path == made
