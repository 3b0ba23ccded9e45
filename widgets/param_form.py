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

Two types hold structures: ``rows`` (a list of records; ``columns`` are
field schemas, ``min_rows`` the fewest it takes; see
:class:`widgets.rows_editor.RowsEditor`) and ``object`` (a dict whose
``fields`` are field schemas, shown as a nested form; ``optional`` adds a
check box turning it on, the value None when off; it can also be edited as
JSON, see :class:`ObjectField`). A problem anywhere in one shows one sentence
under it and the form keeps its last good value. An error the host reports
for a path inside a field (``curriculum.stages[0].slip``) shows on that field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from PySide6.QtCore import Signal
from PySide6.QtGui import QFontDatabase
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from widgets.form_values import ERROR_STYLE, INT64_MAX, check_value
from widgets.picker import PickerEntry, SearchPicker
from widgets.rows_editor import RowsEditor

__all__ = ["ERROR_STYLE", "INT64_MAX", "ObjectField", "ParamForm", "check_value"]


class ParamForm(QWidget):
    """Emits ``values_changed(dict)`` with every valid edit and
    ``validity_changed(bool)`` when the form as a whole becomes (in)valid;
    ``picker_search_requested(kind, text)`` when the user searches a picker
    field (the host may add entries found elsewhere, e.g. on the Hub);
    ``errors_changed(dict)`` when the sentences on its fields change."""

    values_changed = Signal(dict)
    validity_changed = Signal(bool)
    picker_search_requested = Signal(str, str)
    errors_changed = Signal(dict)

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
    def put_labels_above(self) -> None:
        """Each label over its field, which then has the form's whole width
        (for a narrow panel: beside a long label, a model path field of the
        flow inspector got 54 px and showed "ruct")."""
        self._layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapAllRows)

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
            error = QLabel(wordWrap=True)
            error.setStyleSheet("color: #d62728;")
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
                    f"Unavailable here: {schema['disabled']}", wordWrap=True
                )
                reason.setToolTip(schema["disabled"])
                reason.setObjectName(f"{name}-disabled")
                reason.setStyleSheet("color: gray;")
                column.addRow(reason)
            column.addRow(error)
            if isinstance(editor, ObjectField):
                self._layout.addRow(cell)  # the whole width; it names itself
            else:
                self._layout.addRow(label, cell)
            if isinstance(editor, RowsEditor | ObjectField):
                # Its value as the editor reads it (a bad one kept as given).
                if not editor.problem():
                    self._values[name] = editor.value()
                self._set_error(name, editor.problem())
        self._set_valid(not self._errors)

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
        """Show errors found elsewhere (the engine's validation) on their
        fields; one for a path inside a field (``a.b``, ``a[0]``) on that
        field."""
        by_field: dict[str, str] = {}
        for path, message in errors.items():
            name = self._field_of(path)
            if name is not None:
                by_field.setdefault(name, message)
        for name, label in self._error_labels.items():
            message = by_field.get(name) or self._errors.get(name, "")
            label.setText(message)
            label.setVisible(bool(message))

    def _field_of(self, path: str) -> str | None:
        """The field ``path`` names or lies inside (the longest such name)."""
        if path in self._error_labels:
            return path
        inside = [n for n in self._error_labels if path.startswith((f"{n}.", f"{n}["))]
        return max(inside, key=len) if inside else None

    # -------------------------------------------------------- editors
    def _make_editor(self, schema: dict[str, Any], value: Any) -> QWidget:
        kind = schema.get("type", "str")
        name = schema["name"]
        tip = schema.get("help", "")
        if kind in ("rows", "object"):
            editor: RowsEditor | ObjectField
            if kind == "rows":
                editor = RowsEditor(
                    schema.get("columns", []),
                    title=schema.get("title") or name,
                    min_rows=int(schema.get("min_rows", 0)),
                )
                editor.set_value(value or [])
            else:
                editor = ObjectField(schema)
                editor.set_value(value)
            editor.setToolTip(tip)
            editor.value_changed.connect(
                lambda v, n=name: self._on_structure_value_changed(n, v)
            )
            editor.problem_changed.connect(lambda p, n=name: self._set_error(n, p))
            return editor
        if kind in ("bool", "choice") and schema.get("optional"):
            # An empty first entry: leave the value to the engine.
            options = (
                [("yes", True), ("no", False)]
                if kind == "bool"
                else [(str(c), c) for c in schema.get("choices", [])]
            )
            combo = QComboBox()
            combo.setToolTip(tip)
            for text, data in [("", None), *options]:
                combo.addItem(text, data)
            combo.setCurrentIndex(max(combo.findData(value), 0))
            combo.currentIndexChanged.connect(
                lambda i, n=name, c=combo: self._accept(n, c.itemData(i))
            )
            return combo
        if kind == "bool":
            box = QCheckBox()
            box.setToolTip(tip)
            box.setChecked(bool(value))
            box.toggled.connect(lambda checked, n=name: self._accept(n, bool(checked)))
            return box
        if kind == "choice":
            combo = QComboBox()
            combo.setToolTip(tip)
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
            combo = QComboBox(editable=True)
            combo.setToolTip(tip)
            combo.addItems([str(x) for x in schema["suggestions"]])
            combo.setCurrentText("" if value is None else str(value))
            # An editable combo box always has its line edit.
            line = cast(QLineEdit, combo.lineEdit())
            line.textChanged.connect(
                lambda text, s=schema, e=line: self._on_text_changed(s, e, text)
            )
            combo.setProperty("line_edit", line)
            return combo
        edit = QLineEdit("" if value is None else str(value))
        edit.setToolTip(tip)
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
        browse = QToolButton()
        browse.setText("…")
        browse.setToolTip("Browse")
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
        self._set_error(name, error)
        if not error:
            self._accept(name, value)

    def _on_structure_value_changed(self, name: str, value: Any) -> None:
        self._set_error(name, "")  # a good value: no engine error stays shown
        self._accept(name, value)

    def _set_error(self, name: str, error: str) -> None:
        """Show ``error`` (one sentence; empty: none) under the field (an
        object field shows its own, where the problem lies)."""
        label = self._error_labels.get(name)
        if label is not None:  # also clears an engine error shown there
            inside = isinstance(self._editors.get(name), ObjectField)
            label.setText("" if inside else error)
            label.setVisible(bool(error) and not inside)
        if error == self._errors.get(name, ""):
            return
        if error:
            self._errors[name] = error
        else:
            self._errors.pop(name, None)
        self._set_valid(not self._errors)
        self.errors_changed.emit(self.errors())

    def _accept(self, name: str, value: Any) -> None:
        self._values[name] = value
        self._set_valid(not self._errors)
        self.values_changed.emit(self.values())

    def _set_valid(self, valid: bool) -> None:
        if valid != self._valid:
            self._valid = valid
            self.validity_changed.emit(valid)


class ObjectField(QWidget):
    """An ``object`` field: a nested :class:`ParamForm` of its ``fields``
    (an optional one behind a check box), or the same value as JSON text
    ("Edit as JSON"). Emits ``value_changed(object)`` with every good edit
    (a dict without the unset optional settings, or None when off) and
    ``problem_changed(str)`` when the sentence saying what is wrong changes;
    ``value()`` keeps the last good value."""

    value_changed = Signal(object)
    problem_changed = Signal(str)

    def __init__(self, schema: Mapping[str, Any], parent: QWidget | None = None):
        super().__init__(parent)
        self._fields = [dict(f) for f in schema.get("fields", [])]
        self._title = str(schema.get("title") or schema["name"])
        self._value: dict[str, Any] | None = None
        self._problem = ""
        self._loaded_problem = ""
        self._json_problem = ""
        self._loading = False
        optional = bool(schema.get("optional"))
        self.enabled_box = QCheckBox(f"Use {self._title.lower()}")
        self.enabled_box.setToolTip(schema.get("help", ""))
        self.enabled_box.setVisible(optional)
        self.enabled_box.setChecked(not optional)
        title = QLabel(self._title)
        title.setToolTip(schema.get("help", ""))
        title.setVisible(not optional)
        self.enabled_box.toggled.connect(self._on_enabled_box_toggled)
        self.json_button = QToolButton()
        self.json_button.setText("Edit as JSON")
        self.json_button.setCheckable(True)
        self.json_button.setToolTip("Edit the settings as one JSON object")
        self.json_button.toggled.connect(self._on_json_button_toggled)
        self.form = ParamForm()
        self.form.values_changed.connect(self._update)
        self.form.errors_changed.connect(self._update)
        self.json_edit = QPlainTextEdit()
        self.json_edit.setObjectName("json")
        self.json_edit.setFont(
            QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        )
        self.json_edit.setMaximumHeight(160)
        self.json_edit.hide()
        self.json_edit.textChanged.connect(self._on_json_edit_text_changed)
        self.problem_label = QLabel(wordWrap=True)
        self.problem_label.setStyleSheet("color: #d62728;")
        self.problem_label.hide()
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.enabled_box)
        top.addWidget(title)
        top.addStretch(1)
        top.addWidget(self.json_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.form)
        layout.addWidget(self.json_edit)
        layout.addWidget(self.problem_label)
        self._load({})
        self._show_body()

    # ------------------------------------------------------------ API
    def value(self) -> dict[str, Any] | None:
        return None if self._value is None else dict(self._value)

    def problem(self) -> str:
        return self._problem

    def set_value(self, value: Any) -> None:
        """Show ``value`` (None: off); a key no field has, or a value that
        is no object, is a problem."""
        self._json_problem = ""
        if value is None:
            self._set_enabled(False)
            self._load({})
        else:
            self._set_enabled(True)
            self._load(value)
        if self.json_button.isChecked():
            self._show_json()
        self._update()

    # ------------------------------------------------------------ inside
    def _set_enabled(self, on: bool) -> None:
        self._loading = True
        self.enabled_box.setChecked(on or self.enabled_box.isHidden())
        self._loading = False
        self._show_body()

    def _load(self, value: Any) -> None:
        """Rebuild the nested form from ``value`` (a dict of its fields)."""
        names = [f["name"] for f in self._fields]
        self._loaded_problem = ""
        if not isinstance(value, dict):
            self._loaded_problem = f"{self._title} must be an object of settings."
            value = {}
        unknown = [k for k in value if k not in names]
        if unknown:
            self._loaded_problem = (
                f"{unknown[0]!r} is not a setting of {self._title}; it has "
                f"{', '.join(names)}."
            )
        values = {k: v for k, v in value.items() if k in names}
        for field in self._fields:  # a table that needs rows starts with them
            if field.get("type") == "rows" and field["name"] not in values:
                values[field["name"]] = [{}] * int(field.get("min_rows", 0))
        self._loading = True
        self.form.set_schema(self._fields, values)
        self._loading = False

    def _current(self) -> dict[str, Any] | None:
        if not self.enabled_box.isChecked():
            return None
        return {k: v for k, v in self.form.values().items() if v is not None}

    def _update(self, *_: Any) -> None:
        if self._loading:
            return
        problem = ""
        if self.enabled_box.isChecked():
            errors = self.form.errors()
            problem = (
                self._json_problem
                or self._loaded_problem
                or next(iter(errors.values()), "")
            )
        # Shown here unless a field of the nested form shows it.
        own = problem in (self._json_problem, self._loaded_problem)
        own = own or self.json_button.isChecked()
        self.problem_label.setText(problem if own else "")
        self.problem_label.setVisible(bool(problem) and own)
        if problem != self._problem:
            self._problem = problem
            self.problem_changed.emit(problem)
        value = self._current()
        if not problem and value != self._value:
            self._value = value
            self.value_changed.emit(self.value())

    def _show_body(self) -> None:
        on = self.enabled_box.isChecked()
        json_mode = self.json_button.isChecked()
        self.json_button.setEnabled(on)
        self.form.setVisible(on and not json_mode)
        self.json_edit.setVisible(on and json_mode)

    def _show_json(self) -> None:
        self._loading = True
        self.json_edit.setPlainText(json.dumps(self._current() or {}, indent=1))
        self._loading = False

    def _on_enabled_box_toggled(self, on: bool) -> None:
        if self._loading:
            return
        self._json_problem = ""
        if not on:
            self.json_button.setChecked(False)
        self._show_body()
        self._update()

    def _on_json_button_toggled(self, on: bool) -> None:
        if on:
            self._show_json()
        elif self._problem:
            self._json_problem = ""  # back to the last good settings
            self._load(self._value if self._value is not None else {})
        self._show_body()
        self._update()

    def _on_json_edit_text_changed(self) -> None:
        if self._loading:
            return
        try:
            value = json.loads(self.json_edit.toPlainText() or "{}")
        except json.JSONDecodeError as exc:
            self._json_problem = (
                f"{self._title} is not valid JSON: {exc.msg.lower()} at line "
                f"{exc.lineno}, column {exc.colno}."
            )
            self._update()
            return
        if not isinstance(value, dict):
            self._json_problem = f"{self._title} must be a JSON object of settings."
            self._update()
            return
        self._json_problem = ""
        self._load(value)
        self._update()
