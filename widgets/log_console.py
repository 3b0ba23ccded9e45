"""A read-only log view with a source filter, for engine and run output."""

from __future__ import annotations

import time

from PySide6.QtCore import Signal
from PySide6.QtGui import QColor, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

LEVEL_COLORS = {
    "error": "#d9534f",
    "warning": "#e0a800",
    "info": "",
    "debug": "#888888",
}


class LogConsole(QWidget):
    """Shows lines as ``hh:mm:ss source  text``; keeps the last ``max_lines``.

    Lines that do not match the filter text are kept but not shown until the
    filter changes.
    """

    filter_changed = Signal(str)
    clear_requested = Signal()

    def __init__(self, max_lines: int = 5000, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._lines: list[tuple[str, str]] = []  # (level, formatted line)
        self._max_lines = max_lines
        self._filter = ""
        self._view = QPlainTextEdit(readOnly=True)
        self._view.setMaximumBlockCount(max_lines)
        self._view.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        font = self._view.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self._view.setFont(font)
        self._filter_edit = QLineEdit(placeholderText="Filter (text or run id)")
        self._filter_edit.setClearButtonEnabled(True)
        self._filter_edit.textChanged.connect(self._on_filter_edit_text_changed)
        clear = QToolButton()
        clear.setText("Clear")
        clear.clicked.connect(self.clear)
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self._filter_edit)
        top.addWidget(clear)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(2, 2, 2, 2)
        layout.addLayout(top)
        layout.addWidget(self._view)

    def append_line(
        self,
        text: str,
        source: str = "",
        level: str = "info",
        when: float | None = None,
    ) -> None:
        """Add a line stamped with ``when`` (a wall time; None: now)."""
        stamp = time.strftime("%H:%M:%S", time.localtime(when))
        line = f"{stamp} {source:<10} {text}" if source else f"{stamp} {text}"
        self._add(line, level)

    def _add(self, line: str, level: str = "info") -> None:
        self._lines.append((level, line))
        if len(self._lines) > self._max_lines:
            del self._lines[: len(self._lines) - self._max_lines]
        if self._matches(line):
            self._write(level, line)

    def append_lines(
        self, lines: list[str], source: str = "", level: str = "info"
    ) -> None:
        for text in lines:
            self.append_line(text, source, level)

    def append_timed_lines(
        self, rows: list[tuple[float | None, str]], source: str = ""
    ) -> None:
        """Lines written earlier, each with its time (None: unknown, shown
        blank rather than as now)."""
        for when, text in rows:
            if when is None:
                self._add(f"{'':8} {source:<10} {text}" if source else f"{'':8} {text}")
            else:
                self.append_line(text, source, when=when)

    def text(self) -> str:
        return self._view.toPlainText()

    def clear(self) -> None:
        self._lines.clear()
        self._view.clear()
        self.clear_requested.emit()

    def set_filter(self, text: str) -> None:
        self._filter_edit.setText(text)

    def _matches(self, line: str) -> bool:
        return not self._filter or self._filter.lower() in line.lower()

    def _write(self, level: str, line: str) -> None:
        cursor = self._view.textCursor()
        cursor.movePosition(QTextCursor.MoveOperation.End)
        fmt = QTextCharFormat()
        color = LEVEL_COLORS.get(level, "")
        if color:
            fmt.setForeground(QColor(color))
        if not self._view.document().isEmpty():
            cursor.insertBlock()
        cursor.insertText(line, fmt)
        bar = self._view.verticalScrollBar()
        bar.setValue(bar.maximum())

    def _on_filter_edit_text_changed(self, text: str) -> None:
        self._filter = text
        self._view.clear()
        for level, line in self._lines:
            if self._matches(line):
                self._write(level, line)
        self.filter_changed.emit(text)
