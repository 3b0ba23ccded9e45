"""Trace viewer: language-model rollouts and recorded trajectories (JSONL
traces), browsed, filtered and labelled with the keyboard.

Files in ``<project>/data/traces/`` on the left (rollouts of ``llm.collect``
and ``agent-*`` trajectories recorded over HTTP), their episodes (filtered by
env, model, outcome, return and label), and the steps of the chosen episode
(completion, parsed action, valid, reward and its breakdown) with the full
prompt of the chosen step beside them (``trace_browser``).

Keys, on the episode or step table: ``G`` good, ``B`` bad (KTO; the step,
or the whole episode on the episode table), ``X`` clears it, ``E`` edits
the step's ideal answer (SFT), ``P`` pins a step and ``1`` / ``2`` on
another says the pinned / this one is the better (DPO), ``Ctrl+Z`` undoes.
Each label is committed to ``data/labels.sqlite`` as the key is pressed
(``trace_labels``).

The auto-labeler panel (``auto_labeler``) lists the suggestions of the last
reward model for the unlabelled steps of the chosen file: ``A`` accepts the
selected ones, ``C`` corrects them (the opposite label), both in one undo
step; Retrain asks for a new reward model on the labels as they are now.
"""

from __future__ import annotations

import html
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QEvent, QObject, Qt, Signal
from PySide6.QtGui import QKeyEvent, QKeySequence
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from engine.store.database import DatabaseError
from engine.store.labels import EPISODE, LabelError, LabelStore
from studio.common import ok_cancel_buttons
from studio.model_manager.auto_labeler import AutoLabelerPanel
from studio.model_manager.trace_browser import TraceBrowser
from studio.model_manager.trace_labels import Position, TraceLabels
from studio.state.traces import list_trace_files, load_trace_file
from widgets.fit import scroll_area

BROWSER_WIDTH = 560
"""The width (px) the episodes, steps and prompt are given where the
workspace has it: the filters on two lines, the steps and the prompt side
by side. At 300 px (a 1024 px screen) the filters took four lines and the
summary three, and the three panes two rows each."""
LABEL_HELP = "Keys: G good · B bad · X clear · E answer · P pin · 1 / 2 better · Ctrl+Z"
"""One line under the panes; ``LABEL_HELP_LONG`` in its tooltip, and each
key in Help → Keyboard shortcuts."""
LABEL_HELP_LONG = (
    "Label with the keyboard: G good · B bad · X clear · E ideal answer · "
    "P pin, then 1 pinned better / 2 this better · Ctrl+Z undo."
)


class IdealAnswerDialog(QDialog):
    """Edit the ideal answer of a step (its recorded completion to start)."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Ideal answer")
        self.editor = QPlainTextEdit(text)
        buttons = ok_cancel_buttons(self)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("The answer the model should have given:"))
        layout.addWidget(self.editor, 1)
        layout.addWidget(buttons)
        self.resize(560, 360)

    def text(self) -> str:
        return self.editor.toPlainText()


@dataclass(frozen=True)
class TraceKey:
    """A key of the trace viewer's lists and what it does."""

    key: Qt.Key
    text: str
    steps_only: bool
    """Acts in the step list only (not on a whole episode)."""
    act: Callable[[TraceViewer, bool], object]
    """Called with the viewer and whether the step list has the focus."""


def shortcut_rows() -> list[tuple[str, str]]:
    """(action, keys) of the labelling keys, for Help → Keyboard shortcuts."""
    rows = [
        (f"Traces: {k.text}" + (" (steps)" if k.steps_only else ""), _key_name(k.key))
        for k in TraceViewer.KEYS
    ]
    rows += [
        (f"Suggestions: {k.text}", _key_name(k.key))
        for k in TraceViewer.SUGGESTION_KEYS
    ]
    return rows


def _key_name(key: Qt.Key) -> str:
    return QKeySequence(key).toString(QKeySequence.SequenceFormat.NativeText)


def _where(pos: Position) -> str:
    e, t = pos
    return f"episode {e}" if t == EPISODE else f"step {e}:{t}"


class TraceViewer(QWidget):
    retrain_requested = Signal(dict)
    """A ``reward.train`` config: a new reward model on the labels as they
    are now (after corrections)."""

    KEYS: tuple[TraceKey, ...] = (
        TraceKey(
            Qt.Key.Key_G, "Label good", False, lambda v, s: v.label_current("good", s)
        ),
        TraceKey(
            Qt.Key.Key_B, "Label bad", False, lambda v, s: v.label_current("bad", s)
        ),
        TraceKey(
            Qt.Key.Key_X, "Clear the label", False, lambda v, s: v.clear_current(s)
        ),
        TraceKey(
            Qt.Key.Key_E, "Edit the ideal answer", True, lambda v, s: v.edit_current()
        ),
        TraceKey(
            Qt.Key.Key_P, "Pin the step to compare", True, lambda v, s: v.pin_current()
        ),
        TraceKey(
            Qt.Key.Key_1, "Pinned step is better", True, lambda v, s: v.prefer(True)
        ),
        TraceKey(
            Qt.Key.Key_2, "This step is better", True, lambda v, s: v.prefer(False)
        ),
    )
    """The labelling keys of the episode and step lists, one declaration for
    what they do and for Help → Keyboard shortcuts."""
    SUGGESTION_KEYS: tuple[TraceKey, ...] = (
        TraceKey(
            Qt.Key.Key_A,
            "Accept the suggestions",
            False,
            lambda v, s: v.review(correct=False),
        ),
        TraceKey(
            Qt.Key.Key_C,
            "Correct the suggestions",
            False,
            lambda v, s: v.review(correct=True),
        ),
    )

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.labels = TraceLabels()
        self.edit_answer = self._ask_answer
        """Asks for an ideal answer (text in, text or None out); tests
        replace it."""
        self.choose_file = self._ask_file
        """Asks for a label file (``save``: to write); tests replace it."""
        self.files = QListWidget()
        self.files.currentItemChanged.connect(self._on_files_current_changed)
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.import_button = QPushButton("Import labels…")
        self.import_button.setToolTip("Add the labels of a JSON Lines label file.")
        self.import_button.clicked.connect(self._on_import_clicked)
        self.export_button = QPushButton("Export labels…")
        self.export_button.setToolTip("Write every label as JSON Lines.")
        self.export_button.clicked.connect(self._on_export_clicked)
        self.browser = TraceBrowser(self.labels)
        self.label_status = QLabel(LABEL_HELP, wordWrap=True)
        self.label_status.setToolTip(LABEL_HELP_LONG)
        self.auto = AutoLabelerPanel()
        self.auto.review_requested.connect(self._on_auto_review_requested)
        self.auto.retrain_requested.connect(self._on_auto_retrain_requested)
        self.auto.step_requested.connect(self.browser.select_step)
        for view in (
            self.browser.episodes.view,
            self.browser.steps.view,
            self.auto.suggestions.view,
        ):
            view.installEventFilter(self)
        self._lay_out()

    def _lay_out(self) -> None:
        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(0, 0, 0, 0)
        left_layout.addWidget(QLabel("<b>Trace files</b>"))
        left_layout.addWidget(self.files, 1)
        left_layout.addWidget(self.refresh_button)
        left_layout.addWidget(self.import_button)
        left_layout.addWidget(self.export_button)
        right = QWidget()
        right_layout = QVBoxLayout(right)
        right_layout.setContentsMargins(0, 0, 0, 0)
        right_layout.addWidget(self.browser, 1)
        right_layout.addWidget(self.label_status)
        # The files over the auto-labeler, beside the browser: three panes
        # side by side left the episodes table 99 px of a 1024 px screen.
        side = QSplitter(Qt.Orientation.Vertical)
        side.addWidget(left)
        side.addWidget(scroll_area(self.auto))  # scrolls on a low screen
        side.setSizes([240, 260])
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(side)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setSizes([170, 700])
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(split)

    def wanted_width(self) -> int:
        """The width at which the browser gets ``BROWSER_WIDTH``."""
        return self.width() - self.browser.width() + BROWSER_WIDTH

    # ------------------------------------------------------------ project
    def set_project(self, project_dir: str) -> None:
        self.labels.set_project(project_dir)
        self.refresh()

    def _store(self) -> LabelStore | None:
        """The label database; says why when it cannot be opened."""
        try:
            return self.labels.open()
        except (sqlite3.Error, DatabaseError) as exc:
            self._say(f"Cannot open the label database: {exc}.", error=True)
            return None

    def refresh(self) -> None:
        current = self.files.currentItem()
        keep = current.data(Qt.ItemDataRole.UserRole) if current else None
        self.files.clear()
        project_dir = self.labels.project_dir
        paths = list_trace_files(project_dir) if project_dir else []
        for path in paths:
            item = QListWidgetItem(path.stem)
            item.setData(Qt.ItemDataRole.UserRole, str(path))
            item.setToolTip(str(path))
            self.files.addItem(item)
            if str(path) == keep:
                self.files.setCurrentItem(item)
        if not paths:
            self.browser.show_nothing(
                "No traces yet: record rollouts of a language-model policy "
                "(llm.collect) and they appear here."
            )
        self._report_deleted({p.stem for p in paths})

    def _report_deleted(self, names: set[str]) -> None:
        store = self._store() if self.labels.project_dir else None
        if store is None:
            return
        gone = {t: n for t, n in store.traces().items() if t not in names}
        if gone:
            self._say(
                f"{sum(gone.values())} label(s) belong to trace files that were "
                f"deleted ({', '.join(sorted(gone))}); they are kept in "
                "data/labels.sqlite but not shown or used.",
                error=True,
            )

    def open_file(self, path: str | Path) -> None:
        for i in range(self.files.count()):
            item = self.files.item(i)
            if item.data(Qt.ItemDataRole.UserRole) == str(path):
                self.files.setCurrentItem(item)
                return
        self._load(Path(path))

    def _on_files_current_changed(self, item: QListWidgetItem | None, _prev) -> None:  # type: ignore[no-untyped-def]
        if item is not None:
            self._load(Path(item.data(Qt.ItemDataRole.UserRole)))

    def _load(self, path: Path) -> None:
        try:
            trace = load_trace_file(path)
        except OSError as exc:
            self.labels.show_trace(None)
            self.browser.info.setText(f"Cannot read {path.name}: {exc.strerror}.")
            return
        self._store()
        orphans = self.labels.show_trace(trace)
        self.browser.show_trace(path, orphans)
        self.reload_suggestions()

    # ------------------------------------------------------------ keys
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent):
            if watched is self.auto.suggestions.view and self._dispatch(
                self.SUGGESTION_KEYS, event, False
            ):
                return True
            on_steps = watched is self.browser.steps.view
            if (on_steps or watched is self.browser.episodes.view) and self._dispatch(
                self.KEYS, event, on_steps
            ):
                return True
        return super().eventFilter(watched, event)

    def _dispatch(
        self, keys: tuple[TraceKey, ...], event: QKeyEvent, on_steps: bool
    ) -> bool:
        """Act on a key of ``keys``; False when it is not one."""
        if event.matches(QKeySequence.StandardKey.Undo):
            self.undo()
            return True
        if event.modifiers() & ~Qt.KeyboardModifier.KeypadModifier:
            return False
        for binding in keys:
            if event.key() == binding.key and (on_steps or not binding.steps_only):
                binding.act(self, on_steps)
                return True
        return False

    def _say(self, text: str, error: bool = False) -> None:
        color = "#d62728" if error else "gray"
        self.label_status.setText(
            f"<span style='color:{color}'>{html.escape(text)}</span>"
        )

    def _ready(self) -> bool:
        """Whether a label can be saved now; says why not."""
        if self._store() is None or self.labels.trace is None:
            self._say("Open a project and a trace file to label.", error=True)
            return False
        return True

    # ------------------------------------------------------------ labels
    def label_current(self, value: str, on_steps: bool = True) -> None:
        """Good/bad on the current step (or episode), then on to the next."""
        pos = self.browser.current(on_steps)
        if not self._ready() or pos is None:
            return
        try:
            self.labels.label(pos, value)
        except (LabelError, sqlite3.Error, DatabaseError) as exc:
            self._say(f"The label was not saved: {exc}", error=True)
            return
        self.browser.show_label(*pos)
        self._say(f"Labelled {_where(pos)} {value}.")
        self.browser.advance(on_steps)

    def clear_current(self, on_steps: bool = True) -> None:
        pos = self.browser.current(on_steps)
        if not self._ready() or pos is None:
            return
        if self.labels.clear(pos):
            self.browser.show_label(*pos)
            self._say(f"Cleared the label of {_where(pos)}.")

    def edit_current(self) -> None:
        pos = self.browser.current(True)
        if not self._ready() or pos is None or self.labels.trace is None:
            return
        step = self.labels.trace.episodes[pos[0]]["steps"][pos[1]]
        ideal = self.labels.ideal(pos)
        text = self.edit_answer(
            ideal if ideal is not None else str(step.get("completion") or "")
        )
        if text is None:
            return
        try:
            self.labels.set_ideal(pos, text)
        except (LabelError, sqlite3.Error, DatabaseError) as exc:
            self._say(f"The ideal answer was not saved: {exc}", error=True)
            return
        self.browser.show_label(*pos)
        self.browser.show_prompt()
        self._say(f"Saved the ideal answer of {_where(pos)}.")

    def _ask_answer(self, text: str) -> str | None:
        dialog = IdealAnswerDialog(text, self)
        return dialog.text() if dialog.exec() == QDialog.DialogCode.Accepted else None

    def pin_current(self) -> None:
        pos = self.browser.current(True)
        if pos is None:
            return
        self.labels.pin(pos)
        self._say(
            f"Pinned {_where(pos)}; on another step press 1 if the pinned one "
            "is better, 2 if that one is."
        )

    def prefer(self, pinned_better: bool) -> None:
        pos = self.browser.current(True)
        if not self._ready() or pos is None:
            return
        try:
            compared = self.labels.prefer(pos, pinned_better)
        except (LabelError, sqlite3.Error, DatabaseError) as exc:
            self._say(f"The comparison was not saved: {exc}", error=True)
            return
        if compared is None:
            self._say(
                "Pin a step with P first, then compare another with 1 or 2.", error=True
            )
            return
        better, worse = compared
        self.browser.show_label(better.episode, better.step)
        self._say(
            f"Step {better.episode}:{better.step} is better than "
            f"{worse.episode}:{worse.step}."
        )

    def undo(self) -> None:
        store = self._store()
        if store is None or not store.can_undo:
            self._say("Nothing to undo.")
            return
        for pos in self.labels.undo():
            self.browser.show_label(*pos)
        if self.auto.has_suggestions():
            self.reload_suggestions()
        self._say("Undone.")

    # ------------------------------------------------------------ auto-labeler
    def reload_suggestions(self) -> None:
        """The open suggestions for the chosen file, and the agreement plot."""
        self.auto.show_suggestions(self._store(), self.labels.trace)

    def review(self, correct: bool) -> None:
        """Accept (or correct) the selected suggestions in one commit."""
        ready = self._ready()
        chosen = self.labels.unlabelled(self.auto.selected_suggestions())
        if not chosen or not ready:
            self._say("Select suggestions first (Shift/Ctrl+click for many).")
            return
        try:
            n = self.labels.review(chosen, correct)
        except (LabelError, sqlite3.Error, DatabaseError) as exc:
            self._say(f"The review was not saved: {exc}", error=True)
            return
        for sug in chosen:
            self.browser.show_label(sug.episode, sug.step)
        self.reload_suggestions()
        self._say(f"{'Corrected' if correct else 'Accepted'} {n} suggestion(s).")

    def _on_auto_review_requested(self, correct: bool) -> None:
        self.review(correct)

    def _on_auto_retrain_requested(self) -> None:
        config = self.auto.retrain_config(self.labels.project_dir, self._store())
        if config is None:
            self._say(
                "Nothing to retrain yet: train a first reward model with "
                "reward.train (or the Learn reward node).",
                error=True,
            )
            return
        self._say("Retraining the reward model on the labels as they are now.")
        self.retrain_requested.emit(config)

    # ------------------------------------------------------------ label files
    def _ask_file(self, save: bool) -> str:
        if save:
            path, _ = QFileDialog.getSaveFileName(
                self, "Export labels", "labels.jsonl", "Label files (*.jsonl)"
            )
        else:
            path, _ = QFileDialog.getOpenFileName(
                self, "Import labels", "", "Label files (*.jsonl);;All files (*)"
            )
        return path

    def _on_import_clicked(self) -> None:
        store = self._store()
        path = self.choose_file(False) if store is not None else ""
        if not path or store is None:
            return
        try:
            stored, problems = store.import_file(path)
        except (LabelError, sqlite3.Error, DatabaseError) as exc:
            self._say(str(exc), error=True)
            return
        text = f"Imported {stored} label(s) from {Path(path).name}."
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            text += f" {problems[0]}{more}"
        self._say(text, error=bool(problems))
        if self.labels.trace is not None:
            self._load(self.labels.trace.path)

    def _on_export_clicked(self) -> None:
        store = self._store()
        path = self.choose_file(True) if store is not None else ""
        if not path or store is None:
            return
        try:
            n = store.export_file(path)
        except OSError as exc:
            self._say(f"Cannot write {Path(path).name}: {exc.strerror}.", error=True)
            return
        self._say(f"Exported {n} label(s) to {Path(path).name}.")
