"""Models: every model registered in the project, with its details."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.models.project_state import ProjectState
from studio.workspaces.common import JsonPreview, fmt_bytes, fmt_time, open_folder
from widgets.record_table import Column, RecordTable


def key_metric(model: dict) -> str:
    metrics = model.get("metrics") or {}
    for name in ("eval/mean_reward", "eval/success_rate", "best_eval_reward"):
        if name in metrics:
            return f"{name} {metrics[name]:.3g}"
    if metrics:
        name, value = next(iter(metrics.items()))
        return f"{name} {value}"
    return ""


class ModelsWorkspace(QWidget):
    def __init__(self, state: ProjectState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._state = state
        self.table = RecordTable(
            [
                Column("Name", lambda m: m["name"]),
                Column("Kind", lambda m: m["kind"]),
                Column("Env", lambda m: m.get("env", "")),
                Column(
                    "Algorithm / base", lambda m: m.get("algo") or m.get("base", "")
                ),
                Column("Key metric", key_metric),
                Column("Size", lambda m: m.get("size_bytes", 0), fmt_bytes),
                Column("Created", lambda m: m.get("created", 0), fmt_time),
                Column("Source run", lambda m: m.get("source_run") or ""),
            ],
            empty_text="No models in this project yet. Models appear here when a "
            "training run finishes.",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.details = JsonPreview()
        self.show_folder = QPushButton("Show in folder")
        self.show_folder.setEnabled(False)
        self.show_folder.clicked.connect(self._on_show_folder_clicked)
        buttons = QHBoxLayout()
        buttons.addWidget(self.show_folder)
        buttons.addStretch(1)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.details)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<h2>Models</h2>"))
        layout.addLayout(buttons)
        layout.addWidget(split, 1)
        state.subscribe(self._on_state_changed)
        self._on_state_changed("reset", "")

    def _selected(self) -> dict | None:
        keys = self.table.selected_keys()
        return next((m for m in self._state.models if m["id"] in keys), None)

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self.table.set_records(self._state.models)

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        model = self._selected()
        self.show_folder.setEnabled(model is not None)
        if model is None:
            self.details.clear()
        else:
            self.details.show_value(model)

    def _on_show_folder_clicked(self) -> None:
        model = self._selected()
        if model:
            open_folder(Path(model["path"]).parent)
