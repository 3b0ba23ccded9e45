"""Formatting helpers, a JSON file preview, a dialog's button box and the
agent's view of a preview's frames, shared by the workspaces."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QPlainTextEdit, QWidget

from studio.state.env_preview import AGENT_VIEW_TIP, PreviewFrames
from widgets.frame_viewer import FrameViewer
from widgets.image_stack import ImageStackView

STATUS_COLORS = {
    "running": "#1f77b4",
    "queued": "#7f7f7f",
    "completed": "#2ca02c",
    "stopped": "#b8860b",
    "failed": "#d62728",
    "interrupted": "#9467bd",
}


def fmt_time(ts: float | None) -> str:
    if not ts:
        return ""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return ""
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def fmt_bytes(n: int | None) -> str:
    if not n:
        return ""
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def run_duration(run: dict[str, Any]) -> float | None:
    """Seconds the run has run, attempts before a resume included.

    An ended run's is read from what the project keeps, so it is the same
    after the studio restarts: its last attempt, or the time its metrics
    say it trained when that is longer (a resumed run's clock goes on from
    its earlier attempts). A running one's goes on from the attempts this
    studio saw end (``prior_duration_s``)."""
    started = run.get("started")
    if not started:
        return None
    if run.get("status") == "running" and not run.get("ended"):
        prior = float(run.get("prior_duration_s") or 0.0)
        return time.time() - float(started) + prior
    ended = run.get("ended")
    if ended is None:
        return None
    trained = run.get("trained_s")
    attempt = float(ended) - float(started)
    return max(attempt, float(trained)) if trained is not None else attempt


def open_folder(path: str | Path) -> None:
    QDesktopServices.openUrl(QUrl.fromLocalFile(str(path)))


class JsonPreview(QPlainTextEdit):
    """Read-only, pretty-printed view of a JSON file or value."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setReadOnly(True)
        font = self.font()
        font.setFamily("monospace")
        font.setStyleHint(font.StyleHint.Monospace)
        self.setFont(font)

    def show_file(self, path: str | Path) -> None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            self.setPlainText(f"Cannot read {path}: {exc.strerror}")
            return
        try:
            text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError as exc:
            text = f"# This file is not valid JSON: {exc}\n\n{text}"
        self.setPlainText(text)

    def show_value(self, value: Any) -> None:
        text = json.dumps(value, indent=2, default=str, ensure_ascii=False)
        # The same value shown again (a selection that kept its first run)
        # keeps the document: laying the text out again is not free.
        if text != self.toPlainText():
            self.setPlainText(text)


def enable_with_reason(widget: QWidget, enabled: bool, tip: str, why_not: str) -> None:
    """Enable ``widget`` with ``tip`` as its tooltip, or disable it with the
    sentence that says why it is disabled."""
    widget.setEnabled(enabled)
    widget.setToolTip(tip if enabled else why_not)


def ok_cancel_buttons(
    dialog: QDialog, ok_text: str = "", on_ok: Callable[[], None] | None = None
) -> QDialogButtonBox:
    """A dialog's OK and Cancel buttons: OK (named ``ok_text`` when given)
    runs ``on_ok`` (default: accept, so ``on_ok`` may check and refuse
    first), Cancel rejects."""
    buttons = QDialogButtonBox(
        QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
    )
    if ok_text:
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText(ok_text)
    buttons.accepted.connect(on_ok or dialog.accept)
    buttons.rejected.connect(dialog.reject)
    return buttons


def agent_view(frames: FrameViewer) -> ImageStackView:
    """The observation at the frame ``frames`` shows, for an env whose
    observations are images (hidden until :func:`show_agent_view` has some)."""
    view = ImageStackView("Agent's view")
    view.setToolTip(AGENT_VIEW_TIP)
    view.hide()
    frames.frame_changed.connect(view.show_stack)
    return view


def show_agent_view(view: ImageStackView, loaded: PreviewFrames | None) -> None:
    """``loaded``'s observations in ``view``; hidden when they are not images."""
    seen = None if loaded is None else loaded.observations
    if loaded is not None and seen is not None:
        view.set_stacks(seen, loaded.channels, loaded.text)
    else:
        view.set_stacks(None)
    view.setVisible(seen is not None)
