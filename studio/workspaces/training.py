"""Training: the runs of the project, their progress, and their controls."""

from __future__ import annotations

import html
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

from studio.models.project_state import ProjectState
from studio.session import Session
from studio.workspaces.common import (
    STATUS_COLORS,
    JsonPreview,
    fmt_duration,
    fmt_time,
    open_folder,
    run_duration,
)
from widgets.log_console import LogConsole
from widgets.record_table import Column, RecordTable


def progress_text(run: dict[str, Any]) -> str:
    done = run.get("progress_done") or 0
    total = run.get("progress_total") or 0
    if not total:
        return ""
    return f"{done:,.0f} / {total:,.0f} ({100 * done / total:.0f}%)"


def eta_text(run: dict[str, Any]) -> str:
    eta = run.get("eta_s")
    return (
        fmt_duration(eta) if run.get("status") == "running" and eta is not None else ""
    )


RUN_COLUMNS = [
    Column("Name", lambda r: r.get("name", r["id"])),
    Column("Kind", lambda r: r.get("kind", "")),
    Column(
        "Status",
        lambda r: r.get("status", ""),
        color=lambda r: STATUS_COLORS.get(r.get("status", "")),
        tooltip=lambda r: r.get("reason", ""),
    ),
    Column("Progress", lambda r: r.get("progress_done") or 0, display=progress_text),
    Column("Rate", lambda r: r.get("rate") or 0, lambda v: f"{v:,.0f}/s" if v else ""),
    Column("ETA", lambda r: r.get("eta_s") or 0, display=eta_text),
    Column("Started", lambda r: r.get("started") or 0, fmt_time),
    Column(
        "Duration",
        lambda r: run_duration(r) or 0,
        lambda v: fmt_duration(v) if v else "",
    ),
]


class TrainingWorkspace(QWidget):
    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state: ProjectState = session.state
        self.table = RecordTable(
            RUN_COLUMNS,
            empty_text="No runs in this project yet. Start one from a workflow, "
            "or check the engine with Engine ▸ Run self-test.",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.stop_button = QPushButton("Stop")
        self.resume_button = QPushButton("Resume")
        self.folder_button = QPushButton("Open run folder")
        self.stop_button.clicked.connect(self._on_stop_clicked)
        self.resume_button.clicked.connect(self._on_resume_clicked)
        self.folder_button.clicked.connect(self._on_folder_clicked)
        self.status_label = QLabel()
        buttons = QHBoxLayout()
        for b in (self.stop_button, self.resume_button, self.folder_button):
            buttons.addWidget(b)
        buttons.addStretch(1)
        buttons.addWidget(self.status_label)
        self.details = JsonPreview()
        self.run_log = LogConsole(max_lines=2000)
        tabs = QTabWidget()
        tabs.addTab(self.run_log, "Log")
        tabs.addTab(self.details, "Details")
        self.tabs = tabs
        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.table)
        split.addWidget(tabs)
        split.setSizes([320, 280])
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("<h2>Training</h2>"))
        layout.addLayout(buttons)
        layout.addWidget(split, 1)
        state = self._state
        state.subscribe(self._on_state_changed)
        session.run_log_received.connect(self._on_session_run_log_received)
        # Durations of running runs tick even without events.
        self._tick = QTimer(self, interval=1000)
        self._tick.timeout.connect(self._on_tick_timeout)
        self._tick.start()
        self._on_state_changed("reset", "")

    def selected_run(self) -> dict[str, Any] | None:
        keys = self.table.selected_keys()
        return self._state.run(keys[0]) if keys else None

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self.table.set_records(list(self._state.runs.values()))
            self._update_buttons()
        elif what == "run":
            run = self._state.run(key)
            if run is not None:
                self.table.update_record(run)
                if key in self.table.selected_keys():
                    self._update_buttons()

    def _update_buttons(self) -> None:
        run = self.selected_run()
        status = run.get("status") if run else None
        self.stop_button.setEnabled(status == "running")
        self.resume_button.setEnabled(status in ("stopped", "failed", "interrupted"))
        self.folder_button.setEnabled(run is not None)
        if run is None:
            self.status_label.clear()
            return
        color = STATUS_COLORS.get(status or "", "#000")
        reason = html.escape(run.get("reason", ""))
        text = f"<span style='color:{color}'>{status}</span> {reason}"
        self.status_label.setText(text)

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        run = self.selected_run()
        self._update_buttons()
        self.run_log.clear()
        if run is None:
            self.details.clear()
            return
        self.details.show_value(run)
        log_path = f"{run.get('run_dir', '')}/log.txt"
        try:
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                lines = fh.read().splitlines()[-500:]
        except OSError:
            lines = []
        self.run_log.append_lines(lines)

    def _on_session_run_log_received(self, run_id: str, lines: list[str]) -> None:
        if run_id in self.table.selected_keys():
            self.run_log.append_lines(lines)

    def _on_stop_clicked(self) -> None:
        run = self.selected_run()
        if run:
            self.stop_button.setEnabled(False)
            self._session.stop_run(run["id"])

    def _on_resume_clicked(self) -> None:
        run = self.selected_run()
        if run:
            self.resume_button.setEnabled(False)
            self._session.resume_run(run["id"])

    def _on_folder_clicked(self) -> None:
        run = self.selected_run()
        if run and run.get("run_dir"):
            open_folder(run["run_dir"])

    def _on_tick_timeout(self) -> None:
        for run in self._state.runs.values():
            if run.get("status") == "running":
                self.table.update_record(run)
