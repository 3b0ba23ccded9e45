"""Training: the dashboard of the project's runs.

The training runs on the left, and in a second tab the Activity (previews,
plays, evaluations, exports, downloads, the self-test: every run that does
not train), each under a search box and filters (status, env, algorithm,
kind, tag) that find a run among thousands; the selected runs' live plots
on the right (several
selected runs are overlaid for comparison); progress, ETA and the controls
above, with the retraining readiness strip (recorded trajectories against
the rules ``serve-http`` retrains by, its schedule, the agent's versions);
the run's log, its details (its tags and note, edited there, and its full
record), its evaluation videos (listed with their step and mean reward,
played in place, the list following a live run), the Compare tab (the selected runs'
differing settings and outcomes side by side, their curves overlaid above)
and the Sweep panel (an Optuna study over a run's settings, its trials live)
below. Plots read from the session's ``MetricStore`` and redraw on the
panel's own timer; this workspace only marks series dirty when the store
grows.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from engine.run_compare import run_warnings
from studio.common import (
    STATUS_COLORS,
    JsonPreview,
    enable_with_reason,
    fmt_duration,
    fmt_time,
    open_folder,
    run_duration,
)
from studio.lifetime import subscribe
from studio.session import EVAL_REWARD, Session
from studio.state.job_kinds import JOB_KINDS
from studio.state.project_state import (
    ProjectState,
    activity_label,
    is_training,
    run_algo,
    run_env,
    run_steps,
    run_tags,
)
from studio.training.compare import WARNING_COLOR, CompareView, warnings_text
from studio.training.metric_vocabulary import TRAINING_METRICS
from studio.training.readiness import ReadinessStrip
from studio.training.run_dialog import RunDialog
from studio.training.run_notes import RunNotesEditor
from studio.training.run_videos import RunVideosView
from studio.training.sweep import SweepPanel
from widgets.fit import make_room, room_for_form, scroll_area
from widgets.live_plot import LivePlotPanel
from widgets.log_console import LogConsole
from widgets.record_filter import Facet, RecordFilter
from widgets.record_table import Column, RecordTable
from widgets.run_progress import RunProgressBar
from widgets.theme import follow_palette, theme_name

RESUMABLE = ("stopped", "failed", "interrupted")
VIDEOS_ROOM = 360
"""Height in pixels the Videos tab takes from the charts while chosen."""


def _log_size(run: dict[str, Any]) -> int:
    """Size of the run's ``log.txt`` (-1 when there is none)."""
    if not run.get("run_dir"):
        return -1
    try:
        return (Path(run["run_dir"]) / contract.LOG_FILE).stat().st_size
    except OSError:
        return -1


def _config(run: dict[str, Any]) -> dict[str, Any]:
    config = run.get("config")
    return config if isinstance(config, dict) else {}


def best_reward(run: dict[str, Any]) -> float | None:
    """The run's best evaluation mean reward: from its summary once it ended,
    else the best seen in its metrics so far (while a resumed run trains,
    the better of the two)."""
    summary = (run.get("summary") or {}).get("best_eval_reward")
    live = run.get("best_eval_live")
    values = [v for v in (summary, live) if isinstance(v, int | float)]
    if run.get("status") == "running":
        return float(max(values)) if values else None
    value = summary if isinstance(summary, int | float) else live
    return float(value) if isinstance(value, int | float) else None


def _outcome(run: dict[str, Any]) -> str:
    return str(run.get("reason") or run.get("progress_message") or "")


def _name_tooltip(run: dict[str, Any]) -> str:
    started = fmt_time(run.get("started")) if run.get("started") else "not started"
    tags = run_tags(run)
    tagged = f"\ntags: {', '.join(tags)}" if tags else ""
    return f"{run['id']}\nstarted {started}{tagged}"


def search_text(run: dict[str, Any]) -> list[str]:
    """What the search box looks in: name, kind, env, algorithm, tags, note."""
    return [
        str(run.get("name") or ""),
        str(run.get("id") or ""),
        activity_label(run),
        run_env(run),
        run_algo(run),
        *run_tags(run),
        str(run.get("note") or ""),
    ]


def _status(run: dict[str, Any]) -> list[str]:
    return [str(run.get("status") or "")]


def status_text(run: dict[str, Any]) -> str:
    """The run's status, marked ⚠ when its health watch warned."""
    status = str(run.get("status") or "")
    return f"{status} ⚠" if run_warnings(run) else status


def status_tooltip(run: dict[str, Any]) -> str:
    """Why the run ended, then each health warning."""
    warnings = run_warnings(run) or []
    lines = [str(run.get("reason") or "")]
    if warnings:
        lines.append(f"{warnings_text(warnings)}:")
        lines.extend(f"• {w}" for w in warnings)
    return "\n".join(line for line in lines if line)


def status_color(run: dict[str, Any]) -> str | None:
    if run_warnings(run) and run.get("status") == "completed":
        return WARNING_COLOR
    return STATUS_COLORS.get(run.get("status", ""))


TRAINING_FACETS = [
    Facet("status", _status),
    Facet("env", lambda r: [run_env(r)]),
    Facet("algorithm", lambda r: [run_algo(r)]),
    Facet("kind", lambda r: [activity_label(r)]),
    Facet("tag", run_tags),
]
ACTIVITY_FACETS = [
    Facet("status", _status),
    Facet("kind", lambda r: [activity_label(r)]),
    Facet("tag", run_tags),
]


# Compact enough to fit beside the plots without a scroll bar; when it
# started is in the name's tooltip and the Details tab.
RUN_COLUMNS = [
    Column("Name", lambda r: r.get("name", r["id"]), tooltip=_name_tooltip),
    Column(
        "Status",
        lambda r: r.get("status", ""),
        display=status_text,
        color=status_color,
        tooltip=status_tooltip,
    ),
    Column("Algo", run_algo),
    Column("Env", run_env),
    Column("Steps", run_steps, lambda v: f"{v:,.0f}" if v else ""),
    Column(
        "Best",
        lambda r: best_reward(r) if best_reward(r) is not None else float("-inf"),
        display=lambda r: "" if best_reward(r) is None else f"{best_reward(r):.4g}",
        tooltip=lambda r: "Best evaluation mean reward",
    ),
    Column(
        "Duration",
        lambda r: run_duration(r) or 0,
        lambda v: fmt_duration(v) if v else "",
    ),
]


ACTIVITY_COLUMNS = [
    Column("Name", lambda r: r.get("name", r["id"]), tooltip=_name_tooltip),
    Column("What", activity_label),
    Column(
        "Status",
        lambda r: r.get("status", ""),
        display=status_text,
        color=status_color,
        tooltip=status_tooltip,
    ),
    Column("Started", lambda r: r.get("started") or 0, fmt_time),
    Column(
        "Duration",
        lambda r: run_duration(r) or 0,
        lambda v: fmt_duration(v) if v else "",
    ),
    Column("Outcome", _outcome, tooltip=_outcome),
]


class TrainingWorkspace(QWidget):
    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state: ProjectState = session.state
        self._store = session.metrics

        self._build_lists()
        buttons = self._build_buttons()
        right = self._build_live_view()
        top = QSplitter(Qt.Orientation.Horizontal)
        top.addWidget(self.lists)
        top.addWidget(right)
        # Both sides share what the window gains or loses (the list had a
        # stretch of 0: built in a small window, it stayed ~220 px wide,
        # its names elided, whatever the window's size became).
        top.setStretchFactor(0, 2)
        top.setStretchFactor(1, 3)
        top.setSizes([540, 740])

        self._build_tabs(session)
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(top)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 1)
        split.setSizes([600, 130])
        self._split = split
        self._lent: list[int] = []
        """The splitter's sizes before the Sweep tab took room, while it has."""
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)

        self.readiness = ReadinessStrip(session)

        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.readiness)
        layout.addWidget(split, 1)

        self._log_shown: tuple[str, int] | None = None
        self._changed_runs: dict[str, None] = {}  # ordered set
        self._shown_status: dict[str, Any] = {}  # run id -> status its row shows
        self._run_changes = QTimer(self, singleShot=True, interval=0)
        self._run_changes.timeout.connect(self._on_run_changes_timeout)
        subscribe(self._state, self, self._on_state_changed)
        session.run_log_received.connect(self._on_session_run_log_received)
        # Durations of running runs tick even without events.
        self._tick = QTimer(self, interval=1000)
        self._tick.timeout.connect(self._on_tick_timeout)
        self._tick.start()
        self._on_state_changed("reset", "")

    def _build_lists(self) -> None:
        """The training runs and the activity, each under its search and
        filters, as two tabs."""
        self.table = RecordTable(
            RUN_COLUMNS,
            empty_text="No training runs in this project yet. Press New run to "
            "train an agent.",
        )
        self.activity = RecordTable(
            ACTIVITY_COLUMNS,
            empty_text="Previews, plays, evaluations, exports, downloads and the "
            "self-test (Engine ▸ Run self-test) are listed here.",
        )
        self.table.view.setObjectName("runs")
        self.activity.view.setObjectName("activity")
        for table in (self.table, self.activity):
            table.view.setSelectionMode(table.view.SelectionMode.ExtendedSelection)
            table.selection_changed.connect(self._on_table_selection_changed)
            # Every column as wide as its contents and resizable, the name
            # first and whole: stretched, it took what the others left and
            # showed "PP…" in a narrow list. A narrow list scrolls sideways;
            # the widths the user sets are kept (see layout_memory).
            header = table.view.horizontalHeader()
            header.setMinimumSectionSize(40)
            table.view.setWordWrap(False)
        self.table_filter = RecordFilter(
            TRAINING_FACETS,
            search_text,
            placeholder="Search runs: name, env, algorithm, tags, note",
        )
        self.activity_filter = RecordFilter(
            ACTIVITY_FACETS, search_text, placeholder="Search: name, kind, tags, note"
        )
        self._filters = {
            self.table: self.table_filter,
            self.activity: self.activity_filter,
        }
        self._pages: dict[RecordTable, QWidget] = {}
        self.lists = QTabWidget()
        for table, title in (
            (self.table, "Training runs"),
            (self.activity, "Activity"),
        ):
            self._filters[table].filter_changed.connect(self._on_filter_filter_changed)
            page = QWidget()
            page_layout = QVBoxLayout(page)
            page_layout.setContentsMargins(4, 4, 4, 0)
            page_layout.addWidget(self._filters[table])
            page_layout.addWidget(table, 1)
            self._pages[table] = page
            self.lists.addTab(page, title)
        self.lists.currentChanged.connect(self._on_lists_current_changed)

    def _build_buttons(self) -> QHBoxLayout:
        self.new_button = QPushButton("New run…")
        self.stop_button = QPushButton("Stop")
        self.resume_button = QPushButton("Resume")
        self.duplicate_button = QPushButton("Duplicate with changes…")
        self.folder_button = QPushButton("Open run folder")
        self.compare_button = QPushButton("Compare")
        self.new_button.clicked.connect(self._on_new_clicked)
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.duplicate_button.clicked.connect(self._on_duplicate_clicked)
        self.folder_button.clicked.connect(self._on_folder_clicked)
        self.compare_button.clicked.connect(self._on_compare_clicked)
        buttons = QHBoxLayout()
        for b in (
            self.new_button,
            self.stop_button,
            self.resume_button,
            self.duplicate_button,
            self.folder_button,
            self.compare_button,
        ):
            buttons.addWidget(b)
        buttons.addStretch(1)
        return buttons

    def _build_live_view(self) -> QWidget:
        """The selected run's progress, why it ended, and its live plots."""
        self.progress = RunProgressBar()
        self.reason_label = QLabel(wordWrap=True)
        self.plots = LivePlotPanel(
            vocabulary=TRAINING_METRICS, theme=theme_name(self.palette()), columns=2
        )
        follow_palette(
            self.plots,
            lambda dark: self.plots.set_theme("dark" if dark else "light"),
            now=False,
        )
        self.plots.set_source(self._store.series)
        self.plots.export_requested.connect(self.plots.choose_and_export)
        self._store.add_append_listener(self._on_store_appended)
        self._store.add_keys_listener(self._on_store_appended)

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.progress)
        right_layout.addWidget(self.reason_label)
        right_layout.addWidget(self.plots, 1)
        return right

    def _build_tabs(self, session: Session) -> None:
        """Run log, Details (with tags and note), Videos, Compare and Sweep."""
        self.details = JsonPreview()
        self.notes = RunNotesEditor(session)
        details = QSplitter(Qt.Orientation.Horizontal)
        details.addWidget(self.notes)
        details.addWidget(self.details)
        details.setStretchFactor(1, 1)
        details.setSizes([320, 700])
        self.run_log = LogConsole(max_lines=2000)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.run_log, "Run log")
        self.tabs.addTab(details, "Details")
        self.videos = RunVideosView(self._store)
        self.tabs.addTab(self.videos, "Videos")
        self.compare = CompareView(self.plots.run_color)
        self.tabs.addTab(self.compare, "Compare")
        self.sweep = SweepPanel(session)
        # Its form is taller than the tab's share of the window: the tab
        # takes room from the charts when chosen, and scrolls where the
        # window has not that much.
        self.sweep_tab = scroll_area(self.sweep)
        self.tabs.addTab(self.sweep_tab, "Sweep")

    def _on_tabs_current_changed(self, _index: int) -> None:
        """The Sweep tab borrows the room its form needs from the charts
        and the runs list, the Videos tab room for its player; either gives
        it back when a tab that needs none is chosen."""
        current = self.tabs.currentWidget()
        if current is self.sweep_tab:
            room = room_for_form(self.sweep_tab)
        elif current is self.videos:
            room = VIDEOS_ROOM
        else:
            if self._lent:
                self._split.setSizes(self._lent)
                self._lent = []
            return
        self._lent = self._lent or self._split.sizes()
        frame = self.tabs.height() - current.height()
        make_room(self._split, 1, frame + room)

    # ------------------------------------------------------------ queries
    def current_table(self) -> RecordTable:
        """The list shown: training runs or activity."""
        return (
            self.activity
            if self.lists.currentWidget() is self._pages[self.activity]
            else self.table
        )

    def table_of(self, run: dict[str, Any]) -> RecordTable:
        return self.table if is_training(run) else self.activity

    def show_run(self, run_id: str) -> None:
        """Show the list holding ``run_id`` with it selected (an unknown id,
        a run not started yet: the list of its kind waits for it)."""
        run = self._state.run(run_id)
        if run is not None:
            table = self.table_of(run)
            self.lists.setCurrentWidget(self._pages[table])
            if run_id not in table.shown_keys():
                self._filters[table].clear()  # a run asked for is never hidden
            table.select_keys([run_id])

    def show_activity(self) -> None:
        self.lists.setCurrentWidget(self._pages[self.activity])

    def selected_runs(self) -> list[dict[str, Any]]:
        runs = (self._state.run(k) for k in self.current_table().selected_keys())
        return [r for r in runs if r is not None]

    def selected_run(self) -> dict[str, Any] | None:
        runs = self.selected_runs()
        return runs[0] if runs else None

    # ------------------------------------------------------------- model
    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            runs = list(self._state.runs.values())
            for table in (self.table, self.activity):
                records = [r for r in runs if self.table_of(r) is table]
                self._filters[table].set_records(records)
                table.set_records(records)
                if not table.selected_keys() and records:
                    # The newest run the filter shows.
                    shown = set(table.shown_keys())
                    newest = [r["id"] for r in records if r["id"] in shown][-1:]
                    table.select_keys(newest)
            self._show_selection()
        elif what == "run":
            run = self._state.run(key)
            if run is None:
                return
            if self._shown_status.get(key) == run.get("status"):
                # Progress of a listed run comes many times a second per
                # run, in bursts: its row is brought up to date once per
                # turn of the event loop (each took 5 ms of the GUI thread).
                # A new run or a new status shows at once.
                self._changed_runs[key] = None
                self._run_changes.start()
                return
            self._show_run_change(key)

    def _on_run_changes_timeout(self) -> None:
        changed, self._changed_runs = self._changed_runs, {}
        for key in changed:
            self._show_run_change(key)

    def _show_run_change(self, key: str) -> None:
        run = self._state.run(key)
        if run is not None:
            new_status = self._shown_status.get(key) != run.get("status")
            self._shown_status[key] = run.get("status")
            table = self.table_of(run)
            self._filters[table].add_record(run)
            table.update_record(run)
            if not table.selected_keys():
                table.select_keys([key])  # follow a run the user just started
            elif key == (self.selected_run() or {}).get("id"):
                self._update_controls()
                # Its record as it is now (its tags and note just saved).
                self.details.show_value(run)
                self.notes.show_run(run)
                if new_status:  # a run's last video comes before its end
                    self._show_videos(run)
            if key in self.compare.run_ids():
                self._show_comparison(self.compare.run_ids())

    def _on_store_appended(self, run_id: str, keys: list[str]) -> None:
        if run_id in self.plots.runs():
            self.plots.mark_dirty(run_id, keys)
        if EVAL_REWARD not in keys:  # most appends: no evaluation, no lookup
            return
        current = self.selected_run()
        if current is not None and current["id"] == run_id:
            self._show_videos(current)  # an evaluation: its video follows

    # --------------------------------------------------------- selection
    def _on_table_selection_changed(self, keys: list[str]) -> None:
        if self.sender() is self.current_table():
            self._show_selection()

    def _on_lists_current_changed(self, index: int) -> None:
        self._show_selection()

    def _on_filter_filter_changed(self) -> None:
        for table, bar in self._filters.items():
            if bar is self.sender():
                table.set_filter(bar.predicate())

    def _show_selection(self) -> None:
        runs = self.selected_runs()
        wanted = {r["id"] for r in runs}
        shown = set(self.plots.runs())
        for run_id in shown - wanted:
            self.plots.remove_run(run_id)
        for run in runs:
            self._session.ensure_metrics_loaded(run["id"])
            self.plots.add_run(run["id"], run.get("name") or run["id"])
            if run["id"] not in shown:
                # A run shown already keeps its curves, which the store's
                # listeners keep up to date: declaring its keys again marked
                # every curve for a fetch and redraw on each selection.
                self.plots.add_keys(run["id"], self._store.keys(run["id"]))
        self._update_controls()
        # An open Compare tab follows the selection, as the plots do.
        if self.tabs.currentWidget() is self.compare and len(runs) >= 2:
            self._show_comparison([r["id"] for r in runs])
        current = self.selected_run()
        self.notes.show_run(current)
        self._show_videos(current)
        if current is None:
            self._log_shown = None
            self.run_log.clear()
            self.details.clear()
            return
        self.details.show_value(current)
        # Snapshots come every few seconds while a headless run trains; keep
        # the log (and where the user scrolled it) unless its file changed.
        log_shown = (current["id"], _log_size(current))
        if log_shown != self._log_shown:
            self._log_shown = log_shown
            self.run_log.clear()
            self.run_log.append_timed_lines(self._session.read_run_log(current["id"]))

    def _update_controls(self) -> None:
        run = self.selected_run()
        status = run.get("status") if run else None
        pick = "Select a run in the list first."
        enable_with_reason(
            self.stop_button,
            status == "running",
            "Stop the selected run (it saves a checkpoint and can be resumed).",
            f"The selected run is {status}, not running." if run else pick,
        )
        enable_with_reason(
            self.resume_button,
            status in RESUMABLE,
            "Resume the selected run from its last checkpoint.",
            f"A {status} run cannot be resumed; only a stopped, failed or "
            "interrupted one."
            if run
            else pick,
        )
        enable_with_reason(
            self.duplicate_button,
            run is not None and bool(_config(run)),
            "Start a new run with this run's settings, changed as you like.",
            "The selected run has no saved settings to start from." if run else pick,
        )
        enable_with_reason(
            self.folder_button,
            run is not None,
            "Open the selected run's folder (checkpoints, log, metrics).",
            pick,
        )
        compared = len(self.current_table().selected_keys())
        self.compare_button.setEnabled(compared >= 2)
        self.compare_button.setToolTip(
            "Compare the selected runs: differing settings, outcomes, curves"
            if compared >= 2
            else "Select two or more runs (Ctrl- or Shift-click) to compare them"
        )
        if run is None:
            self.progress.set_state("queued")
            self.progress.set_progress(0, None)
            self.reason_label.clear()
            return
        if status in (
            "queued",
            "running",
            "completed",
            "stopped",
            "failed",
            "interrupted",
        ):
            self.progress.set_state(str(status))
        done = float(run.get("progress_done") or 0)
        total = int(run.get("progress_total") or 0) or None
        unit = JOB_KINDS.unit(str(run.get("kind") or ""))
        self.progress.set_progress(
            done,
            total,
            run.get("rate") or None,
            run.get("eta_s"),
            unit,
            # A flow's bar counts nodes; what the running node has done of
            # its own work (episodes, bytes) is its message.
            "" if unit == "steps" or status != "running" else _outcome(run),
        )
        reason = run.get("reason") or ""
        self.reason_label.setText(
            f"<span style='color:{STATUS_COLORS.get(str(status), '#000')}'>"
            f"{html.escape(reason)}</span>"
        )
        self.reason_label.setVisible(bool(reason))

    # ----------------------------------------------------------- actions
    def open_run_dialog(
        self, initial: dict[str, Any] | None = None, title: str | None = None
    ) -> RunDialog:
        dialog = RunDialog(self._session, "rl.train", initial, parent=self, title=title)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self.show_run(dialog.started_run_id))
        dialog.open()
        return dialog

    def _on_new_clicked(self) -> None:
        self.open_run_dialog()

    def _on_duplicate_clicked(self) -> None:
        run = self.selected_run()
        if run:
            config = dict(_config(run))
            config.pop("seed", None)  # a duplicate draws its own seed unless set
            config.pop("project_dir", None)
            self.open_run_dialog(config)

    def _on_stop_clicked(self) -> None:
        for run in self.selected_runs():
            if run.get("status") == "running":
                self._session.stop_run(run["id"])
        enable_with_reason(self.stop_button, False, "", "The run is stopping.")

    def _on_resume_clicked(self) -> None:
        run = self.selected_run()
        if run:
            enable_with_reason(self.resume_button, False, "", "The run is resuming.")
            self._session.resume_run(run["id"])

    def _on_compare_clicked(self) -> None:
        self._show_comparison([r["id"] for r in self.selected_runs()])
        self.tabs.setCurrentWidget(self.compare)

    def _show_comparison(self, run_ids: list[str]) -> None:
        runs = (self._state.run(k) for k in run_ids)
        self.compare.show_runs([r for r in runs if r is not None])

    def _on_folder_clicked(self) -> None:
        run = self.selected_run()
        if run and run.get("run_dir"):
            open_folder(run["run_dir"])

    def _on_session_run_log_received(self, run_id: str, lines: list[str]) -> None:
        run = self.selected_run()
        if run and run["id"] == run_id:
            self.run_log.append_lines(lines)
            # The supervisor wrote these to log.txt too: shown already.
            self._log_shown = (run_id, _log_size(run))

    def _show_videos(self, run: dict[str, Any] | None) -> None:
        """The run's evaluation videos as its folder holds them now, their
        count in the tab's title."""
        self.videos.show_run(run)
        count = len(self.videos.rows())
        self.tabs.setTabText(
            self.tabs.indexOf(self.videos), f"Videos ({count})" if count else "Videos"
        )

    def _on_tick_timeout(self) -> None:
        for run in self._state.runs.values():
            if run.get("status") == "running":
                self.table_of(run).update_record(run)
        current = self.selected_run()
        if current is not None and current.get("status") == "running":
            # A video is written after its evaluation's reward arrives (and
            # a headless run's rewards come with a snapshot): the list
            # follows the folder.
            self._show_videos(current)
