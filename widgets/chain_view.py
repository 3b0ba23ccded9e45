"""A horizontal chain of labelled boxes joined by arrows (a lineage)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QWidget

KIND_COLORS = {
    "env": "#2ca02c",
    "run": "#7f7f7f",
    "base": "#8c564b",
    "sb3-policy": "#1f77b4",
    "lora-adapter": "#9467bd",
    "hf-merged": "#e377c2",
    "gguf": "#ff7f0e",
    "onnx": "#17becf",
    "ollama": "#d62728",
    "ollama-bundle": "#d62728",
}


@dataclass(frozen=True)
class ChainItem:
    key: str
    kind: str
    title: str
    subtitle: str = ""
    current: bool = False


class _Box(QFrame):
    clicked = Signal(str)

    def __init__(self, item: ChainItem) -> None:
        super().__init__()
        self.key = item.key
        color = KIND_COLORS.get(item.kind, "#555555")
        weight = 2 if item.current else 1
        # A translucent amber over the base: cream on the light theme, a
        # dark amber on the dark one, under the palette's text either way
        # (an opaque cream put the dark theme's white text on cream).
        background = "rgba(255, 193, 7, 0.22)" if item.current else "palette(base)"
        self.setObjectName("chain_box")
        self.setStyleSheet(
            f"#chain_box {{ border: {weight}px solid {color}; border-radius: 6px;"
            f" background: {background}; }}"
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 8, 4)
        label = QLabel(
            f"<span style='color:{color}; font-size:9pt'>{item.subtitle}</span><br>"
            f"<b>{_escape(item.title)}</b>"
        )
        label.setToolTip(item.key)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.NoTextInteraction)
        layout.addWidget(label)

    def mouseReleaseEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        self.clicked.emit(self.key)
        super().mouseReleaseEvent(event)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class ChainView(QScrollArea):
    """Shows ``ChainItem``s left to right; ``item_clicked(key)`` on a click."""

    item_clicked = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._items: list[ChainItem] = []
        self._inner = QWidget()
        self._row = QHBoxLayout(self._inner)
        self._row.setContentsMargins(2, 2, 2, 2)
        self.setWidget(self._inner)
        self.setFixedHeight(64)
        self.set_items([])

    def items(self) -> list[ChainItem]:
        return list(self._items)

    def titles(self) -> list[str]:
        return [i.title for i in self._items]

    def set_items(self, items: Sequence[ChainItem], empty_text: str = "") -> None:
        self._items = list(items)
        while self._row.count():
            child = self._row.takeAt(0)
            widget = child.widget() if child is not None else None
            if widget is not None:
                widget.deleteLater()
        if not items and empty_text:
            self._row.addWidget(QLabel(f"<i>{_escape(empty_text)}</i>"))
        for i, item in enumerate(items):
            if i:
                arrow = QLabel("→")
                arrow.setStyleSheet("font-size: 16pt; color: palette(mid);")
                self._row.addWidget(arrow)
            box = _Box(item)
            box.clicked.connect(self.item_clicked)
            self._row.addWidget(box)
        self._row.addStretch(1)
