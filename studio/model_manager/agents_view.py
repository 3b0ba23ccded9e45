"""The Models workspace's Agents tab: the project's agents as the promotion
gate sees them (issue 32).

Each agent's versions with their role (current, previous, candidate), the
gate's status and its reason sentence, the evaluation the gate compares and
their runs' health warnings; the agent's RL switch and the project's; and
Promote / Roll back, each with the reason the promotion log keeps. Every
change is an ``agent.*`` request answered by the engine with the code the
service's routes and ``rl-studio-engine agent`` use
(:mod:`engine.store.promotion`), and the view redraws from its reply.
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from studio.common import fmt_time
from studio.model_manager.controller import ModelsController

COLUMNS = ("Version", "Role", "Gate", "Evaluation", "Health", "Gate's decision")
REFUSED = QColor("#b35c00")
"""A version the gate kept a candidate."""
CURRENT = QColor("#1b7f3b")


def evaluation_text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "—"
    return f"{value:.4g}"


def version_cells(version: dict[str, Any]) -> list[str]:
    """One version's row of the table, in :data:`COLUMNS` order."""
    warnings = version.get("warnings") or []
    health = f"{len(warnings)} warning(s): {warnings[0]}" if warnings else "ok"
    return [
        str(version["version"]),
        str(version.get("role") or ""),
        str(version.get("status") or ""),
        evaluation_text(version.get("evaluation")),
        health,
        str(version.get("reason") or ""),
    ]


class AgentsView(QWidget):
    def __init__(self, controller: ModelsController, parent: QWidget | None = None):
        super().__init__(parent)
        self.controller = controller
        self.overview: dict[str, Any] = {"rl_enabled": True, "agents": []}
        """The engine's last ``agent.list`` reply."""
        self.project_switch = QCheckBox("Serve RL models (the project's switch)")
        self.project_switch.setToolTip(
            "Off: every agent answers act from its base model or rule policy."
        )
        self.project_switch.clicked.connect(self._on_project_switch_clicked)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.agent_list = QComboBox()
        self.agent_list.setMinimumContentsLength(16)
        self.agent_list.currentIndexChanged.connect(self._on_agent_list_index_changed)
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        self.title.setWordWrap(True)
        self.agent_switch = QCheckBox("Serve RL models (this agent's switch)")
        self.agent_switch.clicked.connect(self._on_agent_switch_clicked)
        self.versions = QTableWidget(0, len(COLUMNS))
        self.versions.setHorizontalHeaderLabels(list(COLUMNS))
        self.versions.setSelectionBehavior(
            QAbstractItemView.SelectionBehavior.SelectRows
        )
        self.versions.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.versions.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.versions.verticalHeader().hide()
        self.versions.setWordWrap(False)
        header = self.versions.horizontalHeader()
        for column in range(len(COLUMNS) - 1):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.versions.itemSelectionChanged.connect(self._on_versions_selection_changed)
        self.decision = QLabel()
        """The selected version's gate decision, whole."""
        self.decision.setWordWrap(True)
        self.decision.setTextFormat(Qt.TextFormat.RichText)
        self.why = QLineEdit()
        self.why.setPlaceholderText("Why (kept in the promotion log)")
        self.why.textChanged.connect(self._update_buttons)
        self.promote_button = QPushButton("Promote selected")
        self.promote_button.clicked.connect(self._on_promote_button_clicked)
        self.rollback_button = QPushButton("Roll back")
        self.rollback_button.clicked.connect(self._on_rollback_button_clicked)
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumHeight(110)
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.setStyleSheet("color: #b00020")
        self._lay_out()
        controller.agents_changed.connect(self._on_controller_agents_changed)
        controller.agents_failed.connect(self._on_controller_agents_failed)
        self._show()

    def _lay_out(self) -> None:
        project = QHBoxLayout()
        project.addWidget(self.project_switch)
        project.addStretch(1)
        project.addWidget(self.refresh_button)
        top = QHBoxLayout()
        top.addWidget(QLabel("Agent"))
        top.addWidget(self.agent_list)
        top.addWidget(self.agent_switch)
        top.addStretch(1)
        actions = QHBoxLayout()
        actions.addWidget(self.why, 1)
        actions.addWidget(self.promote_button)
        actions.addWidget(self.rollback_button)
        layout = QVBoxLayout(self)
        layout.addLayout(project)
        layout.addLayout(top)
        layout.addWidget(self.message)
        layout.addWidget(self.title)
        layout.addWidget(self.versions, 1)
        layout.addWidget(self.decision)
        layout.addLayout(actions)
        layout.addWidget(QLabel("Promotion log, newest first"))
        layout.addWidget(self.log_view)

    # ------------------------------------------------------------ queries
    def agent(self) -> dict[str, Any] | None:
        """The agent shown (its overview)."""
        row = self.agent_list.currentIndex()
        agents = self.overview["agents"]
        return agents[row] if 0 <= row < len(agents) else None

    def selected_version(self) -> dict[str, Any] | None:
        agent = self.agent()
        rows = {i.row() for i in self.versions.selectedIndexes()}
        if agent is None or len(rows) != 1:
            return None
        (row,) = rows
        return dict(agent["versions"][row]) if row < len(agent["versions"]) else None

    # ------------------------------------------------------------ engine
    def refresh(self) -> None:
        self.controller.request_agents()

    def _on_controller_agents_changed(self, overview: dict[str, Any]) -> None:
        # The message stays until the user acts again: a refresh that another
        # change started (the supervisor's look at the agents store each
        # second) arrived after a refusal and wiped its sentence.
        self.overview = overview
        self._show()

    def _on_controller_agents_failed(self, message: str) -> None:
        self.message.setText(message)
        self._show()  # the switches go back to what the engine last said

    # ------------------------------------------------------------- drawing
    def _show(self) -> None:
        shown = self.agent()
        names = [str(a["name"]) for a in self.overview["agents"]]
        self.project_switch.setChecked(bool(self.overview.get("rl_enabled", True)))
        self.agent_list.blockSignals(True)
        self.agent_list.clear()
        for agent in self.overview["agents"]:
            self.agent_list.addItem(f"{agent['name']}  ·  {agent['current'] or '—'}")
        keep = names.index(shown["name"]) if shown and shown["name"] in names else 0
        self.agent_list.setCurrentIndex(keep if names else -1)
        self.agent_list.blockSignals(False)
        self._show_agent()

    def _show_agent(self) -> None:
        agent = self.agent()
        self.agent_switch.setEnabled(agent is not None)
        self.versions.setRowCount(0)
        self.decision.clear()
        if agent is None:
            self.title.setText("No agents: a run or flow that names an agent adds one.")
            self.agent_switch.setChecked(False)
            self.log_view.clear()
            self._update_buttons()
            return
        self.agent_switch.setChecked(bool(agent["rl_enabled"]))
        metric = agent["gate_metric"] or "no metric"
        header = self.versions.horizontalHeaderItem(COLUMNS.index("Evaluation"))
        if header is not None:
            header.setText(agent["gate_metric"] or "Evaluation")
        better = "higher" if agent["higher_is_better"] else "lower"
        self.title.setText(
            f"<b>{html.escape(agent['name'])}</b> — current "
            f"<b>{agent['current'] or '—'}</b>, previous {agent['previous'] or '—'}"
            + (f", pinned to {agent['pin']}" if agent["pin"] else "")
            + f"<br><span style='color:gray'>The gate compares {html.escape(metric)}"
            f" ({better} is better) with a tolerance of {agent['tolerance']:g}.</span>"
        )
        for row, version in enumerate(agent["versions"]):
            self.versions.insertRow(row)
            for column, text in enumerate(version_cells(version)):
                item = QTableWidgetItem(text)
                item.setToolTip(text)
                if version.get("role") == "current":
                    item.setForeground(QBrush(CURRENT))
                    font = QFont(item.font())
                    font.setBold(True)
                    item.setFont(font)
                elif version.get("status") == "candidate" and version.get("reason"):
                    item.setForeground(QBrush(REFUSED))
                self.versions.setItem(row, column, item)
        self.log_view.setPlainText(
            "\n".join(
                f"{fmt_time(e['time'])}  {e['by']}  {e['reason']}"
                for e in reversed(agent["log"])
            )
        )
        self._update_buttons()

    def _on_versions_selection_changed(self) -> None:
        version = self.selected_version()
        if version is None:
            self.decision.clear()
        else:
            warnings = "".join(
                f"<br><span style='color:#b35c00'>Warning: {html.escape(w)}</span>"
                for w in version.get("warnings") or []
            )
            self.decision.setText(
                f"<b>{version['version']}</b> ({html.escape(version['status'])}): "
                f"{html.escape(version.get('reason') or 'not decided yet')}{warnings}"
            )
        self._update_buttons()

    def _update_buttons(self) -> None:
        agent, version = self.agent(), self.selected_version()
        why = bool(self.why.text().strip())
        self.promote_button.setEnabled(
            why and version is not None and version.get("role") != "current"
        )
        self.rollback_button.setEnabled(
            why and agent is not None and agent["current"] is not None
        )

    # ------------------------------------------------------------ intents
    def _on_agent_list_index_changed(self, index: int) -> None:
        self._show_agent()

    def _on_project_switch_clicked(self, checked: bool) -> None:
        self.message.clear()
        self.controller.switch_agent("", checked)

    def _on_agent_switch_clicked(self, checked: bool) -> None:
        self.message.clear()
        agent = self.agent()
        if agent is not None:
            self.controller.switch_agent(str(agent["name"]), checked)

    def _on_promote_button_clicked(self) -> None:
        self.message.clear()
        agent, version = self.agent(), self.selected_version()
        if agent is None or version is None:
            return
        number = int(str(version["version"]).lstrip("v"))
        self.controller.promote_agent(str(agent["name"]), number, self.why.text())
        self.why.clear()

    def _on_rollback_button_clicked(self) -> None:
        self.message.clear()
        agent = self.agent()
        if agent is not None:
            self.controller.rollback_agent(str(agent["name"]), self.why.text())
            self.why.clear()
