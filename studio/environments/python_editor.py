"""The editor of a python env: its spec fields and the code of its file.

The code lives in its own file, not in the spec: the editor has its own undo
(inside the text) and modified state, and the file is written on Save, and
before Validate and Preview because the engine imports it from disk."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QSignalBlocker
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from engine.contract import atomic_write_text
from studio.environments.fields import FieldForm
from studio.environments.kind_editor import EditorContext, KindEditor, ProblemMarks
from studio.state.env_design import Target
from widgets.code_editor import CodeEditor

PYTHON_FIELDS: list[tuple[str, dict[str, Any]]] = [
    (
        "python.file",
        {
            "name": "file",
            "type": "str",
            "default": "",
            "help": "The .py file, relative to the project.",
            "title": "File",
        },
    ),
    (
        "python.class",
        {
            "name": "class",
            "type": "str",
            "default": "",
            "help": "The gymnasium.Env subclass in the file.",
            "title": "Class",
        },
    ),
    (
        "python.max_episode_steps",
        {
            "name": "max_episode_steps",
            "type": "int",
            "default": None,
            "optional": True,
            "min": 1,
            "title": "Max episode steps",
        },
    ),
]


class PythonEditor(KindEditor):
    """The python kind's page. ``context.resolve`` finds the spec's
    ``python.file`` as the engine does; ``context.confirm_discard(name)`` is
    asked before Reload drops unsaved code."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.code_path: Path | None = None
        """The file shown in the code editor."""
        self._code_readable = False

        self.form = FieldForm(PYTHON_FIELDS)
        self.bind_form(self.form)
        self.code = CodeEditor()
        self.code.modificationChanged.connect(self._on_code_modification_changed)
        self.note = QLabel(wordWrap=True)
        self.save_button = QPushButton("Save file")
        self.save_button.setToolTip(
            "Write the code to its file (Save, Validate and Preview do too: "
            "the engine imports the file from disk)."
        )
        self.save_button.clicked.connect(lambda *_: self.save_code())
        self.reload_button = QPushButton("Reload")
        self.reload_button.setToolTip("Read the file again from disk.")
        self.reload_button.clicked.connect(self._on_reload_clicked)
        row = QHBoxLayout()
        row.addWidget(self.note, 1)
        row.addWidget(self.save_button)
        row.addWidget(self.reload_button)
        layout = QVBoxLayout(self)
        layout.addWidget(self.form)
        layout.addLayout(row)
        layout.addWidget(self.code, 1)

    @property
    def code_modified(self) -> bool:
        return (
            self._model.kind == "python"
            and self.code_path is not None
            and self.code.document().isModified()
        )

    def refresh(self) -> None:
        """Bring the page up to date with the spec (the form too unless the
        edit came from it, so typing is never interrupted)."""
        if self.context.source() is not self.form:
            self.form.load(self._model)
        path = self._locate_file()
        # Typing is never overwritten: the file is read again only when the
        # spec names another file or the text has no unsaved changes.
        if path != self.code_path or not self.code.document().isModified():
            self._load_code(path)

    def _locate_file(self) -> Path:
        return self.context.resolve(str(self._model.get_field("python.file", "")))

    def show_problems(self, marks: ProblemMarks) -> None:
        fields = dict(marks.fields)
        # A failure of the whole env (make, check_env) is the file's.
        if "python" in fields:
            fields.setdefault("python.file", fields["python"])
        self.form.mark(fields)

    def focus_problem(self, target: Target) -> None:
        if target.kind == "field":
            self.form.focus(target.key)

    def unsaved(self) -> bool:
        return self.code_modified

    def save_files(self) -> bool:
        return self.save_code()

    def discard_files(self) -> None:
        self.code.document().setModified(False)

    def _load_code(self, path: Path) -> None:
        self.code_path = path
        try:
            code = path.read_text(encoding="utf-8")
            readable = True
        except (OSError, UnicodeDecodeError):
            code, readable = "", False
        with QSignalBlocker(self.code):
            self.code.set_code(code)
        self._code_readable = readable
        self._update_note()

    def _update_note(self) -> None:
        path = self.code_path
        if path is None:
            self.note.clear()
        elif not self._code_readable and not self.code_modified:
            self.note.setText(
                f"<span style='color:#d62728'>{path} cannot be read; type the "
                "code here and Save file to create it.</span>"
            )
        else:
            mark = (
                " <span style='color:#b8860b'>● unsaved changes</span>"
                if self.code_modified
                else ""
            )
            self.note.setText(f"<span style='color:gray'>{path}</span>{mark}")
        self.save_button.setEnabled(self.code_modified)

    def save_code(self) -> bool:
        """Write the code editor's text to the python env's file (atomically)."""
        if self.code_path is None or not self.code_modified:
            return True
        try:
            atomic_write_text(self.code_path, self.code.toPlainText())
        except OSError as exc:
            self.message_requested.emit(
                f"Could not save {self.code_path.name}: {exc.strerror or exc}; the "
                "code is still in the editor.",
                "error",
                0,
            )
            return False
        self._code_readable = True
        self.code.document().setModified(False)
        return True

    def _on_code_modification_changed(self, modified: bool) -> None:
        self._update_note()
        self.modified_changed.emit(modified)

    def _on_reload_clicked(self) -> None:
        if self.code_modified and not self.context.confirm_discard(
            self.code_path.name if self.code_path else "the code"
        ):
            return
        self._load_code(self._locate_file())


__all__ = ["PYTHON_FIELDS", "PythonEditor"]
