"""Undo commands of the environment designer, one per kind of edit.

Each command applies its edit through an :class:`EnvDesign` method the first
time it is done; undo restores the document as it was before, and redo
restores it as it was after (snapshots of a few KB), so undo and redo are
exact whatever the edit touched. Consecutive edits of the same form field
(or of the JSON text) merge into one undo step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtGui import QUndoCommand

from studio.state.env_design import Cell, EnvDesign, Position

_MERGE_FIELD = 1001
_MERGE_JSON = 1002


class EnvCommand(QUndoCommand):
    """Base: ``apply`` the edit once, then switch between snapshots."""

    def __init__(self, model: EnvDesign, text: str) -> None:
        super().__init__(text)
        self.model = model
        self._before: Any = None
        self._after: Any = None

    def apply(self) -> None:
        raise NotImplementedError

    def redo(self) -> None:
        if self._after is None:
            # The "before" is taken when the edit is first done, not when the
            # command is made, so commands may be built ahead of time.
            self._before = self.model.snapshot()
            self.apply()
            self._after = self.model.snapshot()
        else:
            self.model.restore(self._after)

    def undo(self) -> None:
        self.model.restore(self._before)


class CallCommand(EnvCommand):
    """An edit that is one call of a model method."""

    def __init__(self, model: EnvDesign, text: str, call: Callable[[], Any]) -> None:
        super().__init__(model, text)
        self._call = call

    def apply(self) -> None:
        self._call()


class AddStatus(EnvCommand):
    def __init__(self, model: EnvDesign, name: str, position: Position | None) -> None:
        super().__init__(model, f"Add status '{name}'")
        self.name, self.position = name, position

    def apply(self) -> None:
        self.model.add_status(self.name, self.position)


class RemoveStatus(EnvCommand):
    def __init__(self, model: EnvDesign, name: str) -> None:
        super().__init__(model, f"Remove status '{name}'")
        self.name = name

    def apply(self) -> None:
        self.model.remove_status(self.name)


class RenameStatus(EnvCommand):
    def __init__(self, model: EnvDesign, old: str, new: str) -> None:
        super().__init__(model, f"Rename status '{old}' to '{new}'")
        self.old, self.new = old, new

    def apply(self) -> None:
        self.model.rename_status(self.old, self.new)


class AddTool(EnvCommand):
    def __init__(self, model: EnvDesign, name: str, description: str = "") -> None:
        super().__init__(model, f"Add tool '{name}'")
        self.name, self.description = name, description

    def apply(self) -> None:
        self.model.add_tool(self.name, self.description)


class RemoveTool(EnvCommand):
    def __init__(self, model: EnvDesign, name: str) -> None:
        super().__init__(model, f"Remove tool '{name}'")
        self.name = name

    def apply(self) -> None:
        self.model.remove_tool(self.name)


class RenameTool(EnvCommand):
    def __init__(self, model: EnvDesign, old: str, new: str) -> None:
        super().__init__(model, f"Rename tool '{old}' to '{new}'")
        self.old, self.new = old, new

    def apply(self) -> None:
        self.model.rename_tool(self.old, self.new)


class AddTransition(EnvCommand):
    """Add a transition, and its tool first when the tool is new."""

    def __init__(
        self,
        model: EnvDesign,
        source: str,
        tool: str,
        target: str,
        probability: float | None = None,
    ) -> None:
        super().__init__(model, f"Add transition {source} → {target}")
        self.source, self.tool, self.target = source, tool, target
        self.probability = probability
        self.index = -1

    def apply(self) -> None:
        if self.tool not in self.model.tool_names():
            self.model.add_tool(self.tool)
        self.index = self.model.add_transition(
            self.source, self.tool, self.target, self.probability
        )


class RemoveTransition(EnvCommand):
    def __init__(self, model: EnvDesign, index: int) -> None:
        super().__init__(model, "Remove transition")
        self.index = index

    def apply(self) -> None:
        self.model.remove_transition(self.index)


class EditTransition(EnvCommand):
    """Change fields of a transition; a new tool name adds the tool."""

    def __init__(self, model: EnvDesign, index: int, **fields: Any) -> None:
        super().__init__(model, f"Edit transition ({', '.join(fields)})")
        self.index, self.fields = index, fields

    def apply(self) -> None:
        tool = self.fields.get("tool")
        if tool is not None and tool not in self.model.tool_names():
            self.model.add_tool(tool)
        self.model.edit_transition(self.index, **self.fields)


class MoveStatuses(EnvCommand):
    """Statuses dragged on the canvas: one command per release."""

    def __init__(self, model: EnvDesign, positions: dict[str, Position]) -> None:
        n = len(positions)
        super().__init__(model, f"Move {n} status{'es' * (n != 1)}")
        self.positions = dict(positions)

    def apply(self) -> None:
        self.model.move_statuses(self.positions)


class SetField(EnvCommand):
    """Set a plain field; consecutive edits of the same field merge."""

    def __init__(self, model: EnvDesign, path: str, value: Any) -> None:
        super().__init__(model, f"Set {path}")
        self.path, self.value = path, value

    def apply(self) -> None:
        self.model.set_field(self.path, self.value)

    def id(self) -> int:
        return _MERGE_FIELD

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, SetField) or other.path != self.path:
            return False
        self._after = other._after
        self.value = other.value
        return True


class PaintCells(EnvCommand):
    """One stroke of the grid painter: ``(row, col, old, new)`` per cell."""

    def __init__(
        self, model: EnvDesign, changes: list[tuple[int, int, Cell, Cell]]
    ) -> None:
        n = len(changes)
        super().__init__(model, f"Paint {n} cell{'s' * (n != 1)}")
        self.changes = [(r, c, new) for r, c, _old, new in changes]

    def apply(self) -> None:
        self.model.set_grid_cells(self.changes)


class ResizeGrid(EnvCommand):
    def __init__(self, model: EnvDesign, rows: int, cols: int) -> None:
        super().__init__(model, f"Resize grid to {rows} x {cols}")
        self.rows, self.cols = rows, cols

    def apply(self) -> None:
        self.model.resize_grid(self.rows, self.cols)


class ReplaceDocument(EnvCommand):
    """The JSON view's text replaced the spec; consecutive ones merge."""

    def __init__(self, model: EnvDesign, spec: dict[str, Any]) -> None:
        super().__init__(model, "Edit JSON")
        self.spec = spec

    def apply(self) -> None:
        self.model.replace_spec(self.spec)

    def id(self) -> int:
        return _MERGE_JSON

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, ReplaceDocument):
            return False
        self._after = other._after
        return True
