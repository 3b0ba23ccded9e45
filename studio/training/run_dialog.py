"""New run / Duplicate with changes: the engine's form for ``rl.train``
(:class:`studio.run_form.RunFormDialog`), whose environment, algorithm and
preset shape the rest: rollout sizes fitted to the step budget and the
hardware stay the engine's choice unless the user changes them.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.run_form import RunFormDialog
from studio.session import Session

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


class RunDialog(RunFormDialog):
    """New training run / Duplicate with changes (``rl.train`` and the
    sweep's trials): the form nests hyperparameters as
    ``hyperparameters.x`` fields and previews the hardware profile."""

    profile_preview_changed = Signal(str)
    """The hardware profile preview now shows this profile."""

    shaping_fields = SHAPING_FIELDS
    keeps_edits = False  # a new algorithm or preset brings its own settings

    def __init__(
        self,
        session: Session,
        kind: str = "rl.train",
        initial: dict[str, Any] | None = None,
        parent: QWidget | None = None,
        title: str | None = None,
    ) -> None:
        super().__init__(
            session,
            kind,
            title=title
            or ("Duplicate run with changes" if initial else "New training run"),
            ok_text="Train",
            initial=initial,
            parent=parent,
        )
        # The engine's form arrives later, through the event loop.
        self._profiles: dict[str, dict[str, Any]] = {}
        self.profile_preview = ProfilePreview()
        self.profile_preview.hide()
        self.resize(560, 720)
        self.body.insertWidget(1, self.profile_preview)

    def to_form(self, config: dict[str, Any]) -> dict[str, Any]:
        return flatten_config(config)

    def to_config(self, values: dict[str, Any]) -> dict[str, Any]:
        return nest_values(values)

    def schema_loaded(self, fields: list[dict[str, Any]]) -> None:
        self._profiles = next(
            (f.get("profiles", {}) for f in fields if f["name"] == PROFILE_FIELD), {}
        )
        self._show_profile()

    def values_edited(self) -> None:
        self._show_profile()

    def _show_profile(self) -> None:
        """The chosen hardware profile's settings, with those this form sets
        itself in their place."""
        values = self.values
        name = str(values.get(PROFILE_FIELD) or "")
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
