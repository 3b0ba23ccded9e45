"""What the studio tells the user outside its own views: the quit question
when runs train, and a desktop notification when a run ends while the user
looks elsewhere."""

from __future__ import annotations

from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMessageBox, QSystemTrayIcon, QWidget


def ask_quit(parent: QWidget, n: int) -> str:
    """What quitting does to ``n`` training runs: ``keep`` (they train on
    headless), ``stop`` (each saves a checkpoint) or ``cancel``."""
    box = QMessageBox(parent)
    box.setWindowTitle("Quit RL Studio")
    box.setIcon(QMessageBox.Icon.Question)
    box.setText(f"{n} run(s) are still training.")
    box.setInformativeText(
        "They can train on in the background: the next start shows them "
        "live. Or they stop now, each saving a checkpoint to resume from."
    )
    keep = box.addButton("Keep training", QMessageBox.ButtonRole.AcceptRole)
    stop = box.addButton("Stop and quit", QMessageBox.ButtonRole.DestructiveRole)
    box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(keep)
    box.exec()
    clicked = box.clickedButton()
    return "keep" if clicked is keep else "stop" if clicked is stop else "cancel"


class Notifier:
    """A desktop notification where a system tray exists (its icon made on
    first use), and the window's taskbar entry asking for attention
    everywhere."""

    def __init__(self, window: QWidget, icon: QIcon) -> None:
        self._window = window
        self._icon = icon
        self.tray: QSystemTrayIcon | None = None

    def notify(self, title: str, text: str) -> None:
        if self.tray is None and QSystemTrayIcon.isSystemTrayAvailable():
            self.tray = QSystemTrayIcon(self._icon, self._window)
            self.tray.show()
        if self.tray is not None:
            self.tray.showMessage(title, text, self._icon, 10_000)
        QApplication.alert(self._window)
