"""The workflow editor's inspector: the fields of the selected status or
transition, the tools and the episode's settings. It only holds the
widgets; the editor (``workflow_editor``) fills them and turns their edits
into commands."""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QStackedWidget,
    QTableWidget,
    QVBoxLayout,
    QWidget,
)

from studio.environments.fields import FieldForm

WORKFLOW_FIELDS: list[tuple[str, dict[str, Any]]] = [
    (
        "workflow.max_steps",
        {
            "name": "max_steps",
            "type": "int",
            "default": 50,
            "min": 1,
            "help": "Steps before an episode is cut off.",
            "title": "Max steps",
        },
    ),
    (
        "workflow.rewards.per_step",
        {
            "name": "per_step",
            "type": "float",
            "default": 0.0,
            "help": "Reward added every step (usually a small cost).",
            "title": "Reward per step",
        },
    ),
    (
        "workflow.rewards.invalid_tool",
        {
            "name": "invalid_tool",
            "type": "float",
            "default": 0.0,
            "help": "Reward for a tool that is not valid in the current status.",
            "title": "Invalid tool",
        },
    ),
    (
        "workflow.rewards.success_bonus",
        {
            "name": "success_bonus",
            "type": "float",
            "default": 0.0,
            "help": "Added when a success status is reached.",
            "title": "Success bonus",
        },
    ),
    (
        "workflow.rewards.status_mode",
        {
            "name": "status_mode",
            "type": "choice",
            "choices": ["enter", "potential"],
            "default": "enter",
            "help": "'enter': a status's reward each time it is entered; "
            "'potential': the change in reward, 0 where an episode ends (guides "
            "without paying detours; the success bonus pays for finishing).",
            "title": "Status rewards",
        },
    ),
    (
        "workflow.tasks.data",
        {
            "name": "data",
            "type": "str",
            "default": "",
            "help": "Mock data in the RL Hub Jira format, relative to the project.",
            "title": "Task data",
        },
    ),
    (
        "workflow.tasks.use_task_status",
        {
            "name": "use_task_status",
            "type": "bool",
            "default": False,
            "help": "Start each episode in the task's own status.",
            "title": "Start in task status",
        },
    ),
    (
        "workflow.tasks.use_task_target",
        {
            "name": "use_task_target",
            "type": "bool",
            "default": False,
            "help": "Succeed on the task's target status.",
            "title": "Task target is success",
        },
    ),
]


class WorkflowInspector(QWidget):
    """Fields of the selected status or transition, the tools, the settings."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.stack = QStackedWidget()
        self.none_label = QLabel(
            "Select a status or a transition on the canvas.\n\n"
            "Double-click empty space to add a status; drag the dot on a "
            "status's right edge onto another status to add a transition.",
            wordWrap=True,
        )
        self.none_label.setStyleSheet("color: palette(mid);")
        self.stack.addWidget(self.none_label)

        status_page = QWidget()
        form = QFormLayout(status_page)
        self.status_name = QLineEdit()
        self.status_start = QCheckBox("Episodes start here")
        self.status_terminal = QCheckBox("Ends the episode")
        self.status_success = QCheckBox("Counts as success")
        self.status_reward = QLineEdit(placeholderText="none")
        self.status_reward.setToolTip(
            "Reward weight of the status (see Status rewards)."
        )
        self.status_error = QLabel(wordWrap=True)
        self.status_error.setStyleSheet("color: #d62728;")
        form.addRow("Name", self.status_name)
        form.addRow("Start", self.status_start)
        form.addRow("Terminal", self.status_terminal)
        form.addRow("Success", self.status_success)
        form.addRow("Reward", self.status_reward)
        form.addRow(self.status_error)
        self.stack.addWidget(status_page)

        transition_page = QWidget()
        form = QFormLayout(transition_page)
        self.transition_from = QComboBox()
        self.transition_tool = QComboBox(editable=True)
        self.transition_tool.setInsertPolicy(QComboBox.InsertPolicy.NoInsert)
        self.transition_to = QComboBox()
        self.transition_probability = QLineEdit(placeholderText="the rest (of 1)")
        self.transition_probability.setToolTip(
            "Chance of this outcome among the transitions with the same status "
            "and tool; empty takes what the others leave."
        )
        self.transition_reward = QLineEdit(placeholderText="none")
        self.transition_error = QLabel(wordWrap=True)
        self.transition_error.setStyleSheet("color: #d62728;")
        form.addRow("From", self.transition_from)
        form.addRow("Tool", self.transition_tool)
        form.addRow("To", self.transition_to)
        form.addRow("Probability", self.transition_probability)
        form.addRow("Reward", self.transition_reward)
        form.addRow(self.transition_error)
        self.stack.addWidget(transition_page)

        selection = QGroupBox("Selection")
        QVBoxLayout(selection).addWidget(self.stack)

        tools_box = QGroupBox("Tools (actions, in order)")
        self.tools_table = QTableWidget(0, 2)
        self.tools_table.setHorizontalHeaderLabels(["Name", "Description"])
        self.tools_table.horizontalHeader().setSectionResizeMode(
            1, QHeaderView.ResizeMode.Stretch
        )
        self.tools_table.verticalHeader().hide()
        self.tools_table.setMinimumHeight(150)
        self.add_tool_button = QPushButton("Add tool")
        self.remove_tool_button = QPushButton("Remove tool")
        row = QHBoxLayout()
        row.addWidget(self.add_tool_button)
        row.addWidget(self.remove_tool_button)
        row.addStretch(1)
        tools_layout = QVBoxLayout(tools_box)
        tools_layout.addWidget(self.tools_table)
        tools_layout.addLayout(row)

        settings_box = QGroupBox("Episode and rewards")
        self.settings = FieldForm(WORKFLOW_FIELDS)
        QVBoxLayout(settings_box).addWidget(self.settings)

        content = QWidget()
        layout = QVBoxLayout(content)
        layout.addWidget(selection)
        layout.addWidget(tools_box)
        layout.addWidget(settings_box)
        layout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(content)
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll)
        self.setMinimumWidth(270)

    def transition_widgets(self) -> dict[str, QWidget]:
        return {
            "from": self.transition_from,
            "tool": self.transition_tool,
            "to": self.transition_to,
            "probability": self.transition_probability,
            "reward": self.transition_reward,
        }

    def status_widgets(self) -> dict[str, QWidget]:
        return {
            "statuses": self.status_name,
            "start": self.status_start,
            "terminal": self.status_terminal,
            "success": self.status_success,
            "reward": self.status_reward,
        }


__all__ = ["WORKFLOW_FIELDS", "WorkflowInspector"]
