"""The Models workspace's Ollama server: its host, Refresh, and a line that
says what it answered (its version and number of models, or why not)."""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtWidgets import QHBoxLayout, QLabel, QLineEdit, QPushButton, QWidget

from studio.model_manager.controller import ModelsController


class OllamaServerBar(QWidget):
    """The host and Refresh, in a row; ``status`` is the line below it."""

    def __init__(
        self, controller: ModelsController, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self.host_edit = QLineEdit(controller.ollama_host)
        self.host_edit.setPlaceholderText("Ollama host")
        self.host_edit.setFixedWidth(220)
        self.host_edit.returnPressed.connect(self.refresh)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.setToolTip("List the models of the Ollama server")
        self.refresh_button.clicked.connect(self.refresh)
        self.status = QLabel(wordWrap=True)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(QLabel("Ollama:"))
        layout.addWidget(self.host_edit)
        layout.addWidget(self.refresh_button)
        controller.ollama_models_changed.connect(self._on_ollama_models_changed)
        controller.ollama_failed.connect(self._on_ollama_failed)

    def refresh(self) -> None:
        """Ask the server at the host typed for its models."""
        self.status.setText("<span style='color:gray'>Asking Ollama…</span>")
        self._controller.refresh_ollama(self.host_edit.text())

    def _on_ollama_models_changed(self, models: list[dict[str, Any]]) -> None:
        if not self._controller.ollama_error:
            version = getattr(self._controller, "ollama_version", "")
            self.status.setText(
                f"<span style='color:#2ca02c'>●</span> Ollama {html.escape(version)}: "
                f"{len(models)} model(s)"
            )
            self.status.setToolTip(self._controller.ollama_host)

    def _on_ollama_failed(self, message: str) -> None:
        self.status.setText(
            f"<span style='color:#d62728'>●</span> {html.escape(message)}"
        )
        self.status.setToolTip(message)
