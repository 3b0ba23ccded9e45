"""Environments and Workflows: the project's documents of one kind, listed
from the project folder with a preview of the selected file."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QSplitter, QVBoxLayout, QWidget

from studio.common import JsonPreview, fmt_time
from studio.lifetime import subscribe
from studio.state.project_state import ProjectState
from widgets.record_table import Column, RecordTable


class DocumentsWorkspace(QWidget):
    """Lists ``state.envs`` or ``state.flows`` (``attribute``)."""

    def __init__(
        self,
        state: ProjectState,
        attribute: str,
        title: str,
        folder: str,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._state = state
        self._attribute = attribute
        self._folder = folder
        self.heading = QLabel(f"<h2>{title}</h2>")
        self.table = RecordTable(
            [
                Column("Name", lambda d: d["name"]),
                Column("Kind", lambda d: d.get("kind", "")),
                Column(
                    "Description",
                    lambda d: d.get("error") or d.get("description", ""),
                    color=lambda d: "#d62728" if d.get("error") else None,
                ),
                Column("Modified", lambda d: d.get("modified", 0), fmt_time),
            ],
            key="path",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.preview = JsonPreview()
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(self.preview)
        split.setSizes([300, 300])
        layout = QVBoxLayout(self)
        layout.addWidget(self.heading)
        layout.addWidget(split, 1)
        subscribe(state, self, self._on_state_changed)
        self._on_state_changed("reset", "")

    def documents(self) -> list[dict]:
        docs: list[dict] = getattr(self._state, self._attribute)
        return docs

    def _on_state_changed(self, what: str, key: str) -> None:
        if what != "reset":
            return
        where = (
            f"{self._state.path}/{self._folder}"
            if self._state.is_open
            else self._folder
        )
        self.table.set_empty_text(f"No files in {where} yet.")
        self.table.set_records(self.documents())
        if self.documents() and not self.table.selected_keys():
            self.table.select_keys([self.documents()[0]["path"]])

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        if keys:
            self.preview.show_file(keys[0])
        else:
            self.preview.clear()
