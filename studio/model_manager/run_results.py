"""The Models workspace's Evaluate / Play tab: what an evaluation found (its
returns, lengths and success rate), the episode played (its step trace
beside its frames and, for an env whose observations are images, the
agent's view of each frame), and a recorded video, played here by the studio's one
video player (:class:`~widgets.video_player.VideoPlayer`, an MP4 and a GIF
alike: QMovie played only GIFs, without a slider or pause) and opened in the
desktop's player on request."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QLabel, QSplitter, QTextBrowser, QVBoxLayout, QWidget

from engine import contract
from studio.common import agent_view, show_agent_view
from studio.state.env_preview import load_frames
from widgets.frame_viewer import FrameViewer
from widgets.record_table import Column, RecordTable
from widgets.video_player import VideoPlayer

TRACE_COLUMNS = [
    Column("Step", lambda r: r["step"]),
    Column("Action", lambda r: r["action"]),
    Column("Reward", lambda r: r["reward"], lambda v: f"{v:+.3g}"),
    Column("Breakdown", lambda r: r["breakdown"]),
    Column("Status", lambda r: r["status"]),
    Column("Observation", lambda r: r["observation"]),
]


def short(value: Any, limit: int = 60) -> str:
    """``value`` as text of at most ``limit`` characters (lists as numbers)."""
    text = (
        ", ".join(f"{v:.3g}" for v in value) if isinstance(value, list) else str(value)
    )
    return text if len(text) <= limit else text[: limit - 1] + "…"


def play_rows(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows of the step trace of a played episode (``preview.json``)."""
    names = data.get("action_names") or []
    rows = []
    for i, step in enumerate(data.get("trace") or []):
        action = step.get("action_name") or step.get("action")
        if step.get("action_name") is None and isinstance(action, int) and names:
            action = names[action] if action < len(names) else action
        breakdown = step.get("reward_breakdown") or {}
        rows.append(
            {
                "id": str(i),
                "step": step.get("step", i + 1),
                "action": short(action, 30),
                "reward": float(step.get("reward") or 0.0),
                "breakdown": ", ".join(
                    f"{k} {v:+.3g}"
                    for k, v in breakdown.items()
                    if isinstance(v, int | float)
                ),
                "status": "terminated"
                if step.get("terminated")
                else ("truncated" if step.get("truncated") else "")
                + (f" {step['status']}" if step.get("status") else ""),
                "observation": short(step.get("observation"), 80),
            }
        )
    return rows


PLAY_HINT = "Press Play to roll the policy out."
PLAYING = "Playing an episode in the engine…"


class RunResultsPane(QWidget):
    """The result of the last evaluation or episode played."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result_label = QLabel(wordWrap=True, alignment=Qt.AlignmentFlag.AlignTop)
        self.result_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.frames = FrameViewer()
        self.trace_table = RecordTable(TRACE_COLUMNS, empty_text=PLAY_HINT)
        # The episode from its first step (a view sorts descending at first).
        self.trace_table.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.trace_table.selection_changed.connect(self._on_trace_selection_changed)
        play_split = QSplitter(Qt.Orientation.Horizontal)
        play_split.addWidget(self.trace_table)
        play_split.addWidget(self.frames)
        self.agent_view = agent_view(self.frames)
        """The observation at the frame shown (image envs only)."""
        play_split.addWidget(self.agent_view)
        play_split.setSizes([520, 300, 300])
        self.frames.hide()  # until an episode with frames is played
        self.result_label.linkActivated.connect(self._on_result_label_link_activated)
        self.open_url = QDesktopServices.openUrl
        """Opens a video or folder the result names; tests replace it."""
        self.video = VideoPlayer()
        """A recorded video, playing (hidden otherwise)."""
        self.video.open_requested.connect(self._on_video_open_requested)
        self.video.hide()
        self.card = QTextBrowser()
        """A pushed agent's model card, rendered from its Markdown."""
        self.card.setOpenExternalLinks(False)
        self.card.setOpenLinks(False)
        self.card.hide()
        layout = QVBoxLayout(self)
        layout.addWidget(self.result_label)
        layout.addWidget(self.video, 1)
        layout.addWidget(self.card, 1)
        layout.addWidget(play_split, 1)
        self._play_split = play_split

    def show_running(self, title: str, playing: bool = False) -> None:
        """A run of ``title`` started; ``playing``: an episode is being
        played, so the last one's trace gives way (no "Press Play" then)."""
        self.result_label.setText(f"<i>{title} running in the engine…</i>")
        if playing:
            self.trace_table.set_records([])
            self.trace_table.set_empty_text(PLAYING)

    def show_failed(self, title: str, status: str, reason: str) -> None:
        self.trace_table.set_empty_text(PLAY_HINT)
        self.result_label.setText(
            f"<span style='color:#d62728'>{title} {status}: "
            f"{html.escape(reason)}</span>"
        )

    def show_video(self, summary: dict[str, Any]) -> None:
        """A recording's summary (``rl.record``): what it holds, a link to
        its folder, and the video playing in place."""
        self._stop_video()
        path = Path(str(summary.get("file") or ""))
        if not path.is_file():
            self.result_label.setText("The recording wrote no video.")
            return
        returns = ", ".join(f"{r:.4g}" for r in summary.get("returns") or [])
        folder = QUrl.fromLocalFile(str(path.parent)).toString()
        self.result_label.setText(
            f"<b>Video</b> {html.escape(path.name)}: {summary.get('frames', 0)} "
            f"frames, {summary.get('seconds', 0):.1f} s at {summary.get('fps', 0)} "
            f"frames/s, {summary.get('width', 0)} x {summary.get('height', 0)}; "
            f"returns {html.escape(returns)}<br><a href='{folder}'>Show in folder</a>"
        )
        self._play_split.hide()
        self.video.show()
        self.video.set_video(path)

    def show_card(self, summary: dict[str, Any]) -> None:
        """A push's summary (``rl.hub_push``): where it went and the model
        card it uploaded, rendered (its YAML metadata shown as a block)."""
        self._stop_video()
        folder = Path(str(summary.get("folder") or ""))
        readme = folder / "README.md"
        url = str(summary.get("url") or "")
        self.result_label.setText(
            f"<b>Pushed</b> {html.escape(str(summary.get('repo_id', '')))} at "
            f"{html.escape(str(summary.get('commit', ''))[:12])}: mean reward "
            f"<b>{float(summary.get('mean_reward') or 0):.2f}</b> ± "
            f"{float(summary.get('std_reward') or 0):.2f} over "
            f"{summary.get('n_eval_episodes', 0)} episodes"
            + (f"<br><a href='{html.escape(url)}'>Open on the Hub</a>" if url else "")
        )
        if not readme.is_file():
            return
        text = readme.read_text(encoding="utf-8")
        if text.startswith("---\n"):
            # Markdown has no front matter: the metadata shows as code, last.
            meta, _, body = text[4:].partition("\n---\n")
            text = f"{body}\n\n## Metadata\n\n```yaml\n{meta}\n```\n"
        self.card.setMarkdown(text)
        self._play_split.hide()
        self.card.show()

    def _stop_video(self) -> None:
        self.video.clear()
        self.video.hide()
        self.card.hide()
        self._play_split.show()

    def _on_result_label_link_activated(self, link: str) -> None:
        self.open_url(QUrl(link))

    def _on_video_open_requested(self, path: str) -> None:
        self.open_url(QUrl.fromLocalFile(path))

    def show_evaluation(self, data: dict[str, Any] | None) -> None:
        """What an evaluation's ``preview.json`` says (None: it wrote none)."""
        if data is None:
            self.result_label.setText("The evaluation wrote no results.")
            return
        eps = data.get("episodes") or []
        returns = [e["return"] for e in eps]
        lengths = [e["length"] for e in eps]
        success = data.get("success_rate")
        env_id = str(data.get("env_id") or "")
        # Only designed envs say what success is; elsewhere 0 % would mislead.
        designed = contract.env_name(env_id) is not None or env_id.endswith(
            contract.SPEC_SUFFIX
        )
        self.result_label.setText(
            f"<b>Evaluation</b> on {html.escape(str(data.get('env_id')))}: "
            f"{len(eps)} episodes<br>"
            f"mean return <b>{np.mean(returns):.4g}</b> ± {np.std(returns):.3g} "
            f"(min {min(returns, default=0):.4g}, max {max(returns, default=0):.4g}),"
            f" mean length {np.mean(lengths):.4g}"
            + (
                f", success rate {success:.0%}"
                if success is not None and designed
                else ""
            )
        )
        # The trace and frames of an episode played alongside stay: an
        # evaluation has no single episode to show in their place.

    def show_play(self, data: dict[str, Any] | None) -> None:
        """The episode a Play run's ``preview.json`` holds (None: none)."""
        self._stop_video()
        self.trace_table.set_empty_text(PLAY_HINT)
        if data is None:
            self.result_label.setText("The episode wrote no results.")
            return
        self.trace_table.set_records(play_rows(data))
        ep = (data.get("episodes") or [{}])[0]
        note = str(data.get("frames_note") or "")
        self.result_label.setText(
            f"<b>Play</b> on {html.escape(str(data.get('env_id')))}: return "
            f"<b>{ep.get('return', 0):.4g}</b> in {ep.get('length', 0)} steps"
            + (" — success" if ep.get("success") else "")
            + (
                f"<br><span style='color:gray'>{html.escape(note)}</span>"
                if note
                else ""
            )
        )
        loaded = load_frames(data)
        show_agent_view(self.agent_view, loaded)
        if loaded is not None:
            self.frames.set_frames(loaded.frames)
        else:
            # The viewer stays, with the sentence where the picture would be.
            self.frames.clear(note or "This episode has no frames.")
        self.frames.show()

    def _on_trace_selection_changed(self, keys: list[str]) -> None:
        """A step chosen shows the frame before its action (the frames are
        the reset's, then one a step), on the screen and in the agent's
        view."""
        rows = {r["id"]: r for r in self.trace_table.model.records}
        row = rows.get(keys[0]) if keys else None
        if row is not None and self.frames.frame_count():
            self.frames.show_frame(int(row["step"]) - 1)
