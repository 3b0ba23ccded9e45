"""Environments: the designer of the project's environment specs.

The project's specs on the left; the open one on the right, in an editor
that fits its kind (a state-machine canvas and an inspector for workflows, a
grid painter for grids, a form for gymnasium ids built from the env's
signature, a code editor for python files) beside a JSON view that stays in
sync. This module is the shell (the list, the title, open/save, the JSON
view, problems, preview, training); each kind's editor is its own module
(workflow_editor, grid_editor, gymnasium_editor, python_editor), and the
autosave cycle is studio.document_session's. Every edit of the spec is an
undo command on
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
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from PySide6.QtCore import QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QColor, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QLineEdit,
    QMessageBox,
    QPlainTextEdit,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QTabWidget,
    QToolButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from engine.contract import ModelRow, atomic_write_text
from studio.common import fmt_time
from studio.document_session import DocumentSession
from studio.environments import commands as cmd
from studio.environments.controller import EnvController
from studio.environments.fields import FieldForm, monospace
from studio.environments.preview import EnvPreviewPanel
from studio.lifetime import subscribe
from studio.session import Session
from studio.state.env_design import (
    KINDS,
    NAME_PATTERN,
    PYTHON_TEMPLATE,
    SPEC_SUFFIX,
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
from widgets.fit import undo_redo_actions
from widgets.param_form import ERROR_STYLE
from widgets.record_table import Column, RecordTable

if TYPE_CHECKING:
    from PySide6.QtWidgets import QComboBox

    from studio.environments.grid_editor import GridEditor
    from studio.environments.gymnasium_editor import GymnasiumEditor
    from studio.environments.python_editor import PythonEditor
    from studio.environments.workflow_editor import WorkflowEditor, WorkflowInspector
    from widgets.code_editor import CodeEditor
    from widgets.grid_painter import GridPainter, GridPalette
    from widgets.param_form import ParamForm
    from widgets.state_machine_editor import StateMachineEditor

PAGE_INDEX = {"workflow": 1, "grid": 2, "gymnasium": 3, "python": 4}
"""The editor page of each env kind in the Design tab (0: nothing open)."""
PREFERRED_FIRST = "jira_issue_resolution"
"""Opened first in a project that holds it (the example to start from)."""
JSON_DEBOUNCE_MS = 400
TRACE_EPISODES = 5
"""Episodes of a preview whose every step goes into the trace table."""
SEVERITY_COLORS = {"error": "#d62728", "warning": "#b8860b", "info": "#1f77b4"}


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
        self.undo_action, self.redo_action = undo_redo_actions(self.undo_stack, self)
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
        # The title has a row of its own: beside the buttons it was cut to
        # a few letters in a 1,024 px window.
        header.addStretch(1)
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
            wordWrap=True,
        )
        self.empty_page.setStyleSheet("color: palette(mid);")
        self.pages.addWidget(self.empty_page)
        # Each kind's editor is built when an env of that kind is first
        # opened (or a script asks for it): building all four was a fifth
        # of the launch, before the project had even opened.
        self._editors: dict[str, QWidget] = {}
        for _ in PAGE_INDEX:
            self.pages.addWidget(QWidget())

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
        right_layout.addWidget(self.title)
        right_layout.addLayout(header)
        right_layout.addWidget(self.description)
        right_layout.addWidget(split, 1)
        self.banner.overlay_on(split)

        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(left)
        main.addWidget(right)
        main.setStretchFactor(1, 1)
        main.setSizes([230, 920])
        layout = QVBoxLayout(self)
        layout.addWidget(main)

    def _editor(self, kind: str) -> QWidget:
        """The editor page of an env kind, built on first use."""
        editor = self._editors.get(kind)
        if editor is None:
            build = {
                "workflow": self._build_workflow_page,
                "grid": self._build_grid_page,
                "gymnasium": self._build_gymnasium_page,
                "python": self._build_python_page,
            }[kind]
            editor = self._editors[kind] = build()
            index = PAGE_INDEX[kind]
            placeholder = self.pages.widget(index)
            current = self.pages.currentIndex()
            self.pages.insertWidget(index, editor)
            if placeholder is not None:
                self.pages.removeWidget(placeholder)
                placeholder.deleteLater()
            self.pages.setCurrentIndex(current)
        return editor

    def _build_workflow_page(self) -> QWidget:
        from studio.environments.workflow_editor import WorkflowEditor

        editor = WorkflowEditor(
            self.model,
            self.banner,
            self._push,
            lambda: self._source,
            self._show_problem_marks,
        )
        editor.inspector.settings.values_changed.connect(
            lambda v: self._on_form_values_changed(editor.inspector.settings, v)
        )
        return editor

    def _build_grid_page(self) -> QWidget:
        from studio.environments.grid_editor import GridEditor

        editor = GridEditor(self.model, self._push, lambda: self._source)
        editor.form.values_changed.connect(
            lambda v: self._on_form_values_changed(editor.form, v)
        )
        return editor

    def _build_gymnasium_page(self) -> QWidget:
        from studio.environments.gymnasium_editor import GymnasiumEditor

        return GymnasiumEditor(
            self.model, self.controller, self._push, lambda: self._source
        )

    def _build_python_page(self) -> QWidget:
        from studio.environments.python_editor import PythonEditor

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
        return editor

    # The editors, and their widgets under the names the problem marks and
    # scripts use (each built on first use).
    @property
    def workflow_editor(self) -> WorkflowEditor:
        return cast("WorkflowEditor", self._editor("workflow"))

    @property
    def canvas(self) -> StateMachineEditor:
        return self.workflow_editor.canvas

    @property
    def inspector(self) -> WorkflowInspector:
        return self.workflow_editor.inspector

    @property
    def grid_editor(self) -> GridEditor:
        return cast("GridEditor", self._editor("grid"))

    @property
    def grid_painter(self) -> GridPainter:
        return self.grid_editor.painter

    @property
    def grid_palette(self) -> GridPalette:
        return self.grid_editor.cell_palette

    @property
    def grid_form(self) -> FieldForm:
        return self.grid_editor.form

    @property
    def gym_editor(self) -> GymnasiumEditor:
        return cast("GymnasiumEditor", self._editor("gymnasium"))

    @property
    def gym_id(self) -> QComboBox:
        return self.gym_editor.env_id

    @property
    def gym_spaces(self) -> QLabel:
        return self.gym_editor.spaces

    @property
    def gym_max_steps(self) -> QLineEdit:
        return self.gym_editor.max_steps

    @property
    def gym_kwargs(self) -> ParamForm:
        return self.gym_editor.kwargs

    @property
    def gym_kwargs_text(self) -> QLineEdit:
        return self.gym_editor.kwargs_text

    @property
    def python_editor(self) -> PythonEditor:
        return cast("PythonEditor", self._editor("python"))

    @property
    def python_form(self) -> FieldForm:
        return self.python_editor.form

    @property
    def python_code(self) -> CodeEditor:
        return self.python_editor.code

    @property
    def python_note(self) -> QLabel:
        return self.python_editor.note

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
    def policies(self) -> list[ModelRow]:
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

    def _on_preview_finished(self, data: dict[str, Any]) -> None:
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
        described = self.gym_editor.described if kind == "gymnasium" else {}
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
            if "python" in self._editors:
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
    # ------------------------------------------------------------ workflow
    @property
    def _inspected(self) -> tuple[str, Any]:
        """What the workflow inspector shows: ("status", name),
        ("transition", index) or ("", None)."""
        if "workflow" not in self._editors:
            return ("", None)
        return self.workflow_editor.inspected

    @_inspected.setter
    def _inspected(self, value: tuple[str, Any]) -> None:
        if "workflow" in self._editors or value != ("", None):
            self.workflow_editor.inspected = value

    def _refresh_workflow(self) -> None:
        self.workflow_editor.refresh()

    def auto_layout(self, style: str = "layered") -> None:
        """Arrange the statuses (``layered`` or ``circular``), one undo step."""
        self.workflow_editor.auto_layout(style)

    def delete_selection(self) -> None:
        """Delete the selected status or transition."""
        self.workflow_editor.delete_selection()

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
        if "python" not in self._editors:
            return None  # no python env opened yet
        return self.python_editor.code_path

    @property
    def code_modified(self) -> bool:
        """Unsaved changes in a python env's code (kept apart from the spec's
        undo stack: the code is its own file)."""
        return "python" in self._editors and self.python_editor.code_modified

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

    def _on_check_finished(self, report: dict[str, Any]) -> None:
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

        def add(d: dict[Any, str], key: Any, msg: str) -> None:
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
        if kind not in self._editors and not targets:
            kind = ""  # an editor not built yet has no marks to clear
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
            forms = {
                "workflow": lambda: self.inspector.settings,
                "grid": lambda: self.grid_form,
                "python": lambda: self.python_form,
            }
            for kind in [k for k in forms if k in self._editors]:
                form = forms[kind]()
                for name, p in form.paths.items():
                    if p == target.key and form.isVisible():
                        form.editor(name).setFocus()


def _mark(widget: QWidget, message: str) -> None:
    """A red border and the message as tooltip on a field (or none)."""
    widget.setStyleSheet(ERROR_STYLE if message else "")
    widget.setToolTip(message)
    widget.setProperty("problem", message)
