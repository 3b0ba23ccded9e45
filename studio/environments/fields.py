"""What the env designer's kind editors share: a form bound to dotted paths
of the spec, a problem mark on a field, and a monospace font for code-like
fields."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QSignalBlocker
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QWidget

from studio.state.env_design import EnvDesign
from widgets.param_form import ERROR_STYLE, ParamForm


class FieldForm(ParamForm):
    """A ParamForm bound to dotted paths of the spec."""

    def __init__(self, fields: list[tuple[str, dict[str, Any]]]) -> None:
        super().__init__()
        self.fields = fields
        self.paths = {schema["name"]: path for path, schema in fields}

    def load(self, model: EnvDesign) -> None:
        values = {
            schema["name"]: model.get_field(path, schema.get("default"))
            for path, schema in self.fields
        }
        with QSignalBlocker(self):
            self.set_schema([s for _, s in self.fields], values)

    def changed_fields(
        self, model: EnvDesign, values: dict[str, Any]
    ) -> list[tuple[str, Any]]:
        out = []
        for path, schema in self.fields:
            name = schema["name"]
            if name in self.errors():
                continue
            new = values.get(name)
            old = model.get_field(path, schema.get("default"))
            if new != old:
                if new in ("", None) and not schema.get("default"):
                    new = None
                out.append((path, new))
        return out

    def mark(self, fields: dict[str, str]) -> None:
        """Show the problems of ``fields`` (dotted path: message) on the
        form's fields (and none on the others)."""
        self.set_external_errors(
            {name: fields[path] for name, path in self.paths.items() if path in fields}
        )

    def focus(self, path: str) -> None:
        """Put the focus on the field of a dotted path, when it is shown."""
        for name, p in self.paths.items():
            if p == path and self.isVisible():
                self.editor(name).setFocus()


def mark(widget: QWidget, message: str) -> None:
    """A red border and the message as tooltip on a field (or none)."""
    widget.setStyleSheet(ERROR_STYLE if message else "")
    widget.setToolTip(message)
    widget.setProperty("problem", message)


def monospace(widget: QWidget) -> None:
    font = QFont(widget.font())
    font.setFamily("monospace")
    font.setStyleHint(QFont.StyleHint.Monospace)
    widget.setFont(font)
