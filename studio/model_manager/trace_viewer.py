"""Trace viewer: language-model rollouts and recorded trajectories (JSONL
traces), browsed, filtered and labelled with the keyboard.

Files in ``<project>/data/traces/`` on the left (rollouts of ``llm.collect``
and ``agent-*`` trajectories recorded over HTTP), their episodes (filtered by
env, model, outcome, return and label), and the steps of the chosen episode
(completion, parsed action, valid, reward and its breakdown) with the full
prompt of the chosen step below.

Keys, on the episode or step table: ``G`` good, ``B`` bad (KTO; the step,
or the whole episode on the episode table), ``X`` clears it, ``E`` edits
the step's ideal answer (SFT), ``P`` pins a step and ``1`` / ``2`` on
another says the pinned / this one is the better (DPO), ``Ctrl+Z`` undoes.
Each label is committed to ``data/labels.sqlite`` as the key is pressed.

The auto-labeler panel lists the suggestions of the last reward model
(``reward.train``) for the unlabelled steps of the chosen file, least
confident first: ``A`` accepts the selected ones, ``C`` corrects them (the
opposite label), both in one undo step; Retrain asks for a new reward model
on the labels as they are now; the plot shows how far each model agreed
with the person's labels over time (held out at training, and in reviews).
"""

from __future__ import annotations

import html
import itertools
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDoubleSpinBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.store.labels import (
    EPISODE,
    LabelError,
    LabelStore,
    StepRef,
    Suggestion,
    orphan_sentence,
    ref_of,
    resolve,
)
from studio.common import ok_cancel_buttons
from studio.state.traces import (
    LABEL_FILTERS,
    EpisodeFilter,
    TraceFile,
    choices,
    episode_row,
    label_text,
    list_trace_files,
    load_trace_file,
    prompt_text,
    step_row,
)
from widgets.fit import ScrollStrip
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
    Column("Label", lambda r: r.get("label", "")),
]
LABEL_COLORS = {"good": "#2ca02c", "bad": "#d62728"}
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
        "Label",
        lambda r: r.get("label", ""),
        color=lambda r: LABEL_COLORS.get(r.get("label", "").split(" ")[0]),
    ),
    Column(
        "Completion",
        lambda r: r["completion"].replace("\n", " ⏎ ")[:120],
        tooltip=lambda r: r["completion"],
    ),
]


def _sorted_set(table: RecordTable, records: list[dict[str, Any]]) -> None:
    """Show ``records``, sorted as the table's header says; the proxy sorts
    only when they are not in that order already (a thousand episodes in
    file order need no sort)."""
    header = table.view.horizontalHeader()
    column = header.sortIndicatorSection()
    order = header.sortIndicatorOrder()
    table.set_records(records)
    if 0 <= column < len(table.model.columns):
        keys = [table.model.sort_key(r, column) for r in range(len(records))]
        try:
            ordered = all(a <= b for a, b in itertools.pairwise(keys))
        except TypeError:
            ordered = False
        if order == Qt.SortOrder.DescendingOrder or not ordered:
            table._proxy.sort(column, order)


SUGGESTION_COLUMNS = [
    Column("Step", lambda r: r["where"]),
    Column(
        "Suggests",
        lambda r: r["value"],
        color=lambda r: LABEL_COLORS.get(r["value"]),
    ),
    Column("Confidence", lambda r: r["confidence"], lambda v: f"{v:.0%}"),
    Column("Action", lambda r: r["action"]),
]
REWARD_MODELS = "data/reward_models"


class IdealAnswerDialog(QDialog):
    """Edit the ideal answer of a step (its recorded completion to start)."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Ideal answer")
        self.editor = QPlainTextEdit(text)
        buttons = ok_cancel_buttons(self)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The answer the model should have given:"))
        layout.addWidget(self.editor, 1)
        layout.addWidget(buttons)
        self.resize(560, 360)

    def text(self) -> str:
        return self.editor.toPlainText()


@dataclass(frozen=True)
class TraceKey:
    """A key of the trace viewer's lists and what it does."""

    key: Qt.Key
    text: str
    steps_only: bool
    """Acts in the step list only (not on a whole episode)."""
    act: Callable[[TraceViewer, bool], object]
    """Called with the viewer and whether the step list has the focus."""


def shortcut_rows() -> list[tuple[str, str]]:
    """(action, keys) of the labelling keys, for Help → Keyboard shortcuts."""
    rows = [
        (f"Traces: {k.text}" + (" (steps)" if k.steps_only else ""), _key_name(k.key))
        for k in TraceViewer.KEYS
    ]
    rows += [
        (f"Suggestions: {k.text}", _key_name(k.key))
        for k in TraceViewer.SUGGESTION_KEYS
    ]
    return rows


def _key_name(key: Qt.Key) -> str:
    return QKeySequence(key).toString(QKeySequence.SequenceFormat.NativeText)


class TraceViewer(QWidget):
    retrain_requested = Signal(dict)
    """A ``reward.train`` config: a new reward model on the labels as they
    are now (after corrections)."""

    KEYS: tuple[TraceKey, ...] = (
        TraceKey(
            Qt.Key.Key_G, "Label good", False, lambda v, s: v.label_current("good", s)
        ),
        TraceKey(
            Qt.Key.Key_B, "Label bad", False, lambda v, s: v.label_current("bad", s)
        ),
        TraceKey(
            Qt.Key.Key_X, "Clear the label", False, lambda v, s: v.clear_current(s)
        ),
        TraceKey(
            Qt.Key.Key_E, "Edit the ideal answer", True, lambda v, s: v.edit_current()
        ),
        TraceKey(
            Qt.Key.Key_P, "Pin the step to compare", True, lambda v, s: v.pin_current()
        ),
        TraceKey(
            Qt.Key.Key_1, "Pinned step is better", True, lambda v, s: v.prefer(True)
        ),
        TraceKey(
            Qt.Key.Key_2, "This step is better", True, lambda v, s: v.prefer(False)
        ),
    )
    """The labelling keys of the episode and step lists, one declaration for
    what they do and for Help → Keyboard shortcuts."""
    SUGGESTION_KEYS: tuple[TraceKey, ...] = (
        TraceKey(
            Qt.Key.Key_A,
            "Accept the suggestions",
            False,
            lambda v, s: v.review(correct=False),
        ),
        TraceKey(
            Qt.Key.Key_C,
            "Correct the suggestions",
            False,
            lambda v, s: v.review(correct=True),
        ),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.project_dir = ""
        self.trace: TraceFile | None = None
        self.store: LabelStore | None = None
        self._rows: list[dict[str, Any]] = []
        self._step_labels: dict[tuple[int, int], dict[str, str]] = {}
        """(episode, step) -> kind -> what its label shows."""
        self._pinned: StepRef | None = None
        self.edit_answer = self._ask_answer
        """Asks for an ideal answer (text in, text or None out); tests
        replace it."""
        self.files = QListWidget()
        self.files.currentItemChanged.connect(self._on_files_current_changed)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.import_button = QPushButton("Import labels…")
        self.import_button.setToolTip("Add the labels of a JSON Lines label file.")
        self.import_button.clicked.connect(self._on_import_clicked)
        self.export_button = QPushButton("Export labels…")
        self.export_button.setToolTip("Write every label as JSON Lines.")
        self.export_button.clicked.connect(self._on_export_clicked)
        self.choose_file = self._ask_file
        """Asks for a label file (``save``: to write); tests replace it."""
        self.info = QLabel(wordWrap=True)
        self.label_status = QLabel(wordWrap=True)
        self.label_status.setText(
            "Label with the keyboard: G good · B bad · X clear · E ideal answer · "
            "P pin, then 1 pinned better / 2 this better · Ctrl+Z undo."
        )
        self.env_filter = QComboBox()
        self.policy_filter = QComboBox()
        self.outcome_filter = QComboBox()
        self.outcome_filter.addItems(["", "success", "failed", "truncated"])
        self.labelled_filter = QComboBox()
        self.labelled_filter.addItems(list(LABEL_FILTERS))
        self.min_return = QDoubleSpinBox(minimum=-1e9, maximum=1e9, decimals=3)
        self.min_return.setSpecialValueText("any")
        self.min_return.setValue(self.min_return.minimum())
        for combo in (self.outcome_filter, self.labelled_filter):
            combo.setItemText(0, "any")
        for combo in (
            self.env_filter,
            self.policy_filter,
            self.outcome_filter,
            self.labelled_filter,
        ):
            combo.currentIndexChanged.connect(self._on_filter_changed)
        self.min_return.valueChanged.connect(self._on_filter_changed)
        self.episodes = RecordTable(
            EPISODE_COLUMNS, empty_text="Choose a trace file on the left."
        )
        self.episodes.selection_changed.connect(self._on_episode_selection_changed)
        self.episodes.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        self.steps = RecordTable(STEP_COLUMNS, empty_text="Choose an episode.")
        self.steps.selection_changed.connect(self._on_step_selection_changed)
        self.steps.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
        for table in (self.episodes.view, self.steps.view):
            table.installEventFilter(self)
            # fit columns to the first rows only: measuring every row of a
            # long trace would take most of a second
            table.horizontalHeader().setResizeContentsPrecision(100)
        for records in (self.episodes, self.steps):
            # rows stay where they are when a label changes, and a new list
            # is sorted only when it is not in order already (_sorted_set)
            records._proxy.setDynamicSortFilter(False)
        self.prompt = QPlainTextEdit(readOnly=True)
        self.prompt.setPlaceholderText("The prompt and completion of the chosen step.")

        self._suggested: list[Suggestion] = []
        self.suggestion_info = QLabel(wordWrap=True)
        self.suggestions = RecordTable(
            SUGGESTION_COLUMNS,
            empty_text="No suggestions: train a reward model on your labels "
            "(reward.train, or the Learn reward node) and it suggests labels "
            "for the unlabelled steps here.",
        )
        self.suggestions.view.setSelectionMode(
            QTableView.SelectionMode.ExtendedSelection
        )
        self.suggestions.view.setSortingEnabled(False)
        self.suggestions.view.installEventFilter(self)
        self.suggestions.selection_changed.connect(
            self._on_suggestion_selection_changed
        )
        self.accept_button = QPushButton("Accept (A)")
        self.accept_button.clicked.connect(self._on_accept_clicked)
        self.correct_button = QPushButton("Correct (C)")
        self.correct_button.clicked.connect(self._on_correct_clicked)
        self.retrain_button = QPushButton("Retrain")
        self.retrain_button.setToolTip(
            "Train a new reward model on the labels as they are now."
        )
        self.retrain_button.clicked.connect(self._on_retrain_clicked)
        self.agreement_plot = pg.PlotWidget()
        self.agreement_plot.setFixedHeight(110)
        self.agreement_plot.setYRange(0, 1)
        self.agreement_plot.setLabel("left", "agreement")
        self.agreement_plot.setLabel("bottom", "review")
        self._held_curve = self.agreement_plot.plot(
            [], [], pen=None, symbol="o", symbolSize=6, name="held out"
        )
        self._review_curve = self.agreement_plot.plot(
            [], [], pen=pg.mkPen("#2ca02c", width=2), symbol="t", symbolSize=6
        )
        auto = QGroupBox("Auto-labeler")
        auto_layout = QVBoxLayout(auto)
        auto_layout.addWidget(self.suggestion_info)
        auto_layout.addWidget(self.suggestions, 1)
        buttons = QHBoxLayout()
        for button in (self.accept_button, self.correct_button, self.retrain_button):
            buttons.addWidget(button)
        auto_layout.addLayout(buttons)
        auto_layout.addWidget(self.agreement_plot)

        filters = QHBoxLayout()
        for title, widget in (
            ("Env", self.env_filter),
            ("Model", self.policy_filter),
            ("Outcome", self.outcome_filter),
            ("Return ≥", self.min_return),
            ("Labels", self.labelled_filter),
        ):
            filters.addWidget(QLabel(title))
            filters.addWidget(widget, 1)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<b>Trace files</b>"))
        left_layout.addWidget(self.files, 1)
        left_layout.addWidget(self.refresh_button)
        left_layout.addWidget(self.import_button)
        left_layout.addWidget(self.export_button)
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(self.episodes)
        middle.addWidget(self.steps)
        middle.addWidget(self.prompt)
        middle.setSizes([160, 200, 160])
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.info)
        right_layout.addWidget(ScrollStrip(filters))
        right_layout.addWidget(middle, 1)
        right_layout.addWidget(self.label_status)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.addWidget(auto)
        split.setSizes([180, 700, 260])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    # ------------------------------------------------------------ project
    def set_project(self, project_dir: str) -> None:
        if project_dir != self.project_dir and self.store is not None:
            self.store.close()
            self.store = None
        self.project_dir = project_dir
        self._pinned = None
        self.refresh()

    def close_store(self) -> None:
        """Close the label database (labels are committed already)."""
        if self.store is not None:
            self.store.close()
            self.store = None

    def _labels(self) -> LabelStore | None:
        if self.store is None and self.project_dir:
            try:
                self.store = LabelStore(self.project_dir)
            except sqlite3.Error as exc:
                self._say(f"Cannot open the label database: {exc}.", error=True)
        return self.store

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
        self._report_deleted({p.stem for p in paths})

    def _report_deleted(self, names: set[str]) -> None:
        store = self._labels() if self.project_dir else None
        if store is None:
            return
        gone = {t: n for t, n in store.traces().items() if t not in names}
        if gone:
            self._say(
                f"{sum(gone.values())} label(s) belong to trace files that were "
                f"deleted ({', '.join(sorted(gone))}); they are kept in "
                "data/labels.sqlite but not shown or used.",
                error=True,
            )

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
        self._pinned = None
        eps = self.trace.episodes
        self._rows = [episode_row(ep, i) for i, ep in enumerate(self.trace.summaries)]
        self._step_labels = {}
        store = self._labels()
        orphans = 0
        if store is not None:
            labels = store.labels(trace=self.trace.name)
            orphans = resolve(labels, {self.trace.name: eps}).orphans
            for label in labels:
                self._remember(label.kind, label.episode, label.step, label)
        for row in self._rows:
            row["label"] = self._episode_label_text(int(row["id"]))
        self._fill_filter(self.env_filter, choices(self._rows, "env"))
        self._fill_filter(self.policy_filter, choices(self._rows, "policy"))
        rows = self._rows
        wins = sum(1 for r in rows if r["outcome"] == "success")
        steps = sum(r["length"] for r in rows)
        invalid = sum(r["invalid"] for r in rows)
        first = self.trace.summaries[0] if rows else {}
        env = html.escape(str(first.get("env", "")))
        policy = html.escape(str(first.get("policy", "")))
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
        if orphans:
            text += f"<br><span style='color:#b8860b'>{orphan_sentence(orphans)}</span>"
        self.info.setText(text)
        self.steps.set_records([])
        self.prompt.clear()
        self._apply_filter()
        self.reload_suggestions()

    def _fill_filter(self, combo: QComboBox, values: list[str]) -> None:
        keep = combo.currentText()
        combo.blockSignals(True)
        combo.clear()
        combo.addItem("any", "")
        for v in values:
            combo.addItem(v, v)
        i = combo.findText(keep)
        combo.setCurrentIndex(max(i, 0))
        combo.blockSignals(False)

    # ------------------------------------------------------------ filters
    def episode_filter(self) -> EpisodeFilter:
        def value(combo: QComboBox) -> str:
            return "" if combo.currentIndex() <= 0 else combo.currentText()

        low = self.min_return.value()
        return EpisodeFilter(
            env=value(self.env_filter),
            policy=value(self.policy_filter),
            outcome=value(self.outcome_filter),
            min_return=None if low <= self.min_return.minimum() else low,
            labelled=value(self.labelled_filter),
        )

    def _on_filter_changed(self, *_: object) -> None:
        self._apply_filter()

    def _apply_filter(self) -> None:
        flt = self.episode_filter()
        labelled = {e for e, _ in self._step_labels}
        shown = [r for r in self._rows if flt.keeps(r, int(r["id"]) in labelled)]
        _sorted_set(self.episodes, shown)
        if shown and not self.episodes.selected_keys():
            self.episodes.select_keys([shown[0]["id"]])
        if not shown:
            self.steps.set_records([])
            self.prompt.clear()

    # ------------------------------------------------------------ browsing
    def _episode(self) -> dict[str, Any] | None:
        keys = self.episodes.selected_keys()
        if not keys or self.trace is None:
            return None
        return self.trace.episodes[int(keys[0])]

    def _episode_index(self) -> int | None:
        keys = self.episodes.selected_keys()
        return int(keys[0]) if keys else None

    def _on_episode_selection_changed(self, keys: list[str]) -> None:
        ep = self._episode()
        steps = (ep or {}).get("steps") or []
        e = self._episode_index()
        rows = [step_row(s, i) for i, s in enumerate(steps)]
        for row in rows:
            row["label"] = self._step_label_text(e or 0, int(row["id"]))
        _sorted_set(self.steps, rows)
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
        text = (
            f"{prompt_text(step)}\n\n[completion — {parsed}, {valid}, action "
            f"{step.get('tool')!r}]\n{step.get('completion', '')}"
        )
        ideal = self._step_labels.get((self._episode_index() or 0, int(keys[0])), {})
        if "sft" in ideal:
            text += f"\n\n[ideal answer]\n{ideal['sft']}"
        self.prompt.setPlainText(text)

    # ------------------------------------------------------------ labels
    def _remember(self, kind: str, episode: int, step: int, label: object) -> None:
        """Keep the shown label of a position (``label`` None: none)."""
        slot = self._step_labels.setdefault((episode, step), {})
        if label is None:
            slot.pop(kind, None)
            if not slot:
                self._step_labels.pop((episode, step), None)
            return
        value = label.value  # type: ignore[attr-defined]
        if kind == "dpo":
            value = f"{label.other_episode}:{label.other_step}"  # type: ignore[attr-defined]
        slot[kind] = value

    def _step_label_text(self, episode: int, step: int) -> str:
        slot = self._step_labels.get((episode, step), {})
        return label_text(slot.get("kto"), "sft" in slot, slot.get("dpo"))

    def _episode_label_text(self, episode: int) -> str:
        own = self._step_labels.get((episode, EPISODE), {}).get("kto", "")
        n = sum(1 for e, t in self._step_labels if e == episode and t != EPISODE)
        if n:
            return f"{own} ({n} steps)".strip()
        return own

    def _repaint(self, episode: int, step: int) -> None:
        if step != EPISODE and episode == self._episode_index():
            for row in self.steps.model.records:
                if int(row["id"]) == step:
                    self.steps.update_record(
                        {**row, "label": self._step_label_text(episode, step)}
                    )
                    break
        label = self._episode_label_text(episode)
        self._rows[episode]["label"] = label
        if str(episode) in self.episodes.model._rows:
            self.episodes.update_record(self._rows[episode])

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            watched is self.suggestions.view
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and self.handle_suggestion_key(event)
        ):
            return True
        on_steps = watched is self.steps.view
        if (
            event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and (on_steps or watched is self.episodes.view)
            and self.handle_key(event, on_steps)
        ):
            return True
        return super().eventFilter(watched, event)

    def handle_key(self, event: QKeyEvent, on_steps: bool) -> bool:
        """Act on a labelling key; False when it is not one."""
        return self._dispatch(self.KEYS, event, on_steps)

    def _dispatch(
        self, keys: tuple[TraceKey, ...], event: QKeyEvent, on_steps: bool
    ) -> bool:
        if event.matches(QKeySequence.StandardKey.Undo):
            self.undo()
            return True
        if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            return False
        for binding in keys:
            if event.key() == binding.key and (on_steps or not binding.steps_only):
                binding.act(self, on_steps)
                return True
        return False

    def _current(self, on_steps: bool) -> tuple[int, int] | None:
        e = self._episode_index()
        if e is None or self.trace is None:
            return None
        if not on_steps:
            return e, EPISODE
        keys = self.steps.selected_keys()
        return (e, int(keys[0])) if keys else None

    def _say(self, text: str, error: bool = False) -> None:
        color = "#d62728" if error else "gray"
        self.label_status.setText(
            f"<span style='color:{color}'>{html.escape(text)}</span>"
        )

    def _store_or_say(self) -> LabelStore | None:
        store = self._labels()
        if store is None or self.trace is None:
            self._say("Open a project and a trace file to label.", error=True)
            return None
        return store

    def label_current(self, value: str, on_steps: bool = True) -> None:
        """Good/bad on the current step (or episode), then on to the next."""
        pos = self._current(on_steps)
        store = self._store_or_say()
        if pos is None or store is None or self.trace is None:
            return
        ref = ref_of(self.trace.name, self.trace.episodes, *pos)
        try:
            label = store.set("kto", ref, value)
        except (LabelError, sqlite3.Error) as exc:
            self._say(f"The label was not saved: {exc}", error=True)
            return
        self._remember("kto", pos[0], pos[1], label)
        self._repaint(*pos)
        self._say(f"Labelled {self._where(pos)} {value}.")
        self._advance(self.steps if on_steps else self.episodes)

    def clear_current(self, on_steps: bool = True) -> None:
        pos = self._current(on_steps)
        store = self._store_or_say()
        if pos is None or store is None or self.trace is None:
            return
        removed = store.remove("kto", self.trace.name, *pos)
        if removed is not None:
            self._remember("kto", pos[0], pos[1], None)
            self._repaint(*pos)
            self._say(f"Cleared the label of {self._where(pos)}.")

    def edit_current(self) -> None:
        pos = self._current(True)
        store = self._store_or_say()
        if pos is None or store is None or self.trace is None:
            return
        step = self.trace.episodes[pos[0]]["steps"][pos[1]]
        slot = self._step_labels.get(pos, {})
        text = self.edit_answer(slot.get("sft", str(step.get("completion") or "")))
        if text is None:
            return
        try:
            label = store.set(
                "sft", ref_of(self.trace.name, self.trace.episodes, *pos), text
            )
        except (LabelError, sqlite3.Error) as exc:
            self._say(f"The ideal answer was not saved: {exc}", error=True)
            return
        self._remember("sft", pos[0], pos[1], label)
        self._repaint(*pos)
        self._on_step_selection_changed(self.steps.selected_keys())
        self._say(f"Saved the ideal answer of {self._where(pos)}.")

    def _ask_answer(self, text: str) -> str | None:
        dialog = IdealAnswerDialog(text, self)
        return dialog.text() if dialog.exec() == QDialog.DialogCode.Accepted else None

    def pin_current(self) -> None:
        pos = self._current(True)
        if pos is None or self.trace is None:
            return
        self._pinned = ref_of(self.trace.name, self.trace.episodes, *pos)
        self._say(
            f"Pinned {self._where(pos)}; on another step press 1 if the pinned one "
            "is better, 2 if that one is."
        )

    def prefer(self, pinned_better: bool) -> None:
        pos = self._current(True)
        store = self._store_or_say()
        if pos is None or store is None or self.trace is None:
            return
        if self._pinned is None or self._pinned.trace != self.trace.name:
            self._say(
                "Pin a step with P first, then compare another with 1 or 2.", error=True
            )
            return
        here = ref_of(self.trace.name, self.trace.episodes, *pos)
        better, worse = (self._pinned, here) if pinned_better else (here, self._pinned)
        try:
            label = store.set("dpo", better, "better", other=worse)
        except (LabelError, sqlite3.Error) as exc:
            self._say(f"The comparison was not saved: {exc}", error=True)
            return
        self._remember("dpo", better.episode, better.step, label)
        self._repaint(better.episode, better.step)
        self._say(
            f"Step {better.episode}:{better.step} is better than "
            f"{worse.episode}:{worse.step}."
        )

    def undo(self) -> None:
        store = self._labels()
        if store is None or not store.can_undo:
            self._say("Nothing to undo.")
            return
        for item in store.undo():
            if isinstance(item, tuple):
                kind, trace, episode, step = item
                label = None
            else:
                kind, trace, episode, step = (
                    item.kind,
                    item.trace,
                    item.episode,
                    item.step,
                )
                label = item
            if self.trace is not None and trace == self.trace.name:
                self._remember(kind, episode, step, label)
                self._repaint(episode, step)
        if self._suggested or self.suggestions.model.records:
            self.reload_suggestions()
        self._say("Undone.")

    # ------------------------------------------------------------ auto-labeler
    def reload_suggestions(self) -> None:
        """The open suggestions for the chosen file, and the agreement plot."""
        store = self._labels()
        if store is None or self.trace is None:
            self._suggested = []
            self.suggestions.set_records([])
            return
        self._suggested = store.suggestions(self.trace.name)
        records = []
        for i, sug in enumerate(self._suggested):
            action = ""
            if sug.episode < len(self.trace.summaries):
                steps = self.trace.episodes[sug.episode].get("steps") or []
                if sug.step < len(steps):
                    action = step_row(steps[sug.step], sug.step)["action"]
            records.append(
                {
                    "id": str(i),
                    "where": f"{sug.episode}:{sug.step}",
                    "value": sug.value,
                    "confidence": sug.confidence,
                    "action": action,
                }
            )
        self.suggestions.set_records(records)
        models = sorted({s.model for s in self._suggested})
        self.suggestion_info.setText(
            f"{len(records)} suggestion(s) from {', '.join(models)}, least "
            "confident first: A accepts, C corrects the selected ones."
            if records
            else ""
        )
        history = store.agreement()
        held = [(i, h.rate) for i, h in enumerate(history) if h.source == "held-out"]
        review = [(i, h.rate) for i, h in enumerate(history) if h.source == "review"]
        self._held_curve.setData([x for x, _ in held], [y for _, y in held])
        self._review_curve.setData([x for x, _ in review], [y for _, y in review])

    def agreement_points(self) -> tuple[list[float], list[float]]:
        """The plotted review agreement (x, rate), for tests and tooltips."""
        x, y = self._review_curve.getData()
        return ([] if x is None else list(x)), ([] if y is None else list(y))

    def selected_suggestions(self) -> list[Suggestion]:
        return [self._suggested[int(k)] for k in self.suggestions.selected_keys()]

    def handle_suggestion_key(self, event: QKeyEvent) -> bool:
        return self._dispatch(self.SUGGESTION_KEYS, event, False)

    def _on_accept_clicked(self) -> None:
        self.review(correct=False)

    def _on_correct_clicked(self) -> None:
        self.review(correct=True)

    def review(self, correct: bool) -> None:
        """Accept (or correct) the selected suggestions in one commit."""
        store = self._store_or_say()
        # a step labelled by hand since the list was made keeps that label
        chosen = [
            s
            for s in self.selected_suggestions()
            if store is not None
            and store.get("kto", s.trace, s.episode, s.step) is None
        ]
        if not chosen or store is None:
            self._say("Select suggestions first (Shift/Ctrl+click for many).")
            return
        try:
            n = store.review([], chosen) if correct else store.review(chosen, [])
        except (LabelError, sqlite3.Error) as exc:
            self._say(f"The review was not saved: {exc}", error=True)
            return
        flip = {"good": "bad", "bad": "good"}
        for sug in chosen:
            value = flip[sug.value] if correct else sug.value
            self._step_labels.setdefault((sug.episode, sug.step), {})["kto"] = value
            self._repaint(sug.episode, sug.step)
        self.reload_suggestions()
        self._say(f"{'Corrected' if correct else 'Accepted'} {n} suggestion(s).")

    def _on_suggestion_selection_changed(self, keys: list[str]) -> None:
        if not keys:
            return
        sug = self._suggested[int(keys[0])]
        self.episodes.select_keys([str(sug.episode)])
        if self._episode_index() == sug.episode:
            self.steps.select_keys([str(sug.step)])

    def retrain_config(self) -> dict[str, Any] | None:
        """A ``reward.train`` config like the one that made the current
        suggestions (None without one)."""
        models = [s.model for s in self._suggested]
        store = self._labels()
        if not models and store is not None:
            history = store.agreement()
            models = [history[-1].model] if history else []
        if not models or not self.project_dir:
            return None
        meta_file = (
            Path(self.project_dir) / REWARD_MODELS / models[0] / "reward_model.json"
        )
        try:
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        config: dict[str, Any] = {
            "agent": meta.get("kind", "auto"),
            "traces": meta.get("traces"),
        }
        if meta.get("kind") == "text":
            config["base_model"] = meta.get("base", "")
        return config

    def _on_retrain_clicked(self) -> None:
        config = self.retrain_config()
        if config is None:
            self._say(
                "Nothing to retrain yet: train a first reward model with "
                "reward.train (or the Learn reward node).",
                error=True,
            )
            return
        self._say("Retraining the reward model on the labels as they are now.")
        self.retrain_requested.emit(config)

    # ------------------------------------------------------------ label files
    def _ask_file(self, save: bool) -> str:
        if save:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export labels", "labels.jsonl", "Label files (*.jsonl)"
            )
        else:
            path, _ = QFileDialog.getOpenFileName(
                self, "Import labels", "", "Label files (*.jsonl);;All files (*)"
            )
        return path

    def _on_import_clicked(self) -> None:
        store = self._labels()
        path = self.choose_file(False) if store is not None else ""
        if not path or store is None:
            return
        try:
            stored, problems = store.import_file(path)
        except (LabelError, sqlite3.Error) as exc:
            self._say(str(exc), error=True)
            return
        text = f"Imported {stored} label(s) from {Path(path).name}."
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            text += f" {problems[0]}{more}"
        self._say(text, error=bool(problems))
        if self.trace is not None:
            self._load(self.trace.path)

    def _on_export_clicked(self) -> None:
        store = self._labels()
        path = self.choose_file(True) if store is not None else ""
        if not path or store is None:
            return
        try:
            n = store.export_file(path)
        except OSError as exc:
            self._say(f"Cannot write {Path(path).name}: {exc.strerror}.", error=True)
            return
        self._say(f"Exported {n} label(s) to {Path(path).name}.")

    def _where(self, pos: tuple[int, int]) -> str:
        e, t = pos
        return f"episode {e}" if t == EPISODE else f"step {e}:{t}"

    def _advance(self, table: RecordTable) -> None:
        """Select the next row of ``table`` (labelling goes down the list)."""
        view = table.view
        rows = [i.row() for i in view.selectionModel().selectedRows()]
        row = max(rows) if rows else -1
        if row + 1 < view.model().rowCount():
            view.selectRow(row + 1)
