"""The trace viewer's auto-labeler: the suggestions of the last reward
model (``reward.train``) for the unlabelled steps of the open trace file,
least confident first, Accept / Correct / Retrain, and a plot of how far
each model agreed with the person's labels over time (held out at
training, and in reviews)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from engine.store.labels import LabelStore, Suggestion
from studio.model_manager.trace_browser import LABEL_COLORS
from studio.state.traces import TraceFile, step_row
from widgets.record_table import Column, RecordTable
from widgets.theme import follow_palette, style_plot

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


def _action_of(trace: TraceFile, sug: Suggestion) -> str:
    if sug.episode < len(trace.summaries):
        steps = trace.episodes[sug.episode].get("steps") or []
        if sug.step < len(steps):
            return str(step_row(steps[sug.step], sug.step)["action"])
    return ""


class AutoLabelerPanel(QGroupBox):
    """The open suggestions, what to do with them, and the agreement plot."""

    review_requested = Signal(bool)
    """Accept (False) or correct (True) the selected suggestions."""
    retrain_requested = Signal()
    """A new reward model on the labels as they are now."""
    step_requested = Signal(int, int)
    """Show this (episode, step): the chosen suggestion's."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Auto-labeler", parent)
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
        # Least confident first, as suggested: no column sorts them.
        self.suggestions.view.setSortingEnabled(False)
        self.suggestions.model.sort(-1)
        self.suggestions.selection_changed.connect(
            self._on_suggestion_selection_changed
        )
        self.accept_button = QPushButton("Accept (A)")
        self.accept_button.clicked.connect(lambda: self.review_requested.emit(False))
        self.correct_button = QPushButton("Correct (C)")
        self.correct_button.clicked.connect(lambda: self.review_requested.emit(True))
        self.retrain_button = QPushButton("Retrain")
        self.retrain_button.setToolTip(
            "Train a new reward model on the labels as they are now."
        )
        self.retrain_button.clicked.connect(lambda: self.retrain_requested.emit())
        self.agreement_plot = pg.PlotWidget()
        self.agreement_plot.setFixedHeight(110)
        self.agreement_plot.setYRange(0, 1)
        self.agreement_plot.setLabel("left", "agreement")
        self.agreement_plot.setLabel("bottom", "review")
        # pyqtgraph draws on black unless told: the theme's plot colours,
        # and again when the theme changes.
        follow_palette(
            self.agreement_plot,
            lambda dark: style_plot(self.agreement_plot, dark),
        )
        self._held_curve = self.agreement_plot.plot(
            [], [], pen=None, symbol="o", symbolSize=6, name="held out"
        )
        self._review_curve = self.agreement_plot.plot(
            [], [], pen=pg.mkPen("#2ca02c", width=2), symbol="t", symbolSize=6
        )
        layout = QVBoxLayout(self)
        layout.addWidget(self.suggestion_info)
        layout.addWidget(self.suggestions, 1)
        buttons = QHBoxLayout()
        for button in (self.accept_button, self.correct_button, self.retrain_button):
            buttons.addWidget(button)
        layout.addLayout(buttons)
        layout.addWidget(self.agreement_plot)

    def has_suggestions(self) -> bool:
        return bool(self._suggested or self.suggestions.model.records)

    def show_suggestions(
        self, store: LabelStore | None, trace: TraceFile | None
    ) -> None:
        """The open suggestions for ``trace``, and the agreement plot."""
        if store is None or trace is None:
            self._suggested = []
            self.suggestions.set_records([])
            return
        self._suggested = store.suggestions(trace.name)
        records = [
            {
                "id": str(i),
                "where": f"{sug.episode}:{sug.step}",
                "value": sug.value,
                "confidence": sug.confidence,
                "action": _action_of(trace, sug),
            }
            for i, sug in enumerate(self._suggested)
        ]
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

    def _on_suggestion_selection_changed(self, keys: list[str]) -> None:
        if keys:
            sug = self._suggested[int(keys[0])]
            self.step_requested.emit(sug.episode, sug.step)

    def retrain_config(
        self, project_dir: str, store: LabelStore | None
    ) -> dict[str, Any] | None:
        """A ``reward.train`` config like the one that made the current
        suggestions (or the last reward model of ``store``); None without
        one."""
        models = [s.model for s in self._suggested]
        if not models and store is not None:
            history = store.agreement()
            models = [history[-1].model] if history else []
        if not models or not project_dir:
            return None
        meta_file = Path(project_dir) / REWARD_MODELS / models[0] / "reward_model.json"
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
