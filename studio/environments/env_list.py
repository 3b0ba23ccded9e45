"""The designer's list of the project's environment specs, with New…,
Open…, Import Jira mock data… and Delete. It asks (signals); the designer
opens, creates, imports and deletes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from studio.common import fmt_time
from studio.state.env_design import KINDS
from widgets.record_table import Column, RecordTable


class EnvList(QWidget):
    """The specs (``table``, keyed by path) and the buttons under them.
    ``envs_dir()`` is the folder the Open… dialog starts in."""

    open_requested = Signal(str)
    """Open the spec at this path (perhaps the one open already)."""
    new_requested = Signal(str, str)
    """Create a spec of this kind under this name."""
    delete_requested = Signal(str)
    """Delete the spec at this path."""
    import_jira_requested = Signal(str)
    """Make a workflow env of the RL Hub Jira mock data file at this path."""

    def __init__(
        self, envs_dir: Callable[[], Path], parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._envs_dir = envs_dir
        self.table = RecordTable(
            [
                Column("Name", lambda d: d["name"]),
                Column(
                    "Kind",
                    lambda d: d.get("kind", "") if not d.get("error") else "broken",
                    color=lambda d: "#d62728" if d.get("error") else None,
                    tooltip=lambda d: d.get("error") or d.get("description", ""),
                ),
                Column("Modified", lambda d: d.get("modified", 0), fmt_time),
            ],
            key="path",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.new_button = QPushButton("New…")
        self.open_button = QPushButton("Open…")
        self.delete_button = QPushButton("Delete")
        self.import_jira_button = QPushButton("Import Jira mock data…")
        self.import_jira_button.setToolTip(
            "Make a workflow env of an RL Hub Jira mock data file "
            "(envs/NAME.env.json, its data in data/jira/)."
        )
        self.import_jira_button.clicked.connect(self._on_import_jira_clicked)
        self.new_button.clicked.connect(self._on_new_clicked)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.delete_button.clicked.connect(self._on_delete_clicked)
        buttons = QHBoxLayout()
        for b in (self.new_button, self.open_button, self.delete_button):
            buttons.addWidget(b)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("<h2>Environments</h2>"))
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        layout.addWidget(self.import_jira_button)

    def show_envs(self, envs: list[dict[str, Any]], empty_text: str) -> None:
        self.table.set_empty_text(empty_text)
        self.table.set_records(envs)

    def select(self, path: Path | None) -> None:
        """Select the row of the spec being edited (asking nothing)."""
        with QSignalBlocker(self.table):
            self.table.select_keys([str(path)] if path else [])

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        if keys:  # the open spec's own row opens nothing: it is open
            self.open_requested.emit(keys[0])

    def _on_new_clicked(self) -> None:
        kind, ok = QInputDialog.getItem(
            self, "New environment", "Kind:", list(KINDS), 0, False
        )
        if not ok:
            return
        name, ok = QInputDialog.getText(self, "New environment", "Name:")
        if ok and name:
            self.new_requested.emit(kind, name.strip())

    def _on_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Open environment",
            str(self._envs_dir()),
            "Environment specs (*.env.json);;JSON files (*.json)",
        )
        if path:
            self.open_requested.emit(path)

    def _on_import_jira_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Import Jira mock data",
            str(self._envs_dir().parent / "data"),
            "RL Hub Jira mock data (*.json)",
        )
        if path:
            self.import_jira_requested.emit(path)

    def _on_delete_clicked(self) -> None:
        keys = self.table.selected_keys()
        if keys:
            self.delete_requested.emit(keys[0])


__all__ = ["EnvList"]
