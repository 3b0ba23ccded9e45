"""The editor of a gymnasium env: the id (from the engine's catalog), its
spaces, the episode limit and the constructor's keyword arguments, as a
form from the env's signature and as JSON."""

from __future__ import annotations

import json
from typing import Any, cast

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from studio.environments import commands as cmd
from studio.environments.fields import mark, monospace
from studio.environments.kind_editor import EditorContext, KindEditor, ProblemMarks
from widgets.fit import scroll_area
from widgets.param_form import ERROR_STYLE, ParamForm


class GymnasiumEditor(KindEditor):
    """The gymnasium kind's page."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self._controller = context.controller
        self._catalog_requested = False
        self.described: dict[str, Any] = {}
        """The engine's description of the id (spaces, signature)."""
        self._kwargs_defaults: dict[str, Any] = {}
        self.env_id = QComboBox(editable=True)
        self.env_id.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.env_id.activated.connect(lambda *_: self._on_id_edited())
        # An editable combo box always has its line edit.
        cast(QLineEdit, self.env_id.lineEdit()).editingFinished.connect(
            self._on_id_edited
        )
        self.spaces = QLabel(wordWrap=True)
        self.spaces.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.max_steps = QLineEdit(placeholderText="the env's own limit")
        self.max_steps.editingFinished.connect(self._on_max_steps_edited)
        self.kwargs = ParamForm()
        self.kwargs.values_changed.connect(self._on_kwargs_changed)
        self.kwargs_text = QLineEdit()
        monospace(self.kwargs_text)
        self.kwargs_text.setToolTip("All keyword arguments as a JSON object.")
        self.kwargs_text.editingFinished.connect(self._on_kwargs_text_edited)
        body = QWidget()
        form = QFormLayout(body)
        form.addRow("Environment id", self.env_id)
        form.addRow("Spaces", self.spaces)
        form.addRow("Max episode steps", self.max_steps)
        form.addRow(
            QLabel(
                "<b>Keyword arguments</b> (the env's own defaults unless set)",
                wordWrap=True,
            )
        )
        form.addRow(self.kwargs)
        form.addRow("As JSON", self.kwargs_text)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll_area(body))
        self._controller.catalog_received.connect(self._on_catalog_received)
        self._controller.env_described.connect(self._on_env_described)

    def refresh(self) -> None:
        if not self._catalog_requested:
            self._catalog_requested = True
            self._controller.request_catalog()
        env_id = str(self._model.get_field("gymnasium.id", ""))
        if self.env_id.currentText() != env_id:
            with QSignalBlocker(self.env_id):
                self.env_id.setEditText(env_id)
        steps = self._model.get_field("gymnasium.max_episode_steps")
        with QSignalBlocker(self.max_steps):
            self.max_steps.setText("" if steps is None else str(steps))
        kwargs = self._model.get_field("gymnasium.kwargs", {}) or {}
        if self.context.source() is not self.kwargs_text:
            with QSignalBlocker(self.kwargs_text):
                self.kwargs_text.setText(json.dumps(kwargs))
        if self.context.source() is not self.kwargs:
            self._build_kwargs_form()
        if self.context.source() is None:
            self._controller.describe(env_id)

    def show_problems(self, marks: ProblemMarks) -> None:
        fields = marks.fields
        mark(self.env_id, fields.get("gymnasium.id", "") or fields.get("gymnasium", ""))
        mark(self.max_steps, fields.get("gymnasium.max_episode_steps", ""))
        mark(self.kwargs_text, fields.get("gymnasium.kwargs", ""))
        prefix = "gymnasium.kwargs."
        self.kwargs.set_external_errors(
            {
                path.removeprefix(prefix): msg
                for path, msg in fields.items()
                if path.startswith(prefix)
            }
        )

    def action_space(self) -> str | None:
        """From the engine's description of the id, when it is the spec's."""
        if self.described.get("id") == self._model.get_field("gymnasium.id"):
            return self.described.get("action_space")
        return None

    def _build_kwargs_form(self) -> None:
        """One field per keyword argument of the env: its constructor's
        signature (from the engine's description of the id) with the
        registration's own kwargs as defaults, plus any the spec sets.
        Arguments without a plain type are edited in the JSON field."""
        env_id = str(self._model.get_field("gymnasium.id", ""))
        entry = next((e for e in self._controller.catalog if e["id"] == env_id), {})
        params = (
            list(self.described.get("parameters") or [])
            if self.described.get("id") == env_id
            else []
        )
        registered = dict(entry.get("kwargs", {}))
        defaults = {p["name"]: p.get("default") for p in params}
        defaults.update(registered)
        current = self._model.get_field("gymnasium.kwargs", {}) or {}
        kinds = {p["name"]: p.get("type", "json") for p in params}
        helps = {
            p["name"]: f"{p['name']}: {p['annotation']}"
            for p in params
            if p.get("annotation")
        }
        schemas = []
        for name in dict.fromkeys([*kinds, *registered, *current]):
            value = current.get(name, defaults.get(name))
            kind = kinds.get(name) or _plain_type(value)
            if kind == "json" or isinstance(value, (dict, list)):
                continue  # edited in the JSON field below
            if value is None and name not in current:
                continue  # no default to show; the JSON field sets it
            schema: dict[str, Any] = {
                "name": name,
                "type": kind,
                "default": defaults.get(name, value),
            }
            if name in helps:
                schema["help"] = helps[name]
            schemas.append(schema)
        with QSignalBlocker(self.kwargs):
            self.kwargs.set_schema(schemas, current)
        self._kwargs_defaults = defaults

    def _on_id_edited(self) -> None:
        env_id = self.env_id.currentText().strip()
        if env_id and env_id != self._model.get_field("gymnasium.id"):
            self.push(cmd.SetField(self._model, "gymnasium.id", env_id))

    def _on_max_steps_edited(self) -> None:
        text = self.max_steps.text().strip()
        try:
            value = int(text) if text else None
        except ValueError:
            self.max_steps.setStyleSheet(ERROR_STYLE)
            self.max_steps.setToolTip("Max episode steps must be a whole number.")
            return
        self.max_steps.setStyleSheet("")
        if value != self._model.get_field("gymnasium.max_episode_steps"):
            self.push(cmd.SetField(self._model, "gymnasium.max_episode_steps", value))

    def _on_kwargs_changed(self, values: dict[str, Any]) -> None:
        defaults = self._kwargs_defaults
        kwargs = dict(self._model.get_field("gymnasium.kwargs", {}) or {})
        for name, value in values.items():
            if name in defaults and value == defaults[name]:
                kwargs.pop(name, None)
            else:
                kwargs[name] = value
        if kwargs != (self._model.get_field("gymnasium.kwargs", {}) or {}):
            self.push(
                cmd.SetField(self._model, "gymnasium.kwargs", kwargs), self.kwargs
            )

    def _on_kwargs_text_edited(self) -> None:
        try:
            kwargs = json.loads(self.kwargs_text.text() or "{}")
        except ValueError:
            kwargs = None
        if not isinstance(kwargs, dict):
            self.kwargs_text.setStyleSheet(ERROR_STYLE)
            self.kwargs_text.setToolTip("Keyword arguments must be a JSON object.")
            return
        self.kwargs_text.setStyleSheet("")
        if kwargs != (self._model.get_field("gymnasium.kwargs", {}) or {}):
            self.push(
                cmd.SetField(self._model, "gymnasium.kwargs", kwargs),
                self.kwargs_text,
            )

    def _on_catalog_received(self, envs: list[dict[str, Any]]) -> None:
        with QSignalBlocker(self.env_id):
            text = self.env_id.currentText()
            self.env_id.clear()
            self.env_id.addItems([e["id"] for e in envs if not e.get("designed")])
            self.env_id.setEditText(text)
        if self._model.kind == "gymnasium":
            self._build_kwargs_form()

    def _on_env_described(self, entry: dict[str, Any]) -> None:
        if entry.get("id") != self._model.get_field("gymnasium.id"):
            return
        self.described = dict(entry)
        if self._model.kind == "gymnasium":
            self._build_kwargs_form()  # now with the signature's arguments
        if entry.get("error"):
            self.spaces.setText(f"<span style='color:#d62728'>{entry['error']}</span>")
        else:
            self.spaces.setText(
                f"observations {entry.get('observation_space', '?')}<br>"
                f"actions {entry.get('action_space', '?')}"
            )


def _plain_type(value: Any) -> str:
    """The form field type for a value (``json`` when no field fits)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "str"
    return "json"


__all__ = ["GymnasiumEditor"]
