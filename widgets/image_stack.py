"""Shows images stacked on the channel axis, as a frame-stacking agent is
given them: each frame of an (h, w, c) array drawn side by side, oldest
first, scaled up pixel for pixel (an 84 px frame is small, and smoothing
would hide what the agent sees), each labelled ``t-3`` … ``t``.

A sequence of such stacks, (n, h, w, c), is held; :meth:`show_stack` picks
the one shown, so the view follows another's slider (a frame viewer's
``frame_changed``)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRect, QSize, Qt
from PySide6.QtGui import QColor, QImage, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

GAP = 6
"""Pixels between two frames."""


def stack_labels(count: int) -> list[str]:
    """``t-3``, ``t-2``, ``t-1``, ``t`` for four frames, oldest first."""
    return [f"t-{count - 1 - i}" if i < count - 1 else "t" for i in range(count)]


class ImageStackView(QWidget):
    """The frames of one stack side by side under ``title`` (and the
    caption the stacks came with); empty (a sentence) without."""

    def __init__(self, title: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.caption = ""
        self._stacks = np.zeros((0, 1, 1, 1), np.uint8)
        self._channels = 1
        self._index = 0
        self._images: list[QImage] = []
        self._arrays: list[np.ndarray] = []
        self._empty_text = "No observations"
        self.setMinimumSize(120, 60)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)

    def set_stacks(
        self,
        stacks: np.ndarray | None,
        channels: int = 1,
        caption: str = "",
        empty_text: str = "",
    ) -> None:
        """Hold ``stacks`` (n, h, w, c) uint8, whose frames have ``channels``
        channels each (1 grey, 3 RGB; any other count draws each channel
        grey), and show the first, ``caption`` after the title (what the
        stack is); none: ``empty_text`` in their place."""
        self.caption = caption
        stacks = np.zeros((0, 1, 1, 1), np.uint8) if stacks is None else stacks
        stacks = np.asarray(stacks)
        if stacks.ndim == 3:  # (n, h, w): one grey frame a step
            stacks = stacks[..., None]
        if stacks.ndim != 4 or not len(stacks):
            stacks = np.zeros((0, 1, 1, 1), np.uint8)
        self._stacks = stacks.astype(np.uint8, copy=False)
        self._channels = channels if channels in (1, 3) else 1
        if self._stacks.shape[-1] % self._channels:
            self._channels = 1
        self._empty_text = empty_text or "No observations"
        self._index = -1
        self.show_stack(0)

    def stack_count(self) -> int:
        return len(self._stacks)

    def current(self) -> int:
        """The stack shown (0 when there is none)."""
        return max(0, self._index)

    def show_stack(self, index: int) -> None:
        """Show stack ``index`` (clipped to those held)."""
        n = len(self._stacks)
        index = int(np.clip(index, 0, max(0, n - 1)))
        if index == self._index:
            return
        self._index = index
        self._arrays = []
        if n:
            stack = self._stacks[index]
            c = self._channels
            self._arrays = [
                np.ascontiguousarray(stack[..., i : i + c] if c == 3 else stack[..., i])
                for i in range(0, stack.shape[-1], c)
            ]
        self._images = [_qimage(a) for a in self._arrays]
        self.update()

    def images(self) -> list[np.ndarray]:
        """The frames shown, oldest first: (h, w) grey or (h, w, 3) RGB."""
        return list(self._arrays)

    def labels(self) -> list[str]:
        return stack_labels(len(self._arrays))

    def tile_rect(self, i: int) -> QRect:
        """Where frame ``i`` is drawn, in the widget's pixels."""
        h, w = self._arrays[0].shape[:2]
        n = len(self._arrays)
        line = self.fontMetrics().height() + 4
        head = self._head_height()
        room_w = max(1, self.width() - GAP * (n - 1))
        room_h = max(1, self.height() - head - line)
        scale = min(room_w / (n * w), room_h / h)
        # Whole screen pixels per frame pixel from twice the size (every
        # frame pixel the same size, as the agent sees them, losing at most
        # a third of the room); below, all the room.
        if scale >= 2:
            scale = float(int(scale))
        tw, th = max(1, int(w * scale)), max(1, int(h * scale))
        left = (self.width() - (n * tw + GAP * (n - 1))) // 2
        top = head + max(0, (room_h - th) // 2)
        return QRect(left + i * (tw + GAP), top, tw, th)

    def heading(self) -> str:
        """The line drawn above the frames: the title and the caption."""
        return " · ".join(t for t in (self.title, self.caption) if t)

    def _head_height(self) -> int:
        return self.fontMetrics().height() + 6 if self.heading() else 0

    def sizeHint(self) -> QSize:
        n = max(1, len(self._arrays))
        h, w = self._arrays[0].shape[:2] if self._arrays else (84, 84)
        line = self.fontMetrics().height() + 4
        return QSize(n * w * 2 + GAP * (n - 1), h * 2 + line + self._head_height())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#202020"))
        painter.setPen(QColor("#bbbbbb"))
        if self.heading():
            head = QRect(4, 2, self.width() - 8, self._head_height())
            painter.drawText(
                head,
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop,
                self.fontMetrics().elidedText(
                    self.heading(), Qt.TextElideMode.ElideRight, head.width()
                ),
            )
        if not self._images:
            painter.drawText(
                self.rect(), Qt.AlignmentFlag.AlignCenter, self._empty_text
            )
            return
        # No SmoothPixmapTransform: scaled nearest-neighbour, pixel for pixel.
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        for i, (image, label) in enumerate(
            zip(self._images, self.labels(), strict=True)
        ):
            rect = self.tile_rect(i)
            painter.drawImage(rect, image)
            text = QRect(rect.left(), rect.bottom() + 2, rect.width(), 999)
            painter.drawText(
                text, Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, label
            )


def _qimage(frame: np.ndarray) -> QImage:
    """``frame`` (h, w) grey or (h, w, 3) RGB as a QImage of its own."""
    h, w = frame.shape[:2]
    if frame.ndim == 2:
        return QImage(frame.data, w, h, w, QImage.Format.Format_Grayscale8).copy()
    return QImage(frame.data, w, h, 3 * w, QImage.Format.Format_RGB888).copy()
