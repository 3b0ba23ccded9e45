"""Workflows: the node-graph editor.

Palette (node types from the engine's catalog) | canvas | inspector (the
selected node's parameters) and details (the clicked node's last output and
log). Every edit is an undo command on ``undo_stack``; the model
(``FlowDocumentModel``) notifies the canvas, the inspector and the autosave.
The engine is reached only through ``FlowController``.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QMimeData, QPointF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import (
    QAction,
    QDesktopServices,
    QFocusEvent,
    QKeySequence,
    QUndoStack,
)
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QFormLayout,
    QLabel,
    QLineEdit,
    QMenu,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QSizePolicy,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QToolBar,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from engine import flow
from engine.flow import FlowDocument, Link, NodeTypeSpec, ParamSpec
from studio.common import JsonPreview, fmt_time
from studio.document_session import DocumentSession
from studio.lifetime import subscribe
from studio.pickers import ENV, picker_sources
from studio.session import Session
from studio.state.flow_document import FlowDocumentModel, link_from_key
from studio.state.flow_results import (
    FlowRunResults,
    last_flow_run,
    node_of_log_line,
    read_flow_run,
)
from studio.workflows.commands import (
    AddLinkCommand,
    AddNodeCommand,
    MoveNodesCommand,
    PasteCommand,
    Position,
    RemoveLinksCommand,
    RemoveNodesCommand,
    SetFlowInfoCommand,
    SetParamsCommand,
    SetTitleCommand,
    clipboard_payload,
    pasted_items,
)
from studio.workflows.controller import FlowController
from widgets.node_graph import (
    GRID,
    HEADER_HEIGHT,
    NODE_PARAMS_MIME,
    NODE_TYPE_MIME,
    NODE_WIDTH,
    STATE_COLORS,
    NodeGraphView,
    Port,
)
from widgets.node_palette import NodePalette
from widgets.param_form import ParamForm
from widgets.picker import PickerEntry, SearchPicker
from widgets.record_table import Column, RecordTable

FLOW_FRAGMENT_MIME = "application/x-rlstudio-flow-fragment"
ENV_NODE_TYPE = "env.environment"


def env_drag_data(entry: PickerEntry) -> QMimeData:
    """An env dragged from a list: an Environment node set to it."""
    mime = QMimeData()
    mime.setData(NODE_TYPE_MIME, ENV_NODE_TYPE.encode("utf-8"))
    mime.setData(NODE_PARAMS_MIME, json.dumps({"env": entry.value}).encode("utf-8"))
    mime.setText(entry.value)
    return mime


AUTOSAVE_FOLDER = ".autosave"
UNTITLED = "untitled"

PORT_COLORS = {
    "env": "#59b36b",
    "policy": "#4c9be8",
    "hf_model": "#e68a3a",
    "adapter": "#d4b22c",
    "dataset": "#3fb5b0",
    "trajectories": "#9c755f",
    "reward_fn": "#e15759",
    "gguf": "#b07aa1",
    "report": "#7f8ba3",
}
CATEGORY_COLORS = {
    "Environments": "#3f7d4e",
    "Reinforcement learning": "#3a6ea5",
    "Models": "#7d4f94",
    "Language models": "#b0652a",
    "Datasets": "#2f8080",
    "Export": "#9e3d3d",
}
_OTHER_COLORS = ("#4a5668", "#5b6b3a", "#6a4a5e", "#3d5f73")


def param_label(spec: ParamSpec) -> str:
    return spec.label or spec.name.replace("_", " ").capitalize()


def param_schema(spec: ParamSpec) -> dict[str, Any]:
    """An ``engine.flow.ParamSpec`` as ``widgets.param_form`` reads it."""
    schema: dict[str, Any] = {
        "name": spec.name,
        "type": spec.type,
        "default": spec.default,
        "help": spec.help,
        "title": param_label(spec),
    }
    if spec.min is not None:
        schema["min"] = spec.min
    if spec.max is not None:
        schema["max"] = spec.max
    for key in ("exclusive_min", "exclusive_max", "optional"):
        if getattr(spec, key):
            schema[key] = True
    if spec.group:
        schema["group"] = spec.group
    if spec.type == "choice":
        offered = spec.offered or spec.choices
        schema["choices"] = list(offered)
        unoffered = [c for c in spec.choices if c not in offered]
        if unoffered:
            schema["unoffered"] = unoffered
    if spec.disabled:
        schema["disabled"] = spec.disabled
    if spec.picker:
        schema["picker"] = spec.picker
    return schema


def category_color(category: str) -> str:
    if category in CATEGORY_COLORS:
        return CATEGORY_COLORS[category]
    return _OTHER_COLORS[sum(category.encode()) % len(_OTHER_COLORS)]


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


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict | list):
        return json.dumps(value, default=str)
    return str(value)


def output_files(value: Any) -> list[str]:
    """Absolute paths of existing files or folders anywhere in a node's
    outputs (models, reports, datasets travel as paths)."""
    found: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif (
            isinstance(v, str)
            and os.path.isabs(v)
            and v not in found
            and os.path.exists(v)
        ):
            found.append(v)

    walk(value)
    return found


def _rows(pairs: Iterable[tuple[str, Any]]) -> str:
    return "".join(
        f"<tr><td style='color:#5f6b7a;padding-right:10px'>{html.escape(k)}</td>"
        f"<td>{html.escape(_fmt_value(v))}</td></tr>"
        for k, v in pairs
    )


def node_details_html(
    title: str,
    node_id: str,
    result: dict[str, Any] | None,
    metrics: dict[str, float] | None = None,
) -> str:
    """What the Output tab says about a node's last result: its state, the
    facts of its summary, its last metric values, its outputs (models and
    reports) and the files they point at, as links."""
    head = f"<b>{html.escape(title)}</b> <span style='color:#7f8ba3'>· {node_id}</span>"
    if result is None:
        return (
            f"{head}<p style='color:#5f6b7a'>No result yet: run the flow to see "
            "this node's outputs, metrics and log here.</p>"
        )
    state = result.get("state", "")
    color = STATE_COLORS.get(state, "#5f6b7a")
    parts = [head, f"<p><b style='color:{color}'>{html.escape(state)}</b>"]
    if result.get("message"):
        parts.append(f" — {html.escape(result['message'])}")
    if result.get("run_id"):
        parts.append(f"<br><span style='color:#7f8ba3'>run {result['run_id']}</span>")
    parts.append("</p>")
    summary = {k: v for k, v in (result.get("summary") or {}).items() if v is not None}
    if summary:
        parts.append(f"<p><b>Summary</b></p><table>{_rows(summary.items())}</table>")
    if metrics:
        parts.append(
            f"<p><b>Last metrics</b></p><table>{_rows(sorted(metrics.items()))}</table>"
        )
    outputs = result.get("outputs") or {}
    for port, value in outputs.items():
        parts.append(f"<p><b>Output {html.escape(port)}</b></p>")
        if isinstance(value, dict):
            flat = [
                (k, v)
                for k, v in value.items()
                if not isinstance(v, dict | list) or k == "metrics"
            ]
            inner = value.get("metrics")
            if isinstance(inner, dict):
                flat = [p for p in flat if p[0] != "metrics"] + list(inner.items())
            parts.append(f"<table>{_rows(flat)}</table>")
        else:
            parts.append(f"<table>{_rows([(port, value)])}</table>")
    files = output_files(outputs)
    if files:
        parts.append("<p><b>Files</b></p><ul style='margin-left:-20px'>")
        for path in files:
            url = QUrl.fromLocalFile(path).toString()
            parts.append(f"<li><a href='{url}'>{html.escape(path)}</a></li>")
        parts.append("</ul>")
    return "".join(parts)


def flow_overview_html(rows: list[tuple[str, str, dict[str, Any] | None]]) -> str:
    """The Output tab while no node is picked: each node's state and
    message in the last run (``rows``: node id, label, result or None)."""
    if not rows:
        return ""
    if not any(result for _, _, result in rows):
        return (
            "<p style='color:#5f6b7a'>Run the flow to see each node's state "
            "here. Click a node for its outputs, metrics and log.</p>"
        )
    parts = ["<p><b>Last run</b> <span style='color:#7f8ba3'>· click a node "
             "for its outputs, metrics and log</span></p><table>"]  # fmt: skip
    for node_id, label, result in rows:
        state = result["state"] if result else "stale"
        color = STATE_COLORS.get(state, "#7f8ba3")
        message = result.get("message", "") if result else "changed since the run"
        parts.append(
            f"<tr><td style='padding-right:8px'>{html.escape(label)} "
            f"<span style='color:#7f8ba3'>({node_id})</span></td>"
            f"<td style='color:{color};padding-right:8px'><b>{state}</b></td>"
            f"<td>{html.escape(message)}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


class _DescriptionEdit(QPlainTextEdit):
    """A plain-text editor that says when the user leaves it."""

    editing_finished = Signal()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self.editing_finished.emit()


class WorkflowsWorkspace(QWidget):
    """The editor. Signals: ``run_finished(status, reason)``,
    ``document_saved(path)``."""

    run_finished = Signal(str, str)
    document_saved = Signal(str)

    def __init__(self, session: Session, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self.model = FlowDocumentModel()
        self.undo_stack = QUndoStack(self)
        self.controller = FlowController(session, self)
        self.catalog: dict[str, NodeTypeSpec] = {}
        self.errors: dict[str, list[str]] = {}
        self._errors_shown = False
        self._engine_errors: dict[str, list[str]] = {}
        self.run_id: str | None = None
        self._run_pending = False
        self._early_events: list[tuple[str, tuple[Any, ...]]] = []
        self.node_results: dict[str, dict[str, Any]] = {}
        self.node_logs: dict[str, list[str]] = {}
        self.run_log: list[str] = []
        self.last_run: FlowRunResults | None = None
        """The finished run whose results show (restored from the project)."""
        self.results_run_id: str | None = None
        """The run the node results come from (live or restored)."""
        self._running_nodes: set[str] = set()
        self._log_node: str | None = None
        """The node the run's untagged log lines belong to (see
        ``flow_results.split_log``)."""
        self._inspected: str | None = None
        self._details_node: str | None = None
        self._paste_count = 0
        self._rebuilding = False

        # Decisions a user makes in dialogs; tests replace them.
        self.ask_restore: Callable[[Path | None, Path], bool] = self._ask_restore
        self.ask_save_path: Callable[[str], str | None] = self._ask_save_path
        self.ask_open_path: Callable[[], str | None] = self._ask_open_path
        self.ask_unsaved: Callable[[], str] = self._ask_unsaved
        """Returns ``save``, ``discard`` or ``cancel``."""
        self.show_error: Callable[[str], None] = self._show_error

        self._build_ui()
        self._build_actions()

        self.model.subscribe(self._on_model_changed)
        self.document: DocumentSession[FlowDocument] = DocumentSession(
            self.undo_stack,
            autosave_of=lambda p: autosave_path(self._state.path or None, p),
            current_path=lambda: self.model.path,
            snapshot=lambda: self.model.doc,
            write=flow.save,
            read=flow.load,
            same=lambda a, b: flow.dumps(a) == flow.dumps(b),
            failed=self._on_autosave_failed,
            read_errors=(flow.FlowError,),
            write_errors=(flow.FlowError,),
            parent=self,
        )
        self.document.modified_changed.connect(self._on_modified_changed)
        self.controller.catalog_received.connect(self.set_catalog)
        self.controller.catalog_failed.connect(self._on_controller_catalog_failed)
        self.controller.validation_received.connect(self._on_engine_validation)
        self.controller.run_started.connect(self._on_controller_run_started)
        self.controller.run_refused.connect(self._on_controller_run_refused)
        self.controller.node_state_received.connect(self._on_node_state)
        self.controller.run_log_received.connect(self._on_run_log)
        self.controller.run_ended.connect(self._on_run_ended)
        subscribe(self._state, self, self._on_state_changed)
        QApplication.clipboard().dataChanged.connect(self._on_clipboard_data_changed)
        session.project_opened.connect(self._on_session_project_opened)
        self._on_state_changed("reset", "")
        self._update_title()
        self._update_actions()
        if self._state.is_open:
            # Built after the project opened (the main window builds each
            # workspace when it is first needed): what opening it does here.
            QTimer.singleShot(
                0, self, lambda: self._on_session_project_opened(self._state.path)
            )

    # ------------------------------------------------------------- UI
    def _build_ui(self) -> None:
        self.node_palette = NodePalette()
        self.node_palette.set_empty_text("Waiting for the engine's node catalog…")
        self.node_palette.node_type_activated.connect(
            self._on_palette_node_type_activated
        )
        self.table = RecordTable(
            [
                Column("Name", lambda d: d["name"]),
                Column("Modified", lambda d: d.get("modified", 0), fmt_time),
            ],
            key="path",
            empty_text="No flows in this project yet.",
        )
        self.table.activation_requested.connect(self._on_table_activation_requested)
        # Envs to drag onto the canvas (an Environment node, or onto one).
        self.env_list = SearchPicker(
            always_open=True, placeholder="Search environments…"
        )
        self.env_list.drag_data = env_drag_data
        self.env_list.setToolTip(
            "Drag an environment onto the canvas (or onto an Environment node); "
            "double-click adds an Environment node."
        )
        self.env_list.activation_requested.connect(
            self._on_env_list_activation_requested
        )
        self.left_tabs = QTabWidget()
        self.left_tabs.addTab(self.node_palette, "Nodes")
        self.left_tabs.addTab(self.env_list, "Envs")
        self.left_tabs.addTab(self.table, "Flows")

        self.canvas = NodeGraphView()
        self.canvas.set_port_colors(PORT_COLORS)
        self.canvas.set_empty_text(
            "Drag a node from the palette onto the canvas, then drag from an "
            "output port to an input port to link them."
        )
        self.canvas.node_drop_requested.connect(self._on_canvas_node_drop_requested)
        self.canvas.node_params_drop_requested.connect(
            self._on_canvas_node_params_drop_requested
        )
        self.canvas.link_requested.connect(self._on_canvas_link_requested)
        self.canvas.nodes_moved.connect(self._on_canvas_nodes_moved)
        self.canvas.delete_requested.connect(self._on_canvas_delete_requested)
        self.canvas.links_delete_requested.connect(self._on_canvas_delete_requested)
        self.canvas.selection_changed.connect(self._on_canvas_selection_changed)
        self.canvas.node_clicked.connect(self.show_node_details)

        self.toolbar = QToolBar()
        self.toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.title_label = QLabel()
        # A long description must not widen the canvas column: it is cut.
        self.title_label.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.status_label = QLabel(wordWrap=True)
        self.status_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        center = QWidget()
        column = QVBoxLayout(center)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.title_label)
        column.addWidget(self.canvas, 1)
        column.addWidget(self.status_label)

        # Inspector
        self.inspector_heading = QLabel("<b>No node selected</b>", wordWrap=True)
        self.inspector_help = QLabel(wordWrap=True)
        self.inspector_help.setStyleSheet("color: palette(mid);")
        self.title_edit = QLineEdit(placeholderText="Node title")
        self.title_edit.editingFinished.connect(self._on_title_edit_finished)
        self.param_form = ParamForm()
        self.param_form.values_changed.connect(self._on_param_form_values_changed)
        pickers = picker_sources(self._session)
        pickers.attach(self.param_form)
        pickers.attach_picker(self.env_list, ENV)
        self.node_errors_label = QLabel(wordWrap=True)
        self.node_errors_label.setStyleSheet("color: #d62728;")

        # The flow itself, shown while no single node is selected.
        self.flow_name_edit = QLineEdit()
        self.flow_name_edit.setToolTip(
            "The flow's name, saved in the file. Cached node results are kept "
            "per flow name: a renamed flow runs every node again."
        )
        self.flow_name_edit.editingFinished.connect(self._on_flow_info_edited)
        self.flow_description_edit = _DescriptionEdit()
        self.flow_description_edit.setPlaceholderText("What this flow does")
        self.flow_description_edit.setTabChangesFocus(True)
        self.flow_description_edit.setFixedHeight(90)
        self.flow_description_edit.editing_finished.connect(self._on_flow_info_edited)
        self.last_run_label = QLabel(wordWrap=True)
        self.last_run_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        self.flow_panel = QWidget()
        form = QFormLayout(self.flow_panel)
        form.setContentsMargins(0, 0, 0, 0)
        form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapAllRows)
        form.addRow("Name", self.flow_name_edit)
        form.addRow("Description", self.flow_description_edit)
        form.addRow("Last run", self.last_run_label)

        inspector = QWidget()
        ilayout = QVBoxLayout(inspector)
        ilayout.addWidget(self.inspector_heading)
        ilayout.addWidget(self.flow_panel)
        ilayout.addWidget(self.inspector_help)
        ilayout.addWidget(self.title_edit)
        ilayout.addWidget(self.param_form)
        ilayout.addWidget(self.node_errors_label)
        ilayout.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(inspector)

        self.output_view = QTextBrowser()
        self.output_view.setOpenLinks(False)  # files open in their own app
        self.output_view.anchorClicked.connect(self._on_output_view_anchor_clicked)
        self.raw_view = JsonPreview()
        self.log_view = QPlainTextEdit(readOnly=True)
        self.log_view.setMaximumBlockCount(5000)
        self.details_tabs = QTabWidget()
        self.details_tabs.addTab(self.output_view, "Output")
        self.details_tabs.addTab(self.log_view, "Log")
        self.details_tabs.addTab(self.raw_view, "JSON")
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(scroll)
        right.addWidget(self.details_tabs)
        right.setSizes([380, 300])

        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.left_tabs)
        split.addWidget(center)
        split.addWidget(right)
        split.setStretchFactor(1, 1)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(2, 0)
        # The side panels narrow first (the canvas takes what a small window
        # loses otherwise): at 1,024 px the canvas had 270 px, too little to
        # show the bundled LLM flow with readable titles.
        split.setSizes([180, 720, 260])
        split.setCollapsible(1, False)
        self.left_tabs.setMinimumWidth(190)
        right.setMinimumWidth(280)
        layout = QVBoxLayout(self)
        layout.addWidget(self.toolbar)
        layout.addWidget(split, 1)
        self._show_inspector(None)

    def _build_actions(self) -> None:
        ctx = Qt.ShortcutContext.WidgetWithChildrenShortcut
        self.flow_actions: dict[str, QAction] = {}
        """The toolbar's actions by name (``run``, ``undo``, ``save``…)."""

        def add(
            name: str,
            text: str,
            slot: Callable[[], object],
            shortcut: QKeySequence | QKeySequence.StandardKey | str | None = None,
            owner: QWidget | None = None,
            tip: str = "",
        ) -> QAction:
            action = QAction(text, self)
            action.setToolTip(tip or text)
            if shortcut is not None:
                action.setShortcut(QKeySequence(shortcut))
                action.setShortcutContext(ctx)
                (owner or self).addAction(action)
            action.triggered.connect(lambda *_: slot())
            self.toolbar.addAction(action)
            self.flow_actions[name] = action
            return action

        add("new", "New", self.new_document, tip="Start an empty flow")
        add("open", "Open…", self._on_open_triggered, tip="Open a flow file")
        add("save", "Save", self.save, QKeySequence.StandardKey.Save)
        add("save_as", "Save as…", self.save_as, "Ctrl+Shift+S")
        self.recent_menu = QMenu(self)
        self.recent_menu.aboutToShow.connect(self._on_recent_menu_about_to_show)
        recent = QToolButton()
        recent.setText("Recent")
        recent.setMenu(self.recent_menu)
        recent.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.toolbar.addWidget(recent)
        self.recent_button = recent
        self.toolbar.addSeparator()
        stack = self.undo_stack
        undo = add("undo", "Undo", stack.undo, QKeySequence.StandardKey.Undo)
        redo = add("redo", "Redo", stack.redo, QKeySequence.StandardKey.Redo)
        undo.setEnabled(False)
        redo.setEnabled(False)
        stack.canUndoChanged.connect(undo.setEnabled)
        stack.canRedoChanged.connect(redo.setEnabled)
        stack.undoTextChanged.connect(lambda t: undo.setToolTip(f"Undo {t}".strip()))
        stack.redoTextChanged.connect(lambda t: redo.setToolTip(f"Redo {t}".strip()))
        add("delete", "Delete", self.delete_selected, tip="Delete the selection (Del)")
        add(
            "copy",
            "Copy",
            self.copy_selected,
            QKeySequence.StandardKey.Copy,
            self.canvas,
        )
        add("paste", "Paste", self.paste, QKeySequence.StandardKey.Paste, self.canvas)
        add("duplicate", "Duplicate", self.duplicate_selected, "Ctrl+D", self.canvas)
        add(
            "fit",
            "Fit",
            self.canvas.fit_view,
            "F",
            self.canvas,
            "Show the whole flow (F). Wheel: zoom; middle drag or Space + drag: pan",
        )
        # Keyboard only, to keep the toolbar short.
        canvas = self.canvas
        for name, text, keys, slot in (
            ("zoom_in", "Zoom in", QKeySequence.StandardKey.ZoomIn,
             lambda: canvas.set_zoom(canvas.zoom() * 1.25)),
            ("zoom_out", "Zoom out", QKeySequence.StandardKey.ZoomOut,
             lambda: canvas.set_zoom(canvas.zoom() / 1.25)),
            ("zoom_reset", "Actual size", "Ctrl+0", lambda: canvas.set_zoom(1.0)),
            ("select_all", "Select all", QKeySequence.StandardKey.SelectAll,
             lambda: canvas.select_nodes(self.model.doc.node_ids())),
        ):  # fmt: skip
            action = QAction(text, self)
            action.setShortcut(QKeySequence(keys))
            action.setShortcutContext(ctx)
            action.triggered.connect(lambda *_, f=slot: f())
            canvas.addAction(action)
            self.flow_actions[name] = action
        self.toolbar.addSeparator()
        add("validate", "Validate", self.validate, tip="Check the flow")
        add("run", "Run", self.run_flow, "Ctrl+R", tip="Save and run the flow")
        add("cancel", "Cancel", self.cancel_run, tip="Stop the running flow")

    # ------------------------------------------------------ catalog
    def set_catalog(self, node_types: list[dict[str, Any]]) -> None:
        """Node types from the engine (``flow.catalog``'s ``node_types``)."""
        self.catalog = flow.catalog_from_dicts(node_types)
        self.node_palette.set_node_types(
            [
                {
                    "type": t.type,
                    "title": t.title,
                    "category": t.category,
                    "help": t.description,
                }
                for t in self.catalog.values()
            ]
        )
        self.node_palette.set_empty_text("The engine offers no node types.")
        selected = self.canvas.selected_nodes()
        self._rebuild_canvas()
        self.canvas.select_nodes(selected)
        if self._errors_shown or self._has_structural_problems():
            self._refresh_errors()
        self._update_actions()

    def _on_controller_catalog_failed(self, message: str) -> None:
        self.node_palette.set_empty_text(
            f"The engine could not list node types: {message}"
        )

    # --------------------------------------------------------- canvas
    def _canvas_node_args(self, node: flow.Node) -> dict[str, Any]:
        spec = self.catalog.get(node.type)
        if spec is None:
            return {
                "title": flow.display_name(node),
                "color": "#7a7a7a",
                "subtitle": f"unknown type {node.type}",
            }
        return {
            "title": flow.display_name(node, self.catalog),
            "inputs": [Port(p.name, p.type, p.help, p.required) for p in spec.inputs],
            "outputs": [Port(p.name, p.type, p.help) for p in spec.outputs],
            "color": category_color(spec.category),
            "subtitle": self._subtitle(node, spec),
        }

    @staticmethod
    def _subtitle(node: flow.Node, spec: NodeTypeSpec) -> str:
        params = flow.resolved_params(node.params, spec)
        for p in spec.params:
            value = params.get(p.name)
            if isinstance(value, str) and (not value or value.startswith(("{", "["))):
                continue
            if value is None:
                continue
            return f"{param_label(p)}: {value}"
        return ""

    def _add_canvas_node(self, node: flow.Node) -> None:
        self.canvas.add_node(
            node.id, pos=(node.x, node.y), **self._canvas_node_args(node)
        )
        if self._errors_shown:
            self.canvas.set_node_errors(node.id, self.errors.get(node.id, []))
        result = self.node_results.get(node.id)
        if result:
            self.canvas.set_node_state(
                node.id, result["state"], result["progress"], result["message"]
            )

    def _rebuild_canvas(self) -> None:
        # Clearing the scene empties the selection; that is no user's click
        # on the background, so the details pane keeps its node.
        self._rebuilding = True
        try:
            self.canvas.clear()
            for node in self.model.doc.nodes:
                self._add_canvas_node(node)
            for lk in self.model.doc.links:
                self.canvas.add_link(lk.from_node, lk.from_port, lk.to_node, lk.to_port)
        finally:
            self._rebuilding = False

    # ---------------------------------------------------------- model
    def _on_model_changed(self, what: str, key: str) -> None:
        canvas = self.canvas
        if what == "reset":
            self._rebuild_canvas()
            self._show_inspector(None)
            self._update_title()
            return
        if what == "path":
            self._update_title()
            self._sync_flow_panel()
            return
        if what == "info":
            self._update_title()
            self._sync_flow_panel()
            self.document.write_autosave()
            return
        if what == "node_added":
            self._add_canvas_node(self.model.node(key))
        elif what == "node_removed":
            canvas.remove_node(key)
            self.node_results.pop(key, None)
            if self._inspected == key:
                self._show_inspector(None)
        elif what == "node_moved":
            node = self.model.node(key)
            canvas.move_node(key, (node.x, node.y))
        elif what == "link_added":
            lk = link_from_key(key)
            canvas.add_link(lk.from_node, lk.from_port, lk.to_node, lk.to_port)
            self._mark_stale(lk.to_node)
        elif what == "link_removed":
            lk = link_from_key(key)
            canvas.remove_link(lk.from_node, lk.from_port, lk.to_node, lk.to_port)
            if self.model.has_node(lk.to_node):
                self._mark_stale(lk.to_node)
        elif what in ("params", "title"):
            node = self.model.node(key)
            args = self._canvas_node_args(node)
            canvas.set_node_title(key, args["title"], args["subtitle"])
            if what == "params":
                self._mark_stale(key)
                if self._inspected == key:
                    self._sync_form(node)
            elif self._inspected == key and self.title_edit.text() != node.title:
                self.title_edit.setText(node.title)
        self.document.write_autosave()
        if self._errors_shown:
            self._refresh_errors()
        if self._details_node is None and what != "node_moved":
            self._render_overview()

    def _mark_stale(self, node_id: str) -> None:
        """An edit invalidates the node's and its downstream's last results."""
        if self.run_id is not None:
            return
        for stale in flow.stale_nodes(self.model.doc, node_id):
            if stale in self.node_results:
                self.node_results.pop(stale)
                self.canvas.set_node_state(stale, "")

    def _on_modified_changed(self, modified: bool) -> None:
        self._update_title()

    def is_modified(self) -> bool:
        return self.document.is_modified()

    def _update_title(self) -> None:
        path = self.model.path
        doc = self.model.doc
        name = flow.flow_name(doc, path) if path or doc.name.strip() else UNTITLED
        mark = " •" if self.is_modified() else ""
        # The description shows in the Flow panel and as this tooltip.
        description = self.model.doc.description.strip()
        self.title_label.setText(f"<b>{html.escape(name)}</b>{mark}")
        tip = str(path) if path else "Not saved yet"
        self.title_label.setToolTip(f"{tip}\n\n{description}" if description else tip)

    # -------------------------------------------------------- editing
    def add_node_of_type(
        self,
        type_name: str,
        pos: tuple[float, float] | None = None,
        params: dict[str, Any] | None = None,
    ) -> str | None:
        """Add a node of a catalog type (its top-left at ``pos``, snapped;
        ``params`` over its defaults); returns its id, or None when the type
        is unknown."""
        spec = self.catalog.get(type_name)
        if spec is None:
            self._set_status(f"The engine has no node type {type_name!r}.", "error")
            return None
        if pos is None:
            center = self.canvas.mapToScene(self.canvas.viewport().rect().center())
            pos = (center.x() - NODE_WIDTH / 2, center.y() - HEADER_HEIGHT)
            while any(
                (n.x, n.y) == (round(pos[0] / GRID) * GRID, round(pos[1] / GRID) * GRID)
                for n in self.model.doc.nodes
            ):
                pos = (pos[0] + 2 * GRID, pos[1] + 2 * GRID)
        x, y = (round(v / GRID) * GRID for v in pos)
        node = flow.new_node(spec, self.model.doc.new_node_id(type_name), x, y)
        node.params.update(params or {})
        self.undo_stack.push(AddNodeCommand(self.model, node, f"Add {spec.title}"))
        self.canvas.select_nodes([node.id])
        return node.id

    def request_link(
        self, from_node: str, from_port: str, to_node: str, to_port: str
    ) -> tuple[bool, str]:
        """Link two ports if the flow allows it; a refusal's reason shows
        as a tooltip and on the status line."""
        ok, reason = flow.can_link(
            self.model.doc,
            self.catalog,
            (from_node, from_port),
            (to_node, to_port),
            replace=True,
        )
        if not ok:
            self.canvas.show_link_refused(reason)
            self._set_status(reason, "error")
            return False, reason
        replaces: list[Link] = []
        spec = self.catalog[self.model.node(to_node).type]
        port = spec.input(to_port)
        if port is not None and not port.multiple:
            replaces = self.model.doc.links_into(to_node, to_port)
        link = Link(from_node, from_port, to_node, to_port)
        self.undo_stack.push(AddLinkCommand(self.model, link, replaces))
        self._set_status("")
        return True, ""

    def delete_selected(self) -> None:
        nodes = self.canvas.selected_nodes()
        links = [Link(*k) for k in self.canvas.selected_links()]
        links = [lk for lk in links if not ({lk.from_node, lk.to_node} & set(nodes))]
        if not nodes and not links:
            return
        self.undo_stack.beginMacro("Delete")
        if links:
            self.undo_stack.push(RemoveLinksCommand(self.model, links))
        if nodes:
            self.undo_stack.push(RemoveNodesCommand(self.model, nodes))
        self.undo_stack.endMacro()

    def copy_selected(self) -> bool:
        nodes = self.canvas.selected_nodes()
        if not nodes:
            return False
        payload = clipboard_payload(self.model, nodes)
        text = json.dumps(payload, indent=2)
        mime = QMimeData()
        mime.setData(FLOW_FRAGMENT_MIME, text.encode("utf-8"))
        mime.setText(text)
        QApplication.clipboard().setMimeData(mime)
        self._paste_count = 0
        return True

    def paste(self) -> list[str]:
        mime = QApplication.clipboard().mimeData()
        if mime is None:
            return []
        if mime.hasFormat(FLOW_FRAGMENT_MIME):
            raw = bytes(mime.data(FLOW_FRAGMENT_MIME).data()).decode("utf-8")
        else:
            raw = mime.text()
        try:
            payload = json.loads(raw)
            if not isinstance(payload, dict) or payload.get("kind") != "flow-fragment":
                return []
            self._paste_count += 1
            offset = 2 * GRID * self._paste_count
            nodes, links = pasted_items(self.model, payload, (offset, offset))
        except ValueError as exc:
            self._set_status(f"The clipboard holds no nodes that can be pasted: {exc}")
            return []
        return self._insert(nodes, links, "Paste")

    def duplicate_selected(self) -> list[str]:
        nodes = self.canvas.selected_nodes()
        if not nodes:
            return []
        payload = clipboard_payload(self.model, nodes)
        new_nodes, links = pasted_items(self.model, payload, (2 * GRID, 2 * GRID))
        return self._insert(new_nodes, links, "Duplicate")

    def _insert(
        self, nodes: list[flow.Node], links: list[Link], text: str
    ) -> list[str]:
        if not nodes:
            return []
        self.undo_stack.push(PasteCommand(self.model, nodes, links, text))
        ids = [n.id for n in nodes]
        self.canvas.select_nodes(ids)
        return ids

    # -------------------------------------------------- canvas events
    def _on_canvas_node_params_drop_requested(
        self, type_name: str, params: dict[str, Any], pos: QPointF, node_id: str
    ) -> None:
        # Dropped onto a node of that type: set it; elsewhere: a new node.
        if node_id and self.model.has_node(node_id):
            node = self.model.node(node_id)
            spec = self.catalog.get(node.type)
            if node.type == type_name and spec is not None:
                old = dict(node.params)
                new = {**flow.resolved_params(old, spec), **params}
                self.undo_stack.push(SetParamsCommand(self.model, node_id, old, new))
                self.canvas.select_nodes([node_id])
                return
        self.add_node_of_type(
            type_name, (pos.x() - NODE_WIDTH / 2, pos.y() - HEADER_HEIGHT / 2), params
        )

    def _on_env_list_activation_requested(self, env_id: str) -> None:
        self.add_node_of_type(ENV_NODE_TYPE, None, {"env": env_id})

    def _on_canvas_node_drop_requested(self, type_name: str, pos: QPointF) -> None:
        self.add_node_of_type(
            type_name, (pos.x() - NODE_WIDTH / 2, pos.y() - HEADER_HEIGHT / 2)
        )
        self.canvas.setFocus()

    def _on_palette_node_type_activated(self, type_name: str) -> None:
        self.add_node_of_type(type_name)

    def _on_canvas_link_requested(self, a: str, ap: str, b: str, bp: str) -> None:
        self.request_link(a, ap, b, bp)

    def _on_canvas_nodes_moved(
        self, moves: dict[str, tuple[Position, Position]]
    ) -> None:
        moves = {k: v for k, v in moves.items() if self.model.has_node(k)}
        if moves:
            self.undo_stack.push(MoveNodesCommand(self.model, moves))

    def _on_canvas_delete_requested(self, _ids: list[str]) -> None:
        self.delete_selected()

    def _on_canvas_selection_changed(self, ids: list[str]) -> None:
        self._show_inspector(ids[0] if len(ids) == 1 else None)
        if not ids and self._details_node is not None and not self._rebuilding:
            self.show_flow_overview()  # clicked the empty canvas
        self._update_actions()

    # ------------------------------------------------------- inspector
    def _show_inspector(self, node_id: str | None) -> None:
        self._inspected = node_id
        node = self.model.doc.node(node_id) if node_id else None
        self.flow_panel.setVisible(node is None)
        if node is None:
            self._inspected = None
            self.inspector_heading.setText("<b>Flow</b>")
            self.inspector_help.setText(
                "Drag node types from the palette to build the flow."
                if not self.model.doc.nodes
                else "Select a node to edit its parameters."
            )
            self._sync_flow_panel()
            self.title_edit.hide()
            self.param_form.set_schema([])
            self.param_form.hide()
            self.node_errors_label.clear()
            return
        spec = self.catalog.get(node.type)
        self.title_edit.show()
        self.title_edit.setText(node.title)
        self.title_edit.setPlaceholderText(spec.title if spec else node.type)
        if spec is None:
            self.inspector_heading.setText(f"<b>{node.id}</b> — unknown type")
            self.inspector_help.setText(
                f"This engine does not know the node type {node.type!r}; its "
                "parameters are kept as they are in the file."
            )
            self.param_form.set_schema([])
            self.param_form.hide()
        else:
            self.inspector_heading.setText(f"<b>{spec.title}</b> · {node.id}")
            self.inspector_help.setText(spec.description)
            self.param_form.set_schema(
                [param_schema(p) for p in spec.params],
                flow.resolved_params(node.params, spec),
            )
            self.param_form.show()
        self._show_node_errors()

    def _sync_flow_panel(self) -> None:
        doc = self.model.doc
        placeholder = flow.flow_name(doc, self.model.path) if self.model.path else ""
        self.flow_name_edit.setPlaceholderText(placeholder or "Name of the flow")
        if self.flow_name_edit.text() != doc.name:
            self.flow_name_edit.setText(doc.name)
        if self.flow_description_edit.toPlainText() != doc.description:
            self.flow_description_edit.setPlainText(doc.description)
        self.last_run_label.setText(self._last_run_text())

    def _last_run_text(self) -> str:
        if self.run_id is not None or self._run_pending:
            return "Running now."
        last = self.last_run
        if last is None:
            return "Never run." if self.model.path else "Not saved yet."
        counts: dict[str, int] = {}
        for result in self.node_results.values():
            counts[result["state"]] = counts.get(result["state"], 0) + 1
        when = (
            time.strftime(" %Y-%m-%d %H:%M", time.localtime(last.ended))
            if last.ended
            else ""
        )
        text = f"{last.status.capitalize()}{when} (run {last.run_id})"
        if counts:
            text += ": " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
        if last.stale:
            n = len(last.stale)
            text += f"; {n} node{'s' if n != 1 else ''} changed since"
        if last.reason:
            text += f". {last.reason}"
        return text

    def _on_flow_info_edited(self) -> None:
        name = self.flow_name_edit.text().strip()
        description = self.flow_description_edit.toPlainText().strip()
        doc = self.model.doc
        if (name, description) != (doc.name, doc.description):
            self.undo_stack.push(SetFlowInfoCommand(self.model, name, description))

    def _sync_form(self, node: flow.Node) -> None:
        spec = self.catalog.get(node.type)
        if spec is None:
            return
        values = flow.resolved_params(node.params, spec)
        if self.param_form.values() != values:  # an undo, not the user typing
            self.param_form.set_schema([param_schema(p) for p in spec.params], values)
            self._show_node_errors()

    def _show_node_errors(self) -> None:
        node_id = self._inspected
        errors = (
            self.errors.get(node_id, []) if (node_id and self._errors_shown) else []
        )
        self.node_errors_label.setText("\n".join(f"• {e}" for e in errors))
        spec = self.catalog.get(self.model.node(node_id).type) if node_id else None
        if spec is not None:
            by_field = {}
            for p in spec.params:
                match = [e for e in errors if e.startswith(f"{p.name} ")]
                if match:
                    by_field[p.name] = match[0]
            self.param_form.set_external_errors(by_field)

    def _on_param_form_values_changed(self, values: dict[str, Any]) -> None:
        node_id = self._inspected
        if node_id is None or not self.model.has_node(node_id):
            return
        node = self.model.node(node_id)
        spec = self.catalog.get(node.type)
        if spec is None:
            return
        old = dict(node.params)
        new = {**flow.resolved_params(old, spec), **values}
        if new == flow.resolved_params(old, spec) and set(old) >= set(new):
            return
        self.undo_stack.push(SetParamsCommand(self.model, node_id, old, new))

    def _on_title_edit_finished(self) -> None:
        node_id = self._inspected
        if node_id is None or not self.model.has_node(node_id):
            return
        title = self.title_edit.text().strip()
        if title != self.model.node(node_id).title:
            self.undo_stack.push(SetTitleCommand(self.model, node_id, title))

    # ------------------------------------------------------ validation
    def _has_structural_problems(self) -> bool:
        doc = self.model.doc
        ids = set(doc.node_ids())
        if self.catalog and any(n.type not in self.catalog for n in doc.nodes):
            return True
        return any(not {lk.from_node, lk.to_node} <= ids for lk in doc.links)

    def validate(self) -> dict[str, list[str]]:
        """Check the flow here and on the engine; problems show on the nodes.
        Returns the local result."""
        self._errors_shown = True
        self._engine_errors = {}
        errors = self._refresh_errors()
        self.controller.validate(self.model.doc.to_dict())
        return errors

    def _refresh_errors(self) -> dict[str, list[str]]:
        if not self.catalog:
            return {}
        errors = flow.validate(self.model.doc, self.catalog)
        for node_id, extra in self._engine_errors.items():
            bucket = errors.setdefault(node_id, [])
            bucket += [e for e in extra if e not in bucket]
        self.errors = errors
        self._errors_shown = True
        for node_id in self.model.doc.node_ids():
            self.canvas.set_node_errors(node_id, errors.get(node_id, []))
        count = sum(len(v) for k, v in errors.items())
        if count:
            general = errors.get(flow.DOCUMENT_KEY, [])
            nodes = len([k for k in errors if k != flow.DOCUMENT_KEY])
            text = f"{count} problem{'s' if count != 1 else ''}"
            if nodes:
                text += f" in {nodes} node{'s' if nodes != 1 else ''} (red marks)"
            if general:
                text += ": " + " ".join(general)
            self._set_status(text + ".", "error")
        else:
            self._set_status("The flow is valid.", "ok")
        if self._inspected:
            self._show_node_errors()
        return errors

    def _on_engine_validation(self, errors: dict[str, list[str]]) -> None:
        doc_ids = set(self.model.doc.node_ids()) | {flow.DOCUMENT_KEY}
        self._engine_errors = {k: list(v) for k, v in errors.items() if k in doc_ids}
        self._refresh_errors()

    # ------------------------------------------------------------- files
    def project_flows_dir(self) -> Path | None:
        return Path(self._state.path) / "flows" if self._state.is_open else None

    def autosave_file(self) -> Path | None:
        return self.document.autosave_file()

    def _on_autosave_failed(self, action: str, exc: Exception) -> None:
        if action == "remove":
            self._set_status(f"Could not remove the autosave copy: {exc}", "error")
        elif isinstance(exc, OSError):
            self._set_status(f"Autosave failed: {exc.strerror}.", "error")
        else:
            self._set_status(f"Autosave failed: {exc}", "error")

    def new_document(self) -> bool:
        if not self._maybe_save_changes():
            return False
        self._load(FlowDocument(), None, restored=False)
        return True

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
            self._set_status(str(exc), "error")
            return False
        self._session.settings.add_recent_flow(str(path.resolve()))
        saved = self.document.restorable(path, doc, self.ask_restore)
        restored = saved is not None
        self._load(saved if saved is not None else doc, path, restored)
        return True

    def _load(self, doc: FlowDocument, path: Path | None, restored: bool) -> None:
        # A run of the flow open so far goes on in the engine (the Training
        # workspace shows it); opening that flow again picks it up.
        self.run_id = None
        self._run_pending = False
        self._early_events = []
        self._clear_run_results()
        self._errors_shown = False
        self.errors = {}
        self._engine_errors = {}
        self.model.replace(doc, path)
        self._restore_last_run()
        if self._details_node is None:
            self.show_flow_overview()
        self.undo_stack.clear()
        if restored:
            self.undo_stack.resetClean()  # restored edits are not saved yet
            self.document.write_autosave()
        else:
            self.undo_stack.setClean()
        self._update_title()
        self.canvas.fit_view()
        message = ""
        if path is not None:
            message = (
                f"Restored unsaved changes of {path.name}."
                if restored
                else (f"Opened {path.name}.")
            )
        elif restored:
            message = "Restored an unsaved flow."
        self._set_status(message)
        if self.catalog and (self._has_structural_problems() or path is not None):
            errors = self._refresh_errors()
            if not errors:
                self._set_status(message)
        self._update_actions()

    def save(self) -> bool:
        if self.model.path is None:
            return self.save_as()
        return self._save_to(self.model.path)

    def save_as(self) -> bool:
        suggested = (
            self.model.path.name if self.model.path else UNTITLED + flow.FLOW_SUFFIX
        )
        chosen = self.ask_save_path(suggested)
        if not chosen:
            return False
        path = Path(chosen)
        if not path.name.endswith(flow.FLOW_SUFFIX):
            path = path.with_name(path.name.removesuffix(".json") + flow.FLOW_SUFFIX)
        return self._save_to(path)

    def _save_to(self, path: Path) -> bool:
        old_autosave = self.document.autosave_file()
        try:
            flow.save(self.model.doc, path)
        except OSError as exc:
            self.show_error(f"Could not save {path}: {exc.strerror or exc}.")
            return False
        except flow.FlowError as exc:
            self.show_error(f"Could not save {path}: {exc}")
            return False
        if self.model.path != path:
            self.model.set_path(path)
        self.document.mark_saved(old_autosave)
        self._session.settings.add_recent_flow(str(path.resolve()))
        self._update_title()
        self._set_status(f"Saved {path.name}.", "ok")
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

    def _on_open_triggered(self) -> None:
        path = self.ask_open_path()
        if path:
            self.open_file(path)

    def _on_table_activation_requested(self, path: str) -> None:
        self.open_file(path)

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

    def _on_recent_menu_about_to_show(self) -> None:
        self.recent_menu.clear()
        for path in self.recent_files():
            name = Path(path).name.removesuffix(flow.FLOW_SUFFIX)
            action = self.recent_menu.addAction(name)
            action.setToolTip(path)
            action.triggered.connect(lambda *_, p=path: self.open_file(p))
        self.recent_menu.setToolTipsVisible(True)
        if self.recent_menu.isEmpty():
            self.recent_menu.addAction("No recent flows").setEnabled(False)

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "reset":
            self.table.set_records(self._state.flows)
            # The project's runs arrive after a flow opened at start-up.
            if self.results_run_id is None and not self._run_pending:
                self._restore_last_run()

    def _on_session_project_opened(self, path: str) -> None:
        # A new flow of a crashed session may wait in the autosave folder.
        if self.model.path is not None or self.model.doc.nodes or self.is_modified():
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

    # ------------------------------------------------------ dialogs
    def _ask_restore(self, path: Path | None, autosave: Path) -> bool:
        what = path.name if path is not None else "an unsaved flow"
        answer = QMessageBox.question(
            self,
            "Restore unsaved changes?",
            f"RL Studio found changes to {what} that were not saved (autosaved "
            f"{fmt_time(autosave.stat().st_mtime)}), probably because the app "
            "closed unexpectedly. Restore them?",
        )
        return answer == QMessageBox.StandardButton.Yes

    def _ask_save_path(self, suggested: str) -> str | None:
        folder = self.project_flows_dir() or Path.home()
        path, _ = QFileDialog.getSaveFileName(
            self, "Save flow", str(folder / suggested), "Flows (*.flow.json)"
        )
        return path or None

    def _ask_open_path(self) -> str | None:
        folder = self.project_flows_dir() or Path.home()
        path, _ = QFileDialog.getOpenFileName(
            self, "Open flow", str(folder), "Flows (*.flow.json);;JSON (*.json)"
        )
        return path or None

    def _ask_unsaved(self) -> str:
        answer = QMessageBox.question(
            self,
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
        QMessageBox.warning(self, "Workflows", text)

    # ------------------------------------------------------------- run
    def run_flow(self) -> bool:
        """Validate, save, and start the flow on the engine."""
        if self.run_id is not None or self._run_pending:
            return False
        if not self.catalog:
            self._set_status("The engine's node catalog has not arrived yet.", "error")
            return False
        if not self.model.doc.nodes:
            self._set_status("The flow is empty: add nodes first.", "error")
            return False
        errors = self.validate()
        if errors:
            self._set_status(
                "The flow cannot run yet: " + self.status_label.text(), "error"
            )
            return False
        if (self.is_modified() or self.model.path is None) and not self.save():
            return False
        assert self.model.path is not None
        self._clear_run_results()
        for node_id in self.model.doc.node_ids():
            self.canvas.set_node_state(node_id, "queued")
        self._run_pending = True
        self._early_events = []
        name = flow.flow_name(self.model.doc, self.model.path)
        self.controller.start_run(str(self.model.path), True, f"Flow {name}")
        self._set_status(f"Starting {name}…")
        self._sync_flow_panel()
        self._update_actions()
        return True

    def cancel_run(self) -> None:
        if self.run_id is not None:
            self.controller.stop_run(self.run_id)
            self._set_status("Stopping the run…")

    def _clear_run_results(self) -> None:
        self.node_results = {}
        self.node_logs = {}
        self.run_log = []
        self.last_run = None
        self.results_run_id = None
        self._running_nodes = set()
        self._log_node = None
        self.canvas.clear_node_states()
        self._details_node = None
        self.output_view.clear()
        self.raw_view.clear()
        self.log_view.clear()

    def _restore_last_run(self) -> None:
        """Show the node states, outputs and logs of the open flow's last
        run, as the project keeps them; a run still going on is followed
        live (and can be cancelled)."""
        path = self.model.path
        if path is None or not self._state.is_open:
            return
        run = last_flow_run(self._state.runs.values(), path)
        if run is None:
            self._sync_flow_panel()
            return
        results = read_flow_run(run, self.model.doc)
        self.results_run_id = results.run_id
        self.node_results = {
            node_id: {**record, "run_id": results.run_id}
            for node_id, record in results.nodes.items()
        }
        self.node_logs = results.node_logs
        self.run_log = results.run_log
        if results.status in ("running", "queued"):
            self.run_id = results.run_id
            self._running_nodes = {
                n for n, r in results.nodes.items() if r["state"] == "running"
            }
        else:
            self.last_run = results
        for node_id, result in self.node_results.items():
            self.canvas.set_node_state(
                node_id, result["state"], result["progress"], result["message"]
            )
        if self._details_node is None:
            self.show_flow_overview()
        self._sync_flow_panel()
        self._update_actions()

    def _on_controller_run_started(self, run_id: str) -> None:
        if not self._run_pending:
            return
        self._run_pending = False
        self.run_id = run_id
        self.results_run_id = run_id
        self._set_status("Running…")
        early, self._early_events = self._early_events, []
        for kind, args in early:
            if args[0] != run_id:
                continue
            if kind == "state":
                self._on_node_state(*args)
            elif kind == "log":
                self._on_run_log(*args)
            else:
                self._on_run_ended(*args)
        self._update_actions()

    def _on_controller_run_refused(self, message: str) -> None:
        if self._run_pending:
            self._run_pending = False
            self.canvas.clear_node_states()
            self._update_actions()
        self._set_status(message, "error")

    def _on_node_state(
        self,
        run_id: str,
        node_id: str,
        state: str,
        progress: float,
        message: str,
        outputs: dict[str, Any],
        summary: dict[str, Any] | None = None,
    ) -> None:
        if run_id != self.run_id:
            if self._run_pending:
                self._early_events.append(
                    (
                        "state",
                        (run_id, node_id, state, progress, message, outputs, summary),
                    )
                )
            return
        previous = self.node_results.get(node_id, {})
        if state in ("done", "cached"):
            progress = 1.0
        self.node_results[node_id] = {
            "state": state,
            "progress": progress,
            "message": message,
            "outputs": outputs or previous.get("outputs", {}),
            "summary": summary or previous.get("summary", {}),
            "run_id": run_id,
        }
        if state == "running":
            self._running_nodes.add(node_id)
        else:
            self._running_nodes.discard(node_id)
        self.canvas.set_node_state(node_id, state, progress, message)
        if self._details_node == node_id:
            self.show_node_details(node_id)
        elif self._details_node is None and state != "running":
            self._render_overview()

    def _on_run_log(self, run_id: str, lines: list[str]) -> None:
        if run_id != self.run_id:
            if self._run_pending:
                self._early_events.append(("log", (run_id, lines)))
            return
        self.run_log.extend(lines)
        ids = self.model.doc.node_ids()
        shown = []
        for line in lines:
            tagged = node_of_log_line(line, ids)
            if tagged is not None:
                self._log_node = tagged
            elif len(self._running_nodes) == 1:  # a library printing
                self._log_node = next(iter(self._running_nodes))
            if self._log_node is not None:
                self.node_logs.setdefault(self._log_node, []).append(line)
            if self._details_node in (None, self._log_node):
                shown.append(line)
        if shown:
            self.log_view.appendPlainText("\n".join(shown))

    def _on_run_ended(self, run_id: str, status: str, reason: str) -> None:
        if run_id != self.run_id:
            if self._run_pending:
                self._early_events.append(("end", (run_id, status, reason)))
            return
        self.run_id = None
        self._running_nodes = set()
        # A run killed after the stop timeout (or one that crashed) reports
        # nothing more about its nodes: settle the ones left in the air.
        for node_id in self.model.doc.node_ids():
            state = self.canvas.node_state(node_id)[0]
            if state not in ("queued", "running"):
                continue
            settled = "stopped" if state == "running" else "skipped"
            message = (
                f"The run {status} while this node ran."
                if state == "running"
                else f"Not run: the run {status}."
            )
            result = self.node_results.setdefault(
                node_id, {"outputs": {}, "summary": {}, "run_id": run_id}
            )
            result.update(state=settled, progress=0.0, message=message)
            self.canvas.set_node_state(node_id, settled, 0.0, message)
        self.last_run = FlowRunResults(
            run_id=run_id,
            status=status,
            reason=reason,
            ended=time.time(),
            nodes=self.node_results,
        )
        self._sync_flow_panel()
        if self._details_node is None:
            self._render_overview()
        if status == "completed":
            self._set_status("The run completed.", "ok")
        else:
            self._set_status(
                f"The run {status}" + (f": {reason}" if reason else "."), "error"
            )
        self._update_actions()
        self.run_finished.emit(status, reason)

    def show_node_details(self, node_id: str) -> None:
        """Show the node's last result and log in the details pane."""
        if not self.model.has_node(node_id):
            return
        self._details_node = node_id
        node = self.model.node(node_id)
        result = self.node_results.get(node_id)
        self.output_view.setHtml(
            node_details_html(
                flow.display_name(node, self.catalog),
                node_id,
                result,
                self.node_metrics(node_id),
            )
        )
        self.raw_view.show_value({"node": node_id, **(result or {})})
        lines = self.node_logs.get(node_id) or []
        self.log_view.setPlainText("\n".join(lines))
        self.log_view.setPlaceholderText(
            f"No log lines from {node_id} in the last run."
            if result
            else f"{node_id} has not run yet."
        )

    def show_flow_overview(self) -> None:
        """The details pane for the whole flow: each node's last state, and
        the run's log."""
        self._details_node = None
        self._render_overview()
        self.raw_view.clear()
        self.log_view.setPlainText("\n".join(self.run_log))
        self.log_view.setPlaceholderText("The log of the flow's last run shows here.")

    def _render_overview(self) -> None:
        rows = [
            (n.id, flow.display_name(n, self.catalog), self.node_results.get(n.id))
            for n in self.model.doc.nodes
        ]
        self.output_view.setHtml(flow_overview_html(rows))

    def node_metrics(self, node_id: str) -> dict[str, float]:
        """The last value of each metric the node logged in the run its
        result comes from (``<node-id>/<key>`` in the run's metrics)."""
        result = self.node_results.get(node_id) or {}
        run_id = result.get("run_id") or self.results_run_id
        if not run_id or self._state.run(run_id) is None:
            return {}
        store = self._session.metrics
        self._session.ensure_metrics_loaded(run_id)
        prefix = f"{node_id}/"
        out = {}
        for key in store.keys(run_id):
            if key.startswith(prefix) and (last := store.last(run_id, key)):
                out[key[len(prefix) :]] = last[2]
        return out

    def _on_output_view_anchor_clicked(self, url: QUrl) -> None:
        QDesktopServices.openUrl(url)

    # ---------------------------------------------------------- helpers
    def _set_status(self, text: str, level: str = "info") -> None:
        color = {"error": "#d62728", "ok": "#2ca02c"}.get(level, "")
        self.status_label.setStyleSheet(f"color: {color};" if color else "")
        self.status_label.setText(text)

    def _update_actions(self) -> None:
        has_selection = bool(self.canvas.selected_nodes())
        running = self.run_id is not None or self._run_pending
        self.flow_actions["delete"].setEnabled(
            has_selection or bool(self.canvas.selected_links())
        )
        self.flow_actions["copy"].setEnabled(has_selection)
        self.flow_actions["paste"].setEnabled(self._clipboard_has_nodes())
        self.flow_actions["duplicate"].setEnabled(has_selection)
        self.flow_actions["run"].setEnabled(bool(self.catalog) and not running)
        self.flow_actions["cancel"].setEnabled(self.run_id is not None)
        self.flow_actions["validate"].setEnabled(bool(self.catalog))

    @staticmethod
    def _clipboard_has_nodes() -> bool:
        mime = QApplication.clipboard().mimeData()
        if mime is None:
            return False
        return mime.hasFormat(FLOW_FRAGMENT_MIME) or (
            mime.hasText() and '"flow-fragment"' in mime.text()[:200]
        )

    def _on_clipboard_data_changed(self) -> None:
        self.flow_actions["paste"].setEnabled(self._clipboard_has_nodes())

    def node_ids(self) -> list[str]:
        return self.model.doc.node_ids()

    def links(self) -> Iterable[Link]:
        return list(self.model.doc.links)
