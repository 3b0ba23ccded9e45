"""Shows a sequence of RGB frames (uint8, shape (n, h, w, 3)) with a slider
and a play button; frames may also arrive in parts (:meth:`append_frames`)
while the viewer already plays the first ones."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QImage, QPixmap
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QSizePolicy,
    QSlider,
    QStyle,
    QToolButton,
    QVBoxLayout,
    QWidget,
)


class FrameViewer(QWidget):
    """``frame_changed(index)`` when the shown frame changes."""

    frame_changed = Signal(int)

    def __init__(self, parent: QWidget | None = None, fps: float = 15.0) -> None:
        super().__init__(parent)
        self._frames: list[np.ndarray] = []
        """One (h, w, 3) array a frame: appending a part copies nothing."""
        self.image = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
        self.image.setMinimumSize(160, 120)
        self.image.setWordWrap(True)  # an empty_text sentence in a narrow pane
        self.image.setSizePolicy(
            QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding
        )
        self.image.setStyleSheet("background: #202020; color: #bbbbbb;")
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.valueChanged.connect(self._on_slider_value_changed)
        self.play_button = QToolButton()
        # The style's own icons: a font without the ▶/⏸ glyphs drew nothing.
        self._icons = {
            playing: self.style().standardIcon(icon)
            for playing, icon in (
                (False, QStyle.StandardPixmap.SP_MediaPlay),
                (True, QStyle.StandardPixmap.SP_MediaPause),
            )
        }
        self.play_button.setIcon(self._icons[False])
        self.play_button.setToolTip("Play")
        self.play_button.setCheckable(True)
        self.play_button.toggled.connect(self._on_play_toggled)
        self.counter = QLabel()
        self._timer = QTimer(self, interval=max(1, int(1000 / fps)))
        self._timer.timeout.connect(self._on_timer_timeout)
        row = QHBoxLayout()
        row.addWidget(self.play_button)
        row.addWidget(self.slider, 1)
        row.addWidget(self.counter)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.image, 1)
        layout.addLayout(row)
        self.clear()

    def set_frames(self, frames: np.ndarray, empty_text: str = "No frames") -> None:
        """Show ``frames`` from the first, paused (none: ``empty_text`` where
        the picture would be)."""
        self.clear(empty_text)
        self.append_frames(frames)

    def clear(self, text: str = "No frames") -> None:
        """Hold no frames, paused: ``text`` where the picture would be."""
        self.play_button.setChecked(False)
        self._frames = []
        self.slider.blockSignals(True)
        self.slider.setValue(0)
        self.slider.blockSignals(False)
        self.image.setPixmap(QPixmap())
        self.image.setText(text)
        self.counter.setText("")
        self._update_range()

    def append_frames(self, frames: np.ndarray) -> None:
        """Add ``frames`` after those shown; playing goes on through them.
        Frames of another shape than (n, h, w, 3 or 4) are ignored."""
        frames = np.asarray(frames)
        if frames.ndim != 4 or frames.shape[-1] not in (3, 4) or not len(frames):
            self._update_range()
            return
        first = not self._frames
        self._frames.extend(np.ascontiguousarray(frames[..., :3].astype(np.uint8)))
        self._update_range()
        if first:
            self.show_frame(0)
        else:
            self._show_counter(self.slider.value())

    def _update_range(self) -> None:
        n = len(self._frames)
        self.slider.blockSignals(True)
        self.slider.setRange(0, max(0, n - 1))
        self.slider.blockSignals(False)
        self.slider.setEnabled(n > 1)
        self.play_button.setEnabled(n > 1)

    def set_fps(self, fps: float) -> None:
        """Play at ``fps`` frames a second (a video's own rate)."""
        self._timer.setInterval(max(1, round(1000 / max(fps, 0.1))))

    def is_playing(self) -> bool:
        return self.play_button.isChecked()

    def set_playing(self, playing: bool) -> None:
        """Play or pause, as the play button does (no effect on fewer than
        two frames)."""
        self.play_button.setChecked(playing and len(self._frames) > 1)

    def frame_count(self) -> int:
        return len(self._frames)

    def current(self) -> int:
        return self.slider.value()

    def frame(self, index: int) -> np.ndarray:
        """Frame ``index`` as held, (h, w, 3)."""
        return self._frames[index]

    def show_frame(self, index: int) -> None:
        if not len(self._frames):
            return
        index = int(np.clip(index, 0, len(self._frames) - 1))
        frame = self._frames[index]
        h, w, _ = frame.shape
        qimage = QImage(frame.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
        pixmap = QPixmap.fromImage(qimage)
        size = self.image.size()
        self.image.setPixmap(
            pixmap.scaled(
                size,
                Qt.AspectRatioMode.KeepAspectRatio,
                Qt.TransformationMode.FastTransformation,
            )
        )
        self._show_counter(index)
        if self.slider.value() != index:
            self.slider.setValue(index)
        self.frame_changed.emit(index)

    def _show_counter(self, index: int) -> None:
        self.counter.setText(f"{index + 1} / {len(self._frames)}")

    def _on_slider_value_changed(self, value: int) -> None:
        self.show_frame(value)

    def _on_play_toggled(self, playing: bool) -> None:
        self.play_button.setIcon(self._icons[playing])
        self.play_button.setToolTip("Pause" if playing else "Play")
        if playing:
            self._timer.start()
        else:
            self._timer.stop()

    def _on_timer_timeout(self) -> None:
        n = len(self._frames)
        if n:
            self.show_frame((self.slider.value() + 1) % n)

    def resizeEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().resizeEvent(event)
        if len(self._frames):
            self.show_frame(self.slider.value())
