"""Models: the model manager.

Every model of the project (SB3 policies, base models, adapters, merged
models, GGUF and ONNX files) and of the connected Ollama server in one
table; the selected model's lineage as a chain, its metrics and details;
actions that run in the engine (evaluate, play, export, deploy, one-click
export to Ollama) with their progress; the language-model trace viewer and
the before/after evaluation report.

The workspace composes its parts: the Ollama server bar
(``ollama_bar``), the table (``model_table``), the actions and their dialogs
(``actions``), the run line (``action_progress``), and the tabs: Details
(``details_pane``), Evaluate / Play (``run_results``), Traces
(``trace_viewer``), the evaluation report (``eval_report``) and Agents
(``agents_view``: the agents' versions, the gate's decisions and the
switches).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QLabel,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from studio.lifetime import subscribe
from studio.model_manager.action_progress import ActionProgress, purpose_title
from studio.model_manager.actions import ModelActions
from studio.model_manager.agents_view import AgentsView
from studio.model_manager.controller import ModelsController
from studio.model_manager.details_pane import ModelDetailsPane
from studio.model_manager.eval_report import EvaluationReports
from studio.model_manager.model_table import ModelTable
from studio.model_manager.ollama_bar import OllamaServerBar
from studio.model_manager.run_results import RunResultsPane
from studio.model_manager.trace_viewer import TraceViewer
from studio.session import Session
from studio.state.model_catalog import evaluation_reports, key_metric, ollama_record
from widgets.fit import make_room
from widgets.flow_layout import FlowLayout

__all__ = ["ModelsWorkspace", "key_metric"]


class ModelsWorkspace(QWidget):
    train_requested = Signal(dict)
    """Continue training…: the main window opens the New run dialog with
    these ``rl.train`` values."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self._shown_once = False
        self._lent: list[int] = []
        """The table's and the tabs' widths before the Traces tab borrowed
        some; empty when nothing is lent."""
        self.controller = ModelsController(session, self)
        self.server = OllamaServerBar(self.controller)
        self.table = ModelTable()
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.action_bar = ModelActions(session, self.controller, self.table.selected)
        self.action_bar.models_changed.connect(self._on_action_bar_models_changed)
        self.action_bar.train_requested.connect(self.train_requested)
        self.progress = ActionProgress(session, self.controller)
        self.details = ModelDetailsPane(self._state, self.controller)
        self.details.selection_requested.connect(self.select)
        self.results = RunResultsPane()
        self.trace_viewer = TraceViewer()
        self.trace_viewer.retrain_requested.connect(self._on_retrain_requested)
        self.reports = EvaluationReports()
        self.agents = AgentsView(self.controller)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.details, "Details")
        self.tabs.addTab(self.results, "Evaluate / Play")
        self.tabs.addTab(self.trace_viewer, "Traces")
        self.tabs.addTab(self.reports, "Evaluation report")
        self.tabs.addTab(self.agents, "Agents")
        self.tabs.currentChanged.connect(self._on_tabs_current_changed)
        self._lay_out()
        self.controller.ollama_models_changed.connect(self._on_ollama_models_changed)
        self.controller.action_started.connect(self._on_action_started)
        self.controller.action_ended.connect(self._on_action_ended)
        session.run_ended.connect(self._on_session_run_ended)
        subscribe(self._state, self, self._on_state_changed)
        self._on_state_changed("reset", "")

    def _lay_out(self) -> None:
        # The header wraps where the window is narrow: its server bar and
        # three buttons made the window 1053 px wide at least, more than a
        # 1024-px screen.
        header_row = QWidget()
        header = FlowLayout(header_row)
        header.addWidget(QLabel("<h2 style='margin:0'>Models</h2>"))
        header.addWidget(self.server)
        header.addWidget(self.action_bar.hub_button)
        header.addWidget(self.action_bar.agent_button)
        header.addWidget(self.action_bar.import_button)
        split = self._split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.tabs)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        split.setSizes([600, 680])
        layout = QVBoxLayout(self)
        layout.addWidget(header_row)
        layout.addWidget(self.server.status)
        layout.addWidget(self.action_bar)
        layout.addWidget(split, 1)
        layout.addWidget(self.progress)
        layout.addWidget(self.action_bar.pipeline_view)

    # ------------------------------------------------------------ queries
    def records(self) -> list[dict[str, Any]]:
        return list(self.table.model.records)

    def selected(self) -> dict[str, Any] | None:
        return self.table.selected()

    def select(self, model_id: str) -> None:
        self.table.select_keys([model_id])

    # ------------------------------------------------------------- model
    def _rebuild(self) -> None:
        listed = self.controller.ollama_listed_host
        host = listed or self.controller.ollama_host
        ollama = [ollama_record(o, host) for o in self.controller.ollama_models]
        self.table.show_models(self._state.models, ollama, listed)
        self._show_selection()

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self.details.forget_lineage()
            self._rebuild()
            if not self.table.selected_keys() and self._state.models:
                self.select(self._state.models[-1]["id"])  # the newest
            self.trace_viewer.set_project(self._state.path)
            self._refresh_reports()
        if what == "reset" and self.tabs.currentWidget() is self.agents:
            self.agents.refresh()

    def _on_session_run_ended(self, run_id: str, status: str, reason: str) -> None:
        if self.tabs.currentWidget() is self.agents:
            self.agents.refresh()  # the run may have given an agent a version

    def showEvent(self, event) -> None:  # type: ignore[no-untyped-def]
        super().showEvent(event)
        if not self._shown_once:
            self._shown_once = True
            self.server.refresh()

    def _on_ollama_models_changed(self, models: list[dict[str, Any]]) -> None:
        self._rebuild()

    def _on_action_bar_models_changed(self) -> None:
        # An export to Ollama ended: the server lists a new model, and a
        # listing from before it would call the deployment "not on server"
        # until Refresh.
        self._rebuild()
        self.server.refresh()

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        self._show_selection()

    def _show_selection(self) -> None:
        model = self.selected()
        self.action_bar.update_for(model)
        self.details.show_model(model, self.table.model.records)

    # ------------------------------------------------------ action runs
    def _on_action_started(self, run_id: str, purpose: str) -> None:
        if purpose in ("evaluate", "play", "record", "hub.push"):
            self.tabs.setCurrentWidget(self.results)
            self.results.show_running(purpose_title(purpose), purpose == "play")

    def _on_action_ended(
        self, run_id: str, purpose: str, status: str, reason: str
    ) -> None:
        if purpose in ("hub.download", "hub.agent", "llm.import"):
            return  # the run line says how it ended
        if status != "completed":
            self.results.show_failed(purpose_title(purpose), status, reason)
        elif purpose == "retrain":
            self.trace_viewer.reload_suggestions()
        elif purpose == "evaluate":
            self.results.show_evaluation(self.controller.read_preview(run_id))
        elif purpose == "play":
            self.results.show_play(self.controller.read_preview(run_id))
        elif purpose == "record":
            self.results.show_video(self.controller.run_summary(run_id))
        elif purpose == "hub.push":
            self.results.show_card(self.controller.run_summary(run_id))
        elif purpose == "deploy":
            self.server.refresh()

    def _on_retrain_requested(self, config: dict[str, Any]) -> None:
        self.controller.start_action(
            "retrain", "reward.train", config, {"id": ""}, name="Retrain reward model"
        )

    # ------------------------------------------------------------ reports
    def _on_tabs_current_changed(self, index: int) -> None:
        self._lend_width(self.tabs.widget(index) is self.trace_viewer)
        if self.tabs.widget(index) is self.trace_viewer:
            self.trace_viewer.refresh()
        elif self.tabs.widget(index) is self.reports:
            self._refresh_reports()
        elif self.tabs.widget(index) is self.agents:
            self.agents.refresh()

    def _lend_width(self, traces: bool) -> None:
        """The Traces tab borrows width from the models table (labelling
        needs no model); another tab gives it back, as the Training
        workspace's Sweep tab does with height."""
        if not traces:
            if self._lent:
                self._split.setSizes(self._lent)
                self._lent = []
            return
        self._lent = self._lent or self._split.sizes()
        frame = self.tabs.width() - self.trace_viewer.width()
        make_room(self._split, 1, frame + self.trace_viewer.wanted_width())

    def evaluation_reports(self) -> list[tuple[str, str]]:
        """(title, report path) of every evaluation report of the project's
        runs (``llm.evaluate`` runs and flows' Evaluate nodes)."""
        return evaluation_reports(self._state.runs.values())

    def _refresh_reports(self) -> None:
        self.reports.set_reports(self.evaluation_reports())

    def show_report(self, path: str) -> bool:
        """Show a report file (also one not made by a run of this project)."""
        self.tabs.setCurrentWidget(self.reports)
        return self.reports.report.load(path)
