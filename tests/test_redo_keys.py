"""Ctrl+Y redoes wherever there is an undo stack (issue 29: "Ctrl+Y does not
redo"), beside the platform's own Redo keys."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence, QUndoCommand, QUndoStack
from PySide6.QtWidgets import QWidget

from widgets.fit import redo_shortcuts, undo_redo_actions


class Count(QUndoCommand):
    def __init__(self, box: list[int]) -> None:
        super().__init__("count")
        self.box = box

    def redo(self) -> None:
        self.box[0] += 1

    def undo(self) -> None:
        self.box[0] -= 1


def test_ctrl_y_and_the_platform_keys_redo(qtbot) -> None:
    keys = redo_shortcuts()
    assert QKeySequence("Ctrl+Y") in keys
    assert all(
        k in keys for k in QKeySequence.keyBindings(QKeySequence.StandardKey.Redo)
    )
    box = [0]
    window = QWidget()
    qtbot.addWidget(window)
    stack = QUndoStack(window)  # as a workspace holds it: gone before its actions
    undo, redo = undo_redo_actions(stack, window)
    window.addActions([undo, redo])
    stack.push(Count(box))
    assert box == [1] and undo.isEnabled()
    assert QKeySequence("Ctrl+Y") in redo.shortcuts()
    redo.trigger()  # nothing to redo yet: the stack stays as it is
    undo.trigger()
    assert box == [0] and redo.isEnabled()
    redo.trigger()
    assert box == [1]


def test_the_flow_editor_redoes_on_ctrl_y(qtbot) -> None:
    from studio.engine_client import EngineClient
    from studio.session import Session
    from studio.settings import Settings
    from studio.state.project_state import ProjectState
    from studio.workflows.workspace import WorkflowsWorkspace

    session = Session(EngineClient(), ProjectState(), Settings())
    ws = WorkflowsWorkspace(session)
    qtbot.addWidget(ws)
    assert QKeySequence("Ctrl+Y") in ws.flow_actions["redo"].shortcuts()
