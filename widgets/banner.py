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

from widgets.theme import follow_palette, is_dark

OVERLAY_MARGIN = 6
"""Space (px) between an overlaid banner and its host's edges."""

STYLES = {
    # level: (background, text, border), light theme then dark theme
    "light": {
        "info": ("#d9edf7", "#1b4b66", "#9fcbe3"),
        "warning": ("#fcf3cf", "#6b5200", "#e6cf7a"),
        "error": ("#f8d7da", "#721c24", "#e4a1a8"),
        "success": ("#dff0d8", "#2b542c", "#a7d19c"),
    },
    "dark": {
        "info": ("#1d3a4f", "#cfe7f6", "#3f7ea6"),
        "warning": ("#47390a", "#fbe7a1", "#8f7622"),
        "error": ("#4e1d23", "#f7cdd2", "#a2434e"),
        "success": ("#1e3d22", "#cdeac5", "#4f8c52"),
    },
}
"""Each level's colours per theme. The text colour is set on the label
too: a label takes the palette's text colour otherwise, pale on the dark
theme (it was pale on pale)."""


def banner_style(level: str, dark: bool) -> str:
    """The style sheet of a banner of ``level`` on the dark or light theme."""
    colours = STYLES["dark" if dark else "light"]
    background, text, border = colours.get(level, colours["info"])
    return (
        f"QFrame#banner {{ background: {background}; border: 1px solid {border}; }}"
        f" QFrame#banner QLabel {{ color: {text}; background: transparent; }}"
    )


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
        self._at_bottom = False
        self.hide()
        follow_palette(self, self._restyle)

    def _restyle(self, dark: bool) -> None:
        style = banner_style(self.level, dark)
        if style != self.styleSheet():  # setting it re-polishes: no loop
            self.setStyleSheet(style)

    def overlay_on(self, host: QWidget, at_bottom: bool = False) -> None:
        """Float over the top (or the bottom) of ``host`` instead of taking
        room in a layout: showing or hiding a message then moves nothing
        under the pointer. A host whose top row holds the buttons used
        most takes it at the bottom."""
        self._host = host
        self._at_bottom = at_bottom
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
        top = host.height() - OVERLAY_MARGIN - height if self._at_bottom else 0
        self.setGeometry(OVERLAY_MARGIN, max(OVERLAY_MARGIN, top), width, height)
        self.raise_()

    def show_message(
        self,
        text: str,
        level: str = "info",
        action_text: str = "",
        auto_hide_ms: int = 0,
    ) -> None:
        self.level = level
        self._restyle(is_dark(self.palette()))
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
