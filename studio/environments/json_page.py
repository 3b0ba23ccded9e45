"""The designer's JSON tab: the spec as text, in sync with the editors both
ways. Typing applies (after a pause) when the text is a spec; until then the
design keeps the last valid version and a line says what is wrong."""

from __future__ import annotations

import json
from typing import Any

from PySide6.QtCore import QSignalBlocker, QTimer, Signal
from PySide6.QtWidgets import QLabel, QPlainTextEdit, QVBoxLayout, QWidget

from studio.environments.fields import monospace
from studio.state.env_design import KINDS, shape_problem, spec_text

JSON_DEBOUNCE_MS = 400


class JsonPage(QWidget):
    """The text (``view``) over a status line (``status``)."""

    spec_edited = Signal(dict)
    """The text became this spec (a JSON object of a known kind)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = QPlainTextEdit()
        monospace(self.view)
        self.view.textChanged.connect(self._on_view_text_changed)
        self.status = QLabel(wordWrap=True)
        self._timer = QTimer(self, singleShot=True, interval=JSON_DEBOUNCE_MS)
        self._timer.timeout.connect(self._apply_text)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.status)

    def show_spec(self, spec: dict[str, Any]) -> None:
        """Show ``spec``, unless the text already says the same."""
        try:
            current = json.loads(self.view.toPlainText())
        except ValueError:
            current = None
        if current != spec:
            with QSignalBlocker(self.view):
                self.view.setPlainText(spec_text(spec))
        self._set_status("")

    def clear(self) -> None:
        with QSignalBlocker(self.view):
            self.view.clear()

    def _set_status(self, error: str) -> None:
        if error:
            self.status.setText(
                f"<span style='color:#d62728'>{error} The design keeps the last "
                "valid version.</span>"
            )
        else:
            self.status.setText(
                "<span style='color:gray'>Edits here apply as you type, when the "
                "text is valid JSON.</span>"
            )

    def _on_view_text_changed(self) -> None:
        self._timer.start()

    def _apply_text(self) -> None:
        try:
            data = json.loads(self.view.toPlainText())
        except json.JSONDecodeError as exc:
            self._set_status(
                f"Not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
            )
            return
        if not isinstance(data, dict):
            self._set_status("The document must be a JSON object.")
            return
        if data.get("kind") not in KINDS:
            self._set_status(f"kind must be one of {', '.join(KINDS)}.")
            return
        problem = shape_problem(data)
        if problem is not None:
            self._set_status(problem)
            return
        self._set_status("")
        self.spec_edited.emit(data)


__all__ = ["JsonPage"]
