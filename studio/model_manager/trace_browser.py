"""The trace viewer's browser: what the open trace file holds (a summary
line), its episodes filtered by env, model, outcome, return and label, the
steps of the chosen episode, and the prompt and completion of the chosen
step. Label columns read what ``TraceLabels`` shows."""

from __future__ import annotations

import html
import itertools
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QLabel,
    QPlainTextEdit,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.store.labels import EPISODE, orphan_sentence
from studio.model_manager.trace_labels import Position, TraceLabels
from studio.state.traces import (
    LABEL_FILTERS,
    EpisodeFilter,
    choices,
    episode_row,
    prompt_text,
    step_row,
)
from widgets.fit import tell_width_changed, wrapped_minimum
from widgets.flow_layout import FlowLayout
from widgets.record_table import Column, RecordTable

OUTCOME_COLORS = {"success": "#2ca02c", "failed": "#d62728", "truncated": "#b8860b"}
LABEL_COLORS = {"good": "#2ca02c", "bad": "#d62728"}
ROW_AIR = 8
"""Room (px) above and below a table row's line of text."""

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


def _combo_value(combo: QComboBox) -> str:
    return "" if combo.currentIndex() <= 0 else combo.currentText()


class TraceBrowser(QWidget):
    """The episodes and steps of ``labels.trace``, and the chosen prompt."""

    def __init__(self, labels: TraceLabels, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._labels = labels
        self._rows: list[dict[str, Any]] = []
        self.info = QLabel(wordWrap=True)
        self.env_filter = QComboBox()
        self.policy_filter = QComboBox()
        self.outcome_filter = QComboBox()
        self.outcome_filter.addItems(["", "success", "failed", "truncated"])
        self.labelled_filter = QComboBox()
        self.labelled_filter.addItems(list(LABEL_FILTERS))
        # a range a return has, not ±1e9: the box is as wide as its range
        self.min_return = QDoubleSpinBox(minimum=-1e5, maximum=1e5, decimals=2)
        self.min_return.setPrefix("return ≥ ")
        self.min_return.setSpecialValueText("any return")
        self.min_return.setValue(self.min_return.minimum())
        # Each filter says what it filters in its first item ("any env"),
        # not in a label beside it: the five fit one line of a 1024 px
        # screen's pane, where with labels they took two to four.
        for combo, what in (
            (self.env_filter, "env"),
            (self.policy_filter, "model"),
            (self.outcome_filter, "outcome"),
            (self.labelled_filter, "labels"),
        ):
            if combo.count() == 0:
                combo.addItem("", "")
            combo.setItemText(0, f"any {what}")
            combo.setToolTip(f"Show the episodes of one {what} only.")
        for combo in (self.env_filter, self.policy_filter):
            # as wide as its "any" item; a long env path shows whole in
            # the list that drops down
            combo.setSizeAdjustPolicy(
                QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
            )
            combo.setMinimumContentsLength(len(combo.itemText(0)))
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
        self.steps = RecordTable(STEP_COLUMNS, empty_text="Choose an episode.")
        self.steps.selection_changed.connect(self._on_step_selection_changed)
        for records in (self.episodes, self.steps):
            records.view.sortByColumn(0, Qt.SortOrder.AscendingOrder)
            # fit columns to the first rows only: measuring every row of a
            # long trace would take most of a second
            records.view.horizontalHeader().setResizeContentsPrecision(100)
            # rows stay where they are when a label changes, and a new list
            # is sorted only when it is not in order already (_sorted_set)
            records._proxy.setDynamicSortFilter(False)
            # a line of text and a little air, not the style's 30 px: five
            # rows and the header fit a window at its lowest
            rows = records.view.verticalHeader()
            rows.setDefaultSectionSize(records.view.fontMetrics().height() + ROW_AIR)
        self.prompt = QPlainTextEdit(readOnly=True)
        # Two lines at least, not Qt's 70 px: under wrapped filters the three
        # panes must fit a low window.
        self.prompt.setMinimumHeight(2 * self.prompt.fontMetrics().lineSpacing() + 12)
        self.prompt.setPlaceholderText("The prompt and completion of the chosen step.")
        self._lay_out()

    def _lay_out(self) -> None:
        filters = FlowLayout()
        for widget in (
            self.env_filter,
            self.policy_filter,
            self.outcome_filter,
            self.min_return,
            self.labelled_filter,
        ):
            filters.addWidget(widget)
        # The episodes beside the chosen episode's steps, the chosen step's
        # prompt under both, across the width its lines want: stacked three
        # high, at the window's lowest (a 768 px screen with a panel) each
        # pane showed two rows.
        lists = QSplitter(Qt.Orientation.Horizontal)
        lists.addWidget(self.episodes)
        lists.addWidget(self.steps)
        lists.setSizes([300, 300])
        middle = QSplitter(Qt.Orientation.Vertical)
        middle.addWidget(lists)
        middle.addWidget(self.prompt)
        middle.setSizes([300, 200])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.info)
        layout.addLayout(filters)  # wraps where the pane is narrow
        layout.addWidget(middle, 1)

    def minimumSizeHint(self) -> QSize:
        # The filters wrap in a narrow pane: the tables get what is left.
        return wrapped_minimum(self, super().minimumSizeHint())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        tell_width_changed(self, event)

    # ------------------------------------------------------------ the file
    def show_nothing(self, text: str) -> None:
        """No trace file to show: ``text`` says why."""
        self.info.setText(text)
        self.episodes.set_records([])
        self.steps.set_records([])

    def show_trace(self, path: Path, orphans: int) -> None:
        """The episodes of ``labels.trace`` (read from ``path``), with a
        summary that says how many labels are ``orphans``."""
        trace = self._labels.trace
        if trace is None:
            return
        self._rows = [episode_row(ep, i) for i, ep in enumerate(trace.summaries)]
        for row in self._rows:
            row["label"] = self._labels.episode_text(int(row["id"]))
        self._fill_filter(self.env_filter, choices(self._rows, "env"))
        self._fill_filter(self.policy_filter, choices(self._rows, "policy"))
        rows = self._rows
        wins = sum(1 for r in rows if r["outcome"] == "success")
        steps = sum(r["length"] for r in rows)
        invalid = sum(r["invalid"] for r in rows)
        first = trace.summaries[0] if rows else {}
        env = html.escape(str(first.get("env", "")))
        policy = html.escape(str(first.get("policy", "")))
        text = (
            f"<b>{html.escape(path.stem)}</b> — {len(rows)} episodes, "
            f"success {wins}/{len(rows)}, {steps} steps, {invalid} invalid"
        )
        if env:
            text += f"<br><span style='color:gray'>env {env} · policy {policy}</span>"
        if trace.bad_lines:
            text += (
                f"<br><span style='color:#b8860b'>{trace.bad_lines} unreadable "
                "line(s) skipped.</span>"
            )
        if orphans:
            text += f"<br><span style='color:#b8860b'>{orphan_sentence(orphans)}</span>"
        self.info.setText(text)
        self.steps.set_records([])
        self.prompt.clear()
        self.apply_filter()

    def _fill_filter(self, combo: QComboBox, values: list[str]) -> None:
        keep = combo.currentText()
        anything = combo.itemText(0)
        combo.blockSignals(True)
        combo.clear()
        combo.addItem(anything, "")
        for v in values:
            combo.addItem(v, v)
        i = combo.findText(keep)
        combo.setCurrentIndex(max(i, 0))
        combo.blockSignals(False)
        view = combo.view()
        view.setMinimumWidth(view.sizeHintForColumn(0) + view.frameWidth() * 2)

    # ------------------------------------------------------------ filters
    def episode_filter(self) -> EpisodeFilter:
        low = self.min_return.value()
        return EpisodeFilter(
            env=_combo_value(self.env_filter),
            policy=_combo_value(self.policy_filter),
            outcome=_combo_value(self.outcome_filter),
            min_return=None if low <= self.min_return.minimum() else low,
            labelled=_combo_value(self.labelled_filter),
        )

    def _on_filter_changed(self, *_: object) -> None:
        self.apply_filter()

    def apply_filter(self) -> None:
        flt = self.episode_filter()
        labelled = self._labels.labelled_episodes()
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
        trace = self._labels.trace
        if not keys or trace is None:
            return None
        return trace.episodes[int(keys[0])]

    def episode_index(self) -> int | None:
        keys = self.episodes.selected_keys()
        return int(keys[0]) if keys else None

    def current(self, on_steps: bool) -> Position | None:
        """The chosen step (``on_steps``) or episode (step ``EPISODE``)."""
        e = self.episode_index()
        if e is None or self._labels.trace is None:
            return None
        if not on_steps:
            return e, EPISODE
        keys = self.steps.selected_keys()
        return (e, int(keys[0])) if keys else None

    def select_step(self, episode: int, step: int) -> None:
        self.episodes.select_keys([str(episode)])
        if self.episode_index() == episode:
            self.steps.select_keys([str(step)])

    def advance(self, on_steps: bool) -> None:
        """Select the next row (labelling goes down the list)."""
        view = (self.steps if on_steps else self.episodes).view
        rows = [i.row() for i in view.selectionModel().selectedRows()]
        row = max(rows) if rows else -1
        if row + 1 < view.model().rowCount():
            view.selectRow(row + 1)

    def _on_episode_selection_changed(self, keys: list[str]) -> None:
        ep = self._episode()
        steps = (ep or {}).get("steps") or []
        e = self.episode_index()
        rows = [step_row(s, i) for i, s in enumerate(steps)]
        for row in rows:
            row["label"] = self._labels.step_text(e or 0, int(row["id"]))
        _sorted_set(self.steps, rows)
        self.prompt.clear()
        if steps:
            self.steps.select_keys(["0"])

    def _on_step_selection_changed(self, keys: list[str]) -> None:
        self.show_prompt()

    def show_prompt(self) -> None:
        """The prompt and completion of the chosen step, and its ideal
        answer when it has one."""
        ep = self._episode()
        keys = self.steps.selected_keys()
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
        ideal = self._labels.ideal((self.episode_index() or 0, int(keys[0])))
        if ideal is not None:
            text += f"\n\n[ideal answer]\n{ideal}"
        self.prompt.setPlainText(text)

    def show_label(self, episode: int, step: int) -> None:
        """Show the label of a position as it is now."""
        if step != EPISODE and episode == self.episode_index():
            for row in self.steps.model.records:
                if int(row["id"]) == step:
                    self.steps.update_record(
                        {**row, "label": self._labels.step_text(episode, step)}
                    )
                    break
        self._rows[episode]["label"] = self._labels.episode_text(episode)
        if str(episode) in self.episodes.model._rows:
            self.episodes.update_record(self._rows[episode])
