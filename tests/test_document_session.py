"""The document session both editors share (studio.document_session): the
modified state, the autosave copy, the offer to restore it, and what a save
or a save-as clears; on a small JSON document with real files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject
from PySide6.QtGui import QUndoCommand, QUndoStack

from studio.document_session import DocumentSession


class SetKey(QUndoCommand):
    def __init__(self, doc: dict[str, Any], key: str, value: Any) -> None:
        super().__init__(f"Set {key}")
        self.doc, self.key, self.value = doc, key, value
        self.old = doc.get(key)

    def redo(self) -> None:
        self.doc[self.key] = self.value

    def undo(self) -> None:
        self.doc[self.key] = self.old


def write_json(doc: dict[str, Any], file: Path) -> None:
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(doc))


class Editor:
    """What an editor hands the session: a path, a document, JSON files and
    an autosave folder beside the document."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.doc: dict[str, Any] = {"name": "a"}
        self.failures: list[tuple[str, str]] = []
        # Owned as in an editor: the stack and the session are its children.
        self.owner = QObject()
        self.stack = QUndoStack(self.owner)
        self.session: DocumentSession[dict[str, Any]] = DocumentSession(
            self.stack,
            autosave_of=self.autosave_of,
            current_path=lambda: self.path,
            snapshot=lambda: dict(self.doc),
            write=write_json,
            read=lambda file: json.loads(file.read_text()),
            same=lambda a, b: a == b,
            failed=lambda action, exc: self.failures.append((action, str(exc))),
            read_errors=(ValueError, OSError),
            parent=self.owner,
        )

    @staticmethod
    def autosave_of(path: Path | None) -> Path | None:
        return None if path is None else path.parent / ".autosave" / path.name

    def edit(self, key: str, value: Any) -> None:
        self.stack.push(SetKey(self.doc, key, value))


def test_modified_follows_the_undo_stack_and_is_announced(qtbot, tmp_path) -> None:
    editor = Editor(tmp_path / "a.json")
    seen: list[bool] = []
    editor.session.modified_changed.connect(seen.append)
    assert not editor.session.is_modified()
    editor.edit("x", 1)
    assert editor.session.is_modified()
    editor.stack.undo()
    assert not editor.session.is_modified()
    assert seen == [True, False]


def test_the_autosave_copy_exists_only_while_modified(qtbot, tmp_path) -> None:
    editor = Editor(tmp_path / "a.json")
    auto = tmp_path / ".autosave" / "a.json"
    editor.edit("x", 1)
    editor.session.sync_autosave()
    assert json.loads(auto.read_text()) == {"name": "a", "x": 1}
    editor.stack.undo()  # back at the saved state: no copy to offer
    editor.session.sync_autosave()
    assert not auto.exists()
    editor.session.remove_autosave()  # a copy that is not there is fine
    assert editor.failures == []


def test_a_failed_autosave_is_reported_and_the_document_kept(qtbot, tmp_path) -> None:
    editor = Editor(tmp_path / "a.json")
    (tmp_path / ".autosave").write_text("a file where the folder should be")
    editor.edit("x", 1)
    editor.session.write_autosave()
    assert [a for a, _ in editor.failures] == ["write"]
    assert editor.doc == {"name": "a", "x": 1} and editor.session.is_modified()
    # A copy that cannot be removed (a folder in its place) is reported too.
    other = Editor(tmp_path / "sub" / "b.json")
    blocker = tmp_path / "sub" / ".autosave" / "b.json"
    (blocker / "inside").mkdir(parents=True)
    other.session.remove_autosave()
    assert [a for a, _ in other.failures] == ["remove"]
    assert blocker.is_dir()


def saved_with_autosave(tmp_path: Path, saved: dict, auto: Any) -> Path:
    path = tmp_path / "a.json"
    path.write_text(json.dumps(saved))
    copy = tmp_path / ".autosave" / "a.json"
    copy.parent.mkdir(exist_ok=True)
    copy.write_text(auto if isinstance(auto, str) else json.dumps(auto))
    stamp = path.stat().st_mtime
    os.utime(copy, (stamp + 5, stamp + 5))
    return path


def test_a_newer_different_autosave_is_offered(qtbot, tmp_path) -> None:
    path = saved_with_autosave(tmp_path, {"name": "a"}, {"name": "a", "x": 2})
    editor = Editor(None)
    asked: list[tuple[Path | None, Path]] = []
    restored = editor.session.restorable(
        path, {"name": "a"}, lambda p, a: asked.append((p, a)) or True
    )
    assert restored == {"name": "a", "x": 2}
    assert asked == [(path, tmp_path / ".autosave" / "a.json")]


def test_a_declined_autosave_is_forgotten_only_when_asked_to(qtbot, tmp_path) -> None:
    path = saved_with_autosave(tmp_path, {"name": "a"}, {"name": "a", "x": 2})
    copy = tmp_path / ".autosave" / "a.json"
    editor = Editor(None)
    assert editor.session.restorable(path, {"name": "a"}, lambda p, a: False) is None
    assert copy.exists()  # offered again next time
    assert (
        editor.session.restorable(
            path, {"name": "a"}, lambda p, a: False, forget_declined=True
        )
        is None
    )
    assert not copy.exists()


@pytest.mark.parametrize(
    "auto, older",
    [
        ({"name": "a"}, False),  # the same as the file: nothing to restore
        ({"name": "a", "x": 2}, True),  # older than the file
        ("{not json", False),  # unreadable
    ],
)
def test_no_offer_for_an_autosave_that_adds_nothing(
    qtbot, tmp_path, auto: Any, older: bool
) -> None:
    path = saved_with_autosave(tmp_path, {"name": "a"}, auto)
    copy = tmp_path / ".autosave" / "a.json"
    if older:
        stamp = path.stat().st_mtime
        os.utime(copy, (stamp - 5, stamp - 5))
    editor = Editor(None)

    def ask(p: Path | None, a: Path) -> bool:
        raise AssertionError("asked to restore a useless autosave")

    assert editor.session.restorable(path, {"name": "a"}, ask) is None
    assert copy.exists()  # left as it was, never deleted unasked


def test_a_save_as_clears_both_copies_and_marks_clean(qtbot, tmp_path) -> None:
    editor = Editor(tmp_path / "a.json")
    editor.edit("x", 1)
    editor.session.write_autosave()
    old_copy = editor.session.autosave_file()
    assert old_copy is not None and old_copy.exists()
    editor.path = tmp_path / "b.json"  # the editor wrote the document there
    editor.session.write_autosave()
    new_copy = editor.session.autosave_file()
    assert new_copy is not None and new_copy.exists()
    editor.session.mark_saved(old_copy)
    assert not old_copy.exists() and not new_copy.exists()
    assert not editor.session.is_modified()
    assert editor.failures == []
