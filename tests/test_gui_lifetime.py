"""Replies and events never call into deleted widgets: an answer whose asker
was deleted before it came is dropped (CI once failed when a ``run.schema``
reply reached a closed New run dialog)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import shiboken6
from PySide6.QtCore import QCoreApplication, QEvent, QObject
from studio_harness import build_main_window, start_on_project

from engine import protocol
from studio.engine_client import READY, EngineClient
from studio.lifetime import subscribe
from studio.main_window import MainWindow
from studio.state.observable import Observable
from studio.training.run_dialog import RunDialog


class Asker(QObject):
    """Touches Qt in its callbacks, as a widget updating itself would."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[object] = []

    def on_reply(self, result: dict) -> None:
        self.setObjectName("answered")  # raises once the C++ object is gone
        self.answers.append(result)

    def on_error(self, error: protocol.Error) -> None:
        self.setObjectName("refused")
        self.answers.append(error)


@pytest.fixture
def client(qtbot) -> Iterator[EngineClient]:
    c = EngineClient(auto_restart=False)
    with qtbot.waitSignal(c.hello_received, timeout=30_000):
        c.start()
    assert c.state == READY
    yield c
    c.stop()


def test_a_reply_to_a_deleted_asker_is_dropped(qtbot, client: EngineClient) -> None:
    doomed, alive = Asker(), Asker()
    client.request(protocol.GetRunSchema(kind="rl.train"), doomed.on_reply)
    client.request(protocol.GetRunSchema(kind="nope"), on_error=doomed.on_error)
    client.request(protocol.GetRunSchema(kind="rl.train"), alive.on_reply)
    shiboken6.delete(doomed)  # before any answer can be read
    qtbot.waitUntil(
        lambda: not client.has_pending(protocol.GetRunSchema), timeout=30_000
    )
    assert len(alive.answers) == 1 and alive.objectName() == "answered"


def test_an_error_for_a_deleted_asker_is_dropped_when_the_engine_dies(
    qtbot, client: EngineClient
) -> None:
    doomed = Asker()
    client.request(protocol.GetRunSchema(kind="rl.train"), on_error=doomed.on_error)
    shiboken6.delete(doomed)
    with qtbot.waitSignal(client.crashed, timeout=30_000):
        pid = client.pid
        assert pid is not None
        import os
        import signal

        os.kill(pid, signal.SIGKILL)
    assert not client.has_pending(protocol.GetRunSchema)


def test_a_model_listener_is_dropped_with_its_owner(qtbot) -> None:
    model, owner = Observable(), Asker()
    seen: list[str] = []

    def listener(what: str, key: str) -> None:
        owner.setObjectName(what)
        seen.append(what)

    subscribe(model, owner, listener)
    model.notify("first")
    shiboken6.delete(owner)
    model.notify("second")  # would raise RuntimeError inside the listener
    assert seen == ["first"] and model._listeners == []


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.set_workspace("training")
    yield win
    win.session.client.stop()


def test_closing_the_run_dialog_before_its_schema_arrives(
    qtbot, window: MainWindow
) -> None:
    """The CI failure: ``run.schema`` answered after the dialog (and its
    form's QFormLayout) was deleted."""
    client = window.session.client
    dialog = window.workspaces["training"].open_run_dialog()
    assert client.has_pending(protocol.GetRunSchema)
    dialog.reject()  # WA_DeleteOnClose: deleted at the next deferred delete
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    assert not shiboken6.isValid(dialog)
    qtbot.waitUntil(
        lambda: not client.has_pending(protocol.GetRunSchema), timeout=30_000
    )
    # The studio still works: a new dialog gets its form.
    again = window.workspaces["training"].open_run_dialog()
    qtbot.waitUntil(lambda: "algo" in again.form.values(), timeout=30_000)
    assert isinstance(again, RunDialog)
    again.reject()
