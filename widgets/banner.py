"""A dismissible message strip shown above content (engine crashed, restored)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QToolButton,
    QWidget,
)

OVERLAY_MARGIN = 6
"""Space (px) between an overlaid banner and its host's edges."""

STYLES = {
    "info": "background:#d9edf7; color:#1b4b66; border:1px solid #9fcbe3;",
    "warning": "background:#fcf3cf; color:#6b5200; border:1px solid #e6cf7a;",
    "error": "background:#f8d7da; color:#721c24; border:1px solid #e4a1a8;",
    "success": "background:#dff0d8; color:#2b542c; border:1px solid #a7d19c;",
}


class Banner(QFrame):
    """``show_message(text, level, action_text)``; emits ``action_requested``
    when its button is pressed and ``dismissed`` when closed."""

    action_requested = Signal()
    dismissed = Signal()

    def __init__(self, parent: QFrame | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self._label = QLabel(wordWrap=True)
        self._label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self._action = QPushButton()
        self._action.clicked.connect(self.action_requested)
        close = QToolButton(autoRaise=True)
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.clicked.connect(self.dismiss)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self._label, 1)
        layout.addWidget(self._action)
        layout.addWidget(close)
        self._hide_timer = QTimer(self, singleShot=True)
        self._hide_timer.timeout.connect(self.dismiss)
        self.level = "info"
        self._host: QWidget | None = None
        self.hide()

    def overlay_on(self, host: QWidget) -> None:
        """Float over the top of ``host`` instead of taking room in a layout:
        showing or hiding a message then moves nothing under the pointer."""
        self._host = host
        self.setParent(host)
        self.setAutoFillBackground(True)
        host.installEventFilter(self)
        self._place()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self._host and event.type() == QEvent.Type.Resize:
            self._place()
        return False

    def _place(self) -> None:
        host = self._host
        if host is None or self.isHidden():
            return  # placed when a message shows
        width = max(0, host.width() - 2 * OVERLAY_MARGIN)
        height = self.heightForWidth(width)
        if height < 0:
            height = self.sizeHint().height()
        self.setGeometry(OVERLAY_MARGIN, OVERLAY_MARGIN, width, height)
        self.raise_()

    def show_message(
        self,
        text: str,
        level: str = "info",
        action_text: str = "",
        auto_hide_ms: int = 0,
    ) -> None:
        self.level = level
        self.setStyleSheet(f"QFrame#banner {{{STYLES.get(level, STYLES['info'])}}}")
        self._label.setText(text)
        self._action.setText(action_text)
        self._action.setVisible(bool(action_text))
        self._hide_timer.stop()
        if auto_hide_ms:
            self._hide_timer.start(auto_hide_ms)
        self.show()
        self._place()

    def text(self) -> str:
        return self._label.text()

    def dismiss(self) -> None:
        self._hide_timer.stop()
        if self.isVisible():
            self.hide()
            self.dismissed.emit()
