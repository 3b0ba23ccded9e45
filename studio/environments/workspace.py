"""Environments: the designer of the project's environment specs.

The project's specs on the left; the open one on the right, in an editor
that fits its kind (a state-machine canvas and an inspector for workflows, a
grid painter for grids, a form for gymnasium ids built from the env's
signature, a code editor for python files) beside a JSON view that stays in
sync. Every edit of the spec is an undo command on
:attr:`EnvironmentsWorkspace.undo_stack`; after each one an autosave copy is
written to ``envs/.autosave/``, and opening a spec whose autosave is newer
offers to restore it. (A python env's code is its own file, with the code
editor's own undo.) Validate asks the engine to check the spec and
shows each problem on the element or field that causes it.

Preview plays the spec *as edited* (the unsaved document travels with the
``env_preview`` run, and its config.json keeps it): users tune rewards and
look again many times, and saving each time would write half-finished specs
over the file and blur what "modified" means. "Train this environment"
saves first instead, because a training run must name a spec on disk that
reproduces it; it asks the main window (``train_requested``) to open the
Training dialog with the env and a fitting algorithm preselected.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from engine.contract import atomic_write_text
from studio.common import fmt_time
from studio.document_session import DocumentSession
from studio.environments import commands as cmd
from studio.environments.controller import EnvController
from studio.environments.fields import FieldForm, monospace
from studio.environments.grid_editor import GridEditor
from studio.environments.gymnasium_editor import GymnasiumEditor
from studio.environments.preview import EnvPreviewPanel
from studio.environments.python_editor import PythonEditor
from studio.lifetime import subscribe
from studio.session import Session
from studio.state.env_design import (
    KINDS,
    NAME_PATTERN,
    PYTHON_TEMPLATE,
    SPEC_SUFFIX,
    WILDCARD,
    DesignError,
    EnvDesign,
    Target,
    autosave_path,
    layout_path,
    new_spec,
    problem_target,
    read_spec_file,
    spec_text,
)
from studio.state.env_preview import (
    PREVIEW_FRAMES,
    grid_preview_frames,
    matching_policies,
    train_config,
)
from studio.state.project_state import ProjectState
from widgets.banner import Banner
from widgets.param_form import ERROR_STYLE
from widgets.record_table import Column, RecordTable
from widgets.state_machine_editor import (
    Edge,
    StateMachineEditor,
    circular_layout,
    layered_layout,
    text_width,
)

PREFERRED_FIRST = "jira_issue_resolution"
"""Opened first in a project that holds it (the example to start from)."""
JSON_DEBOUNCE_MS = 400
TRACE_EPISODES = 5
"""Episodes of a preview whose every step goes into the trace table."""
SEVERITY_COLORS = {"error": "#d62728", "warning": "#b8860b", "info": "#1f77b4"}

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
            "'potential': the change in reward (cannot be farmed by cycling).",
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


def transition_label(t: dict[str, Any]) -> str:
    label = str(t.get("tool", "?"))
    if t.get("to") == WILDCARD:
        label += " (stays)"
    if isinstance(t.get("probability"), int | float):
        label += f"  p={t['probability']:g}"
    if isinstance(t.get("reward"), int | float):
        label += f"  r={t['reward']:+g}"
    return label


def _parse_optional_float(text: str) -> tuple[float | None, str]:
    text = text.strip()
    if not text:
        return None, ""
    try:
        value = float(text)
    except ValueError:
        return None, f"'{text}' is not a number."
    if value != value or value in (float("inf"), float("-inf")):
        return None, "The value must be a finite number."
    return value, ""


# ---------------------------------------------------------------- inspector


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
        self.status_error = QLabel(styleSheet="color: #d62728;", wordWrap=True)
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
        self.transition_error = QLabel(styleSheet="color: #d62728;", wordWrap=True)
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


# ---------------------------------------------------------------- workspace


class EnvironmentsWorkspace(QWidget):
    """The environment designer. Public methods do what the buttons do,
    without dialogs, so scripts and tests can drive it."""

    document_opened = Signal(str)
    """The path of the spec now being edited."""
    document_saved = Signal(str)
    problems_changed = Signal(list)
    """The problems now shown (dicts as ``env.check`` sends them)."""
    train_requested = Signal(dict)
    """Open the New training run dialog with these values (``env``,
    ``algo``); the main window routes it to the Training workspace."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state: ProjectState = session.state
        self.controller = EnvController(session, self)
        self.model = EnvDesign()
        self.undo_stack = QUndoStack(self)
        self.path: Path | None = None
        self.problems: list[dict[str, Any]] = []
        self._problems_stale = False
        self._source: object | None = None  # the widget whose edit is applied
        self._inspected: tuple[str, Any] = ("", None)
        self._json_error = ""
        self._preview_policy = ""  # name of the policy of the preview running

        self.restore_decider: Callable[[Path, Path], bool] = self._ask_restore
        """Asked (spec file, autosave file) when an autosave is newer."""
        self.confirm_discard: Callable[[str], bool] = self._ask_discard
        """Asked (name) before unsaved changes are dropped."""
        self.confirm_delete: Callable[[str], bool] = self._ask_delete

        self._build()
        self.model.subscribe(self._on_model_changed)
        self.document: DocumentSession[dict[str, Any]] = DocumentSession(
            self.undo_stack,
            autosave_of=lambda p: autosave_path(p) if p is not None else None,
            current_path=lambda: self.path,
            snapshot=lambda: self.model.spec,
            write=lambda spec, file: atomic_write_text(file, spec_text(spec)),
            read=read_spec_file,
            same=operator.eq,
            failed=self._on_autosave_failed,
            read_errors=(DesignError,),
            write_errors=(ValueError,),
            parent=self,
        )
        self.document.modified_changed.connect(self._on_modified_changed)
        self.undo_stack.indexChanged.connect(self._on_stack_index_changed)
        self.controller.check_started.connect(self._on_check_started)
        self.controller.check_finished.connect(self._on_check_finished)
        self.controller.check_failed.connect(self._on_check_failed)
        self.controller.preview_started.connect(self._on_preview_started)
        self.controller.preview_progress.connect(self.preview_panel.set_progress)
        self.controller.preview_finished.connect(self._on_preview_finished)
        self.controller.preview_failed.connect(self._on_preview_failed)
        subscribe(self._state, self, self._on_state_changed)
        self._show_document()
        self._on_state_changed("reset", "")

    # ============================================================ building
    def _build(self) -> None:
        self.table = RecordTable(
            [
                Column("Name", lambda d: d["name"]),
                Column(
                    "Kind",
                    lambda d: d.get("kind", "") if not d.get("error") else "broken",
                    color=lambda d: "#d62728" if d.get("error") else None,
                    tooltip=lambda d: d.get("error") or d.get("description", ""),
                ),
                Column("Modified", lambda d: d.get("modified", 0), fmt_time),
            ],
            key="path",
        )
        self.table.selection_changed.connect(self._on_table_selection_changed)
        self.new_button = QPushButton("New…")
        self.open_button = QPushButton("Open…")
        self.delete_button = QPushButton("Delete")
        self.new_button.clicked.connect(self._on_new_clicked)
        self.open_button.clicked.connect(self._on_open_clicked)
        self.delete_button.clicked.connect(self._on_delete_clicked)
        list_buttons = QHBoxLayout()
        for b in (self.new_button, self.open_button, self.delete_button):
            list_buttons.addWidget(b)
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<h2>Environments</h2>"))
        left_layout.addWidget(self.table, 1)
        left_layout.addLayout(list_buttons)

        # header of the open document
        self.title = QLabel()
        self.title.setTextFormat(Qt.TextFormat.RichText)
        # A long name, the modified mark and "Undo <edit>" must not widen
        # the window: the title gives way (clipped) to the buttons.
        self.title.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.undo_action = self.undo_stack.createUndoAction(self, "Undo")
        self.undo_action.setShortcut(QKeySequence.StandardKey.Undo)
        self.redo_action = self.undo_stack.createRedoAction(self, "Redo")
        self.redo_action.setShortcut(QKeySequence.StandardKey.Redo)
        self.save_action = QAction("Save", self)
        self.save_action.setShortcut(QKeySequence.StandardKey.Save)
        self.save_action.triggered.connect(lambda *_: self.save())
        for action in (self.undo_action, self.redo_action, self.save_action):
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            self.addAction(action)
        self.undo_button = QToolButton()
        self.undo_button.setDefaultAction(self.undo_action)
        self.redo_button = QToolButton()
        self.redo_button.setDefaultAction(self.redo_action)
        self.save_button = QPushButton("Save")
        self.save_button.clicked.connect(lambda *_: self.save())
        self.save_as_button = QPushButton("Save as…")
        self.save_as_button.clicked.connect(self._on_save_as_clicked)
        self.validate_button = QPushButton("Validate")
        self.validate_button.setToolTip(
            "Check the environment in the engine: fields, reachability, rewards, "
            "Gymnasium and SB3 check_env, determinism."
        )
        self.validate_button.clicked.connect(lambda *_: self.validate())
        self.train_button = QPushButton("Train this environment…")
        self.train_button.setToolTip(
            "Save, then open a new training run on this environment with a "
            "fitting algorithm (MaskablePPO for workflows, PPO for discrete "
            "actions, SAC for continuous ones)."
        )
        self.train_button.clicked.connect(lambda *_: self.train())
        header = QHBoxLayout()
        header.addWidget(self.title, 1)
        for w in (
            self.undo_button,
            self.redo_button,
            self.save_button,
            self.save_as_button,
            self.validate_button,
            self.train_button,
        ):
            header.addWidget(w)
        self.banner = Banner()
        self.description = QLineEdit(placeholderText="What is this environment about?")
        self.description.editingFinished.connect(self._on_description_edited)

        # the editor pages
        self.pages = QStackedWidget()
        self.empty_page = QLabel(
            "Open an environment from the list, or press New… to design one.",
            alignment=Qt.AlignmentFlag.AlignCenter,
        )
        self.empty_page.setStyleSheet("color: palette(mid);")
        self.pages.addWidget(self.empty_page)
        self.pages.addWidget(self._build_workflow_page())
        self.pages.addWidget(self._build_grid_page())
        self.pages.addWidget(self._build_gymnasium_page())
        self.pages.addWidget(self._build_python_page())

        self.json_view = QPlainTextEdit()
        monospace(self.json_view)
        self.json_view.textChanged.connect(self._on_json_text_changed)
        self.json_status = QLabel(wordWrap=True)
        self._json_timer = QTimer(self, singleShot=True, interval=JSON_DEBOUNCE_MS)
        self._json_timer.timeout.connect(self._apply_json_text)
        json_page = QWidget()
        json_layout = QVBoxLayout(json_page)
        json_layout.setContentsMargins(0, 0, 0, 0)
        json_layout.addWidget(self.json_view, 1)
        json_layout.addWidget(self.json_status)

        self.preview_panel = EnvPreviewPanel()
        self.preview_panel.preview_requested.connect(
            self._on_preview_panel_preview_requested
        )
        self.preview_panel.stop_requested.connect(self.controller.stop_preview)

        self.tabs = QTabWidget()
        self.tabs.addTab(self.pages, "Design")
        self.tabs.addTab(json_page, "JSON")
        self.tabs.addTab(self.preview_panel, "Preview")

        self.problems_label = QLabel("Problems: press Validate to check.")
        self.problem_list = QTreeWidget()
        self.problem_list.setColumnCount(3)
        self.problem_list.setHeaderLabels(["", "Where", "Problem"])
        self.problem_list.setRootIsDecorated(False)
        self.problem_list.header().setSectionResizeMode(
            0, QHeaderView.ResizeMode.ResizeToContents
        )
        self.problem_list.header().setSectionResizeMode(
            1, QHeaderView.ResizeMode.ResizeToContents
        )
        self.problem_list.itemClicked.connect(self._on_problem_clicked)
        self.problem_list.itemActivated.connect(self._on_problem_clicked)
        problems = QWidget()
        problems_layout = QVBoxLayout(problems)
        problems_layout.setContentsMargins(0, 0, 0, 0)
        problems_layout.addWidget(self.problems_label)
        problems_layout.addWidget(self.problem_list)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.tabs)
        split.addWidget(problems)
        split.setStretchFactor(0, 1)
        split.setSizes([600, 90])

        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addLayout(header)
        right_layout.addWidget(self.banner)
        right_layout.addWidget(self.description)
        right_layout.addWidget(split, 1)

        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setStretchFactor(1, 1)
        main.setSizes([230, 920])
        layout = QVBoxLayout(self)
        layout.addWidget(main)

    def _build_workflow_page(self) -> QWidget:
        self.canvas = StateMachineEditor()
        self.canvas.status_add_requested.connect(self._on_canvas_status_add_requested)
        self.canvas.transition_requested.connect(self._on_canvas_transition_requested)
        self.canvas.statuses_moved.connect(self._on_canvas_statuses_moved)
        self.canvas.selection_changed.connect(self._on_canvas_selection_changed)
        self.canvas.delete_requested.connect(self.delete_selection)
        bar = QHBoxLayout()
        for text, slot, tip in (
            ("Add status", self._on_add_status_clicked, "Add a status"),
            (
                "Delete",
                self.delete_selection,
                "Delete the selected status or transition",
            ),
            (
                "Layered layout",
                lambda: self.auto_layout("layered"),
                "Arrange in layers",
            ),
            (
                "Circle layout",
                lambda: self.auto_layout("circular"),
                "Arrange on a circle",
            ),
            ("Fit", self.canvas.fit, "Show the whole graph"),
        ):
            b = QToolButton(text=text, toolTip=tip)
            b.clicked.connect(lambda *_, s=slot: s())
            bar.addWidget(b)
        bar.addStretch(1)
        legend = QLabel(
            "<span style='color:#2a7de1'>▶ start</span> &nbsp; "
            "<span style='color:#2e9e3e'>▣ success</span> &nbsp; "
            "<span style='color:#c8413a'>▣ terminal</span>"
        )
        bar.addWidget(legend)
        canvas_box = QWidget()
        canvas_layout = QVBoxLayout(canvas_box)
        canvas_layout.setContentsMargins(0, 0, 0, 0)
        canvas_layout.addLayout(bar)
        canvas_layout.addWidget(self.canvas, 1)

        self.inspector = ins = WorkflowInspector()
        ins.status_name.editingFinished.connect(self._on_status_name_edited)
        ins.status_start.toggled.connect(self._on_status_start_toggled)
        ins.status_terminal.toggled.connect(self._on_status_terminal_toggled)
        ins.status_success.toggled.connect(self._on_status_success_toggled)
        ins.status_reward.editingFinished.connect(self._on_status_reward_edited)
        ins.transition_from.activated.connect(
            lambda *_: self._on_transition_edited("from")
        )
        ins.transition_to.activated.connect(lambda *_: self._on_transition_edited("to"))
        ins.transition_tool.activated.connect(
            lambda *_: self._on_transition_edited("tool")
        )
        ins.transition_tool.lineEdit().editingFinished.connect(
            lambda: self._on_transition_edited("tool")
        )
        ins.transition_probability.editingFinished.connect(
            lambda: self._on_transition_edited("probability")
        )
        ins.transition_reward.editingFinished.connect(
            lambda: self._on_transition_edited("reward")
        )
        ins.tools_table.itemChanged.connect(self._on_tools_item_changed)
        ins.add_tool_button.clicked.connect(self._on_add_tool_clicked)
        ins.remove_tool_button.clicked.connect(self._on_remove_tool_clicked)
        ins.settings.values_changed.connect(
            lambda v: self._on_form_values_changed(ins.settings, v)
        )
        page = QSplitter(Qt.Orientation.Horizontal)
        page.addWidget(canvas_box)
        page.addWidget(ins)
        page.setStretchFactor(0, 1)
        page.setSizes([700, 290])
        return page

    def _build_grid_page(self) -> QWidget:
        editor = GridEditor(self.model, self._push, lambda: self._source)
        editor.form.values_changed.connect(
            lambda v: self._on_form_values_changed(editor.form, v)
        )
        self.grid_editor = editor
        # Its widgets under the names the problem marks and scripts use.
        self.grid_painter, self.grid_palette = editor.painter, editor.cell_palette
        self.grid_form = editor.form
        return editor

    def _build_gymnasium_page(self) -> QWidget:
        editor = GymnasiumEditor(
            self.model, self.controller, self._push, lambda: self._source
        )
        self.gym_editor = editor
        # Its widgets under the names the problem marks and scripts use.
        self.gym_id, self.gym_spaces = editor.env_id, editor.spaces
        self.gym_max_steps, self.gym_kwargs = editor.max_steps, editor.kwargs
        self.gym_kwargs_text = editor.kwargs_text
        return editor

    def _build_python_page(self) -> QWidget:
        editor = PythonEditor(
            self.model,
            self.banner,
            self._python_file,
            lambda name: self.confirm_discard(name),
        )
        editor.form.values_changed.connect(
            lambda v: self._on_form_values_changed(editor.form, v)
        )
        editor.code_modified_changed.connect(lambda *_: self._update_title())
        self.python_editor = editor
        # Its widgets under the names the problem marks and scripts use.
        self.python_form, self.python_code = editor.form, editor.code
        self.python_note = editor.note
        return editor

    # ============================================================ documents
    @property
    def is_modified(self) -> bool:
        """Unsaved changes to the spec, or to a python env's code."""
        return self.path is not None and (
            self.document.is_modified() or self.code_modified
        )

    def envs_dir(self) -> Path:
        return Path(self._state.path) / "envs"

    def open_env(self, path: str | Path) -> bool:
        """Open a spec file; False (with a sentence in the banner) if it
        cannot be read. Nothing is lost: the file is left as it is and the
        document being edited stays open."""
        path = Path(path)
        if self.path is not None and path.resolve() == self.path.resolve():
            return True
        try:
            spec = read_spec_file(path)
        except DesignError as exc:
            self.banner.show_message(str(exc), "error")
            self._select_current_row()
            return False
        if not self._may_discard():
            self._select_current_row()
            return False
        restored = self.document.restorable(
            path, spec, self.restore_decider, forget_declined=True
        )
        self._load(spec, path)
        if restored is not None:
            self.undo_stack.push(cmd.ReplaceDocument(self.model, restored))
            self.undo_stack.command(self.undo_stack.count() - 1).setText(
                "Restore autosave"
            )
            self.banner.show_message(
                f"Restored the unsaved changes to {path.name} from its autosave; "
                "Undo goes back to the saved file.",
                "info",
                auto_hide_ms=8000,
            )
        else:
            self.banner.dismiss()
        return True

    def _load(self, spec: dict[str, Any], path: Path | None) -> None:
        positions: dict[str, tuple[float, float]] = {}
        if path is not None and layout_path(path).is_file():
            try:
                raw = json.loads(layout_path(path).read_text(encoding="utf-8"))
                positions = {
                    str(k): (float(v[0]), float(v[1]))
                    for k, v in raw.get("positions", {}).items()
                }
            except (
                OSError,
                ValueError,
                TypeError,
                KeyError,
                IndexError,
                AttributeError,
            ):
                positions = {}
        self.path = path
        self.undo_stack.clear()
        self._inspected = ("", None)
        self._set_problems([], stale=False)
        self.problems_label.setText("Problems: press Validate to check.")
        self.model.restore((spec, positions))
        if self.model.kind == "workflow":
            self.canvas.request_fit()
        self.preview_panel.clear()
        self._refresh_policies()
        self.undo_stack.setClean()
        self._update_title()
        self._select_current_row()
        self.document_opened.emit(str(path) if path else "")

    def _label_width(self) -> float:
        """Widest label of a transition between two different statuses."""
        return text_width(
            transition_label(t)
            for t in self.model.transitions()
            if t.get("from") != t.get("to")
            and WILDCARD not in (t.get("from"), t.get("to"))
        )

    def _fill_missing_positions(self) -> None:
        statuses = self.model.statuses()
        if all(s in self.model.positions for s in statuses):
            return
        auto = layered_layout(
            statuses,
            [(t.get("from"), t.get("to")) for t in self.model.transitions()],
            self.model.start(),
            self._label_width(),
        )
        for s in statuses:
            self.model.positions.setdefault(s, auto.get(s, (0.0, 0.0)))

    def _name_ok(self, name: str) -> bool:
        """True for a valid env name; otherwise the banner says why."""
        if NAME_PATTERN.match(name):
            return True
        self.banner.show_message(
            f"'{name}' is not a valid name: start with a letter and use letters, "
            "digits, '_', '-' and '.'.",
            "error",
        )
        return False

    def new_env(self, kind: str, name: str) -> bool:
        """Create ``envs/<name>.env.json`` from a template of ``kind`` and open it."""
        if kind not in KINDS:
            self.banner.show_message(f"Unknown kind {kind!r}.", "error")
            return False
        if not self._name_ok(name):
            return False
        path = self.envs_dir() / f"{name}{SPEC_SUFFIX}"
        if path.exists():
            self.banner.show_message(
                f"There is already an environment named {name}.", "error"
            )
            return False
        if not self._may_discard():
            return False
        spec = new_spec(kind, name)
        if kind == "python":
            code = self.envs_dir().parent / spec["python"]["file"]
            if not code.exists():
                atomic_write_text(code, PYTHON_TEMPLATE)
        atomic_write_text(path, spec_text(spec))
        self.undo_stack.setClean()  # the old document's changes were dropped
        self.path = None
        self._load(spec, path)
        self._session.refresh_project()
        return True

    def save(self) -> bool:
        """Write the spec atomically (and the canvas layout beside it, and a
        python env's code to its file)."""
        if self.path is None:
            return False
        if not self.save_code():
            return False
        try:
            atomic_write_text(self.path, spec_text(self.model.spec))
            if self.model.kind == "workflow":
                atomic_write_text(
                    layout_path(self.path),
                    json.dumps({"positions": self.model.positions}, indent=1) + "\n",
                )
        except (OSError, ValueError) as exc:
            self.banner.show_message(
                f"Could not save {self.path.name}: {exc}; your changes are still "
                "here and in the autosave.",
                "error",
            )
            return False
        self.document.mark_saved()
        self._update_title()
        self._session.refresh_project()
        self.document_saved.emit(str(self.path))
        return True

    def save_as(self, name: str) -> bool:
        """Save under a new name (``envs/<name>.env.json``) and keep editing it."""
        if self.path is None:
            return False
        if not self._name_ok(name):
            return False
        target = self.envs_dir() / f"{name}{SPEC_SUFFIX}"
        if target.exists() and target.resolve() != self.path.resolve():
            self.banner.show_message(
                f"There is already an environment named {name}; delete it first "
                "or choose another name.",
                "error",
            )
            return False
        old = self.path
        if self.model.name != name:
            self._push(cmd.SetField(self.model, "name", name))
        self.path = target
        if not self.save():
            self.path = old
            return False
        if old != target:
            self.document.remove_autosave(autosave_path(old))
        self._update_title()
        return True

    def delete_env(self, path: str | Path) -> bool:
        path = Path(path)
        if not self.confirm_delete(path.name.removesuffix(SPEC_SUFFIX)):
            return False
        for p in (path, autosave_path(path), layout_path(path)):
            p.unlink(missing_ok=True)
        if self.path is not None and self.path.resolve() == path.resolve():
            self.undo_stack.clear()
            self.path = None
            self._show_document()
        self._session.refresh_project()
        return True

    def validate(self, env_checks: bool = True) -> None:
        """Ask the engine to check the document as it is now (saved or not)."""
        if self.path is None or not self.save_code():
            return
        self.controller.check(self.model.spec, str(self.path), env_checks=env_checks)

    # ------------------------------------------------------------ preview
    def policies(self) -> list[dict[str, Any]]:
        """The project's SB3 policies trained on the open env."""
        if self.path is None:
            return []
        return matching_policies(self._state.models, self.model.spec, self.path)

    def preview(
        self, episodes: int = 20, policy_id: str = "", seed: int | None = None
    ) -> None:
        """Play ``episodes`` of the spec as it is in the editor now, with a
        random policy or the project policy ``policy_id`` (``seed`` None: a
        new one); the Preview tab shows progress, then the results or the
        error."""
        if self.path is None:
            return
        model = next((m for m in self.policies() if m["id"] == policy_id), None)
        if policy_id and model is None:
            self.preview_panel.show_error(
                "That policy is no longer in the project; choose another."
            )
            return
        if not self.save_code():  # the engine imports a python env's file
            return
        self._preview_policy = str(model.get("name", "")) if model else ""
        self.preview_panel.episodes.setValue(episodes)
        self.preview_panel.set_running(True)
        self.controller.preview(
            self.model.spec,
            str(self.path),
            episodes=episodes,
            frames=self._preview_frames(),
            trace_episodes=min(episodes, TRACE_EPISODES),
            model=model,
            seed=seed,
        )

    def _preview_frames(self) -> int:
        """Frames to ask for: fewer for a big grid; an env that cannot draw
        is played without, and the engine says why."""
        if self.model.kind == "grid":
            return grid_preview_frames(*self.model.grid_size())
        return PREVIEW_FRAMES

    def _refresh_policies(self) -> None:
        self.preview_panel.set_policies(self.policies())

    def _on_preview_panel_preview_requested(
        self, episodes: int, policy: str, seed: int
    ) -> None:
        self.preview(episodes, policy, None if seed < 0 else seed)

    def _on_preview_started(self, run_id: str) -> None:
        self.preview_panel.set_running(True)

    def _on_preview_finished(self, data: dict) -> None:
        self.preview_panel.show_result(data, self._preview_policy or "a random policy")

    def _on_preview_failed(self, message: str) -> None:
        self.preview_panel.show_error(message)
        # Put what the engine finds wrong with the spec on its fields.
        self.validate(env_checks=False)

    # ------------------------------------------------------------ training
    def train(self) -> bool:
        """Save, then ask for a training run on this env (``train_requested``
        with the env id and the algorithm that fits it). False when there is
        nothing to train or the save failed."""
        if self.path is None:
            return False
        if self.is_modified:
            if not self.save():
                return False
            self.banner.show_message(
                f"Saved {self.path.name}: training uses the spec on disk.",
                "info",
                auto_hide_ms=6000,
            )
        self.train_requested.emit(train_config(self.model.spec, self._action_space()))
        return True

    def _action_space(self) -> str | None:
        """The env's action space as far as the studio knows it: from the
        catalog for a gymnasium id, else from the last preview of this env."""
        kind = self.model.kind
        described = self.gym_editor.described
        if kind == "gymnasium" and described.get("id") == self.model.get_field(
            "gymnasium.id"
        ):
            return described.get("action_space")
        data = self.preview_panel.data or {}
        if data.get("env_id") == contract.env_id(self.model.name):
            return data.get("action_space")
        return None

    def _may_discard(self) -> bool:
        if not self.is_modified:
            return True
        if self.confirm_discard(self.model.name):
            self.document.remove_autosave()
            self.undo_stack.setClean()
            self.python_code.document().setModified(False)
            return True
        return False

    def _ask_restore(self, path: Path, auto: Path) -> bool:
        answer = QMessageBox.question(
            self,
            "Restore unsaved changes?",
            f"{path.name} has unsaved changes from an earlier session (autosaved "
            f"{fmt_time(auto.stat().st_mtime)}). Restore them?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def _ask_discard(self, name: str) -> bool:
        answer = QMessageBox.question(
            self,
            "Discard changes?",
            f"{name} has unsaved changes. Discard them? (Cancel keeps editing.)",
            QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
        )
        return answer == QMessageBox.StandardButton.Discard

    def _ask_delete(self, name: str) -> bool:
        answer = QMessageBox.question(
            self, "Delete environment", f"Delete the environment {name} from disk?"
        )
        return answer == QMessageBox.StandardButton.Yes

    # ============================================================ list
    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "models":
            self._refresh_policies()
        if what != "reset":
            return
        self._refresh_policies()
        self.table.set_empty_text(
            f"No environments in {self._state.path}/envs yet."
            if self._state.is_open
            else "No project open."
        )
        self.table.set_records(self._state.envs)
        self._select_current_row()
        if self.path is not None and not self.path.exists() and not self.is_modified:
            self.path = None
            self._show_document()
        if self.path is None and self._state.envs:
            docs = [d for d in self._state.envs if not d.get("error")]
            first = next(
                (d for d in docs if d["name"] == PREFERRED_FIRST),
                docs[0] if docs else None,
            )
            if first is not None:
                self.open_env(first["path"])

    def _select_current_row(self) -> None:
        with QSignalBlocker(self.table):
            self.table.select_keys([str(self.path)] if self.path else [])

    def _on_table_selection_changed(self, keys: list[str]) -> None:
        if keys and (self.path is None or keys[0] != str(self.path)):
            self.open_env(keys[0])

    def _on_new_clicked(self) -> None:
        kind, ok = QInputDialog.getItem(
            self, "New environment", "Kind:", list(KINDS), 0, False
        )
        if not ok:
            return
        name, ok = QInputDialog.getText(self, "New environment", "Name:")
        if ok and name:
            self.new_env(kind, name.strip())

    def _on_open_clicked(self) -> None:
        path, _ = QFileDialog.getOpenFileName(
            self,
            "Open environment",
            str(self.envs_dir()),
            "Environment specs (*.env.json);;JSON files (*.json)",
        )
        if path:
            self.open_env(path)

    def _on_save_as_clicked(self) -> None:
        name, ok = QInputDialog.getText(
            self, "Save as", "Name:", text=self.model.name + "_copy"
        )
        if ok and name:
            self.save_as(name.strip())

    def _on_delete_clicked(self) -> None:
        keys = self.table.selected_keys()
        if keys:
            self.delete_env(keys[0])

    # ============================================================ edits
    def _push(self, command: cmd.EnvCommand, source: object | None = None) -> None:
        self._source = source
        try:
            self.undo_stack.push(command)
        finally:
            self._source = None

    def _on_model_changed(self, what: str, key: str) -> None:
        if self._problems_stale is False and self.problems:
            self._set_problems(self.problems, stale=True)
        self.preview_panel.mark_stale()
        self._refresh(what)

    def _on_modified_changed(self, modified: bool) -> None:
        self._update_title()

    def _on_stack_index_changed(self, index: int) -> None:
        if self.path is not None:
            self.document.sync_autosave()

    def _on_autosave_failed(self, action: str, exc: Exception) -> None:
        name = self.path.name if self.path is not None else "the environment"
        self._session.message_posted.emit(
            "warning", "designer", f"Autosave of {name} failed: {exc}"
        )

    def _update_title(self) -> None:
        if self.path is None:
            self.title.setText("<b>No environment open</b>")
            return
        mark = (
            " <span style='color:#b8860b'>● modified</span>" if self.is_modified else ""
        )
        # The mark goes right after the name: the title is clipped from the
        # right when the header is narrow, and the mark matters most.
        self.title.setText(
            f"<span style='font-size:15px'><b>{self.model.name}</b></span>{mark} "
            f"<span style='color:gray'>{self.model.kind} · {self.path.name}</span>"
        )
        self.title.setToolTip(str(self.path))

    def _show_document(self) -> None:
        has = self.path is not None
        for w in (
            self.save_button,
            self.save_as_button,
            self.validate_button,
            self.train_button,
            self.description,
            self.preview_panel,
        ):
            w.setEnabled(has)
        if not has:
            self.pages.setCurrentWidget(self.empty_page)
            with QSignalBlocker(self.json_view):
                self.json_view.clear()
            self._set_problems([], stale=False)
        self._update_title()

    def _refresh(self, what: str = "reset") -> None:
        """Bring every view up to date with the model (the widget whose edit
        caused the change is left alone, so typing is never interrupted)."""
        self._show_document()
        if self.path is None:
            return
        kind = self.model.kind
        if self._source is not self.description:
            with QSignalBlocker(self.description):
                self.description.setText(str(self.model.spec.get("description", "")))
                self.description.setCursorPosition(0)
        index = {"workflow": 1, "grid": 2, "gymnasium": 3, "python": 4}.get(kind, 0)
        self.pages.setCurrentIndex(index)
        if kind == "workflow":
            self._refresh_workflow()
        elif kind == "grid":
            self._refresh_grid()
        elif kind == "gymnasium":
            self._refresh_gymnasium()
        elif kind == "python":
            self._refresh_python()
        if self._source is not self.json_view:
            self._refresh_json()

    # ------------------------------------------------------------ json
    def _refresh_json(self) -> None:
        try:
            current = json.loads(self.json_view.toPlainText())
        except ValueError:
            current = None
        if current != self.model.spec:
            with QSignalBlocker(self.json_view):
                self.json_view.setPlainText(spec_text(self.model.spec))
        self._set_json_status("")

    def _set_json_status(self, error: str) -> None:
        self._json_error = error
        if error:
            self.json_status.setText(
                f"<span style='color:#d62728'>{error} The design keeps the last "
                "valid version.</span>"
            )
        else:
            self.json_status.setText(
                "<span style='color:gray'>Edits here apply as you type, when the "
                "text is valid JSON.</span>"
            )

    def _on_json_text_changed(self) -> None:
        self._json_timer.start()

    def _apply_json_text(self) -> None:
        text = self.json_view.toPlainText()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            self._set_json_status(
                f"Not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
            )
            return
        if not isinstance(data, dict):
            self._set_json_status("The document must be a JSON object.")
            return
        if data.get("kind") not in KINDS:
            self._set_json_status(f"kind must be one of {', '.join(KINDS)}.")
            return
        self._set_json_status("")
        if data != self.model.spec:
            self._push(cmd.ReplaceDocument(self.model, data), self.json_view)

    def _on_description_edited(self) -> None:
        text = self.description.text().strip()
        if self.path is not None and text != self.model.spec.get("description", ""):
            self._push(cmd.SetField(self.model, "description", text), self.description)

    def _on_form_values_changed(self, form: FieldForm, values: dict[str, Any]) -> None:
        for path, value in form.changed_fields(self.model, values):
            self._push(cmd.SetField(self.model, path, value), form)

    # ------------------------------------------------------------ workflow
    def _graph_args(self) -> tuple[list[str], list[Edge]]:
        return self.model.statuses(), [
            Edge(i, str(t.get("from", "")), str(t.get("to", "")), transition_label(t))
            for i, t in enumerate(self.model.transitions())
        ]

    def _refresh_workflow(self) -> None:
        m = self.model
        self._fill_missing_positions()
        statuses, edges = self._graph_args()
        self.canvas.set_graph(
            statuses,
            edges,
            start=m.start(),
            terminal=m.terminal(),
            success=m.effective_success(),
            positions=m.positions,
        )
        self._refresh_tools_table()
        if self._source is not self.inspector.settings:
            self.inspector.settings.load(m)
        kind, key = self._inspected
        if kind == "status" and key not in m.statuses():
            self._inspected = ("", None)
        if kind == "transition" and not (
            isinstance(key, int) and key < len(m.transitions())
        ):
            self._inspected = ("", None)
        self._fill_inspector()
        self._show_problem_marks()

    def _refresh_tools_table(self) -> None:
        table = self.inspector.tools_table
        if self._source is table:
            return
        with QSignalBlocker(table):
            tools = self.model.tools()
            table.setRowCount(len(tools))
            for row, t in enumerate(tools):
                name = QTableWidgetItem(str(t.get("name", "")))
                name.setData(Qt.ItemDataRole.UserRole, str(t.get("name", "")))
                table.setItem(row, 0, name)
                table.setItem(row, 1, QTableWidgetItem(str(t.get("description", ""))))
            table.resizeColumnToContents(0)

    def _on_canvas_selection_changed(self, kind: str, key: Any) -> None:
        self._inspected = (kind, key)
        self._fill_inspector()
        self._show_problem_marks()

    def _fill_inspector(self) -> None:
        ins = self.inspector
        kind, key = self._inspected
        m = self.model
        if kind == "status":
            ins.stack.setCurrentIndex(1)
            rewards = m.status_rewards()
            for w, value in (
                (ins.status_start, key == m.start()),
                (ins.status_terminal, key in m.terminal()),
                (ins.status_success, key in m.effective_success()),
            ):
                with QSignalBlocker(w):
                    w.setChecked(value)
            ins.status_start.setEnabled(key != m.start())
            for w, text in (
                (ins.status_name, key),
                (ins.status_reward, "" if key not in rewards else f"{rewards[key]:g}"),
            ):
                if self._source is not w:
                    with QSignalBlocker(w):
                        w.setText(text)
            ins.status_error.clear()
        elif kind == "transition":
            ins.stack.setCurrentIndex(2)
            t = m.transitions()[key]
            statuses = m.statuses()
            for combo, value, extra in (
                (ins.transition_from, t.get("from", ""), ("*", "every status")),
                (ins.transition_to, t.get("to", ""), ("*", "stays (same status)")),
            ):
                with QSignalBlocker(combo):
                    combo.clear()
                    for s in statuses:
                        combo.addItem(s, s)
                    combo.addItem(extra[1], extra[0])
                    i = combo.findData(value)
                    if i < 0:
                        combo.addItem(f"{value} (unknown)", value)
                        i = combo.count() - 1
                    combo.setCurrentIndex(i)
            with QSignalBlocker(ins.transition_tool):
                ins.transition_tool.clear()
                ins.transition_tool.addItems(m.tool_names())
                ins.transition_tool.setEditText(str(t.get("tool", "")))
            for w, field in (
                (ins.transition_probability, "probability"),
                (ins.transition_reward, "reward"),
            ):
                v = t.get(field)
                with QSignalBlocker(w):
                    w.setText("" if v is None else f"{v:g}")
            ins.transition_error.clear()
        else:
            ins.stack.setCurrentIndex(0)

    def _on_canvas_status_add_requested(self, x: float, y: float) -> None:
        name = self.model.unique_status_name()
        self._push(cmd.AddStatus(self.model, name, (x, y)))
        self.canvas.select("status", name)
        self.inspector.status_name.setFocus()
        self.inspector.status_name.selectAll()

    def _on_add_status_clicked(self) -> None:
        pos = self.canvas.positions()
        x = max((p[0] for p in pos.values()), default=0.0) + 230.0
        y = min((p[1] for p in pos.values()), default=0.0)
        self._on_canvas_status_add_requested(x, y)

    def _on_canvas_transition_requested(self, source: str, target: str) -> None:
        """A new transition uses a tool that does nothing yet in ``source``,
        or a new tool named after the target; the inspector edits it."""
        used = {
            t.get("tool") for t in self.model.transitions() if t.get("from") == source
        }
        tool = next((n for n in self.model.tool_names() if n not in used), None)
        if tool is None:
            base = re.sub(r"\W+", "_", f"to_{target}".lower()).strip("_") or "tool"
            tool = self.model.unique_tool_name(base)
        command = cmd.AddTransition(self.model, source, tool, target)
        self._push(command)
        self.canvas.select("transition", command.index)

    def _on_canvas_statuses_moved(self, positions: dict) -> None:
        self._push(cmd.MoveStatuses(self.model, positions), self.canvas)

    def auto_layout(self, style: str = "layered") -> None:
        """Arrange the statuses (one undo step)."""
        m = self.model
        if style == "circular":
            positions = circular_layout(m.statuses())
        else:
            positions = layered_layout(
                m.statuses(),
                [(t.get("from"), t.get("to")) for t in m.transitions()],
                m.start(),
                self._label_width(),
            )
        self._push(cmd.MoveStatuses(self.model, positions))
        self.canvas.fit()

    def delete_selection(self) -> None:
        kind, key = self._inspected
        if kind == "status":
            self._push(cmd.RemoveStatus(self.model, key))
        elif kind == "transition":
            self._push(cmd.RemoveTransition(self.model, key))
            self.canvas.select("", None)

    def _on_status_name_edited(self) -> None:
        kind, old = self._inspected
        if kind != "status":
            return
        new = self.inspector.status_name.text()
        if new == old:
            return
        problem = self.model.status_name_problem(new, old)
        if problem:
            self.inspector.status_error.setText(problem)
            return
        self._push(cmd.RenameStatus(self.model, old, new))
        self.canvas.select("status", new)

    def _on_status_start_toggled(self, checked: bool) -> None:
        kind, name = self._inspected
        if kind == "status" and checked and name != self.model.start():
            self._push(
                cmd.CallCommand(
                    self.model, f"Start at '{name}'", lambda: self.model.set_start(name)
                )
            )

    def _on_status_terminal_toggled(self, checked: bool) -> None:
        kind, name = self._inspected
        if kind == "status":
            self._push(
                cmd.CallCommand(
                    self.model,
                    f"{'Mark' if checked else 'Unmark'} '{name}' terminal",
                    lambda: self.model.set_terminal(name, checked),
                )
            )

    def _on_status_success_toggled(self, checked: bool) -> None:
        kind, name = self._inspected
        if kind == "status":
            self._push(
                cmd.CallCommand(
                    self.model,
                    f"{'Mark' if checked else 'Unmark'} '{name}' success",
                    lambda: self.model.set_success(name, checked),
                )
            )

    def _on_status_reward_edited(self) -> None:
        kind, name = self._inspected
        if kind != "status":
            return
        value, error = _parse_optional_float(self.inspector.status_reward.text())
        self.inspector.status_error.setText(error)
        if error or value == self.model.status_rewards().get(name):
            return
        self._push(
            cmd.CallCommand(
                self.model,
                f"Set the reward of '{name}'",
                lambda: self.model.set_status_reward(name, value),
            ),
            self.inspector.status_reward,
        )

    def _on_transition_edited(self, field: str) -> None:
        kind, index = self._inspected
        if kind != "transition" or index >= len(self.model.transitions()):
            return
        ins = self.inspector
        t = self.model.transitions()[index]
        value: Any
        error = ""
        if field in ("from", "to"):
            combo = ins.transition_from if field == "from" else ins.transition_to
            value = combo.currentData()
        elif field == "tool":
            value = ins.transition_tool.currentText().strip()
            if value not in self.model.tool_names():
                error = self.model.tool_name_problem(value)
        else:
            w = (
                ins.transition_probability
                if field == "probability"
                else ins.transition_reward
            )
            value, error = _parse_optional_float(w.text())
            if field == "probability" and value is not None and not 0 <= value <= 1:
                error = "A probability is between 0 and 1."
        ins.transition_error.setText(error)
        if error or value == t.get(field):
            return
        self._push(cmd.EditTransition(self.model, index, **{field: value}))
        self.canvas.select("transition", index)

    def _on_tools_item_changed(self, item: QTableWidgetItem) -> None:
        table = self.inspector.tools_table
        row = item.row()
        tools = self.model.tool_names()
        if row >= len(tools):
            return
        name = tools[row]
        if item.column() == 0:
            new = item.text().strip()
            problem = self.model.tool_name_problem(new, name)
            if problem:
                self.banner.show_message(problem, "error", auto_hide_ms=6000)
                with QSignalBlocker(table):
                    item.setText(name)
                return
            if new != name:
                self._push(cmd.RenameTool(self.model, name, new), table)
                self._refresh_tools_table()
        else:
            text = item.text().strip()
            self._push(
                cmd.CallCommand(
                    self.model,
                    f"Describe tool '{name}'",
                    lambda: self.model.set_tool_description(name, text),
                ),
                table,
            )

    def _on_add_tool_clicked(self) -> None:
        name = self.model.unique_tool_name()
        self._push(cmd.AddTool(self.model, name))
        table = self.inspector.tools_table
        table.setCurrentCell(table.rowCount() - 1, 0)
        table.editItem(table.item(table.rowCount() - 1, 0))

    def _on_remove_tool_clicked(self) -> None:
        row = self.inspector.tools_table.currentRow()
        tools = self.model.tool_names()
        if 0 <= row < len(tools):
            self._push(cmd.RemoveTool(self.model, tools[row]))

    # ------------------------------------------------------------ grid
    def _refresh_grid(self) -> None:
        self.grid_editor.refresh()
        self._show_problem_marks()

    # ------------------------------------------------------------ gymnasium
    def _refresh_gymnasium(self) -> None:
        self.gym_editor.refresh()
        self._show_problem_marks()

    # ------------------------------------------------------------ python
    @property
    def code_path(self) -> Path | None:
        """The file shown in a python env's code editor."""
        return self.python_editor.code_path

    @property
    def code_modified(self) -> bool:
        """Unsaved changes in a python env's code (kept apart from the spec's
        undo stack: the code is its own file)."""
        return self.python_editor.code_modified

    def _python_file(self) -> Path:
        """The python env's file, resolved as the engine does (project
        first, then the spec's folder)."""
        rel = str(self.model.get_field("python.file", ""))
        path = Path(rel).expanduser()
        if not path.is_absolute() and self._state.is_open:
            project = Path(self._state.path)
            candidates = [project / rel]
            if self.path is not None:
                candidates.append(self.path.parent / rel)
            path = next((c for c in candidates if c.is_file()), candidates[0])
        return path

    def _refresh_python(self) -> None:
        self.python_editor.refresh(load_form=self._source is not self.python_form)
        self._show_problem_marks()

    def save_code(self) -> bool:
        """Write a python env's code to its file (True when nothing to write)."""
        return self.python_editor.save_code()

    # ============================================================ problems
    def _on_check_started(self) -> None:
        self.validate_button.setEnabled(False)
        self.problems_label.setText("Checking in the engine…")

    def _on_check_finished(self, report: dict) -> None:
        self.validate_button.setEnabled(self.path is not None)
        problems = list(report.get("problems", []))
        self._set_problems(problems, stale=False)
        n_err = sum(1 for p in problems if p.get("severity") == "error")
        n_warn = sum(1 for p in problems if p.get("severity") == "warning")
        verdict = (
            "<span style='color:#2e9e3e'><b>OK</b></span>"
            if report.get("ok")
            else "<span style='color:#d62728'><b>Not usable</b></span>"
        )
        self.problems_label.setText(
            f"Problems: {verdict} — {n_err} error(s), {n_warn} warning(s)."
        )

    def _on_check_failed(self, message: str) -> None:
        self.validate_button.setEnabled(self.path is not None)
        self.problems_label.setText(
            f"<span style='color:#d62728'>The check could not run: {message}</span>"
        )

    def _set_problems(self, problems: list[dict[str, Any]], stale: bool) -> None:
        self.problems = problems
        self._problems_stale = stale
        self.problem_list.clear()
        for p in problems:
            sev = str(p.get("severity", "error"))
            item = QTreeWidgetItem(
                ["●", p.get("path") or "(spec)", str(p.get("message", ""))]
            )
            item.setForeground(0, QColor(SEVERITY_COLORS.get(sev, "#000")))
            item.setToolTip(0, sev)
            item.setToolTip(2, str(p.get("message", "")))
            item.setData(0, Qt.ItemDataRole.UserRole, p.get("path", ""))
            if stale:
                for c in range(3):
                    item.setForeground(c, QColor("#9aa0a6"))
            self.problem_list.addTopLevelItem(item)
        if stale and problems:
            self.problems_label.setText(
                "Problems (edited since the check — Validate again):"
            )
        self._show_problem_marks()
        self.problems_changed.emit(problems)

    def problem_targets(self) -> list[tuple[Target, dict[str, Any]]]:
        return [
            (problem_target(self.model.spec, str(p.get("path", ""))), p)
            for p in self.problems
        ]

    def _show_problem_marks(self) -> None:
        """Put the current problems on their elements and fields (none once
        the document was edited: the paths may no longer point there)."""
        targets = [] if self._problems_stale else self.problem_targets()
        statuses: dict[str, str] = {}
        transitions: dict[Any, str] = {}
        cells: dict[tuple[int, int], str] = {}
        fields: dict[str, str] = {}
        tools: dict[int, str] = {}
        sub_fields: dict[tuple[str, Any, str], str] = {}

        def add(d: dict, key: Any, msg: str) -> None:
            d[key] = f"{d[key]}\n{msg}" if key in d else msg

        for target, p in targets:
            msg = str(p.get("message", ""))
            if target.kind == "status":
                add(statuses, target.key, msg)
                add(sub_fields, ("status", target.key, target.field), msg)
            elif target.kind == "transition":
                add(transitions, target.key, msg)
                add(sub_fields, ("transition", target.key, target.field), msg)
            elif target.kind == "tool":
                add(tools, target.key, msg)
            elif target.kind == "cell":
                add(cells, target.key, msg)
            elif target.kind == "field":
                add(fields, target.key, msg)
        kind = self.model.kind
        if kind == "workflow":
            self.canvas.set_problems(statuses, transitions)
            table = self.inspector.tools_table
            for row in range(table.rowCount()):
                for col in range(2):
                    item = table.item(row, col)
                    if item is None:
                        continue
                    with QSignalBlocker(table):
                        item.setBackground(
                            QColor("#f8d7da") if row in tools else QColor(0, 0, 0, 0)
                        )
                        item.setToolTip(tools.get(row, ""))
            self._mark_form(self.inspector.settings, fields)
            ikind, ikey = self._inspected
            widgets = (
                self.inspector.status_widgets()
                if ikind == "status"
                else self.inspector.transition_widgets()
                if ikind == "transition"
                else {}
            )
            for name, w in widgets.items():
                msg = sub_fields.get((ikind, ikey, name), "")
                if ikind == "status" and name == "statuses":
                    msg = sub_fields.get((ikind, ikey, "statuses"), "")
                _mark(w, msg)
            error_label = (
                self.inspector.status_error
                if ikind == "status"
                else self.inspector.transition_error
            )
            if ikind in ("status", "transition"):
                error_label.setText(
                    statuses.get(ikey, "")
                    if ikind == "status"
                    else transitions.get(ikey, "")
                )
        elif kind == "grid":
            self.grid_painter.set_problem_cells(cells)
            self._mark_form(self.grid_form, fields)
        elif kind == "python":
            # A failure of the whole env (make, check_env) is the file's.
            if "python" in fields:
                fields.setdefault("python.file", fields["python"])
            self._mark_form(self.python_form, fields)
        elif kind == "gymnasium":
            _mark(
                self.gym_id,
                fields.get("gymnasium.id", "") or fields.get("gymnasium", ""),
            )
            _mark(self.gym_max_steps, fields.get("gymnasium.max_episode_steps", ""))
            _mark(self.gym_kwargs_text, fields.get("gymnasium.kwargs", ""))
            prefix = "gymnasium.kwargs."
            self.gym_kwargs.set_external_errors(
                {
                    path.removeprefix(prefix): msg
                    for path, msg in fields.items()
                    if path.startswith(prefix)
                }
            )
        _mark(self.description, fields.get("description", ""))

    def _mark_form(self, form: FieldForm, fields: dict[str, str]) -> None:
        errors = {
            name: fields[path] for name, path in form.paths.items() if path in fields
        }
        form.set_external_errors(errors)

    def _on_problem_clicked(self, item: QTreeWidgetItem, column: int = 0) -> None:
        self.focus_problem(str(item.data(0, Qt.ItemDataRole.UserRole) or ""))

    def focus_problem(self, path: str) -> None:
        """Select and show the element or field a problem path points at."""
        target = problem_target(self.model.spec, path)
        self.tabs.setCurrentIndex(0)
        if target.kind in ("status", "transition"):
            self.canvas.select(target.kind, target.key)
            widgets = (
                self.inspector.status_widgets()
                if target.kind == "status"
                else self.inspector.transition_widgets()
            )
            w = widgets.get(target.field)
            if w is not None:
                w.setFocus()
        elif target.kind == "tool":
            self.inspector.tools_table.setCurrentCell(int(target.key), 0)
            self.inspector.tools_table.setFocus()
        elif target.kind == "cell":
            self.grid_painter.setFocus()
        elif target.kind == "field":
            for form in (self.inspector.settings, self.grid_form, self.python_form):
                for name, p in form.paths.items():
                    if p == target.key and form.isVisible():
                        form.editor(name).setFocus()


def _mark(widget: QWidget, message: str) -> None:
    """A red border and the message as tooltip on a field (or none)."""
    widget.setStyleSheet(ERROR_STYLE if message else "")
    widget.setToolTip(message)
    widget.setProperty("problem", message)
