"""The Training workspace's Compare tab: two or more runs side by side.

The settings that differ and the runs' outcomes, as
:func:`engine.run_compare.compare_runs` declares them (the same comparison
``rl-studio-engine compare`` prints). The runs' curves are the ones the
plot panel already overlays for the selected runs; each run's column here
is headed in its curve's colour.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QLabel,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine.run_compare import METRICS, MISSING, Comparison, compare_runs
from studio.common import STATUS_COLORS, fmt_duration

PLACEHOLDER = "Select two or more runs in the list and press Compare."

HIGHER_IS_BETTER = ("best_eval_reward", "final_eval_reward", "steps_per_s")
"""Outcomes whose highest value is shown in bold."""


def _setting_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


WARNING_COLOR = "#d55e00"
"""A run's health warnings (Okabe and Ito's vermillion, as in the runs list)."""


def warnings_text(warnings: Sequence[str]) -> str:
    """A run's health in a word: how many warnings, or none."""
    n = len(warnings)
    return f"⚠ {n} warning{'s' if n != 1 else ''}" if n else "no warnings"


def _metric_text(key: str, value: Any) -> str:
    if value is None:
        return MISSING
    if key == "warnings":
        return warnings_text(value)
    if key == "duration_s":
        return fmt_duration(value)
    if key == "total_steps":
        return f"{value:,}"
    if key == "steps_per_s":
        return f"{value:,.0f}"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _table() -> QTableWidget:
    table = QTableWidget()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
    table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    return table


class CompareView(QWidget):
    """Shows a comparison of the runs given to :meth:`show_runs`;
    ``run_color`` gives a run's curve colour (None when it has no curve)."""

    def __init__(
        self,
        run_color: Callable[[str], str | None] = lambda _run_id: None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._run_color = run_color
        self._run_ids: list[str] = []
        self.message = QLabel(PLACEHOLDER, wordWrap=True)
        self.diff_table = _table()
        self.metrics_table = _table()
        split = QSplitter()
        split.addWidget(self.diff_table)
        split.addWidget(self.metrics_table)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.message)
        layout.addWidget(split, 1)
        self.show_runs([])

    def run_ids(self) -> list[str]:
        """The runs compared now, in their columns' order."""
        return list(self._run_ids)

    def show_runs(self, runs: Sequence[dict[str, Any]]) -> None:
        """Compare ``runs`` (fewer than two clears the view)."""
        if len(runs) < 2:
            self._run_ids = []
            self.message.setText(PLACEHOLDER)
            for table in (self.diff_table, self.metrics_table):
                table.clear()
                table.setRowCount(0)
                table.setColumnCount(0)
            return
        comparison = compare_runs(runs)
        self._run_ids = [r["id"] for r in comparison["runs"]]
        self._fill(comparison)

    def _fill(self, comparison: Comparison) -> None:
        diff = comparison["config_diff"]
        n = len(comparison["runs"])
        self.message.setText(
            f"{n} runs: {len(diff)} setting{'s' if len(diff) != 1 else ''} differ"
            if diff
            else f"{n} runs with the same settings."
        )
        self._headers(self.diff_table, comparison, list(diff))
        for row, values in enumerate(diff.values()):
            for col, value in enumerate(values):
                item = QTableWidgetItem(_setting_text(value))
                if value == MISSING and isinstance(value, str):
                    item.setToolTip("This run's config has no such setting.")
                self.diff_table.setItem(row, col, item)
        labels = [label for _, label in METRICS]
        self._headers(self.metrics_table, comparison, labels)
        for row, (key, _) in enumerate(METRICS):
            values = comparison["metrics"][key]
            known = [v for v in values if isinstance(v, int | float)]
            top = max(known) if key in HIGHER_IS_BETTER and len(known) > 1 else None
            for col, value in enumerate(values):
                item = QTableWidgetItem(_metric_text(key, value))
                if top is not None and value == top:
                    font = item.font()
                    font.setBold(True)
                    item.setFont(font)
                if key == "status":
                    item.setForeground(QBrush(QColor(STATUS_COLORS.get(value, "#000"))))
                if key == "warnings" and value:
                    item.setForeground(QBrush(QColor(WARNING_COLOR)))
                    item.setToolTip("\n".join(value))
                self.metrics_table.setItem(row, col, item)

    def _headers(
        self, table: QTableWidget, comparison: Comparison, rows: list[str]
    ) -> None:
        table.clear()
        table.setRowCount(len(rows))
        table.setColumnCount(len(comparison["runs"]))
        table.setVerticalHeaderLabels(rows)
        for col, run in enumerate(comparison["runs"]):
            header = QTableWidgetItem(run["name"])
            header.setToolTip(run["id"])
            color = self._run_color(run["id"])
            if color:
                header.setForeground(QBrush(QColor(color)))
            table.setHorizontalHeaderItem(col, header)
