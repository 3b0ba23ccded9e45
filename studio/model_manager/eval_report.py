"""Before/after comparison of an ``llm.evaluate`` report: a bar chart of
success rate, mean return and invalid-action rate beside the random and
expert references, the numbers, and the success rate of each scenario with a
failed episode to look at; and the Models workspace's page that picks one of
the project's reports."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path

from PySide6.QtWidgets import QComboBox, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from studio.state.traces import Comparison, ReportError, load_report
from widgets.bar_chart import GroupedBarChart


class ComparisonReport(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.comparison: Comparison | None = None
        self.heading = QLabel(wordWrap=True)
        self.chart = GroupedBarChart()
        self.chart.setMinimumHeight(200)
        self.table = QLabel(wordWrap=True)
        self.scenario_table = QLabel(wordWrap=True)
        """Success rate per scenario and model; where each failed."""
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.heading)
        layout.addWidget(self.chart, 1)
        layout.addWidget(self.table)
        layout.addWidget(self.scenario_table)
        self.clear(
            "Evaluate a language model before and after training "
            "(llm.evaluate with a baseline) to compare them here."
        )

    def clear(self, text: str = "") -> None:
        self.comparison = None
        self.heading.setText(f"<i>{html.escape(text)}</i>")
        self.chart.set_data([], {})
        self.table.clear()
        self.scenario_table.clear()

    def load(self, path: str | Path) -> bool:
        """Show the report at ``path``; a bad file shows one sentence."""
        try:
            comp = load_report(path)
        except ReportError as exc:
            self.clear(str(exc))
            return False
        self.show_comparison(comp)
        return True

    def show_comparison(self, comp: Comparison) -> None:
        self.comparison = comp
        titles = [title for _, title in comp.metrics]
        self.chart.set_data(
            titles, {label: comp.values[label] for label in comp.labels}
        )
        self.heading.setText(
            f"<b>Evaluation</b> on {html.escape(comp.env)} — {comp.episodes} "
            "episodes per model"
        )
        head = "".join(
            f"<th align='right'>{html.escape(lb)}</th>" for lb in comp.labels
        )
        if len(comp.labels) == 2:
            head += "<th align='right'>change</th>"
        rows = []
        for i, (_, title) in enumerate(comp.metrics):
            cells = [comp.values[lb][i] for lb in comp.labels]
            text = "".join(
                f"<td align='right'>{'' if v is None else f'{v:.3g}'}</td>"
                for v in cells
            )
            if len(cells) == 2 and None not in cells:
                text += f"<td align='right'>{cells[1] - cells[0]:+.3g}</td>"  # type: ignore[operator]
            rows.append(f"<tr><td>{title}</td>{text}</tr>")
        models = "<br>".join(
            f"{html.escape(k)}: {html.escape(v)}" for k, v in comp.models.items()
        )
        self.table.setText(
            f"<table cellspacing='6'><tr><th></th>{head}</tr>{''.join(rows)}</table>"
            f"<span style='color:gray'>{models}</span>"
        )
        self.scenario_table.setText(scenario_html(comp))


def scenario_html(comp: Comparison) -> str:
    """Each scenario's success rate per model, with the trace episode of a
    failure there ("ep 3" in ``eval_<model>.jsonl``); empty without any."""
    if not comp.scenarios:
        return ""
    head = "".join(f"<th align='right'>{html.escape(lb)}</th>" for lb in comp.labels)
    rows = []
    for name, cells in comp.scenarios.items():
        text = ""
        for label in comp.labels:
            rate, failed = cells.get(label, (None, None))
            value = "" if rate is None else f"{rate:.0%}"
            where = "" if failed is None else f" <small>(fails: ep {failed})</small>"
            text += f"<td align='right'>{value}{where}</td>"
        rows.append(f"<tr><td>{html.escape(name)}</td>{text}</tr>")
    return (
        "<b>Success rate by scenario</b> (a failed episode is in the run's "
        f"eval_&lt;model&gt;.jsonl)<table cellspacing='6'><tr><th></th>{head}</tr>"
        f"{''.join(rows)}</table>"
    )


class EvaluationReports(QWidget):
    """A report chosen from a list (the project's), shown as a comparison."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.report_box = QComboBox()
        self.report_box.currentIndexChanged.connect(self._on_report_box_changed)
        self.report = ComparisonReport()
        row = QHBoxLayout()
        row.addWidget(QLabel("Report:"))
        row.addWidget(self.report_box, 1)
        layout = QVBoxLayout(self)
        layout.addLayout(row)
        layout.addWidget(self.report, 1)

    def set_reports(self, reports: Sequence[tuple[str, str]]) -> None:
        """List the (title, path) ``reports``; the one chosen stays chosen."""
        current = self.report_box.currentData()
        self.report_box.blockSignals(True)
        self.report_box.clear()
        for title, path in reports:
            self.report_box.addItem(title, path)
        index = max(0, self.report_box.findData(current))
        self.report_box.blockSignals(False)
        if reports:
            self.report_box.setCurrentIndex(index)
            self._on_report_box_changed(index)
        else:
            self.report.clear(
                "No evaluation reports yet: run llm.evaluate, or a flow's "
                "Evaluate node, with a baseline to compare a model before and "
                "after training."
            )

    def _on_report_box_changed(self, index: int) -> None:
        path = self.report_box.itemData(index)
        if path:
            self.report.load(path)
