"""The welcome page: three ways to start, each the first step of a journey
(design an environment, train CartPole, fine-tune a language model), and
the check that the language-model journey's base model is here before its
flow opens (else the flow's first run fails at once)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

BASE_MODEL_NODE = "llm.base_model"

STARTS = (
    (
        "design",
        "Design an environment",
        "A new workflow environment in the designer: statuses, transitions "
        "and rewards on a canvas, checked and previewed in the engine.",
    ),
    (
        "cartpole",
        "Train CartPole",
        "A new training run of PPO on CartPole-v1 (a few seconds on a CPU), "
        "with live reward and loss charts.",
    ),
    (
        "llm",
        "Fine-tune a language model",
        "The bundled GRPO flow: a small language model learns to resolve Jira "
        "issues, then exports to GGUF and Ollama.",
    ),
)


class WelcomeDialog(QDialog):
    """Emits ``start_requested(kind)`` ("design", "cartpole", "llm") and
    closes when a start is chosen."""

    start_requested = Signal(str)

    def __init__(self, show_at_start: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Welcome to RL Studio")
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<h2>Welcome to RL Studio</h2>"))
        layout.addWidget(
            QLabel(
                "Design environments, train agents with reinforcement learning "
                "or fine-tune language models, and ship them. Where to start?",
                wordWrap=True,
            )
        )
        self.buttons: dict[str, QPushButton] = {}
        row = QHBoxLayout()
        for kind, title, text in STARTS:
            box = QVBoxLayout()
            button = QPushButton(title)
            button.setMinimumHeight(44)
            button.setStyleSheet("font-weight: bold;")
            button.clicked.connect(lambda *_, k=kind: self._on_start_clicked(k))
            self.buttons[kind] = button
            box.addWidget(button)
            label = QLabel(text, wordWrap=True)
            label.setAlignment(Qt.AlignmentFlag.AlignTop)
            box.addWidget(label, 1)
            row.addLayout(box, 1)
        layout.addLayout(row, 1)
        self.show_at_start = QCheckBox("Show this at start (Help → Welcome)")
        self.show_at_start.setChecked(show_at_start)
        close = QPushButton("Close")
        close.clicked.connect(self.reject)
        bottom = QHBoxLayout()
        bottom.addWidget(self.show_at_start)
        bottom.addStretch(1)
        bottom.addWidget(close)
        layout.addLayout(bottom)
        self.resize(720, 260)

    def _on_start_clicked(self, kind: str) -> None:
        self.accept()
        self.start_requested.emit(kind)


def missing_base_models(flow: Path, cached: Collection[str]) -> list[str]:
    """The Hub ids the flow's base-model nodes start from that are neither a
    folder here nor among ``cached`` (the Hugging Face cache's models); a
    flow that cannot be read names none (opening it says why)."""
    from engine import flow as flow_file  # when asked, not at launch
    from engine.flow import FlowError

    try:
        nodes = flow_file.load(flow).nodes
    except (OSError, FlowError):
        return []
    missing: list[str] = []
    for node in nodes:
        model = node.params.get("model") if node.type == BASE_MODEL_NODE else None
        if (
            isinstance(model, str)
            and model
            and model not in cached
            and model not in missing
            and not Path(model).expanduser().exists()
        ):
            missing.append(model)
    return missing


def ask_base_model_download(parent: QWidget, repo: str) -> bool:
    """Ask whether to download the flow's missing base model ``repo``."""
    answer = QMessageBox.question(
        parent,
        "Download the base model?",
        f"The language-model flow fine-tunes {repo}, which is not in the "
        "Hugging Face cache here, so running it now would fail at its first "
        "node. Download it from the Hub now? The download's progress shows in "
        "Models; run the flow when it has finished.",
    )
    return answer == QMessageBox.StandardButton.Yes
