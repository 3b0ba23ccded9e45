"""Environments: the designer of the project's environment specs.

The project's specs on the left (``env_list``); the open one on the right,
under its title and actions (``header``), in an editor that fits its kind (a
state-machine canvas and an inspector for workflows, a grid painter for
grids, a form for gymnasium ids built from the env's signature, a code
editor for python files) beside a JSON view that stays in sync
(``json_page``), with the engine's problems under them (``problems``). The
editors come from one table, ``editors.EDITORS`` (kind -> editor class),
each built from the same ``EditorContext`` and emitting the same signals
(``kind_editor``); ``ws.editors[kind]`` is the one of a kind. This module is
the shell that ties them to the document: open/save, the undo stack,
problem marks, preview and training; the autosave cycle is
studio.document_session's. Every edit of the spec is an undo command on
:attr:`EnvironmentsWorkspace.undo_stack`; after each one an autosave copy is
written to ``envs/.autosave/``, and opening a spec whose autosave is newer
offers to restore it. (A python env's code is its own file, with the code
editor's own undo.) Validate asks the engine to check the spec and shows
each problem on the element or field that causes it.

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
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker, Qt, Signal
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import (
    QInputDialog,
    QLineEdit,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import contract
from engine.contract import ModelRow, atomic_write_text
from studio.common import fmt_time
from studio.document_session import DocumentSession
from studio.environments import commands as cmd
from studio.environments.controller import EnvController
from studio.environments.editors import EditorStack
from studio.environments.env_list import EnvList
from studio.environments.fields import mark
from studio.environments.header import DocumentHeader
from studio.environments.json_page import JsonPage
from studio.environments.kind_editor import EditorContext, KindEditor, ProblemMarks
from studio.environments.preview import EnvPreviewPanel
from studio.environments.problems import ProblemsPanel
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

PREFERRED_FIRST = "jira_issue_resolution"
"""Opened first in a project that holds it (the example to start from)."""
TRACE_EPISODES = 5
"""Episodes of a preview whose every step goes into the trace table."""


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
        self._preview_policy = ""  # name of the policy of the preview running

        self.restore_decider: Callable[[Path, Path], bool] = partial(ask_restore, self)
        """Asked (spec file, autosave file) when an autosave is newer."""
        self.confirm_discard: Callable[[str], bool] = partial(ask_discard, self)
        """Asked (name) before unsaved changes are dropped."""
        self.confirm_delete: Callable[[str], bool] = partial(ask_delete, self)

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
        self.controller.jira_imported.connect(self._on_controller_jira_imported)
        self.controller.jira_import_failed.connect(
            self._on_controller_jira_import_failed
        )
        subscribe(self._state, self, self._on_state_changed)
        self._show_document()
        self._on_state_changed("reset", "")

    # ============================================================ building
    def _build(self) -> None:
        self.env_list = EnvList(self.envs_dir)
        self.env_list.open_requested.connect(self.open_env)
        self.env_list.new_requested.connect(self.new_env)
        self.env_list.delete_requested.connect(self.delete_env)
        self.env_list.import_jira_requested.connect(self.controller.import_jira)
        self.header = DocumentHeader(self.undo_stack)
        self.addActions(list(self.header.shortcut_actions()))
        self.header.save_requested.connect(self.save)
        self.header.save_as_requested.connect(self._on_header_save_as_requested)
        self.header.validate_requested.connect(self.validate)
        self.header.train_requested.connect(self.train)
        self.banner = Banner()
        self.description = QLineEdit(placeholderText="What is this environment about?")
        self.description.editingFinished.connect(self._on_description_edited)
        self.editors = EditorStack(
            EditorContext(
                model=self.model,
                controller=self.controller,
                source=lambda: self._source,
                resolve=self._resolve,
                confirm_discard=lambda name: self.confirm_discard(name),
            )
        )
        """The Design tab: ``editors[kind]`` is the kind's editor."""
        self.editors.editor_built.connect(self._on_editors_editor_built)
        self.json_page = JsonPage()
        self.json_page.spec_edited.connect(self._on_json_page_spec_edited)
        self.preview_panel = EnvPreviewPanel()
        self.preview_panel.preview_requested.connect(
            self._on_preview_panel_preview_requested
        )
        self.preview_panel.stop_requested.connect(self.controller.stop_preview)
        self.tabs = QTabWidget()
        self.tabs.addTab(self.editors, "Design")
        self.tabs.addTab(self.json_page, "JSON")
        self.tabs.addTab(self.preview_panel, "Preview")
        self.problems_panel = ProblemsPanel()
        self.problems_panel.problem_clicked.connect(self.focus_problem)

        split = QSplitter(Qt.Orientation.Vertical)
        split.addWidget(self.tabs)
        split.addWidget(self.problems_panel)
        split.setStretchFactor(0, 1)
        split.setSizes([600, 150])  # five problems without scrolling
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.header)
        right_layout.addWidget(self.description)
        right_layout.addWidget(split, 1)
        self.banner.overlay_on(split)

        main = QSplitter(Qt.Orientation.Horizontal)
        main.addWidget(self.env_list)
        main.addWidget(right)
        main.setStretchFactor(1, 1)
        main.setSizes([230, 920])
        layout = QVBoxLayout(self)
        layout.addWidget(main)

    def _on_editors_editor_built(self, editor: KindEditor) -> None:
        editor.edit_requested.connect(self._push)
        editor.message_requested.connect(self._on_editor_message_requested)
        editor.marks_changed.connect(self._show_problem_marks)
        editor.modified_changed.connect(lambda *_: self._update_title())

    def _on_editor_message_requested(self, text: str, level: str, hide_ms: int) -> None:
        self.banner.show_message(text, level, auto_hide_ms=hide_ms)

    def _resolve(self, rel: str) -> Path:
        """A file the spec names, resolved as the engine does (project
        first, then the spec's folder)."""
        path = Path(rel).expanduser()
        if not path.is_absolute() and self._state.is_open:
            project = Path(self._state.path)
            candidates = [project / rel]
            if self.path is not None:
                candidates.append(self.path.parent / rel)
            path = next((c for c in candidates if c.is_file()), candidates[0])
        return path

    # ============================================================ documents
    @property
    def is_modified(self) -> bool:
        """Unsaved changes to the spec, or to a python env's code."""
        return self.path is not None and (
            self.document.is_modified()
            or any(e.unsaved() for e in self.editors.built.values())
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
        positions = read_positions(path) if path is not None else {}
        self.path = path
        self.undo_stack.clear()
        for editor in self.editors.built.values():
            editor.about_to_open()
        self._set_problems([], stale=False)
        self.problems_panel.show_unchecked()
        self.model.restore((spec, positions))
        self.editors[self.model.kind].opened()
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
        if not self._save_files():
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
        if self.path is None or not self._save_files():
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
        if not self._save_files():  # the engine imports a python env's file
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
        space = self.editors[self.model.kind].action_space()
        if space is not None:
            return space
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
            for editor in self.editors.built.values():
                editor.discard_files()
            return True
        return False

    # ============================================================ list
    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "models":
            self._refresh_policies()
        if what != "reset":
            return
        self._refresh_policies()
        self.env_list.show_envs(
            self._state.envs,
            f"No environments in {self._state.path}/envs yet."
            if self._state.is_open
            else "No project open.",
        )
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

    def _on_controller_jira_imported(self, made: dict[str, Any]) -> None:
        # The engine's project.changed refreshes the list; the new env opens.
        if self.open_env(str(made["spec_file"])):
            self.banner.show_message(
                f"Imported {made['issues']} issues and {made['statuses']} statuses "
                f"as {made['name']}.",
                "info",
            )

    def _on_controller_jira_import_failed(self, message: str) -> None:
        self.banner.show_message(message, "error")

    def _select_current_row(self) -> None:
        self.env_list.select(self.path)

    def _on_header_save_as_requested(self) -> None:
        name, ok = QInputDialog.getText(
            self, "Save as", "Name:", text=self.model.name + "_copy"
        )
        if ok and name:
            self.save_as(name.strip())

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
        self.header.show_document(
            self.path, self.model.name, self.model.kind, self.is_modified
        )

    def _show_document(self) -> None:
        has = self.path is not None
        for w in (
            *self.header.document_buttons(),
            self.description,
            self.preview_panel,
        ):
            w.setEnabled(has)
        if not has:
            self.editors.show_kind("")
            self.json_page.clear()
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
        editor = self.editors[kind]
        self.editors.show_kind(kind)
        editor.refresh()
        self._show_problem_marks()
        if self._source is not self.json_page.view:
            self.json_page.show_spec(self.model.spec)

    def _on_json_page_spec_edited(self, spec: dict[str, Any]) -> None:
        if spec != self.model.spec:
            self._push(cmd.ReplaceDocument(self.model, spec), self.json_page.view)

    def _on_description_edited(self) -> None:
        text = self.description.text().strip()
        if self.path is not None and text != self.model.spec.get("description", ""):
            self._push(cmd.SetField(self.model, "description", text), self.description)

    def _save_files(self) -> bool:
        """Write what the editors keep outside the spec (a python env's code,
        which the engine imports from disk); True when nothing to write."""
        return all(e.save_files() for e in self.editors.built.values())

    # ============================================================ problems
    def _on_check_started(self) -> None:
        self.header.validate_button.setEnabled(False)
        self.problems_panel.show_checking()

    def _on_check_finished(self, report: dict[str, Any]) -> None:
        self.header.validate_button.setEnabled(self.path is not None)
        self._set_problems(list(report.get("problems", [])), stale=False)
        self.problems_panel.show_report(report)

    def _on_check_failed(self, message: str) -> None:
        self.header.validate_button.setEnabled(self.path is not None)
        self.problems_panel.show_failure(message)

    def _set_problems(self, problems: list[dict[str, Any]], stale: bool) -> None:
        self.problems = problems
        self._problems_stale = stale
        self.problems_panel.set_problems(problems, stale)
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
        marks = ProblemMarks.of(targets)
        kind = self.model.kind
        # An editor not built yet has no marks to clear.
        if kind in self.editors.built or targets:
            self.editors[kind].show_problems(marks)
        mark(self.description, marks.fields.get("description", ""))

    def focus_problem(self, path: str) -> None:
        """Select and show the element or field a problem path points at."""
        target = problem_target(self.model.spec, path)
        self.tabs.setCurrentIndex(0)
        self.editors[self.model.kind].focus_problem(target)


def ask_restore(parent: QWidget, path: Path, auto: Path) -> bool:
    answer = QMessageBox.question(
        parent,
        "Restore unsaved changes?",
        f"{path.name} has unsaved changes from an earlier session (autosaved "
        f"{fmt_time(auto.stat().st_mtime)}). Restore them?",
    )
    return answer == QMessageBox.StandardButton.Yes


def ask_discard(parent: QWidget, name: str) -> bool:
    answer = QMessageBox.question(
        parent,
        "Discard changes?",
        f"{name} has unsaved changes. Discard them? (Cancel keeps editing.)",
        QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Discard


def ask_delete(parent: QWidget, name: str) -> bool:
    answer = QMessageBox.question(
        parent, "Delete environment", f"Delete the environment {name} from disk?"
    )
    return answer == QMessageBox.StandardButton.Yes


def read_positions(spec: Path) -> dict[str, tuple[float, float]]:
    """The canvas layout saved beside a spec (none when missing or broken:
    the editor lays the statuses out again)."""
    try:
        raw = json.loads(layout_path(spec).read_text(encoding="utf-8"))
        return {
            str(k): (float(v[0]), float(v[1]))
            for k, v in raw.get("positions", {}).items()
        }
    except (OSError, ValueError, TypeError, KeyError, IndexError, AttributeError):
        return {}
