"""A form generated from parameter schemas, validated as the user types.

A schema is a dict (the engine's catalog sends them as JSON)::

    {"name": "learning_rate", "type": "float", "default": 3e-4,
     "min": 0.0, "max": 1.0, "help": "Adam step size.", "title": "Learning rate"}

Types: ``int``, ``float``, ``str``, ``bool``, ``choice`` (with ``choices``),
``path``. ``min``/``max`` are inclusive; ``exclusive_min`` /
``exclusive_max`` make them strict; ``optional`` allows an empty value
(``None``; a bool or choice gets an empty first entry); ``suggestions`` offers
common values for free text; ``group`` starts a titled section.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QToolButton,
    QWidget,
)

ERROR_STYLE = "border: 1px solid #d62728;"
INT64_MAX = 2**63 - 1
"""Largest whole number a field takes (the engine refuses larger ones)."""


def check_value(schema: Mapping[str, Any], text: str) -> tuple[Any, str]:
    """Parse ``text`` for ``schema``: ``(value, "")`` or ``(None, error sentence)``."""
    kind = schema.get("type", "str")
    title = schema.get("title") or schema["name"]
    text = text.strip()
    if text == "":
        if schema.get("optional"):
            return None, ""
        if kind in ("str", "path"):
            return "", ""
        return None, f"{title} needs a value."
    if kind == "int":
        try:
            value: Any = int(text.replace("_", "").replace(",", ""))
        except ValueError:
            return None, f"{title} must be a whole number."
        if abs(value) > INT64_MAX:  # JSON readers refuse more than 64 bits
            return None, f"{title} must be a whole number of at most 19 digits."
    elif kind == "float":
        try:
            value = float(text)
        except ValueError:
            return None, f"{title} must be a number."
        if value != value or value in (float("inf"), float("-inf")):
            return None, f"{title} must be a finite number."
    else:
        value = text
    if kind in ("int", "float"):
        lo, hi = schema.get("min"), schema.get("max")
        if lo is not None:
            if schema.get("exclusive_min") and value <= lo:
                return None, f"{title} must be greater than {lo}."
            if value < lo:
                return None, f"{title} must be at least {lo}."
        if hi is not None:
            if schema.get("exclusive_max") and value >= hi:
                return None, f"{title} must be less than {hi}."
            if value > hi:
                return None, f"{title} must be at most {hi}."
    return value, ""


class ParamForm(QWidget):
    """Emits ``values_changed(dict)`` with every valid edit and
    ``validity_changed(bool)`` when the form as a whole becomes (in)valid."""

    values_changed = Signal(dict)
    validity_changed = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QFormLayout(self)
        self._schemas: list[dict[str, Any]] = []
        self._editors: dict[str, QWidget] = {}
        self._errors: dict[str, str] = {}
        self._error_labels: dict[str, QLabel] = {}
        self._values: dict[str, Any] = {}
        self._valid = True

    # ------------------------------------------------------------ API
    def set_schema(
        self,
        schemas: Sequence[Mapping[str, Any]],
        values: Mapping[str, Any] | None = None,
    ) -> None:
        """Rebuild the form; ``values`` override the schemas' defaults."""
        while self._layout.rowCount():
            self._layout.removeRow(0)
        self._schemas = [dict(s) for s in schemas]
        self._editors.clear()
        self._errors.clear()
        self._error_labels.clear()
        values = dict(values or {})
        self._values = {}
        group = None
        for schema in self._schemas:
            name = schema["name"]
            if schema.get("group") and schema["group"] != group:
                group = schema["group"]
                heading = QLabel(f"<b>{group}</b>")
                heading.setContentsMargins(0, 8, 0, 2)
                self._layout.addRow(heading)
            value = values.get(name, schema.get("default"))
            self._values[name] = value
            editor = self._make_editor(schema, value)
            self._editors[name] = editor
            label = QLabel(schema.get("title") or name.replace("_", " ").capitalize())
            label.setToolTip(schema.get("help", ""))
            error = QLabel(styleSheet="color: #d62728;", wordWrap=True)
            error.hide()
            self._error_labels[name] = error
            cell = QWidget()
            column = QFormLayout(cell)
            column.setContentsMargins(0, 0, 0, 0)
            column.addRow(editor)
            column.addRow(error)
            self._layout.addRow(label, cell)
        self._set_valid(True)

    def values(self) -> dict[str, Any]:
        """The current values (the last valid value of a field in error)."""
        return dict(self._values)

    def errors(self) -> dict[str, str]:
        return dict(self._errors)

    def is_valid(self) -> bool:
        return not self._errors

    def editor(self, name: str) -> QWidget:
        return self._editors[name]

    def set_external_errors(self, errors: Mapping[str, str]) -> None:
        """Show errors found elsewhere (the engine's validation) on their fields."""
        for name, label in self._error_labels.items():
            message = errors.get(name) or self._errors.get(name, "")
            label.setText(message)
            label.setVisible(bool(message))

    # -------------------------------------------------------- editors
    def _make_editor(self, schema: dict[str, Any], value: Any) -> QWidget:
        kind = schema.get("type", "str")
        name = schema["name"]
        tip = schema.get("help", "")
        if kind in ("bool", "choice") and schema.get("optional"):
            # An empty first entry: leave the value to the engine.
            options = (
                [("yes", True), ("no", False)]
                if kind == "bool"
                else [(str(c), c) for c in schema.get("choices", [])]
            )
            combo = QComboBox(toolTip=tip)
            for text, data in [("", None), *options]:
                combo.addItem(text, data)
            combo.setCurrentIndex(max(combo.findData(value), 0))
            combo.currentIndexChanged.connect(
                lambda i, n=name, c=combo: self._accept(n, c.itemData(i))
            )
            return combo
        if kind == "bool":
            box = QCheckBox(toolTip=tip)
            box.setChecked(bool(value))
            box.toggled.connect(lambda checked, n=name: self._accept(n, bool(checked)))
            return box
        if kind == "choice":
            combo = QComboBox(toolTip=tip)
            for choice in schema.get("choices", []):
                combo.addItem(str(choice), choice)
            index = combo.findData(value)
            combo.setCurrentIndex(max(index, 0))
            if index < 0 and combo.count():
                self._values[name] = combo.itemData(0)
            combo.currentIndexChanged.connect(
                lambda i, n=name, c=combo: self._accept(n, c.itemData(i))
            )
            return combo
        if schema.get("suggestions"):
            # Free text with a list of common answers (env ids, model names).
            combo = QComboBox(toolTip=tip, editable=True)
            combo.addItems([str(x) for x in schema["suggestions"]])
            combo.setCurrentText("" if value is None else str(value))
            line = combo.lineEdit()
            line.textChanged.connect(
                lambda text, s=schema, e=line: self._on_text_changed(s, e, text)
            )
            combo.setProperty("line_edit", line)
            return combo
        edit = QLineEdit("" if value is None else str(value), toolTip=tip)
        edit.setPlaceholderText("optional" if schema.get("optional") else "")
        edit.textChanged.connect(
            lambda text, s=schema, e=edit: self._on_text_changed(s, e, text)
        )
        if kind != "path":
            return edit
        row = QWidget()
        layout = QHBoxLayout(row)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(edit, 1)
        browse = QToolButton(text="…", toolTip="Browse")
        browse.clicked.connect(lambda *_, e=edit: self._on_browse_clicked(e))
        layout.addWidget(browse)
        row.setProperty("line_edit", edit)
        return row

    def _on_browse_clicked(self, edit: QLineEdit) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose a file", edit.text())
        if path:
            edit.setText(path)

    def _on_text_changed(
        self, schema: dict[str, Any], edit: QLineEdit, text: str
    ) -> None:
        value, error = check_value(schema, text)
        name = schema["name"]
        edit.setStyleSheet(ERROR_STYLE if error else "")
        edit.setToolTip(error or schema.get("help", ""))
        label = self._error_labels[name]
        label.setText(error)
        label.setVisible(bool(error))
        if error:
            self._errors[name] = error
            self._set_valid(False)
            return
        self._errors.pop(name, None)
        self._accept(name, value)

    def _accept(self, name: str, value: Any) -> None:
        self._values[name] = value
        self._set_valid(not self._errors)
        self.values_changed.emit(self.values())

    def _set_valid(self, valid: bool) -> None:
        if valid != self._valid:
            self._valid = valid
            self.validity_changed.emit(valid)
