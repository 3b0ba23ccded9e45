"""A form generated from parameter schemas, validated as the user types.

A schema is a dict (the engine's catalog sends them as JSON)::

    {"name": "learning_rate", "type": "float", "default": 3e-4,
     "min": 0.0, "max": 1.0, "help": "Adam step size.", "title": "Learning rate"}

Types: ``int``, ``float``, ``str``, ``bool``, ``choice`` (with ``choices``),
``path``. ``min``/``max`` are inclusive; ``exclusive_min`` /
``exclusive_max`` make them strict; ``optional`` allows an empty value
(``None``; a bool or choice gets an empty first entry); ``suggestions`` offers
common values for free text; ``note`` is a line shown under the field (where
its default comes from); ``group`` starts a titled section; ``picker``
(a text field) makes the field a :class:`widgets.picker.SearchPicker` whose
entries the host gives per picker kind (:meth:`ParamForm.set_picker_entries`).
``choices`` are what this machine offers; ``unoffered`` lists valid values
it does not (one of them as the value, from an old document, is shown as
such and kept, for the engine to refuse with its reason). ``disabled`` (one
sentence) shows the field disabled, the reason as its tooltip and a grey
note under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
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

from widgets.picker import PickerEntry, SearchPicker

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
    ``validity_changed(bool)`` when the form as a whole becomes (in)valid;
    ``picker_search_requested(kind, text)`` when the user searches a picker
    field (the host may add entries found elsewhere, e.g. on the Hub)."""

    values_changed = Signal(dict)
    validity_changed = Signal(bool)
    picker_search_requested = Signal(str, str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._layout = QFormLayout(self)
        self._schemas: list[dict[str, Any]] = []
        self._editors: dict[str, QWidget] = {}
        self._errors: dict[str, str] = {}
        self._error_labels: dict[str, QLabel] = {}
        self._values: dict[str, Any] = {}
        self._valid = True
        self._picker_entries: dict[str, list[PickerEntry]] = {}
        self._picker_options: dict[str, dict[str, Any]] = {}
        self._picker_status: dict[str, str] = {}

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
            if schema.get("disabled"):
                editor.setEnabled(False)
                editor.setToolTip(schema["disabled"])
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
            if schema.get("note"):
                note = QLabel(schema["note"], wordWrap=True)
                note.setObjectName(f"{name}-note")
                note.setStyleSheet("color: palette(mid);")
                column.addRow(note)
            if schema.get("disabled"):
                reason = QLabel(
                    f"Unavailable here: {schema['disabled']}",
                    wordWrap=True,
                    toolTip=schema["disabled"],
                )
                reason.setObjectName(f"{name}-disabled")
                reason.setStyleSheet("color: gray;")
                column.addRow(reason)
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

    def configure_picker(
        self,
        kind: str,
        *,
        strict: bool = False,
        unknown_message: str = "",
        browse_folders: bool = False,
    ) -> None:
        """How pickers of ``kind`` treat a value none of their entries has
        (``strict`` ones say so with ``unknown_message``, ``{value}`` in
        it), and whether they offer to choose a folder."""
        options: dict[str, Any] = {"strict": strict, "browse_folders": browse_folders}
        if unknown_message:
            options["unknown_message"] = unknown_message
        self._picker_options[kind] = options
        for picker in self.pickers(kind).values():
            picker.set_strict(strict, unknown_message)
            picker.set_browse_folders(browse_folders)

    def pickers(self, kind: str | None = None) -> dict[str, SearchPicker]:
        """The picker fields (of ``kind``), by field name."""
        return {
            name: editor
            for name, editor in self._editors.items()
            if isinstance(editor, SearchPicker)
            and (kind is None or editor.property("picker_kind") == kind)
        }

    def set_picker_entries(
        self, kind: str, entries: Iterable[PickerEntry], section: str | None = None
    ) -> None:
        """The entries pickers of ``kind`` offer (those of one ``section``)."""
        new = list(entries)
        old = self._picker_entries.get(kind, [])
        if section is not None:
            new = [e for e in old if e.section != section] + [
                e for e in new if e.section == section
            ]
        self._picker_entries[kind] = new
        for picker in self.pickers(kind).values():
            picker.set_entries(new)

    def set_picker_status(self, kind: str, text: str) -> None:
        """One sentence under the pickers of ``kind`` (a failed search)."""
        self._picker_status[kind] = text
        for picker in self.pickers(kind).values():
            picker.set_status(text)

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
            if value in schema.get("unoffered", ()):
                # Kept as the document has it; the run says why it cannot be.
                combo.addItem(f"{value} (not available here)", value)
            index = combo.findData(value)
            combo.setCurrentIndex(max(index, 0))
            if index < 0 and combo.count():
                self._values[name] = combo.itemData(0)
            combo.currentIndexChanged.connect(
                lambda i, n=name, c=combo: self._accept(n, c.itemData(i))
            )
            return combo
        if schema.get("picker") and kind == "str":
            return self._make_picker(schema, value)
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

    def _make_picker(self, schema: dict[str, Any], value: Any) -> SearchPicker:
        kind = str(schema["picker"])
        picker = SearchPicker(**self._picker_options.get(kind, {}))
        picker.setProperty("picker_kind", kind)
        picker.setProperty("line_edit", picker.edit)
        picker.setToolTip(schema.get("help", ""))
        picker.set_entries(self._picker_entries.get(kind, []))
        picker.set_value("" if value is None else str(value))
        picker.set_status(self._picker_status.get(kind, ""))
        picker.value_changed.connect(
            lambda text, s=schema, e=picker.edit: self._on_text_changed(s, e, text)
        )
        picker.search_requested.connect(
            lambda text, k=kind: self.picker_search_requested.emit(k, text)
        )
        return picker

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
