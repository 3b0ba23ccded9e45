"""Plays a video file (MP4, GIF: what ffmpeg reads) in the window.

Qt's widgets cannot play a video without QtMultimedia, which this install
lacks; the frames are decoded instead by the ffmpeg that imageio-ffmpeg
bundles, in a worker thread (:class:`_Decoder`), and handed back by signal in
parts, so the first frames play while the rest decode and the GUI never
waits. They are shown by :class:`~widgets.frame_viewer.FrameViewer` (play and
pause, a position slider, a frame counter). Decoded frames are raw pixels:
a long or large video is scaled down to fit :data:`BUDGET_BYTES`, and what
would not fit even so is left out, said in the status line. A file that is
missing, incomplete or not a video is one sentence there, never a traceback.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal
from PySide6.QtGui import QHideEvent, QShowEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from widgets.frame_viewer import FrameViewer

BUDGET_BYTES = 192 * 2**20
"""Decoded frames a player holds, about: a longer video is scaled down to
fit (1,000 frames of 600 x 400 become 316 x 210)."""
MAX_WIDTH = 480
"""Widest frame decoded, in pixels: the player is small, and the frames it
holds are raw."""
GUESSED_FRAMES = 1000
"""Frames a video is taken to hold when its header gives no duration."""
PART_FRAMES = 16
"""Frames handed to the GUI thread at a time (the first alone, at once)."""
PART_SECONDS = 0.1
"""...or fewer, when decoding them took longer than this."""
QUIT_WAIT_MS = 2000
"""How long the application's quit waits for a decoder told to stop."""


def _not_our_scaling(record: logging.LogRecord) -> bool:
    """imageio-ffmpeg warns of every frame size it reads that is not the
    file's: here the player asked for it."""
    return not str(record.msg).startswith("The frame size for reading")


class _Reaper(QObject):
    """Keeps every decoder whose thread runs alive until it ends, whatever
    became of the player that started it (a QThread destroyed while it runs
    aborts the process), and stops them all when the application quits."""

    def __init__(self) -> None:
        super().__init__()
        self.running: set[_Decoder] = set()
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop_all)

    def keep(self, decoder: _Decoder) -> None:
        self.running.add(decoder)
        decoder.finished.connect(self._on_decoder_finished)

    def stop_all(self) -> None:
        for decoder in list(self.running):
            decoder.stop()
        for decoder in list(self.running):
            decoder.wait(QUIT_WAIT_MS)

    def _on_decoder_finished(self) -> None:
        decoder = self.sender()
        if isinstance(decoder, _Decoder):
            # ``finished`` is emitted just before the thread's last
            # instructions: this wait is that long, no more.
            decoder.wait()
            self.running.discard(decoder)
            decoder.deleteLater()


_reaper: _Reaper | None = None


def _keep(decoder: _Decoder) -> None:
    global _reaper
    if _reaper is None:
        _reaper = _Reaper()  # in the GUI thread, where its slot then runs
    _reaper.keep(decoder)


def decoded_width(size: tuple[int, int], frames: int, budget: int, widest: int) -> int:
    """The (even) width to decode frames of ``size`` at, so that ``frames``
    of them take at most ``budget`` bytes and none is wider than ``widest``."""
    width, height = size
    scale = min(1.0, widest / width, math.sqrt(budget / (frames * width * height * 3)))
    return max(2, int(width * scale) // 2 * 2)


class _Decoder(QThread):
    """Decodes one file in its own thread; ``stop`` ends it at the next
    frame. Signals: ``meta_read(fps)``, then ``frames_decoded(array)`` per
    part (n, h, w, 3), then ``failed(sentence)`` or ``partly(sentence)``
    (frames were shown, but not all the file's) if it did not end well."""

    meta_read = Signal(float)
    frames_decoded = Signal(object)
    failed = Signal(str)
    partly = Signal(str)

    def __init__(self, path: Path, budget: int, widest: int) -> None:
        super().__init__()
        self.path, self.budget, self.widest = path, budget, widest
        self._stopping = threading.Event()
        self.decoded = 0

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        name = self.path.name
        try:
            import imageio_ffmpeg
        except ImportError:
            self.failed.emit("Videos cannot be played here: imageio-ffmpeg is missing.")
            return
        ffmpeg_log = logging.getLogger("imageio_ffmpeg")
        if _not_our_scaling not in ffmpeg_log.filters:
            ffmpeg_log.addFilter(_not_our_scaling)
        if not self.path.is_file():
            self.failed.emit(f"{name} cannot be played: the file does not exist.")
            return
        try:
            self._decode(imageio_ffmpeg)
        except (OSError, RuntimeError, ValueError, KeyError, StopIteration):
            # ffmpeg's own words are a screenful of its log: said shortly.
            if self.decoded:
                self.partly.emit(
                    f"{name} ends early: only its first {self.decoded} frames "
                    "could be read."
                )
            else:
                self.failed.emit(
                    f"{name} cannot be played: it is incomplete or not a video."
                )
            return
        if not self.decoded and not self._stopping.is_set():
            self.failed.emit(f"{name} cannot be played: it holds no frames.")

    def _decode(self, ffmpeg: Any) -> None:
        reader = ffmpeg.read_frames(str(self.path))
        try:
            meta = next(reader)
            width, height = meta["size"]
            fps = float(meta.get("fps") or 0) or 30.0
            duration = float(meta.get("duration") or 0)
            expected = max(1, round(duration * fps)) if duration else GUESSED_FRAMES
            wanted = decoded_width((width, height), expected, self.budget, self.widest)
            if wanted != width:
                reader.close()
                reader = ffmpeg.read_frames(
                    str(self.path), output_params=["-vf", f"scale={wanted}:-2"]
                )
                meta = next(reader)
                width, height = meta["size"]
            self.meta_read.emit(fps)
            most = max(1, self.budget // (width * height * 3))
            for part in self._parts(reader, (height, width, 3), most):
                self.frames_decoded.emit(part)
                self.decoded += len(part)
            if self.decoded >= most and not self._stopping.is_set():
                self.partly.emit(
                    f"{self.path.name} is long: its first {self.decoded} frames "
                    "are shown."
                )
        finally:
            reader.close()  # ends ffmpeg

    def _parts(
        self, reader: Iterator[bytes], shape: tuple[int, int, int], most: int
    ) -> Iterator[np.ndarray]:
        part: list[np.ndarray] = []
        since = time.monotonic()
        wanted = 1  # the first frame shows at once
        for count, data in enumerate(reader, 1):
            if self._stopping.is_set():
                return
            part.append(np.frombuffer(data, np.uint8).reshape(shape))
            if len(part) >= wanted or time.monotonic() - since > PART_SECONDS:
                yield np.stack(part)
                part, since, wanted = [], time.monotonic(), PART_FRAMES
            if count >= most:
                break
        if part:
            yield np.stack(part)


class VideoPlayer(QWidget):
    """A video file played in place: :meth:`set_video` decodes it off the
    GUI thread and plays it as its frames arrive.

    Signals: ``frame_changed(index)`` when the frame shown changes;
    ``decoding_changed(decoding)`` when decoding starts and when it ends
    (well or not); ``status_changed(text)`` when the line under the picture
    changes (what the video is, or why it cannot play); ``open_requested(path)``
    when the user asks for the video in the desktop's player."""

    frame_changed = Signal(int)
    decoding_changed = Signal(bool)
    status_changed = Signal(str)
    open_requested = Signal(str)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        budget: int = BUDGET_BYTES,
        widest: int = MAX_WIDTH,
        empty_text: str = "No video",
    ) -> None:
        super().__init__(parent)
        self._budget, self._widest, self._empty_text = budget, widest, empty_text
        self._decoder: _Decoder | None = None
        self._path: Path | None = None
        self._autoplay = True
        self._fps = 0.0
        self._resume = False
        """Playing when hidden: plays again when shown (a hidden player's
        timer drew 50 frames a second for no one)."""
        self._problem = ""
        """Why the video shown is not all there (a failure, frames left out)."""
        self.viewer = FrameViewer()
        self.viewer.frame_changed.connect(self.frame_changed)
        self.status = QLabel(wordWrap=True)
        self.status.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.open_button = QPushButton("Open video")
        self.open_button.setToolTip("Open the video in the desktop's video player")
        self.open_button.clicked.connect(self._on_open_button_clicked)
        row = QHBoxLayout()
        row.addWidget(self.status, 1)
        row.addWidget(self.open_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.viewer, 1)
        layout.addLayout(row)
        self.clear()

    # ------------------------------------------------------------ queries
    def video(self) -> Path | None:
        """The file shown (None: none)."""
        return self._path

    def is_decoding(self) -> bool:
        return self._decoder is not None

    def status_text(self) -> str:
        return self.status.text()

    # ------------------------------------------------------------ actions
    def set_video(self, path: str | Path, autoplay: bool = True) -> None:
        """Show ``path``: its first frame as soon as it is decoded, playing
        from there when ``autoplay``."""
        was_decoding = self._drop_decoder()
        self._path = Path(path)
        self._autoplay = autoplay
        self._fps, self._problem, self._resume = 0.0, "", False
        self.viewer.clear("Decoding…")
        self.open_button.setEnabled(True)
        self._set_status(f"{self._path.name}: decoding…")
        decoder = _Decoder(self._path, self._budget, self._widest)
        decoder.meta_read.connect(self._on_decoder_meta_read)
        decoder.frames_decoded.connect(self._on_decoder_frames_decoded)
        decoder.failed.connect(self._on_decoder_failed)
        decoder.partly.connect(self._on_decoder_partly)
        decoder.finished.connect(self._on_decoder_finished)
        _keep(decoder)
        self._decoder = decoder
        decoder.start()
        if not was_decoding:
            self.decoding_changed.emit(True)

    def clear(self, text: str | None = None) -> None:
        """Show no video: ``text`` (the empty text by default) in its place."""
        if self._drop_decoder():
            self.decoding_changed.emit(False)
        self._path, self._resume = None, False
        self.viewer.clear(text or self._empty_text)
        self.open_button.setEnabled(False)
        self._set_status("")

    def set_playing(self, playing: bool) -> None:
        self.viewer.set_playing(playing)

    # ------------------------------------------------------------ decoder
    def _drop_decoder(self) -> bool:
        """Stop decoding (what the decoder still sends is ignored: not ours
        any more); whether it was decoding."""
        decoder, self._decoder = self._decoder, None
        if decoder is not None:
            decoder.stop()
        return decoder is not None

    def _ours(self) -> bool:
        return self._decoder is not None and self.sender() is self._decoder

    def _on_decoder_meta_read(self, fps: float) -> None:
        if self._ours():
            self.viewer.set_fps(fps)
            self._fps = fps

    def _on_decoder_frames_decoded(self, frames: np.ndarray) -> None:
        if not self._ours():
            return
        self.viewer.append_frames(frames)
        if self._autoplay and self.viewer.frame_count() > 1:
            # Once, when there is something to play: a pause the user
            # chose while the rest decodes stays.
            self._autoplay = False
            if self.isVisible():
                self.viewer.set_playing(True)
            else:
                self._resume = True

    def _on_decoder_failed(self, sentence: str) -> None:
        if self._ours():
            self._problem = sentence
            self.viewer.clear(sentence)
            self._set_status(sentence)

    def _on_decoder_partly(self, sentence: str) -> None:
        if self._ours():
            self._problem = sentence
            self._set_status(sentence)

    def _on_decoder_finished(self) -> None:
        if not self._ours() or self._path is None:
            return
        self._decoder = None
        if not self._problem:
            self._set_status(
                f"{self._path.name}: {self.viewer.frame_count()} frames at "
                f"{self._fps:.3g} frames/s"
            )
        self.decoding_changed.emit(False)

    def hideEvent(self, event: QHideEvent) -> None:
        self._resume = self._resume or self.viewer.is_playing()
        self.viewer.set_playing(False)
        super().hideEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        if self._resume:
            self._resume = False
            self.viewer.set_playing(True)

    def _set_status(self, text: str) -> None:
        if text != self.status.text():
            self.status.setText(text)
            self.status.setToolTip(text)
            self.status_changed.emit(text)

    def _on_open_button_clicked(self) -> None:
        if self._path is not None:
            self.open_requested.emit(str(self._path))
