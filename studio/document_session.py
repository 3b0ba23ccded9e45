"""One open document's session, shared by the env designer and the flow
editor: whether it is modified (its undo stack is not at the saved state),
its autosave copy (written, removed, failures reported) and the offer to
restore a newer autosave when the document is opened, and the clean-up a
save or a save-as does.

What stays with each editor: the document type (a spec dict, a
``FlowDocument``), where its autosave lives, how the modified mark looks and
the wording of its messages; the editor hands those in."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QUndoStack

T = TypeVar("T")
P = TypeVar("P", bound=Path | None)


class DocumentSession(QObject, Generic[T]):
    """The autosave and restore cycle of the document an editor has open.

    ``autosave_of(path)``
        Where the autosave copy of the document at ``path`` (None: not saved
        yet) lives; None when it has no place.
    ``current_path()`` / ``snapshot()``
        The open document's path and its content as it is now.
    ``write(doc, file)`` / ``read(file)``
        Write and read a document file; ``read`` raises one of
        ``read_errors`` for a file it cannot read, ``write`` one of
        ``write_errors`` (or ``OSError``).
    ``failed(action, exc)``
        Told when an autosave copy could not be written (``action`` is
        ``"write"``) or removed (``"remove"``): the editor says so; the
        document itself is untouched.
    """

    modified_changed = Signal(bool)
    """The document became modified (True) or clean again (False)."""

    def __init__(
        self,
        undo_stack: QUndoStack,
        *,
        autosave_of: Callable[[Path | None], Path | None],
        current_path: Callable[[], Path | None],
        snapshot: Callable[[], T],
        write: Callable[[T, Path], None],
        read: Callable[[Path], T],
        same: Callable[[T, T], bool],
        failed: Callable[[str, Exception], None],
        read_errors: tuple[type[Exception], ...],
        write_errors: tuple[type[Exception], ...] = (),
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.undo_stack = undo_stack
        self._autosave_of = autosave_of
        self._current_path = current_path
        self._snapshot = snapshot
        self._write = write
        self._read = read
        self._same = same
        self._failed = failed
        self._read_errors = read_errors
        self._write_errors: tuple[type[Exception], ...] = (OSError, *write_errors)
        self.unattended = False
        """Nobody is there to answer (``rl-studio --screenshot``): the
        restore question is not asked, and the autosave copy stays for the
        next session that can ask."""
        # A method, not a lambda: Qt drops the connection when this object
        # goes, even if the stack outlives it and emits on its way out.
        undo_stack.cleanChanged.connect(self._on_clean_changed)

    def _on_clean_changed(self, clean: bool) -> None:
        self.modified_changed.emit(not clean)

    # ------------------------------------------------------------ state
    def is_modified(self) -> bool:
        """Edits since the document was opened or last saved."""
        return not self.undo_stack.isClean()

    def autosave_file(self) -> Path | None:
        """The open document's autosave copy (whether it exists or not)."""
        return self._autosave_of(self._current_path())

    # ---------------------------------------------------------- autosave
    def write_autosave(self) -> None:
        """Write the document as it is now to its autosave copy."""
        target = self.autosave_file()
        if target is None:
            return
        try:
            self._write(self._snapshot(), target)
        except self._write_errors as exc:
            self._failed("write", exc)

    def remove_autosave(self, file: Path | None = None) -> None:
        """Remove the open document's autosave copy (or the copy ``file``);
        a copy that is not there is fine."""
        target = file if file is not None else self.autosave_file()
        if target is None:
            return
        try:
            target.unlink(missing_ok=True)
        except OSError as exc:
            self._failed("remove", exc)

    def sync_autosave(self) -> None:
        """Keep the autosave copy for a modified document, none for a clean
        one (after an undo back to the saved state, say)."""
        if self.undo_stack.isClean():
            self.remove_autosave()
        else:
            self.write_autosave()

    # ----------------------------------------------------------- restore
    def restorable(
        self,
        path: P,
        saved: T | None,
        ask: Callable[[P, Path], bool],
        *,
        forget_declined: bool = False,
    ) -> T | None:
        """The autosave copy of the document at ``path`` (its content on disk
        being ``saved``; None for a document never saved) if it is at least
        as new as the file, readable, different, and ``ask(path, autosave)``
        says to restore it; else None. ``forget_declined`` removes a copy
        the user declined, so it is not offered again."""
        auto = self._autosave_of(path)
        if auto is None or not auto.is_file():
            return None
        if path is not None and auto.stat().st_mtime < path.stat().st_mtime:
            return None
        try:
            candidate = self._read(auto)
        except self._read_errors:
            return None
        if saved is not None and self._same(candidate, saved):
            return None
        if self.unattended:
            return None
        if ask(path, auto):
            return candidate
        if forget_declined:
            self.remove_autosave(auto)
        return None

    # -------------------------------------------------------------- save
    def mark_saved(self, previous_autosave: Path | None = None) -> None:
        """The document was written to its path: its autosave copy goes (and
        ``previous_autosave``, the copy it had before a save-as gave it a new
        path), and the undo stack's current state is the saved one."""
        if previous_autosave is not None and previous_autosave != self.autosave_file():
            self.remove_autosave(previous_autosave)
        self.remove_autosave()
        self.undo_stack.setClean()


__all__ = ["DocumentSession"]
