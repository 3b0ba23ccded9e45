"""Workflows: the node-graph editor, composed of its parts.

``FlowEditor`` (palettes | canvas | inspector, every edit an undo command
on ``undo_stack``), ``FlowFileSession`` (open, save, autosave, recovery),
``FlowRunWatcher`` (the flow's runs: node states, results, logs) and
``NodeDetailsPane`` (the clicked node's last output, log and JSON). They
share the document (``model``, a ``FlowDocumentModel`` whose notifications
each follows) and the engine's ``controller`` (``FlowController``, the only
way to the engine). The workspace lays them out, builds the toolbar over
them and passes on what one of them says to the others.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAction, QKeySequence, QUndoStack
from PySide6.QtWidgets import (
    QApplication,
    QMenu,
    QSplitter,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import flow
from studio.lifetime import subscribe
from studio.session import Session
from studio.state.flow_document import FlowDocumentModel
from studio.workflows.controller import FlowController
from studio.workflows.editor import FlowEditor
from studio.workflows.file_session import FlowFileSession
from studio.workflows.output_view import NodeDetailsPane, OverviewRow
from studio.workflows.run_watcher import FlowRunWatcher
from widgets.fit import redo_shortcuts

Shortcut = QKeySequence | QKeySequence.StandardKey | str


class WorkflowsWorkspace(QWidget):
    """The Workflows workspace: ``editor``, ``files``, ``watcher`` and
    ``details`` over one flow document, and the toolbar's ``flow_actions``."""

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self.model = FlowDocumentModel()
        self.undo_stack = QUndoStack(self)
        self.controller = FlowController(session, self)
        # The model's listeners are told in this order: the watcher takes a
        # newly opened flow's last run before the editor draws its nodes,
        # and the details pane redraws after both.
        self.watcher = FlowRunWatcher(session, self.controller, self.model, self)
        self.editor = FlowEditor(
            session, self.model, self.undo_stack, self.watcher.state_of
        )
        self.files = FlowFileSession(session, self.model, self.undo_stack, self)
        self.document = self.files.document
        """The autosave cycle, as the shell sets it up (``--screenshot``)."""
        self.details = NodeDetailsPane()
        self.model.subscribe(self._on_model_changed)
        self._build_layout()
        self._build_actions()
        self._connect_parts()
        subscribe(self._state, self, self._on_state_changed)
        self._on_state_changed("reset", "")
        self.editor.update_title()
        self._show_last_run()
        self._update_actions()
        if self._state.is_open:
            # Built after the project opened (the main window builds each
            # workspace when it is first needed): what opening it does here.
            QTimer.singleShot(0, self, self.files.offer_restore)

    # ------------------------------------------------------------- UI
    def _build_layout(self) -> None:
        self.toolbar = QToolBar()
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.editor.inspector)
        right.addWidget(self.details)
        right.setSizes([380, 300])
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.editor.left_tabs)
        split.addWidget(self.editor)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(2, 0)
        # The side panels narrow first (the canvas takes what a small window
        # loses otherwise): at 1,024 px the canvas had 270 px, too little to
        # show the bundled LLM flow with readable titles.
        split.setSizes([180, 720, 260])
        split.setCollapsible(1, False)
        self.editor.left_tabs.setMinimumWidth(190)
        right.setMinimumWidth(280)
        layout = QVBoxLayout(self)
        layout.addWidget(self.toolbar)
        layout.addWidget(split, 1)

    def _connect_parts(self) -> None:
        ctl, editor, files, watcher = (
            self.controller, self.editor, self.files, self.watcher
        )  # fmt: skip
        ctl.catalog_received.connect(self.set_catalog)
        ctl.catalog_failed.connect(editor.show_catalog_failed)
        ctl.validation_received.connect(editor.add_engine_errors)
        editor.validation_requested.connect(ctl.validate)
        editor.selection_changed.connect(self._on_editor_selection_changed)
        editor.canvas.node_clicked.connect(self.show_node_details)
        editor.flows_table.activation_requested.connect(files.open_file)
        files.document.modified_changed.connect(self._on_document_modified_changed)
        files.document_changed.connect(self._on_files_document_changed)
        files.status_changed.connect(editor.set_status)
        watcher.node_state_changed.connect(self._on_watcher_node_state_changed)
        watcher.results_changed.connect(self._on_watcher_results_changed)
        watcher.run_changed.connect(self._on_watcher_run_changed)
        watcher.log_received.connect(self.details.append_log)
        watcher.status_changed.connect(editor.set_status)
        watcher.run_finished.connect(self._on_watcher_run_finished)
        QApplication.clipboard().dataChanged.connect(self._on_clipboard_data_changed)

    # --------------------------------------------------------- actions
    def _build_actions(self) -> None:
        self.flow_actions: dict[str, QAction] = {}
        """The toolbar's actions by name (``run``, ``undo``, ``save``…)."""
        self._add_file_actions()
        self.toolbar.addSeparator()
        self._add_edit_actions()
        self._add_view_actions()
        self.toolbar.addSeparator()
        self._add_action("validate", "Validate", self.editor.validate,
                         tip="Check the flow")  # fmt: skip
        self._add_action("run", "Run", self.run_flow, "Ctrl+R",
                         tip="Save and run the flow")  # fmt: skip
        self._add_action("cancel", "Cancel", self.cancel_run,
                         tip="Stop the running flow")  # fmt: skip

    def _add_action(
        self,
        name: str,
        text: str,
        slot: Callable[[], object],
        shortcut: Shortcut | None = None,
        owner: QWidget | None = None,
        tip: str = "",
        toolbar: bool = True,
    ) -> QAction:
        """An action under ``flow_actions[name]``; its shortcut works while
        the focus is in ``owner`` (the workspace by default)."""
        action = QAction(text, self)
        action.setToolTip(tip or text)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
            action.setShortcutContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            (owner or self).addAction(action)
        action.triggered.connect(lambda *_: slot())
        if toolbar:
            self.toolbar.addAction(action)
        self.flow_actions[name] = action
        return action

    def _add_file_actions(self) -> None:
        files = self.files
        self._add_action("new", "New", files.new_document, tip="Start an empty flow")
        self._add_action("open", "Open…", files.ask_and_open, tip="Open a flow file")
        self._add_action("save", "Save", files.save, QKeySequence.StandardKey.Save)
        self._add_action("save_as", "Save as…", files.save_as, "Ctrl+Shift+S")
        self.recent_menu = QMenu(self)
        self.recent_menu.aboutToShow.connect(self._on_recent_menu_about_to_show)
        recent = QToolButton()
        recent.setText("Recent")
        recent.setMenu(self.recent_menu)
        recent.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.toolbar.addWidget(recent)
        self.recent_button = recent

    def _add_edit_actions(self) -> None:
        stack, editor, canvas = self.undo_stack, self.editor, self.editor.canvas
        add = self._add_action
        undo = add("undo", "Undo", stack.undo, QKeySequence.StandardKey.Undo)
        redo = add("redo", "Redo", stack.redo, QKeySequence.StandardKey.Redo)
        redo.setShortcuts(redo_shortcuts())
        undo.setEnabled(False)
        redo.setEnabled(False)
        stack.canUndoChanged.connect(undo.setEnabled)
        stack.canRedoChanged.connect(redo.setEnabled)
        stack.undoTextChanged.connect(lambda t: undo.setToolTip(f"Undo {t}".strip()))
        stack.redoTextChanged.connect(lambda t: redo.setToolTip(f"Redo {t}".strip()))
        add("delete", "Delete", editor.delete_selected,
            tip="Delete the selection (Del)")  # fmt: skip
        add("copy", "Copy", editor.copy_selected, QKeySequence.StandardKey.Copy,
            canvas)  # fmt: skip
        add("paste", "Paste", editor.paste, QKeySequence.StandardKey.Paste, canvas)
        add("duplicate", "Duplicate", editor.duplicate_selected, "Ctrl+D", canvas)

    def _add_view_actions(self) -> None:
        canvas = self.editor.canvas
        self._add_action(
            "fit",
            "Fit",
            canvas.fit_view,
            "F",
            canvas,
            "Show the whole flow (F). Wheel: zoom; middle drag or Space + drag: pan",
        )
        # Keyboard only, to keep the toolbar short.
        for name, text, keys, slot in (
            ("zoom_in", "Zoom in", QKeySequence.StandardKey.ZoomIn,
             lambda: canvas.set_zoom(canvas.zoom() * 1.25)),
            ("zoom_out", "Zoom out", QKeySequence.StandardKey.ZoomOut,
             lambda: canvas.set_zoom(canvas.zoom() / 1.25)),
            ("zoom_reset", "Actual size", "Ctrl+0", lambda: canvas.set_zoom(1.0)),
            ("select_all", "Select all", QKeySequence.StandardKey.SelectAll,
             self.editor.select_all),
        ):  # fmt: skip
            self._add_action(name, text, slot, keys, canvas, toolbar=False)

    def _update_actions(self) -> None:
        canvas, actions = self.editor.canvas, self.flow_actions
        has_selection = bool(canvas.selected_nodes())
        has_catalog = bool(self.editor.catalog)
        actions["delete"].setEnabled(has_selection or bool(canvas.selected_links()))
        actions["copy"].setEnabled(has_selection)
        actions["paste"].setEnabled(self.editor.clipboard_has_nodes())
        actions["duplicate"].setEnabled(has_selection)
        actions["run"].setEnabled(has_catalog and not self.watcher.busy)
        actions["cancel"].setEnabled(self.watcher.run_id is not None)
        actions["validate"].setEnabled(has_catalog)

    def _on_clipboard_data_changed(self) -> None:
        self.flow_actions["paste"].setEnabled(self.editor.clipboard_has_nodes())

    def _on_recent_menu_about_to_show(self) -> None:
        menu = self.recent_menu
        menu.clear()
        for path in self.files.recent_files():
            name = Path(path).name.removesuffix(flow.FLOW_SUFFIX)
            action = menu.addAction(name)
            action.setToolTip(path)
            action.triggered.connect(lambda *_, p=path: self.files.open_file(p))
        menu.setToolTipsVisible(True)
        if menu.isEmpty():
            menu.addAction("No recent flows").setEnabled(False)

    # ------------------------------------------------- for the shell
    def open_file(self, path: str | os.PathLike[str]) -> bool:
        """Open a flow file (the main window's Open, a start page's link)."""
        return self.files.open_file(path)

    def project_flows_dir(self) -> Path | None:
        return self.files.project_flows_dir()

    def set_catalog(self, node_types: list[dict[str, Any]]) -> None:
        """Node types from the engine (``flow.catalog``'s ``node_types``)."""
        self.editor.set_catalog(node_types)
        self._update_actions()

    # ------------------------------------------------------------- run
    def run_flow(self) -> bool:
        """Validate, save, and start the flow on the engine."""
        editor = self.editor
        if self.watcher.busy:
            return False
        if not editor.catalog:
            editor.set_status("The engine's node catalog has not arrived yet.", "error")
            return False
        if not self.model.doc.nodes:
            editor.set_status("The flow is empty: add nodes first.", "error")
            return False
        if editor.validate():
            editor.set_status(
                "The flow cannot run yet: " + editor.status_label.text(), "error"
            )
            return False
        if (self.files.is_modified() or self.model.path is None) and not (
            self.files.save()
        ):
            return False
        assert self.model.path is not None
        self.details.clear_results()
        name = flow.flow_name(self.model.doc, self.model.path)
        self.watcher.start(self.model.path, name)
        self._show_run_states()
        return True

    def cancel_run(self) -> None:
        self.watcher.cancel()

    def _show_run_states(self) -> None:
        canvas = self.editor.canvas
        canvas.clear_node_states()
        for node_id in self.model.doc.node_ids():
            state = self.watcher.state_of(node_id)
            if state:
                canvas.set_node_state(node_id, *state)

    def _show_last_run(self) -> None:
        self.editor.inspector.set_last_run(self.watcher.last_run_text())

    def _on_watcher_node_state_changed(
        self, node_id: str, state: str, progress: float, message: str
    ) -> None:
        self.editor.canvas.set_node_state(node_id, state, progress, message)
        if self.details.node_id == node_id:
            self.show_node_details(node_id)
        elif self.details.node_id is None:
            # Running states too: the list said "queued" for a node drawing
            # progress (the engine sends them at most 4 times a second).
            self._render_overview()

    def _on_watcher_results_changed(self) -> None:
        self._show_run_states()
        if self.details.node_id is None:
            self.show_flow_overview()

    def _on_watcher_run_changed(self) -> None:
        self._show_last_run()
        self._update_actions()

    def _on_watcher_run_finished(self, status: str, reason: str) -> None:
        if self.details.node_id is None:
            self._render_overview()

    # --------------------------------------------------------- details
    def show_node_details(self, node_id: str) -> None:
        """Show the node's last result and log in the details pane."""
        if not self.model.has_node(node_id):
            return
        watcher = self.watcher
        self.details.show_node(
            flow.display_name(self.model.node(node_id), self.editor.catalog),
            node_id,
            watcher.node_results.get(node_id),
            watcher.node_metrics(node_id),
            watcher.node_logs.get(node_id) or [],
        )

    def show_flow_overview(self) -> None:
        """The details pane for the whole flow: each node's last state, and
        the run's log."""
        self.details.show_overview(self._overview_rows(), self.watcher.run_log)

    def _render_overview(self) -> None:
        self.details.render_overview(self._overview_rows())

    def _overview_rows(self) -> list[OverviewRow]:
        catalog, results = self.editor.catalog, self.watcher.node_results
        return [
            (n.id, flow.display_name(n, catalog), results.get(n.id))
            for n in self.model.doc.nodes
        ]

    # ------------------------------------------------ what the parts say
    def _on_model_changed(self, what: str, key: str) -> None:
        if what == "path":  # "Not saved yet" no more
            self._show_last_run()
        elif (
            what not in ("reset", "info", "node_moved") and self.details.node_id is None
        ):
            self._render_overview()

    def _on_files_document_changed(self, message: str) -> None:
        # The editor and the watcher followed the model to the new flow.
        self.details.clear_results()
        self.show_flow_overview()
        self._show_last_run()
        self.editor.update_title()
        self.editor.check_opened(message)
        self._update_actions()

    def _on_document_modified_changed(self, modified: bool) -> None:
        self.editor.update_title()

    def _on_editor_selection_changed(self, ids: list[str]) -> None:
        if not ids and self.details.node_id is not None:
            self.show_flow_overview()  # clicked the empty canvas
        self._update_actions()

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self.editor.flows_table.set_records(self._state.flows)
