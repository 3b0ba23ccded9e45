"""Trace viewer: language-model rollouts recorded as JSONL traces.

Files in ``<project>/data/traces/`` on the left, their episodes, and the
steps of the chosen episode (completion, parsed action, valid, reward and
its breakdown) with the full prompt of the chosen step below.
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from studio.models.traces import (
    TraceFile,
    episode_row,
    list_trace_files,
    load_trace_file,
    prompt_text,
    step_row,
)
from widgets.record_table import Column, RecordTable

OUTCOME_COLORS = {"success": "#2ca02c", "failed": "#d62728", "truncated": "#b8860b"}

EPISODE_COLUMNS = [
    Column("#", lambda r: r["episode"]),
    Column("Task", lambda r: r["task"]),
    Column(
        "Outcome",
        lambda r: r["outcome"],
        color=lambda r: OUTCOME_COLORS.get(r["outcome"]),
    ),
    Column("Return", lambda r: r["return"], lambda v: f"{v:.3g}"),
    Column("Steps", lambda r: r["length"]),
    Column("Invalid", lambda r: r["invalid"]),
]
STEP_COLUMNS = [
    Column("t", lambda r: r["t"]),
    Column("Action", lambda r: r["action"]),
    Column(
        "Valid",
        lambda r: r["valid"],
        lambda v: "yes" if v else "no",
        color=lambda r: None if r["valid"] else "#d62728",
    ),
    Column("Reward", lambda r: r["reward"], lambda v: f"{v:+.3g}"),
    Column("Breakdown", lambda r: r["breakdown"]),
    Column(
        "Completion",
        lambda r: r["completion"].replace("\n", " ⏎ ")[:120],
        tooltip=lambda r: r["completion"],
    ),
]


class TraceViewer(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.project_dir = ""
        self.trace: TraceFile | None = None
        self.files = QListWidget()
        self.files.currentItemChanged.connect(self._on_files_current_changed)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.info = QLabel(wordWrap=True)
        self.episodes = RecordTable(
            EPISODE_COLUMNS, empty_text="Choose a trace file on the left."
        )
        self.episodes.selection_changed.connect(self._on_episode_selection_changed)
        self.episodes.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.steps = RecordTable(STEP_COLUMNS, empty_text="Choose an episode.")
        self.steps.selection_changed.connect(self._on_step_selection_changed)
        self.steps.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.prompt = QPlainTextEdit(readOnly=True)
        self.prompt.setPlaceholderText("The prompt and completion of the chosen step.")

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<b>Trace files</b>"))
        left_layout.addWidget(self.files, 1)
        left_layout.addWidget(self.refresh_button)
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(self.episodes)
        middle.addWidget(self.steps)
        middle.addWidget(self.prompt)
        middle.setSizes([160, 200, 160])
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.info)
        right_layout.addWidget(middle, 1)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([180, 700])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def set_project(self, project_dir: str) -> None:
        self.project_dir = project_dir
        self.refresh()

    def refresh(self) -> None:
        current = self.files.currentItem()
        keep = current.data(Qt.ItemDataRole.UserRole) if current else None
        self.files.clear()
        paths = list_trace_files(self.project_dir) if self.project_dir else []
        for path in paths:
            item = QListWidgetItem(path.stem)
            item.setData(Qt.ItemDataRole.UserRole, str(path))
            item.setToolTip(str(path))
            self.files.addItem(item)
            if str(path) == keep:
                self.files.setCurrentItem(item)
        if not paths:
            self.info.setText(
                "No traces yet: record rollouts of a language-model policy "
                "(llm.collect) and they appear here."
            )
            self.episodes.set_records([])
            self.steps.set_records([])

    def open_file(self, path: str | Path) -> None:
        for i in range(self.files.count()):
            item = self.files.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == str(path):
                self.files.setCurrentItem(item)
                return
        self._load(Path(path))

    def _on_files_current_changed(self, item: QListWidgetItem | None, _prev) -> None:  # type: ignore[no-untyped-def]
        if item is not None:
            self._load(Path(item.data(Qt.ItemDataRole.UserRole)))

    def _load(self, path: Path) -> None:
        try:
            self.trace = load_trace_file(path)
        except OSError as exc:
            self.trace = None
            self.info.setText(f"Cannot read {path.name}: {exc.strerror}.")
            return
        eps = self.trace.episodes
        rows = [episode_row(ep, i) for i, ep in enumerate(eps)]
        self.episodes.set_records(rows)
        wins = sum(1 for r in rows if r["outcome"] == "success")
        steps = sum(r["length"] for r in rows)
        invalid = sum(r["invalid"] for r in rows)
        env = html.escape(str(eps[0].get("env", ""))) if eps else ""
        policy = html.escape(str(eps[0].get("policy", ""))) if eps else ""
        text = (
            f"<b>{html.escape(path.stem)}</b> — {len(rows)} episodes, "
            f"success {wins}/{len(rows)}, {steps} steps, {invalid} invalid"
        )
        if env:
            text += f"<br><span style='color:gray'>env {env} · policy {policy}</span>"
        if self.trace.bad_lines:
            text += (
                f"<br><span style='color:#b8860b'>{self.trace.bad_lines} unreadable "
                "line(s) skipped.</span>"
            )
        self.info.setText(text)
        self.steps.set_records([])
        self.prompt.clear()
        if rows:
            self.episodes.select_keys([rows[0]["id"]])

    def _episode(self) -> dict | None:
        keys = self.episodes.selected_keys()
        if not keys or self.trace is None:
            return None
        return self.trace.episodes[int(keys[0])]

    def _on_episode_selection_changed(self, keys: list[str]) -> None:
        ep = self._episode()
        steps = (ep or {}).get("steps") or []
        self.steps.set_records([step_row(s, i) for i, s in enumerate(steps)])
        self.prompt.clear()
        if steps:
            self.steps.select_keys(["0"])

    def _on_step_selection_changed(self, keys: list[str]) -> None:
        ep = self._episode()
        if ep is None or not keys:
            self.prompt.clear()
            return
        step = ep["steps"][int(keys[0])]
        parsed = "parsed" if step.get("parsed", True) else "NOT parsed"
        valid = "valid" if step.get("valid", True) else "INVALID"
        self.prompt.setPlainText(
            f"{prompt_text(step)}\n\n[completion — {parsed}, {valid}, action "
            f"{step.get('tool')!r}]\n{step.get('completion', '')}"
        )
