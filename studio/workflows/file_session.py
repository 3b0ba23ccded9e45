"""The flow editor's file session: new, open, save and save-as of
``.flow.json`` documents, the recent files, and the autosave copy with its
offer to restore after a crash (the cycle ``studio.document_session``
shares with the env designer; here: where a flow's copy lives, and the
wording).

The dialogs are attributes a test replaces (``ask_save_path`` and so on)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import QFileDialog, QMessageBox, QWidget

from engine import flow
from engine.flow import FlowDocument
from studio.common import fmt_time
from studio.document_session import DocumentSession
from studio.session import Session
from studio.state.flow_document import FlowDocumentModel
from studio.workflows.editor import UNTITLED

AUTOSAVE_FOLDER = ".autosave"


def autosave_path(project_dir: str | Path | None, path: Path | None) -> Path | None:
    """Where the autosave copy of ``path`` (None: an untitled flow) lives."""
    if project_dir:
        folder = Path(project_dir) / "flows" / AUTOSAVE_FOLDER
    elif path is not None:
        folder = path.parent / AUTOSAVE_FOLDER
    else:
        return None
    name = path.name if path is not None else UNTITLED + flow.FLOW_SUFFIX
    if not name.endswith(flow.FLOW_SUFFIX):
        name += flow.FLOW_SUFFIX
    return folder / name


class FlowFileSession(QObject):
    """The files of the flow open in ``model``; its dialogs open over
    ``window``."""

    document_changed = Signal(str)
    """Another flow was loaded (new, opened or restored); the sentence that
    says so (empty for a new one)."""
    document_saved = Signal(str)
    """The flow was written to this path."""
    status_changed = Signal(str, str)
    """A sentence for the status line and its level (info, ok, error)."""

    def __init__(
        self,
        session: Session,
        model: FlowDocumentModel,
        undo_stack: QUndoStack,
        window: QWidget,
    ) -> None:
        super().__init__(window)
        self._session = session
        self._state = session.state
        self._model = model
        self._window = window
        self.undo_stack = undo_stack
        # Decisions a user makes in dialogs; tests replace them.
        self.ask_restore: Callable[[Path | None, Path], bool] = self._ask_restore
        self.ask_save_path: Callable[[str], str | None] = self._ask_save_path
        self.ask_open_path: Callable[[], str | None] = self._ask_open_path
        self.ask_unsaved: Callable[[], str] = self._ask_unsaved
        """Returns ``save``, ``discard`` or ``cancel``."""
        self.show_error: Callable[[str], None] = self._show_error
        self.document: DocumentSession[FlowDocument] = DocumentSession(
            undo_stack,
            autosave_of=lambda p: autosave_path(self._state.path or None, p),
            current_path=lambda: model.path,
            snapshot=lambda: model.doc,
            write=flow.save,
            read=flow.load,
            same=lambda a, b: flow.dumps(a) == flow.dumps(b),
            failed=self._on_autosave_failed,
            read_errors=(flow.FlowError,),
            write_errors=(flow.FlowError,),
            parent=self,
        )
        model.subscribe(self._on_model_changed)
        session.project_opened.connect(self._on_session_project_opened)

    # ------------------------------------------------------------ state
    def is_modified(self) -> bool:
        return self.document.is_modified()

    def autosave_file(self) -> Path | None:
        return self.document.autosave_file()

    def project_flows_dir(self) -> Path | None:
        return Path(self._state.path) / "flows" if self._state.is_open else None

    def recent_files(self) -> list[str]:
        """Flow files opened or saved lately (newest first, existing only),
        then the project's other flows, last modified first."""
        recent = [p for p in self._session.settings.recent_flows if Path(p).is_file()]
        project = sorted(self._state.flows, key=lambda d: -float(d.get("modified", 0)))
        seen = {str(Path(p).resolve()) for p in recent}
        recent += [
            d["path"] for d in project if str(Path(d["path"]).resolve()) not in seen
        ]
        return recent

    def _on_model_changed(self, what: str, key: str) -> None:
        # Every edit of the open flow (not another flow, nor its new path)
        # lands in its autosave copy.
        if what not in ("reset", "path"):
            self.document.write_autosave()

    def _on_autosave_failed(self, action: str, exc: Exception) -> None:
        if action == "remove":
            message = f"Could not remove the autosave copy: {exc}"
        elif isinstance(exc, OSError):
            message = f"Autosave failed: {exc.strerror}."
        else:
            message = f"Autosave failed: {exc}"
        self.status_changed.emit(message, "error")

    # ------------------------------------------------------------- open
    def new_document(self) -> bool:
        if not self._maybe_save_changes():
            return False
        self._load(FlowDocument(), None, restored=False)
        return True

    def ask_and_open(self) -> bool:
        """Ask for a flow file and open it."""
        path = self.ask_open_path()
        return self.open_file(path) if path else False

    def open_file(self, path: str | os.PathLike[str]) -> bool:
        """Open a flow file; a file that cannot be read leaves the current
        flow as it was and says why."""
        path = Path(path)
        if not self._maybe_save_changes():
            return False
        try:
            doc = flow.load(path)
        except flow.FlowError as exc:
            self.show_error(str(exc))
            self.status_changed.emit(str(exc), "error")
            return False
        self._session.settings.add_recent_flow(str(path.resolve()))
        saved = self.document.restorable(path, doc, self.ask_restore)
        restored = saved is not None
        self._load(saved if saved is not None else doc, path, restored)
        return True

    def _load(self, doc: FlowDocument, path: Path | None, restored: bool) -> None:
        self._model.replace(doc, path)  # the editor and the run watcher follow
        self.undo_stack.clear()
        if restored:
            self.undo_stack.resetClean()  # restored edits are not saved yet
            self.document.write_autosave()
        else:
            self.undo_stack.setClean()
        message = ""
        if path is not None:
            message = (
                f"Restored unsaved changes of {path.name}."
                if restored
                else f"Opened {path.name}."
            )
        elif restored:
            message = "Restored an unsaved flow."
        self.document_changed.emit(message)

    def _on_session_project_opened(self, path: str) -> None:
        self.offer_restore()

    def offer_restore(self) -> None:
        """Offer the untitled flow a crashed session left in the project's
        autosave folder, while the editor holds nothing else."""
        model = self._model
        if model.path is not None or model.doc.nodes or self.is_modified():
            return
        auto = self.autosave_file()
        if auto is None or not auto.exists():
            return
        try:
            doc = flow.load(auto)
        except flow.FlowError:
            return
        if doc.nodes and not self.document.unattended and self.ask_restore(None, auto):
            self._load(doc, None, restored=True)

    # ------------------------------------------------------------- save
    def save(self) -> bool:
        if self._model.path is None:
            return self.save_as()
        return self._save_to(self._model.path)

    def save_as(self) -> bool:
        path = self._model.path
        chosen = self.ask_save_path(path.name if path else UNTITLED + flow.FLOW_SUFFIX)
        if not chosen:
            return False
        path = Path(chosen)
        if not path.name.endswith(flow.FLOW_SUFFIX):
            path = path.with_name(path.name.removesuffix(".json") + flow.FLOW_SUFFIX)
        return self._save_to(path)

    def _save_to(self, path: Path) -> bool:
        old_autosave = self.document.autosave_file()
        try:
            flow.save(self._model.doc, path)
        except OSError as exc:
            self.show_error(f"Could not save {path}: {exc.strerror or exc}.")
            return False
        except flow.FlowError as exc:
            self.show_error(f"Could not save {path}: {exc}")
            return False
        if self._model.path != path:
            self._model.set_path(path)
        self.document.mark_saved(old_autosave)
        self._session.settings.add_recent_flow(str(path.resolve()))
        self.status_changed.emit(f"Saved {path.name}.", "ok")
        self.document_saved.emit(str(path))
        self._session.refresh_project()
        return True

    def _maybe_save_changes(self) -> bool:
        if not self.is_modified():
            return True
        choice = self.ask_unsaved()
        if choice == "save":
            return self.save()
        return choice == "discard"

    # ---------------------------------------------------------- dialogs
    def _ask_restore(self, path: Path | None, autosave: Path) -> bool:
        what = path.name if path is not None else "an unsaved flow"
        answer = QMessageBox.question(
            self._window,
            "Restore unsaved changes?",
            f"RL Studio found changes to {what} that were not saved (autosaved "
            f"{fmt_time(autosave.stat().st_mtime)}), probably because the app "
            "closed unexpectedly. Restore them?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def _ask_save_path(self, suggested: str) -> str | None:
        folder = self.project_flows_dir() or Path.home()
        path, _ = QFileDialog.getSaveFileName(
            self._window, "Save flow", str(folder / suggested), "Flows (*.flow.json)"
        )
        return path or None

    def _ask_open_path(self) -> str | None:
        folder = self.project_flows_dir() or Path.home()
        path, _ = QFileDialog.getOpenFileName(
            self._window, "Open flow", str(folder), "Flows (*.flow.json);;JSON (*.json)"
        )
        return path or None

    def _ask_unsaved(self) -> str:
        answer = QMessageBox.question(
            self._window,
            "Unsaved changes",
            "The flow has unsaved changes. Save them first?",
            QMessageBox.StandardButton.Save
            | QMessageBox.StandardButton.Discard
            | QMessageBox.StandardButton.Cancel,
        )
        return {
            QMessageBox.StandardButton.Save: "save",
            QMessageBox.StandardButton.Discard: "discard",
        }.get(answer, "cancel")

    def _show_error(self, text: str) -> None:
        QMessageBox.warning(self._window, "Workflows", text)
