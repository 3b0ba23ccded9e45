"""The studio's theme: light, dark, or the desktop's (system)."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication

from widgets.theme import apply_palette


def resolve(theme: str) -> str:
    """ "light" or "dark": ``theme`` itself, or the desktop's choice for
    "system" (light where the desktop does not say)."""
    if theme in ("light", "dark"):
        return theme
    scheme = QApplication.styleHints().colorScheme()
    return "dark" if scheme == Qt.ColorScheme.Dark else "light"


def apply_theme(theme: str) -> str:
    """Apply ``theme`` to the whole application (widgets, plots and canvases
    follow the palette); returns "light" or "dark"."""
    app = QApplication.instance()
    assert isinstance(app, QApplication)
    resolved = resolve(theme)
    apply_palette(app, resolved == "dark")
    return resolved
