"""The run page's Videos tab: a training run's evaluation videos
(``videos/eval-<step>.mp4``, one per evaluation when the run asks for them),
newest first, each with its step and the evaluation's mean reward at that
step from the run's metrics; the one selected plays in place
(:class:`~widgets.video_player.VideoPlayer`) and opens in the desktop's
player on request.

The list is read from the run's folder by :meth:`RunVideosView.refresh`,
which the workspace calls when the selection changes, while the run trains
(its one-second tick) and when an evaluation's reward arrives: a scan of one
small folder, and the table is touched only when something changed.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QHBoxLayout, QSplitter, QWidget

from engine import contract
from studio.session import EVAL_REWARD
from studio.state.metric_store import MetricStore
from widgets.record_table import Column, RecordTable
from widgets.video_player import VideoPlayer

NO_VIDEOS = (
    "This run keeps no evaluation videos. Set “Video per evaluation” in a "
    "run's settings to record one after each evaluation."
)
PICK = "Select a video in the list to play it."

VIDEO_COLUMNS = [
    Column("Step", lambda r: r["step"], lambda v: f"{v:,}"),
    Column(
        "Mean reward",
        lambda r: float("-inf") if r["reward"] is None else r["reward"],
        display=lambda r: "" if r["reward"] is None else f"{r['reward']:.4g}",
        tooltip=lambda r: "The evaluation's mean reward at this step",
    ),
]


def eval_videos(run_dir: str | Path) -> list[tuple[int, Path]]:
    """The run's whole evaluation videos as ``(step, path)``, newest first
    (none: the run keeps none, or its folder cannot be read)."""
    folder = Path(run_dir) / contract.VIDEOS_FOLDER
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.is_file()]
    except OSError:
        return []
    found = [(contract.eval_video_step(name), folder / name) for name in names]
    return sorted(
        ((step, path) for step, path in found if step is not None), reverse=True
    )


def video_rows(
    run_id: str, run_dir: str | Path, store: MetricStore
) -> list[dict[str, Any]]:
    """One record a video: its step, the evaluation's mean reward at that
    step when the run's metrics have it (None otherwise), its path."""
    steps, _times, values = store.series(run_id, EVAL_REWARD)
    rewards = dict(zip(steps.astype(np.int64).tolist(), values.tolist(), strict=True))
    return [
        {"id": path.name, "step": step, "reward": rewards.get(step), "path": str(path)}
        for step, path in eval_videos(run_dir)
    ]


class RunVideosView(QWidget):
    """The selected run's evaluation videos beside the player."""

    def __init__(self, store: MetricStore, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._store = store
        self._run: dict[str, Any] | None = None
        self._rows: list[dict[str, Any]] = []
        self.open_url = QDesktopServices.openUrl
        """Opens a video in the desktop's player; tests replace it."""
        self.table = RecordTable(VIDEO_COLUMNS, empty_text=NO_VIDEOS)
        self.table.view.setObjectName("videos")
        self.table.view.sortByColumn(0, Qt.SortOrder.DescendingOrder)  # newest first
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.player = VideoPlayer(empty_text=PICK)
        self.player.open_requested.connect(self._on_player_open_requested)
        split = QSplitter()
        split.addWidget(self.table)
        split.addWidget(self.player)
        split.setStretchFactor(1, 1)
        split.setSizes([220, 500])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def rows(self) -> list[dict[str, Any]]:
        """The videos listed, newest first."""
        return list(self._rows)

    def show_run(self, run: dict[str, Any] | None) -> None:
        """List ``run``'s videos (None: nothing); another run than the one
        shown stops the video playing."""
        if (run or {}).get("id") != (self._run or {}).get("id"):
            self._rows = []
            self.table.set_records([])
            self.player.clear(PICK)
        self._run = run
        self.refresh()

    def refresh(self) -> bool:
        """Read the shown run's videos and rewards again; whether the list
        changed."""
        run = self._run
        rows = (
            video_rows(run["id"], run["run_dir"], self._store)
            if run and run.get("run_dir")
            else []
        )
        if rows == self._rows:
            return False
        self._rows = rows
        self.table.set_records(rows)
        return True

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        rows = [r for r in self._rows if r["id"] in keys]
        if not rows:
            return  # the list refreshed without it: what plays goes on
        path = Path(rows[0]["path"])
        if path != self.player.video():  # a refresh re-selects the same row
            self.player.set_video(path)

    def _on_player_open_requested(self, path: str) -> None:
        self.open_url(QUrl.fromLocalFile(path))
