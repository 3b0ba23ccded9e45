"""The designer's Preview tab: play a few episodes of the env being edited
and show what happened.

The controls choose the policy (random, or one of the project's SB3
policies trained on this env) and the number of episodes; the results are
the return distribution, mean episode length and success rate, the frames
of the first episode for envs that render (beside them, for an env whose
observations are images, the agent's view: the frames stacked in the
observation at that step, oldest first), and a step-by-step trace (action,
reward broken down by rule, status, observation) of the first episode. The
panel only shows: the workspace turns ``preview_requested`` into an engine
run and hands the results back.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.common import agent_view, show_agent_view
from studio.state.env_preview import load_frames, summary, trace_rows
from widgets.fit import labelled
from widgets.flow_layout import FlowLayout
from widgets.frame_viewer import FrameViewer
from widgets.histogram import Histogram
from widgets.record_table import Column, RecordTable

TRACE_COLUMNS = [
    # Sorting by episode keeps each episode's steps in order.
    Column(
        "Ep",
        lambda r: r["episode"] * 1_000_000 + r["step"],
        display=lambda r: str(r["episode"]),
    ),
    Column("Step", lambda r: r["step"]),
    Column("Action", lambda r: r["action"]),
    Column(
        "Reward",
        lambda r: r["reward"],
        lambda v: f"{v:+.3g}",
        color=lambda r: (
            "#2e9e3e" if r["reward"] > 0 else "#d62728" if r["reward"] < 0 else None
        ),
    ),
    Column("Breakdown", lambda r: r["breakdown"]),
    Column("Status", lambda r: r["status"]),
    Column(
        "Observation",
        lambda r: r["observation"],
        tooltip=lambda r: r["observation_labelled"] or r["observation"],
    ),
]
DEFAULT_EPISODES = 20


class EnvPreviewPanel(QWidget):
    preview_requested = Signal(int, str, int)
    """Episodes to play, the id of the project policy to play them with
    (empty: a random policy, uniform over valid actions), the seed (-1: a
    new one each time)."""
    stop_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.data: dict[str, Any] | None = None
        """The last ``preview.json`` shown."""
        self._stale = False
        self._policy_name = ""
        self.policy_combo = QComboBox()
        self.policy_combo.setMinimumContentsLength(18)
        self.policy_combo.setToolTip(
            "Who acts: a random policy (uniform over the valid actions), or a "
            "policy of this project trained on this environment."
        )
        self.episodes = QSpinBox(minimum=1, maximum=10_000, value=DEFAULT_EPISODES)
        self.episodes.setSuffix(" episodes")
        self.seed = QSpinBox(minimum=-1, maximum=2**31 - 1, value=-1)
        self.seed.setSpecialValueText("new seed")
        self.seed.setPrefix("seed ")
        self.seed.setToolTip(
            "Seed of the episodes and of the random policy. Fix it to compare "
            "edits on the same episodes; 'new seed' draws one each time."
        )
        self.run_button = QPushButton("Run preview")
        self.run_button.setToolTip(
            "Play the environment as it is now in the editor (saved or not) "
            "in the engine."
        )
        self.run_button.clicked.connect(self._on_run_clicked)
        self.stop_button = QPushButton("Stop")
        self.stop_button.clicked.connect(lambda *_: self.stop_requested.emit())
        self.progress = QProgressBar()
        self.progress.setFormat("%v / %m episodes")
        self.progress.setMaximumWidth(220)
        # They wrap onto a second line where the pane is narrow (a strip
        # scrolled Run preview out of a 1024 px screen).
        controls = FlowLayout()
        controls.addWidget(labelled("Policy", self.policy_combo))
        controls.addWidget(self.episodes)
        controls.addWidget(self.seed)
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        controls.addWidget(self.progress)

        self.status_label = QLabel(wordWrap=True)
        self.status_label.setTextFormat(Qt.TextFormat.RichText)
        self.status_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )

        self.histogram = Histogram(title="Return per episode", x_label="return")
        self.frames = FrameViewer()
        self.frames.setToolTip("The first episode, frame by frame.")
        self.frames.hide()  # until an env that renders is previewed
        self.agent_view = agent_view(self.frames)
        """The observation at the frame shown (image envs only)."""
        self.charts = top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.histogram)
        top.addWidget(self.frames)
        top.addWidget(self.agent_view)
        top.setSizes([360, 260, 420])

        self.trace_table = RecordTable(
            TRACE_COLUMNS,
            empty_text="Press Run preview: the first episode's steps appear here.",
        )
        self.trace_table.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.trace_table.view.setWordWrap(False)  # one line per step
        self.trace_table.selection_changed.connect(self._on_trace_selection_changed)
        self.step_detail = QPlainTextEdit(readOnly=True)
        self.step_detail.setPlaceholderText(
            "Choose a step: what a language-model policy reads there, and the "
            "observation feature by feature."
        )
        bottom = QSplitter(Qt.Orientation.Horizontal)
        bottom.addWidget(self.trace_table)
        bottom.addWidget(self.step_detail)
        bottom.setSizes([620, 260])

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(bottom)
        split.setSizes([230, 330])

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(controls)
        layout.addWidget(self.status_label)
        layout.addWidget(split, 1)
        self.set_policies([])
        self.clear()

    # ---------------------------------------------------------------- API
    def set_policies(self, models: Sequence[Mapping[str, Any]]) -> None:
        """The project's policies for this env (records with ``id``,
        ``name``, ``algo``); the current choice is kept when still there."""
        current = self.policy_combo.currentData()
        self.policy_combo.clear()
        self.policy_combo.addItem("Random policy", "")
        for m in models:
            self.policy_combo.addItem(
                f"{m.get('name', m['id'])} ({m.get('algo', '?')})", str(m["id"])
            )
        i = self.policy_combo.findData(current)
        self.policy_combo.setCurrentIndex(max(0, i))
        self.policy_combo.setEnabled(self.policy_combo.count() > 1)

    def selected_policy(self) -> str:
        return str(self.policy_combo.currentData() or "")

    def clear(self) -> None:
        """Forget the results (another env was opened)."""
        self.data = None
        self.set_running(False)
        self.progress.hide()
        self.status_label.setText(
            "<span style='color:gray'>Play a few episodes of this environment "
            "as it is now in the editor, with a random policy or a trained "
            "one.</span>"
        )
        self.histogram.set_values([])
        self.histogram.hide()  # empty axes look broken; back with results
        self.trace_table.set_records([])
        self.step_detail.clear()
        self._set_frames({})
        self._update_charts()

    def set_running(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.stop_button.setEnabled(running)
        self.episodes.setEnabled(not running)
        self.seed.setEnabled(not running)
        if running:
            self.progress.setRange(0, 0)  # busy until the first episode ends
            self.progress.show()
            self.status_label.setText(
                "<span style='color:gray'>Starting the preview in the engine…</span>"
            )

    def set_progress(self, done: int, total: int) -> None:
        self.progress.setRange(0, max(1, total))
        self.progress.setValue(done)
        self.progress.show()
        self.status_label.setText(
            f"<span style='color:gray'>Playing episode "
            f"{min(done + 1, total)} of {total}…</span>"
        )

    def show_error(self, message: str) -> None:
        self.clear()  # results of an earlier spec would read as this one's
        self.status_label.setText(
            "<span style='color:#d62728'><b>The preview failed:</b> "
            f"{html.escape(message)}</span><br><span style='color:gray'>"
            "Your edits are untouched; problems the engine found in the spec "
            "are marked on their fields.</span>"
        )

    def show_result(self, data: dict[str, Any], policy_name: str = "") -> None:
        self.data = data
        self.set_running(False)
        self.progress.hide()
        s = summary(data)
        self.histogram.set_values(s["returns"])
        self.histogram.setVisible(bool(s["returns"]))
        self._show_summary(s, policy_name, stale=False)
        rows = trace_rows(data)
        self.trace_table.set_records(rows)
        if rows:
            self.trace_table.select_keys([rows[0]["id"]])
        else:
            self.step_detail.clear()
        self._set_frames(data, str(data.get("frames_note") or ""))
        self._update_charts()

    def mark_stale(self) -> None:
        """The spec was edited after the results shown were played."""
        if self.data is not None and not self._stale:
            self._show_summary(summary(self.data), self._policy_name, stale=True)

    # ------------------------------------------------------------ helpers
    def _show_summary(self, s: dict[str, Any], policy_name: str, stale: bool) -> None:
        self._stale = stale
        self._policy_name = policy_name
        if not s["episodes"]:
            self.status_label.setText("No episode was played.")
            return
        parts = [
            f"<b>{s['episodes']}</b> episodes"
            + (f" with {html.escape(policy_name)}" if policy_name else ""),
            f"return <b>{s['return_mean']:.4g}</b> ± {s['return_std']:.3g} "
            f"(min {s['return_min']:.4g}, max {s['return_max']:.4g})",
            f"mean length <b>{s['length_mean']:.4g}</b> steps",
        ]
        if s["success_rate"] is not None:
            parts.append(f"success rate <b>{s['success_rate']:.0%}</b>")
        if s["seed"] is not None:
            parts.append(f"<span style='color:gray'>seed {s['seed']}</span>")
        text = " · ".join(parts)
        if stale:
            text += (
                " <span style='color:#b8860b'>(edited since: run the preview "
                "again)</span>"
            )
        self.status_label.setText(text)

    def _set_frames(self, data: dict[str, Any], note: str = "") -> None:
        """The frames ``data`` names, and the agent's view of them for an
        image env; else ``note`` (why the env drew none) in their place, or
        no viewer at all."""
        loaded = load_frames(data)
        show_agent_view(self.agent_view, loaded)
        if loaded is not None:
            self.frames.set_frames(loaded.frames)
            self.frames.show()
        else:
            self.frames.clear(note)
            self.frames.setVisible(bool(note))

    def _update_charts(self) -> None:
        """The chart row only takes room when it has something to show."""
        self.charts.setVisible(
            not (
                self.histogram.isHidden()
                and self.frames.isHidden()
                and self.agent_view.isHidden()
            )
        )

    def _on_run_clicked(self) -> None:
        self.preview_requested.emit(
            self.episodes.value(), self.selected_policy(), self.seed.value()
        )

    def _on_trace_selection_changed(self, keys: list[str]) -> None:
        rows = {r["id"]: r for r in self.trace_table.model.records}
        row = rows.get(keys[0]) if keys else None
        if row is None:
            self.step_detail.clear()
            return
        if row["episode"] == 1:
            # The frames are the first episode's: the reset's, then one a
            # step; a row shows the observation before its step's action.
            self.frames.show_frame(row["step"] - 1)
        parts = [
            f"Episode {row['episode']}, step {row['step']}: {row['action']} → "
            f"reward {row['reward']:+.4g}"
            + (f" ({row['breakdown']})" if row["breakdown"] else "")
        ]
        if row["text"]:
            # The env renders its text after the step: what comes next.
            parts.append(f"After it, a language-model policy reads:\n{row['text']}")
        parts.append(
            "Observation before the action:\n"
            + (row["observation_labelled"] or row["observation"])
        )
        self.step_detail.setPlainText("\n\n".join(parts))
