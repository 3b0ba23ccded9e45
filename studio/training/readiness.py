"""The Training workspace's readiness strip: whether the project's recorded
trajectories are ready for retraining, by the rules ``serve-http`` applies
(the engine answers ``training.status`` with the function behind ``GET
/training/status``), the schedule and the agent's versions. Refreshed on a
timer and when the project's runs change."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import protocol
from studio.engine_client import READY
from studio.lifetime import subscribe
from studio.session import Session
from studio.state.readiness import ReadinessText, readiness_text

REFRESH_MS = 5000
"""Trajectories arrive without an event to the studio: how often to look."""


class ReadinessStrip(QFrame):
    updated = Signal(dict)
    """The engine's answer, once shown."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._pending = False
        self.text: ReadinessText | None = None
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.headline = QLabel("Retraining readiness: no project open.", wordWrap=True)
        self.details = QLabel(wordWrap=True)
        # One line until asked: the rules and counts matter to a project that
        # retrains from recorded trajectories, not to one training CartPole.
        self.details.hide()
        self.toggle = QToolButton()
        self.toggle.setText("Details")
        self.toggle.setCheckable(True)
        self.toggle.setToolTip(
            "The retraining rules, the trajectory counts and the agent's versions"
        )
        self.toggle.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.toggle.setArrowType(Qt.ArrowType.RightArrow)
        self.toggle.setAutoRaise(True)
        self.toggle.toggled.connect(self._on_toggled)
        top = QHBoxLayout()
        top.addWidget(self.headline, 1)
        top.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 2, 6, 2)
        layout.setSpacing(2)
        layout.addLayout(top)
        layout.addWidget(self.details)
        self._timer = QTimer(self, interval=REFRESH_MS)
        self._timer.timeout.connect(self.refresh)
        self._timer.start()
        subscribe(session.state, self, self._on_state_changed)
        session.client.state_changed.connect(self._on_client_state_changed)
        self.refresh()

    def refresh(self) -> None:
        """Ask the engine (an answer still awaited is not doubled)."""
        if (
            self._pending
            or self._session.client.state != READY
            or not self._session.state.is_open
        ):
            return
        self._pending = True
        self._session.client.request(
            protocol.GetTrainingStatus(),
            on_reply=self._on_reply,
            on_error=self._on_error,
        )

    def _on_toggled(self, shown: bool) -> None:
        self.details.setVisible(shown)
        self.toggle.setArrowType(
            Qt.ArrowType.DownArrow if shown else Qt.ArrowType.RightArrow
        )

    def _on_state_changed(self, what: str, key: str) -> None:
        if what in ("reset", "run"):
            self.refresh()

    def _on_client_state_changed(self, state: str) -> None:
        self.refresh()

    def _on_reply(self, result: dict[str, Any]) -> None:
        self._pending = False
        self.text = readiness_text(result)
        if self.text.ready:
            style = "color: #2e7d32; font-weight: bold;"
        elif self.text.configured:
            style = "color: #b26a00; font-weight: bold;"
        else:
            style = ""  # the palette's text colour, light or dark
        self.headline.setText(self.text.headline)
        self.headline.setStyleSheet(style)
        self.details.setText(
            "\n".join(
                (
                    self.text.data,
                    self.text.hours,
                    self.text.schedule,
                    self.text.versions,
                )
            )
        )
        self.updated.emit(result)

    def _on_error(self, error: protocol.Error) -> None:
        # A strip that cannot be read is not worth a message box; it says so
        # and the next tick retries.
        self._pending = False
        self.headline.setText(f"Retraining readiness unknown: {error.message}")
        self.headline.setStyleSheet("")
