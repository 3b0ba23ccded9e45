"""A small Python code editor: monospace, four-space indents, syntax colours.

Enough to fix a custom environment without leaving the studio; the text's
own undo and redo work inside it (Ctrl+Z / Ctrl+Shift+Z), and
``document().isModified()`` says whether it differs from what was loaded.
"""

from __future__ import annotations

import keyword
import re

from PySide6.QtCore import Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QKeyEvent,
    QSyntaxHighlighter,
    QTextCharFormat,
    QTextDocument,
)
from PySide6.QtWidgets import QPlainTextEdit, QWidget

INDENT = "    "


def _format(color: str, bold: bool = False, italic: bool = False) -> QTextCharFormat:
    fmt = QTextCharFormat()
    fmt.setForeground(QColor(color))
    if bold:
        fmt.setFontWeight(QFont.Weight.Bold)
    fmt.setFontItalic(italic)
    return fmt


class PythonHighlighter(QSyntaxHighlighter):
    """Keywords, builtins' constants, decorators, numbers, strings, comments.
    Triple-quoted strings spanning lines are tracked with the block state."""

    RULES = [
        (re.compile(r"\b(" + "|".join(keyword.kwlist) + r")\b"), "keyword"),
        (re.compile(r"\b(self|cls)\b"), "self"),
        (re.compile(r"@[\w.]+"), "decorator"),
        (re.compile(r"\b\d+(\.\d*)?([eE][-+]?\d+)?\b"), "number"),
        (re.compile(r"(?<!\w)[rbfu]*'([^'\\\n]|\\.)*'|(?<!\w)[rbfu]*\"([^\"\\\n]|\\.)*\""),
         "string"),
        (re.compile(r"#[^\n]*"), "comment"),
    ]  # fmt: skip
    TRIPLE = re.compile(r'"""|\'\'\'')

    def __init__(self, document: QTextDocument) -> None:
        super().__init__(document)
        self.formats = {
            "keyword": _format("#0033b3", bold=True),
            "self": _format("#94558d"),
            "decorator": _format("#9e880d"),
            "number": _format("#1750eb"),
            "string": _format("#067d17"),
            "comment": _format("#8c8c8c", italic=True),
        }

    def highlightBlock(self, text: str) -> None:
        for pattern, name in self.RULES:
            for hit in pattern.finditer(text):
                self.setFormat(hit.start(), hit.end() - hit.start(), self.formats[name])
        # Triple-quoted strings: state 1 = inside one at the end of the block.
        string = self.formats["string"]
        start = 0 if self.previousBlockState() == 1 else -1
        pos = 0
        self.setCurrentBlockState(0)
        while True:
            m = self.TRIPLE.search(text, pos)
            if start >= 0:
                if m is None:
                    self.setFormat(start, len(text) - start, string)
                    self.setCurrentBlockState(1)
                    return
                self.setFormat(start, m.end() - start, string)
                start, pos = -1, m.end()
            elif m is None:
                return
            else:
                start, pos = m.start(), m.end()


class CodeEditor(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        self.setFont(font)
        self.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        self.setTabStopDistance(self.fontMetrics().horizontalAdvance(" ") * 4)
        self.highlighter = PythonHighlighter(self.document())

    def set_code(self, text: str) -> None:
        """Load ``text`` as the unmodified state (its undo history cleared)."""
        self.setPlainText(text)
        self.document().setModified(False)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        # Python wants spaces; keep the indent of the line on Enter.
        if event.key() == Qt.Key.Key_Tab and not event.modifiers():
            self.insertPlainText(INDENT)
            return
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            line = self.textCursor().block().text()
            indent = line[: len(line) - len(line.lstrip(" "))]
            if line.rstrip().endswith(":"):
                indent += INDENT
            super().keyPressEvent(event)
            self.insertPlainText(indent)
            return
        super().keyPressEvent(event)
