"""What every env kind's editor is: built the same way, from one
:class:`EditorContext`, emitting the same signals and answering the same
calls, so the designer keeps a table from kind to editor class
(``studio.environments.editors``) and never asks which one it holds (the
idiom of napari's layer controls).

An editor never pushes an undo command itself: it asks with
``edit_requested(command, source)``, and the shell pushes it on the
document's stack, remembering ``source`` (the widget the edit came from) so
the refresh that follows leaves that widget alone and typing is never
interrupted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from studio.environments import commands as cmd
from studio.environments.controller import EnvController
from studio.environments.fields import FieldForm
from studio.state.env_design import EnvDesign, Target


@dataclass(frozen=True)
class EditorContext:
    """What every kind's editor is built from."""

    model: EnvDesign
    """The document being edited."""
    controller: EnvController
    """The designer's requests to the engine (catalog, descriptions)."""
    source: Callable[[], object | None]
    """The widget whose edit is being applied now (None: none of theirs)."""
    resolve: Callable[[str], Path]
    """A file the spec names, resolved as the engine does."""
    confirm_discard: Callable[[str], bool]
    """Asked (name) before unsaved changes are dropped."""


@dataclass
class ProblemMarks:
    """The problems of a check by what they are on; several messages on one
    thing are joined one a line."""

    statuses: dict[str, str] = field(default_factory=dict)
    transitions: dict[Any, str] = field(default_factory=dict)
    tools: dict[int, str] = field(default_factory=dict)
    cells: dict[tuple[int, int], str] = field(default_factory=dict)
    fields: dict[str, str] = field(default_factory=dict)
    """By the dotted path of the field."""
    sub_fields: dict[tuple[str, Any, str], str] = field(default_factory=dict)
    """By (element kind, key, the element's field at fault)."""

    @classmethod
    def of(cls, targets: Iterable[tuple[Target, dict[str, Any]]]) -> ProblemMarks:
        marks = cls()
        for target, problem in targets:
            msg = str(problem.get("message", ""))
            if target.kind in ("status", "transition"):
                on = marks.statuses if target.kind == "status" else marks.transitions
                _add(on, target.key, msg)
                _add(marks.sub_fields, (target.kind, target.key, target.field), msg)
            elif target.kind == "tool":
                _add(marks.tools, target.key, msg)
            elif target.kind == "cell":
                _add(marks.cells, target.key, msg)
            elif target.kind == "field":
                _add(marks.fields, target.key, msg)
        return marks


def _add(marks: dict[Any, str], key: Any, message: str) -> None:
    marks[key] = f"{marks[key]}\n{message}" if key in marks else message


class KindEditor(QWidget):
    """The page of one env kind. Subclasses build their widgets in
    ``__init__(context, parent)`` and override :meth:`refresh` and what of
    the rest applies to their kind."""

    edit_requested = Signal(object, object)
    """Push this undo command (``EnvCommand``) from this widget (or None)."""
    message_requested = Signal(str, str, int)
    """Show this sentence in the banner: text, level, auto-hide ms (0: stays)."""
    marks_changed = Signal()
    """What the editor shows changed: put the problems on its widgets again."""
    modified_changed = Signal(bool)
    """What the editor keeps outside the spec (a python env's code) gained
    (True) or lost (False) unsaved changes."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.context = context
        self._model = context.model

    def push(self, command: cmd.EnvCommand, source: object | None = None) -> None:
        self.edit_requested.emit(command, source)

    def bind_form(self, form: FieldForm) -> None:
        """Edits in ``form`` set the fields of the spec it is bound to."""
        form.values_changed.connect(lambda v: self._on_form_values_changed(form, v))

    def _on_form_values_changed(self, form: FieldForm, values: dict[str, Any]) -> None:
        for path, value in form.changed_fields(self._model, values):
            self.push(cmd.SetField(self._model, path, value), form)

    # ------------------------------------------------------------ the calls
    def refresh(self) -> None:
        """Bring the page up to date with the spec, leaving the widget whose
        edit is being applied (``context.source()``) alone."""
        raise NotImplementedError

    def about_to_open(self) -> None:
        """Another document is about to be loaded: forget the selection."""

    def opened(self) -> None:
        """A document of this kind was loaded and shown."""

    def show_problems(self, marks: ProblemMarks) -> None:
        """Put the problems on the page's elements and fields."""

    def focus_problem(self, target: Target) -> None:
        """Select and show what a problem points at."""

    def unsaved(self) -> bool:
        """Changes kept outside the spec's undo stack not yet written."""
        return False

    def save_files(self) -> bool:
        """Write what the editor keeps outside the spec; False (the banner
        says why) when that failed."""
        return True

    def discard_files(self) -> None:
        """Drop the unsaved changes kept outside the spec."""

    def action_space(self) -> str | None:
        """The env's action space, when this editor knows it."""
        return None


__all__ = ["EditorContext", "KindEditor", "ProblemMarks"]
