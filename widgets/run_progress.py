"""A run's progress: steps done of total, speed, ETA, and its state as a color."""

from __future__ import annotations

import math

from PySide6 import QtCore, QtWidgets

__all__ = ["STATE_COLORS", "RunProgressBar", "format_eta", "format_progress"]

#: Bar color per run state.
STATE_COLORS: dict[str, str] = {
    "queued": "#8f9bb3",
    "running": "#4c9be8",
    "completed": "#59b36b",
    "stopped": "#d4b22c",
    "failed": "#e15759",
    "interrupted": "#b07aa1",
}


def format_eta(seconds: float) -> str:
    """``1:42`` below an hour, ``2:05:09`` above."""
    s = max(0, round(seconds))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def _format_rate(rate: float) -> str:
    if rate >= 100:
        return f"{rate:,.0f}"
    if rate >= 10:
        return f"{rate:.1f}"
    return f"{rate:.2f}"


def format_progress(
    done: int,
    total: int | None,
    rate: float | None = None,
    eta_s: float | None = None,
    unit: str = "steps",
    detail: str = "",
) -> str:
    """``12,345 / 100,000 steps · 850 steps/s · ETA 1:42``; unknown parts left
    out. ``detail`` (what the current part is doing, e.g. a flow's running
    node and its own counts) goes before the ETA; the speed is left out
    then, as it counts ``unit`` and the detail may count something else."""
    parts = [f"{done:,} / {total:,} {unit}" if total else f"{done:,} {unit}"]
    if detail:
        parts.append(detail)
    elif rate is not None and math.isfinite(rate) and rate > 0:
        parts.append(f"{_format_rate(rate)} {unit}/s")
    if eta_s is not None and math.isfinite(eta_s) and eta_s >= 0:
        parts.append(f"ETA {format_eta(eta_s)}")
    return " · ".join(parts)


class RunProgressBar(QtWidgets.QWidget):
    """Progress bar with steps, steps/s and ETA; the run state sets its color.

    Signals: ``state_changed(str)``.
    """

    state_changed = QtCore.Signal(str)

    #: Bar resolution: QProgressBar holds ints, step counts may pass 2**31.
    _SCALE = 10_000

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self._state = "queued"
        self._done = 0
        self._exact_done = 0.0
        self._total: int | None = None
        self._rate: float | None = None
        self._eta: float | None = None
        self._unit = "steps"
        self._detail = ""
        self._badge = QtWidgets.QLabel()
        self._badge.setObjectName("runStateBadge")
        self._badge.setMinimumWidth(90)
        self._bar = QtWidgets.QProgressBar()
        self._bar.setRange(0, self._SCALE)
        self._bar.setTextVisible(True)
        self._bar.setAlignment(QtCore.Qt.AlignmentFlag.AlignCenter)
        self._bar.setMinimumHeight(22)
        lay = QtWidgets.QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self._badge)
        lay.addWidget(self._bar, 1)
        self._apply_state()
        self._apply_progress()

    def set_progress(
        self,
        done: float,
        total: int | None,
        rate: float | None = None,
        eta_s: float | None = None,
        unit: str = "steps",
        detail: str = "",
    ) -> None:
        """``done`` of ``total`` ``unit`` (None or 0: unknown), rate in
        ``unit`` per second, ETA in s; ``detail`` says what is going on now
        (see :func:`format_progress`)."""
        if done < 0:
            raise ValueError("done must be >= 0.")
        self._done, self._total, self._rate, self._eta = int(done), total, rate, eta_s
        # The bar fills by the exact fraction (a flow's nodes count in
        # fractions of the running one); the text counts whole units.
        self._exact_done = float(done)
        self._unit, self._detail = unit, detail
        self._apply_progress()

    def set_state(self, state: str) -> None:
        """One of queued, running, completed, stopped, failed, interrupted."""
        if state not in STATE_COLORS:
            raise ValueError(
                f"state must be one of {', '.join(STATE_COLORS)}, not {state!r}."
            )
        if state == self._state:
            return
        self._state = state
        self._apply_state()
        self._apply_progress()
        self.state_changed.emit(state)

    def state(self) -> str:
        return self._state

    def text(self) -> str:
        """The text shown on the bar."""
        return self._bar.format()

    def fraction(self) -> float:
        """Shown fraction done, 0..1 (0 while the total is unknown)."""
        return self._bar.value() / self._SCALE

    def color(self) -> str:
        return STATE_COLORS[self._state]

    def _apply_progress(self) -> None:
        # An ETA means nothing once a run has ended; its average speed still does.
        ended = self._state in ("completed", "stopped", "failed", "interrupted")
        eta = None if ended else self._eta
        text = format_progress(
            self._done, self._total, self._rate, eta, self._unit, self._detail
        )
        if self._total:
            frac = min(1.0, self._exact_done / self._total)
            self._bar.setValue(round(frac * self._SCALE))
        else:
            self._bar.setValue(0)
        self._bar.setFormat(text)

    def _apply_state(self) -> None:
        color = STATE_COLORS[self._state]
        self._badge.setText(
            f"<span style='color:{color}'>●</span> {self._state.title()}"
        )
        self._bar.setStyleSheet(
            "QProgressBar { border: 1px solid palette(mid); border-radius: 4px;"
            " text-align: center; }"
            f"QProgressBar::chunk {{ background-color: {color}; border-radius: 3px; }}"
        )
