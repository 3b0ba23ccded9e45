"""The flow editor's inspector: the selected node's title and parameters
(a form built from its type's parameter specs) and the problems found in it,
or, while no single node is selected, the flow's name, description and last
run. Every edit is an undo command on the editor's stack."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFocusEvent, QUndoStack
from PySide6.QtWidgets import (
    QFormLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from engine import flow
from engine.flow import NodeTypeSpec, ParamSpec
from studio.state.flow_document import FlowDocumentModel
from studio.workflows.commands import (
    SetFlowInfoCommand,
    SetParamsCommand,
    SetTitleCommand,
)
from widgets.param_form import ParamForm


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


class _DescriptionEdit(QPlainTextEdit):
    """A plain-text editor that says when the user leaves it."""

    editing_finished = Signal()

    def focusOutEvent(self, event: QFocusEvent) -> None:
        super().focusOutEvent(event)
        self.editing_finished.emit()


class FlowInspector(QScrollArea):
    """The inspector of the flow in ``model``. ``errors_of(node_id)`` gives
    the problems to show on a node (none until the flow was checked)."""

    def __init__(
        self,
        model: FlowDocumentModel,
        undo_stack: QUndoStack,
        errors_of: Callable[[str], list[str]],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._model = model
        self._undo_stack = undo_stack
        self._errors_of = errors_of
        self.catalog: dict[str, NodeTypeSpec] = {}
        """The engine's node types (the editor's, set with it)."""
        self.node_id: str | None = None
        """The node inspected; None: the flow."""

        self.heading = QLabel("<b>No node selected</b>", wordWrap=True)
        self.help = QLabel(wordWrap=True)
        self.help.setStyleSheet("color: palette(mid);")
        self.title_edit = QLineEdit(placeholderText="Node title")
        self.title_edit.editingFinished.connect(self._on_title_edit_finished)
        self.param_form = ParamForm()
        self.param_form.put_labels_above()  # the panel is narrow
        self.param_form.values_changed.connect(self._on_param_form_values_changed)
        self.node_errors_label = QLabel(wordWrap=True)
        self.node_errors_label.setStyleSheet("color: #d62728;")
        self._build_flow_panel()

        inner = QWidget()
        layout = QVBoxLayout(inner)
        layout.addWidget(self.heading)
        layout.addWidget(self.flow_panel)
        layout.addWidget(self.help)
        layout.addWidget(self.title_edit)
        layout.addWidget(self.param_form)
        layout.addWidget(self.node_errors_label)
        layout.addStretch(1)
        self.setWidgetResizable(True)
        self.setWidget(inner)

    def _build_flow_panel(self) -> None:
        """The flow itself, shown while no single node is selected."""
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

    # ------------------------------------------------------------ show
    def show_node(self, node_id: str | None) -> None:
        """Inspect a node (None: the flow)."""
        node = self._model.doc.node(node_id) if node_id else None
        self.node_id = node.id if node is not None else None
        self.flow_panel.setVisible(node is None)
        if node is None:
            self._show_flow()
            return
        spec = self.catalog.get(node.type)
        self.title_edit.show()
        self.title_edit.setText(node.title)
        self.title_edit.setPlaceholderText(spec.title if spec else node.type)
        if spec is None:
            self.heading.setText(f"<b>{node.id}</b> — unknown type")
            self.help.setText(
                f"This engine does not know the node type {node.type!r}; its "
                "parameters are kept as they are in the file."
            )
            self.param_form.set_schema([])
            self.param_form.hide()
        else:
            self.heading.setText(f"<b>{spec.title}</b> · {node.id}")
            self.help.setText(spec.description)
            self.param_form.set_schema(
                [param_schema(p) for p in spec.params],
                flow.resolved_params(node.params, spec),
            )
            self.param_form.show()
        self.show_node_errors()

    def _show_flow(self) -> None:
        self.heading.setText("<b>Flow</b>")
        self.help.setText(
            "Drag node types from the palette to build the flow."
            if not self._model.doc.nodes
            else "Select a node to edit its parameters."
        )
        self.sync_flow_panel()
        self.title_edit.hide()
        self.param_form.set_schema([])
        self.param_form.hide()
        self.node_errors_label.clear()

    def sync_flow_panel(self) -> None:
        """Show the flow's name and description as the document has them."""
        doc = self._model.doc
        path = self._model.path
        placeholder = flow.flow_name(doc, path) if path else ""
        self.flow_name_edit.setPlaceholderText(placeholder or "Name of the flow")
        if self.flow_name_edit.text() != doc.name:
            self.flow_name_edit.setText(doc.name)
        if self.flow_description_edit.toPlainText() != doc.description:
            self.flow_description_edit.setPlainText(doc.description)

    def set_last_run(self, text: str) -> None:
        """One line about the flow's last run (``FlowRunWatcher``'s)."""
        self.last_run_label.setText(text)

    def sync_form(self, node: flow.Node) -> None:
        """The node's parameters changed (an undo, not the user typing)."""
        spec = self.catalog.get(node.type)
        if spec is None:
            return
        values = flow.resolved_params(node.params, spec)
        if self.param_form.values() != values:
            self.param_form.set_schema([param_schema(p) for p in spec.params], values)
            self.show_node_errors()

    def sync_title(self, node: flow.Node) -> None:
        if self.title_edit.text() != node.title:
            self.title_edit.setText(node.title)

    def show_node_errors(self) -> None:
        """The inspected node's problems, under the form and on its fields."""
        node_id = self.node_id
        errors = self._errors_of(node_id) if node_id else []
        self.node_errors_label.setText("\n".join(f"• {e}" for e in errors))
        spec = self.catalog.get(self._model.node(node_id).type) if node_id else None
        if spec is not None:
            by_field = {}
            for p in spec.params:
                match = [e for e in errors if e.startswith(f"{p.name} ")]
                if match:
                    by_field[p.name] = match[0]
            self.param_form.set_external_errors(by_field)

    # --------------------------------------------------------- edits
    def _on_param_form_values_changed(self, values: dict[str, Any]) -> None:
        node_id = self.node_id
        if node_id is None or not self._model.has_node(node_id):
            return
        node = self._model.node(node_id)
        spec = self.catalog.get(node.type)
        if spec is None:
            return
        old = dict(node.params)
        new = {**flow.resolved_params(old, spec), **values}
        if new == flow.resolved_params(old, spec) and set(old) >= set(new):
            return
        self._undo_stack.push(SetParamsCommand(self._model, node_id, old, new))

    def _on_title_edit_finished(self) -> None:
        node_id = self.node_id
        if node_id is None or not self._model.has_node(node_id):
            return
        title = self.title_edit.text().strip()
        if title != self._model.node(node_id).title:
            self._undo_stack.push(SetTitleCommand(self._model, node_id, title))

    def _on_flow_info_edited(self) -> None:
        name = self.flow_name_edit.text().strip()
        description = self.flow_description_edit.toPlainText().strip()
        doc = self._model.doc
        if (name, description) != (doc.name, doc.description):
            self._undo_stack.push(SetFlowInfoCommand(self._model, name, description))
