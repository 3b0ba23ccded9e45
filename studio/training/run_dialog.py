"""New run / Duplicate with changes: a form from the engine's schema.

The engine publishes the form (``run.schema``), so the fields, defaults,
presets and help always match what its validator accepts. The dialog sends
only what the user changed (and the environment and algorithm), so the
engine keeps choosing the rest: rollout sizes fitted to the step budget and
the hardware. It stays open until the engine accepts the config; a refused
config shows the engine's sentence on the field it names.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from studio.common import ok_cancel_buttons
from studio.pickers import picker_sources
from studio.session import Session
from widgets.param_form import ParamForm

HP_PREFIX = "hyperparameters."
# Changing these changes which fields exist and their presets.
SHAPING_FIELDS = ("env", "algo", "preset")
PROFILE_FIELD = "hardware_profile"
SOURCE_TEXT = {
    "profile": "the profile",
    "preset": "the preset",
    "hardware": "the hardware",
    "default": "the default",
    "form": "this form",
}
"""Where a setting shown under the hardware profile comes from, as the
preview's last column says it."""


def flatten_config(config: dict[str, Any]) -> dict[str, Any]:
    """A run config as form values (``hyperparameters.x`` keys)."""
    values = {k: v for k, v in config.items() if k != "hyperparameters"}
    for name, value in (config.get("hyperparameters") or {}).items():
        values[HP_PREFIX + name] = value
    return values


def nest_values(values: dict[str, Any]) -> dict[str, Any]:
    """Form values as a run config; empty optional fields are left out so the
    engine fills in its own default (a preset, the hardware's choice)."""
    config: dict[str, Any] = {}
    hyper: dict[str, Any] = {}
    for key, value in values.items():
        if value is None:
            continue
        if key.startswith(HP_PREFIX):
            hyper[key[len(HP_PREFIX) :]] = value
        else:
            config[key] = value
    if hyper:
        config["hyperparameters"] = hyper
    return config


class ProfilePreview(QWidget):
    """What the chosen hardware profile sets, read-only: a line naming it
    (or why it cannot be used here) and a table of each setting's value and
    where it comes from. The rows are the engine's (``run.schema`` gives
    every profile's), so choosing a profile asks the engine nothing."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("hardware-profile-preview")
        self.summary = QLabel(wordWrap=True)
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Setting", "Value", "From"])
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.horizontalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMaximumHeight(200)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.summary)
        layout.addWidget(self.table)

    def show_profile(
        self, name: str, preview: dict[str, Any], own: dict[str, Any]
    ) -> None:
        """Show ``preview`` (one profile of the schema's ``profiles``);
        ``own`` holds the settings this form gives itself, which win."""
        problem = str(preview.get("problem") or "")
        text = f"Hardware profile {name!r}: {preview.get('description', '')}"
        self.summary.setText(f"{text}. {problem}" if problem else text)
        self.summary.setStyleSheet("color: #d62728;" if problem else "")
        rows = list(preview.get("settings", []))
        self.table.setRowCount(len(rows))
        for i, row in enumerate(rows):
            key = str(row.get("name", ""))
            value, source = row.get("value"), str(row.get("source", ""))
            if key in own:
                value, source = own[key], "form"
            for column, cell in enumerate(
                (key, str(value), SOURCE_TEXT.get(source, source))
            ):
                self.table.setItem(i, column, QTableWidgetItem(cell))

    def rows(self) -> dict[str, tuple[str, str]]:
        """Setting -> (value, where from) as shown."""

        def text(row: int, column: int) -> str:
            item = self.table.item(row, column)
            return item.text() if item is not None else ""

        return {
            text(i, 0): (text(i, 1), text(i, 2)) for i in range(self.table.rowCount())
        }


class RunDialog(QDialog):
    profile_preview_changed = Signal(str)
    """The hardware profile preview now shows this profile."""

    def __init__(
        self,
        session: Session,
        kind: str = "rl.train",
        initial: dict[str, Any] | None = None,
        parent: QWidget | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle(
            title or ("Duplicate run with changes" if initial else "New training run")
        )
        self.resize(560, 720)
        self._session = session
        self._kind = kind
        self._values = flatten_config(initial or {})
        self._shape = self._shaping(self._values)
        self._defaults: dict[str, Any] = {}
        self._profiles: dict[str, dict[str, Any]] = {}
        self.started_run_id = ""
        self.form = ParamForm()
        picker_sources(session).attach(self.form)
        self.form.values_changed.connect(self._on_form_values_changed)
        self.form.validity_changed.connect(self._on_form_validity_changed)
        scroll = QScrollArea(widgetResizable=True)
        scroll.setWidget(self.form)
        self.profile_preview = ProfilePreview()
        self.profile_preview.hide()
        self.message = QLabel(wordWrap=True)
        self.message.setStyleSheet("color: #d62728;")
        self.message.hide()
        self.buttons = ok_cancel_buttons(self, "Train", self._on_buttons_accepted)
        layout = QVBoxLayout(self)
        layout.addWidget(scroll, 1)
        layout.addWidget(self.profile_preview)
        layout.addWidget(self.message)
        layout.addWidget(self.buttons)
        self._reshape_timer = QTimer(self, singleShot=True, interval=400)
        self._reshape_timer.timeout.connect(self._request_schema)
        self._set_busy(True)
        self._request_schema()

    # ------------------------------------------------------------ schema
    @staticmethod
    def _shaping(values: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(values.get(k) for k in SHAPING_FIELDS)

    def _request_schema(self) -> None:
        if any(p.is_open() for p in self.form.pickers().values()):
            self._reshape_timer.start()  # the user is still searching
            return
        self._session.request_run_schema(
            self._kind, nest_values(self._values), self._on_schema, self._on_error
        )

    def _on_schema(self, fields: list[dict[str, Any]]) -> None:
        # Keep what the user typed; fields new to this shape start at their preset.
        keep = {k: v for k, v in self._values.items() if k in SHAPING_FIELDS}
        if not self._fields_loaded():
            keep = dict(self._values)
        self.form.set_schema(fields, keep)
        self._defaults = {f["name"]: f.get("default") for f in fields}
        self._profiles = next(
            (f.get("profiles", {}) for f in fields if f["name"] == PROFILE_FIELD), {}
        )
        self._values = self.form.values()
        self._shape = self._shaping(self._values)
        self._show_profile()
        self._set_busy(False)

    def _show_profile(self) -> None:
        """The chosen hardware profile's settings, with those this form sets
        itself in their place."""
        name = str(self._values.get(PROFILE_FIELD) or "")
        preview = self._profiles.get(name)
        self.profile_preview.setVisible(preview is not None)
        if preview is None:
            return
        own = {
            key: value
            for key, value in self.config().items()
            if key not in SHAPING_FIELDS and key != PROFILE_FIELD
        }
        self.profile_preview.show_profile(name, preview, own)
        self.profile_preview_changed.emit(name)

    def _fields_loaded(self) -> bool:
        return bool(self.form.values())

    # ------------------------------------------------------------- input
    def _on_form_values_changed(self, values: dict[str, Any]) -> None:
        self._values = values
        self.message.hide()
        if self._shaping(values) != self._shape:
            self._reshape_timer.start()
        self._show_profile()

    def _on_form_validity_changed(self, valid: bool) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(valid)

    def _set_busy(self, busy: bool) -> None:
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(
            not busy and self.form.is_valid()
        )

    # ------------------------------------------------------------ submit
    def config(self) -> dict[str, Any]:
        """The config to send: the fields the user changed from the schema's
        defaults, plus the environment and algorithm."""
        changed = {
            k: v
            for k, v in self._values.items()
            if k not in self._defaults or self._defaults[k] != v
        }
        for key in SHAPING_FIELDS:
            if self._values.get(key) not in (None, ""):
                changed[key] = self._values[key]
        return nest_values(changed)

    def _on_buttons_accepted(self) -> None:
        self._set_busy(True)
        config = self.config()
        self._session.start_run(
            self._kind,
            config,
            name=str(config.get("name") or ""),
            on_started=self._on_started,
            on_error=self._on_error,
        )

    def _on_started(self, run_id: str) -> None:
        self.started_run_id = run_id
        self.accept()

    def _on_error(self, error: protocol.Error) -> None:
        self._set_busy(False)
        self.message.setText(error.message)
        self.message.show()
        if error.field:
            self.form.set_external_errors({error.field: error.message})
