"""The flow editor: the canvas with the flow's title and status line, the
palettes beside it (node types, envs to drag, the project's flows) and the
inspector, wired to the document.

Every edit is an undo command on ``undo_stack``; the canvas and the
inspector follow the model's notifications, one handler per kind of
change. Problems found by checking the flow (here and on the engine) show
as red marks on the nodes and on the inspector's fields."""

from __future__ import annotations

import html
import json
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QMimeData, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QUndoStack
from PySide6.QtWidgets import (
    QApplication,
    QLabel,
    QSizePolicy,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from engine import flow
from engine.flow import Link, NodeTypeSpec
from studio.common import fmt_time
from studio.pickers import ENV, picker_sources
from studio.session import Session
from studio.state.flow_document import FlowDocumentModel, link_from_key
from studio.workflows.commands import (
    AddLinkCommand,
    AddNodeCommand,
    MoveNodesCommand,
    PasteCommand,
    Position,
    RemoveLinksCommand,
    RemoveNodesCommand,
    SetParamsCommand,
    clipboard_payload,
    pasted_items,
)
from studio.workflows.inspector import FlowInspector, param_label
from studio.workflows.run_watcher import NodeState
from widgets.node_graph import (
    GRID,
    HEADER_HEIGHT,
    NODE_PARAMS_MIME,
    NODE_TYPE_MIME,
    NODE_WIDTH,
    NodeGraphView,
    Port,
)
from widgets.node_palette import NodePalette
from widgets.picker import PickerEntry, SearchPicker
from widgets.record_table import Column, RecordTable

FLOW_FRAGMENT_MIME = "application/x-rlstudio-flow-fragment"
ENV_NODE_TYPE = "env.environment"
UNTITLED = "untitled"
STALES_ENGINE_CHECK = frozenset(
    ("node_added", "node_removed", "link_added", "link_removed", "params")
)
"""Document edits after which the engine's last check no longer holds."""

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


def category_color(category: str) -> str:
    if category in CATEGORY_COLORS:
        return CATEGORY_COLORS[category]
    return _OTHER_COLORS[sum(category.encode()) % len(_OTHER_COLORS)]


def env_drag_data(entry: PickerEntry) -> QMimeData:
    """An env dragged from a list: an Environment node set to it."""
    mime = QMimeData()
    mime.setData(NODE_TYPE_MIME, ENV_NODE_TYPE.encode("utf-8"))
    mime.setData(NODE_PARAMS_MIME, json.dumps({"env": entry.value}).encode("utf-8"))
    mime.setText(entry.value)
    return mime


def _subtitle(node: flow.Node, spec: NodeTypeSpec) -> str:
    """The first parameter worth showing under a node's title."""
    params = flow.resolved_params(node.params, spec)
    for p in spec.params:
        value = params.get(p.name)
        if isinstance(value, str) and (not value or value.startswith(("{", "["))):
            continue
        if value is None:
            continue
        return f"{param_label(p)}: {value}"
    return ""


class FlowEditor(QWidget):
    """The canvas column (title, canvas, status line) of the flow in
    ``model``; ``left_tabs`` (palettes) and ``inspector`` are its side
    panels, placed by the workspace. ``run_state(node_id)`` is the node's
    badge in the run results shown (a rebuilt canvas shows them again)."""

    selection_changed = Signal(list)
    """The user changed the canvas's selection (node ids); a rebuild of the
    canvas does not count."""
    validation_requested = Signal(dict)
    """Check this document (``FlowDocument.to_dict()``) on the engine."""

    def __init__(
        self,
        session: Session,
        model: FlowDocumentModel,
        undo_stack: QUndoStack,
        run_state: Callable[[str], NodeState | None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.model = model
        self.undo_stack = undo_stack
        self._run_state = run_state
        self.catalog: dict[str, NodeTypeSpec] = {}
        self.errors: dict[str, list[str]] = {}
        """The problems shown, by node id (``flow.DOCUMENT_KEY``: the flow's)."""
        self._errors_shown = False
        self._engine_errors: dict[str, list[str]] = {}
        self._paste_count = 0
        self._rebuilding = False
        self._build_palettes()
        self._build_canvas()
        self.inspector = FlowInspector(model, undo_stack, self._shown_errors)
        pickers = picker_sources(session)
        pickers.attach(self.inspector.param_form)
        pickers.attach_picker(self.env_list, ENV)
        self._model_handlers: dict[str, Callable[[str], None]] = {
            "reset": self._on_model_reset,
            "path": self._on_model_path,
            "info": self._on_model_info,
            "node_added": self._on_model_node_added,
            "node_removed": self._on_model_node_removed,
            "node_moved": self._on_model_node_moved,
            "link_added": self._on_model_link_added,
            "link_removed": self._on_model_link_removed,
            "params": self._on_model_params,
            "title": self._on_model_title,
        }
        # One edit (deleting a node and its links) notifies several times:
        # the engine is asked again once, about the flow after all of them.
        self._recheck = QTimer(self, singleShot=True, interval=0)
        self._recheck.timeout.connect(self._on_recheck_timeout)
        model.subscribe(self._on_model_changed)
        self.inspector.show_node(None)

    # ------------------------------------------------------------- UI
    def _build_palettes(self) -> None:
        self.node_palette = NodePalette()
        self.node_palette.set_empty_text("Waiting for the engine's node catalog…")
        self.node_palette.node_type_activated.connect(
            self._on_palette_node_type_activated
        )
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
        self.flows_table = RecordTable(
            [
                Column("Name", lambda d: d["name"]),
                Column("Modified", lambda d: d.get("modified", 0), fmt_time),
            ],
            key="path",
            empty_text="No flows in this project yet.",
        )
        self.left_tabs = QTabWidget()
        self.left_tabs.addTab(self.node_palette, "Nodes")
        self.left_tabs.addTab(self.env_list, "Envs")
        self.left_tabs.addTab(self.flows_table, "Flows")

    def _build_canvas(self) -> None:
        self.canvas = NodeGraphView()
        self.canvas.set_port_colors(PORT_COLORS)
        self.canvas.set_empty_text(
            "Drag a node from the palette onto the canvas, then drag from an "
            "output port to an input port to link them."
        )
        canvas = self.canvas
        canvas.node_drop_requested.connect(self._on_canvas_node_drop_requested)
        canvas.node_params_drop_requested.connect(
            self._on_canvas_node_params_drop_requested
        )
        canvas.link_requested.connect(self._on_canvas_link_requested)
        canvas.nodes_moved.connect(self._on_canvas_nodes_moved)
        canvas.delete_requested.connect(self._on_canvas_delete_requested)
        canvas.links_delete_requested.connect(self._on_canvas_delete_requested)
        canvas.selection_changed.connect(self._on_canvas_selection_changed)
        self.title_label = QLabel()
        # A long description must not widen the canvas column: it is cut.
        self.title_label.setSizePolicy(
            QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred
        )
        self.status_label = QLabel(wordWrap=True)
        self.status_label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse
        )
        column = QVBoxLayout(self)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.title_label)
        column.addWidget(self.canvas, 1)
        column.addWidget(self.status_label)

    def set_status(self, text: str, level: str = "info") -> None:
        """The status line under the canvas (``level``: info, ok, error)."""
        color = {"error": "#d62728", "ok": "#2ca02c"}.get(level, "")
        self.status_label.setStyleSheet(f"color: {color};" if color else "")
        self.status_label.setText(text)

    def update_title(self) -> None:
        """The flow's name over the canvas, with a mark while it is modified."""
        path = self.model.path
        doc = self.model.doc
        name = flow.flow_name(doc, path) if path or doc.name.strip() else UNTITLED
        mark = "" if self.undo_stack.isClean() else " •"
        # The description shows in the Flow panel and as this tooltip.
        description = doc.description.strip()
        self.title_label.setText(f"<b>{html.escape(name)}</b>{mark}")
        tip = str(path) if path else "Not saved yet"
        self.title_label.setToolTip(f"{tip}\n\n{description}" if description else tip)

    # ------------------------------------------------------ catalog
    def set_catalog(self, node_types: list[dict[str, Any]]) -> None:
        """Node types from the engine (``flow.catalog``'s ``node_types``)."""
        self.catalog = flow.catalog_from_dicts(node_types)
        self.inspector.catalog = self.catalog
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
            self.refresh_errors()

    def show_catalog_failed(self, message: str) -> None:
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
            "subtitle": _subtitle(node, spec),
        }

    def _add_canvas_node(self, node: flow.Node) -> None:
        self.canvas.add_node(
            node.id, pos=(node.x, node.y), **self._canvas_node_args(node)
        )
        if self._errors_shown:
            self.canvas.set_node_errors(node.id, self.errors.get(node.id, []))
        state = self._run_state(node.id)
        if state:
            self.canvas.set_node_state(node.id, *state)

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
        handler = self._model_handlers.get(what)
        if handler is not None:
            handler(key)
        if what in STALES_ENGINE_CHECK and self._engine_errors:
            # The engine's word was about the flow before this edit: a type
            # error of a link to a node since deleted stayed on the status
            # line. Ask it again about the flow as it is now.
            self._engine_errors = {}
            self._recheck.start()
        if what not in ("reset", "path", "info") and self._errors_shown:
            self.refresh_errors()

    def _on_recheck_timeout(self) -> None:
        self.validation_requested.emit(self.model.doc.to_dict())

    def _on_model_reset(self, _key: str) -> None:
        # Another flow: the problems found in the last one go with it.
        self._recheck.stop()
        self._errors_shown = False
        self.errors = {}
        self._engine_errors = {}
        self._rebuild_canvas()
        self.inspector.show_node(None)
        self.update_title()
        self.canvas.fit_view()

    def _on_model_path(self, _key: str) -> None:
        self.update_title()
        self.inspector.sync_flow_panel()

    def _on_model_info(self, _key: str) -> None:
        self.update_title()
        self.inspector.sync_flow_panel()

    def _on_model_node_added(self, node_id: str) -> None:
        self._add_canvas_node(self.model.node(node_id))

    def _on_model_node_removed(self, node_id: str) -> None:
        self.canvas.remove_node(node_id)
        if self.inspector.node_id == node_id:
            self.inspector.show_node(None)

    def _on_model_node_moved(self, node_id: str) -> None:
        node = self.model.node(node_id)
        self.canvas.move_node(node_id, (node.x, node.y))

    def _on_model_link_added(self, key: str) -> None:
        lk = link_from_key(key)
        self.canvas.add_link(lk.from_node, lk.from_port, lk.to_node, lk.to_port)

    def _on_model_link_removed(self, key: str) -> None:
        lk = link_from_key(key)
        self.canvas.remove_link(lk.from_node, lk.from_port, lk.to_node, lk.to_port)

    def _retitle(self, node: flow.Node) -> None:
        args = self._canvas_node_args(node)
        self.canvas.set_node_title(node.id, args["title"], args["subtitle"])

    def _on_model_params(self, node_id: str) -> None:
        node = self.model.node(node_id)
        self._retitle(node)
        if self.inspector.node_id == node_id:
            self.inspector.sync_form(node)

    def _on_model_title(self, node_id: str) -> None:
        node = self.model.node(node_id)
        self._retitle(node)
        if self.inspector.node_id == node_id:
            self.inspector.sync_title(node)

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
            self.set_status(f"The engine has no node type {type_name!r}.", "error")
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
            self.set_status(reason, "error")
            return False, reason
        replaces: list[Link] = []
        spec = self.catalog[self.model.node(to_node).type]
        port = spec.input(to_port)
        if port is not None and not port.multiple:
            replaces = self.model.doc.links_into(to_node, to_port)
        link = Link(from_node, from_port, to_node, to_port)
        self.undo_stack.push(AddLinkCommand(self.model, link, replaces))
        self.set_status("")
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

    def select_all(self) -> None:
        self.canvas.select_nodes(self.model.doc.node_ids())

    # ------------------------------------------------------ clipboard
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
            self.set_status(f"The clipboard holds no nodes that can be pasted: {exc}")
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

    @staticmethod
    def clipboard_has_nodes() -> bool:
        mime = QApplication.clipboard().mimeData()
        if mime is None:
            return False
        return mime.hasFormat(FLOW_FRAGMENT_MIME) or (
            mime.hasText() and '"flow-fragment"' in mime.text()[:200]
        )

    # ---------------------------------------------- palettes and canvas
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
        self.inspector.show_node(ids[0] if len(ids) == 1 else None)
        if not self._rebuilding:
            self.selection_changed.emit(ids)

    # ------------------------------------------------------ validation
    def _shown_errors(self, node_id: str) -> list[str]:
        return self.errors.get(node_id, []) if self._errors_shown else []

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
        errors = self.refresh_errors()
        self.validation_requested.emit(self.model.doc.to_dict())
        return errors

    def check_opened(self, message: str) -> None:
        """Say ``message`` about the flow just opened, or the problems of
        one that has some (a saved flow is checked as it opens)."""
        self.set_status(message)
        checked = self.model.path is not None or self._has_structural_problems()
        if self.catalog and checked and not self.refresh_errors():
            self.set_status(message)

    def refresh_errors(self) -> dict[str, list[str]]:
        """Check the flow again (with the engine's last word) and show it."""
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
            self.set_status(text + ".", "error")
        else:
            self.set_status("The flow is valid.", "ok")
        if self.inspector.node_id:
            self.inspector.show_node_errors()
        return errors

    def add_engine_errors(self, errors: dict[str, list[str]]) -> None:
        """The engine's check of the flow (``{node_id: [sentence, ...]}``)."""
        doc_ids = set(self.model.doc.node_ids()) | {flow.DOCUMENT_KEY}
        self._engine_errors = {k: list(v) for k, v in errors.items() if k in doc_ids}
        self.refresh_errors()

    def node_ids(self) -> list[str]:
        return self.model.doc.node_ids()

    def links(self) -> list[Link]:
        return list(self.model.doc.links)
