"""The editor of a workflow env: statuses and transitions on a canvas, an
inspector for the selected one, the tools and the settings."""

from __future__ import annotations

import re
from typing import Any, cast

from PySide6.QtCore import QSignalBlocker, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QLabel,
    QLineEdit,
    QSplitter,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from studio.environments import commands as cmd
from studio.environments.fields import mark
from studio.environments.kind_editor import EditorContext, KindEditor, ProblemMarks
from studio.environments.workflow_inspector import WorkflowInspector
from studio.state.env_design import WILDCARD, Position, Target
from widgets.fit import scroll_area
from widgets.flow_layout import FlowLayout
from widgets.state_machine_editor import (
    Edge,
    StateMachineEditor,
    circular_layout,
    layered_layout,
    text_width,
)


def transition_label(t: dict[str, Any]) -> str:
    label = str(t.get("tool", "?"))
    if t.get("to") == WILDCARD:
        label += " (stays)"
    if isinstance(t.get("probability"), int | float):
        label += f"  p={t['probability']:g}"
    if isinstance(t.get("reward"), int | float):
        label += f"  r={t['reward']:+g}"
    return label


def _parse_optional_float(text: str) -> tuple[float | None, str]:
    text = text.strip()
    if not text:
        return None, ""
    try:
        value = float(text)
    except ValueError:
        return None, f"'{text}' is not a number."
    if value != value or value in (float("inf"), float("-inf")):
        return None, "The value must be a finite number."
    return value, ""


# ---------------------------------------------------------------- workspace


class WorkflowEditor(KindEditor):
    """The workflow kind's page: the state-machine canvas with its tool bar,
    and the inspector of the selected status or transition, the tools and
    the settings."""

    def __init__(self, context: EditorContext, parent: QWidget | None = None) -> None:
        super().__init__(context, parent)
        self.inspected: tuple[str, Any] = ("", None)
        """What the inspector shows: ("status", name), ("transition",
        index) or ("", None)."""
        self.canvas = StateMachineEditor()
        self.canvas.status_add_requested.connect(self._on_canvas_status_add_requested)
        self.canvas.transition_requested.connect(self._on_canvas_transition_requested)
        self.canvas.statuses_moved.connect(self._on_canvas_statuses_moved)
        self.canvas.selection_changed.connect(self._on_canvas_selection_changed)
        self.canvas.delete_requested.connect(self.delete_selection)
        self.tool_buttons: dict[str, QToolButton] = {}
        """The canvas tool bar's buttons by their text."""
        canvas_box = QWidget()
        canvas_layout = QVBoxLayout(canvas_box)
        canvas_layout.setContentsMargins(0, 0, 0, 0)
        canvas_layout.addWidget(self._build_tool_bar())
        canvas_layout.addWidget(self.canvas, 1)
        self.inspector = WorkflowInspector()
        self._connect_inspector(self.inspector)
        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(canvas_box)
        splitter.addWidget(scroll_area(self.inspector))
        splitter.setStretchFactor(0, 1)
        splitter.setSizes([700, 290])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(splitter)

    def _build_tool_bar(self) -> QWidget:
        # Wraps instead of scrolling: every action stays in sight at 1,024 px.
        bar = FlowLayout()
        for text, slot, tip in (
            ("Add status", self._on_add_status_clicked, "Add a status"),
            (
                "Delete",
                self.delete_selection,
                "Delete the selected status or transition",
            ),
            (
                "Layered layout",
                lambda: self.auto_layout("layered"),
                "Arrange in layers",
            ),
            (
                "Circle layout",
                lambda: self.auto_layout("circular"),
                "Arrange on a circle",
            ),
            ("Fit", self.canvas.fit, "Show the whole graph"),
        ):
            b = QToolButton()
            b.setText(text)
            b.setToolTip(tip)
            b.clicked.connect(lambda *_, s=slot: s())
            bar.addWidget(b)
            self.tool_buttons[text] = b
        bar.addSpacing(16)
        legend = QLabel(
            "<span style='color:#2a7de1'>▶ start</span> &nbsp; "
            "<span style='color:#2e9e3e'>▣ success</span> &nbsp; "
            "<span style='color:#c8413a'>▣ terminal</span>"
        )
        bar.addWidget(legend)
        bar_row = QWidget()
        bar_row.setLayout(bar)
        return bar_row

    def _connect_inspector(self, ins: WorkflowInspector) -> None:
        self.bind_form(ins.settings)
        ins.status_name.editingFinished.connect(self._on_status_name_edited)
        ins.status_start.toggled.connect(self._on_status_start_toggled)
        ins.status_terminal.toggled.connect(self._on_status_terminal_toggled)
        ins.status_success.toggled.connect(self._on_status_success_toggled)
        ins.status_reward.editingFinished.connect(self._on_status_reward_edited)
        ins.transition_from.activated.connect(
            lambda *_: self._on_transition_edited("from")
        )
        ins.transition_to.activated.connect(lambda *_: self._on_transition_edited("to"))
        ins.transition_tool.activated.connect(
            lambda *_: self._on_transition_edited("tool")
        )
        # An editable combo box always has its line edit.
        tool_edit = cast(QLineEdit, ins.transition_tool.lineEdit())
        tool_edit.editingFinished.connect(lambda: self._on_transition_edited("tool"))
        ins.transition_probability.editingFinished.connect(
            lambda: self._on_transition_edited("probability")
        )
        ins.transition_reward.editingFinished.connect(
            lambda: self._on_transition_edited("reward")
        )
        ins.tools_table.itemChanged.connect(self._on_tools_item_changed)
        ins.add_tool_button.clicked.connect(self._on_add_tool_clicked)
        ins.remove_tool_button.clicked.connect(self._on_remove_tool_clicked)

    # ------------------------------------------------------------ the calls
    def about_to_open(self) -> None:
        self.inspected = ("", None)

    def opened(self) -> None:
        self.canvas.request_fit()

    def show_problems(self, marks: ProblemMarks) -> None:
        self.canvas.set_problems(marks.statuses, marks.transitions)
        table = self.inspector.tools_table
        for row in range(table.rowCount()):
            for col in range(2):
                item = table.item(row, col)
                if item is None:
                    continue
                with QSignalBlocker(table):
                    item.setBackground(
                        QColor("#f8d7da") if row in marks.tools else QColor(0, 0, 0, 0)
                    )
                    item.setToolTip(marks.tools.get(row, ""))
        self.inspector.settings.mark(marks.fields)
        kind, key = self.inspected
        if kind not in ("status", "transition"):
            return
        ins = self.inspector
        status = kind == "status"
        widgets = ins.status_widgets() if status else ins.transition_widgets()
        for name, w in widgets.items():
            mark(w, marks.sub_fields.get((kind, key, name), ""))
        on = marks.statuses if status else marks.transitions
        error_label = ins.status_error if status else ins.transition_error
        error_label.setText(on.get(key, ""))

    def focus_problem(self, target: Target) -> None:
        ins = self.inspector
        if target.kind in ("status", "transition"):
            self.canvas.select(target.kind, target.key)
            widgets = (
                ins.status_widgets()
                if target.kind == "status"
                else ins.transition_widgets()
            )
            w = widgets.get(target.field)
            if w is not None:
                w.setFocus()
        elif target.kind == "tool":
            ins.tools_table.setCurrentCell(int(target.key), 0)
            ins.tools_table.setFocus()
        elif target.kind == "field":
            ins.settings.focus(target.key)

    def _label_width(self) -> float:
        """Widest label of a transition between two different statuses."""
        return text_width(
            transition_label(t)
            for t in self._model.transitions()
            if t.get("from") != t.get("to")
            and WILDCARD not in (t.get("from"), t.get("to"))
        )

    def _fill_missing_positions(self) -> None:
        statuses = self._model.statuses()
        if all(s in self._model.positions for s in statuses):
            return
        auto = layered_layout(
            statuses,
            [(t.get("from"), t.get("to")) for t in self._model.transitions()],
            self._model.start(),
            self._label_width(),
        )
        for s in statuses:
            self._model.positions.setdefault(s, auto.get(s, (0.0, 0.0)))

    def _graph_args(self) -> tuple[list[str], list[Edge]]:
        return self._model.statuses(), [
            Edge(i, str(t.get("from", "")), str(t.get("to", "")), transition_label(t))
            for i, t in enumerate(self._model.transitions())
        ]

    def refresh(self) -> None:
        m = self._model
        self._fill_missing_positions()
        statuses, edges = self._graph_args()
        self.canvas.set_graph(
            statuses,
            edges,
            start=m.start(),
            terminal=m.terminal(),
            success=m.effective_success(),
            positions=m.positions,
        )
        self._refresh_tools_table()
        if self.context.source() is not self.inspector.settings:
            self.inspector.settings.load(m)
        kind, key = self.inspected
        if kind == "status" and key not in m.statuses():
            self.inspected = ("", None)
        if kind == "transition" and not (
            isinstance(key, int) and key < len(m.transitions())
        ):
            self.inspected = ("", None)
        self._fill_inspector()

    def _refresh_tools_table(self) -> None:
        table = self.inspector.tools_table
        if self.context.source() is table:
            return
        with QSignalBlocker(table):
            tools = self._model.tools()
            table.setRowCount(len(tools))
            for row, t in enumerate(tools):
                name = QTableWidgetItem(str(t.get("name", "")))
                name.setData(Qt.ItemDataRole.UserRole, str(t.get("name", "")))
                table.setItem(row, 0, name)
                table.setItem(row, 1, QTableWidgetItem(str(t.get("description", ""))))
            table.resizeColumnToContents(0)

    def _on_canvas_selection_changed(self, kind: str, key: Any) -> None:
        self.inspected = (kind, key)
        self._fill_inspector()
        self.marks_changed.emit()

    def _fill_inspector(self) -> None:
        ins = self.inspector
        kind, key = self.inspected
        m = self._model
        if kind == "status":
            ins.stack.setCurrentIndex(1)
            rewards = m.status_rewards()
            for box, value in (
                (ins.status_start, key == m.start()),
                (ins.status_terminal, key in m.terminal()),
                (ins.status_success, key in m.effective_success()),
            ):
                with QSignalBlocker(box):
                    box.setChecked(value)
            ins.status_start.setEnabled(key != m.start())
            for w, text in (
                (ins.status_name, key),
                (ins.status_reward, "" if key not in rewards else f"{rewards[key]:g}"),
            ):
                if self.context.source() is not w:
                    with QSignalBlocker(w):
                        w.setText(text)
            ins.status_error.clear()
        elif kind == "transition":
            ins.stack.setCurrentIndex(2)
            t = m.transitions()[key]
            statuses = m.statuses()
            for combo, value, extra in (
                (ins.transition_from, t.get("from", ""), ("*", "every status")),
                (ins.transition_to, t.get("to", ""), ("*", "stays (same status)")),
            ):
                with QSignalBlocker(combo):
                    combo.clear()
                    for s in statuses:
                        combo.addItem(s, s)
                    combo.addItem(extra[1], extra[0])
                    i = combo.findData(value)
                    if i < 0:
                        combo.addItem(f"{value} (unknown)", value)
                        i = combo.count() - 1
                    combo.setCurrentIndex(i)
            with QSignalBlocker(ins.transition_tool):
                ins.transition_tool.clear()
                ins.transition_tool.addItems(m.tool_names())
                ins.transition_tool.setEditText(str(t.get("tool", "")))
            for w, field in (
                (ins.transition_probability, "probability"),
                (ins.transition_reward, "reward"),
            ):
                v = t.get(field)
                with QSignalBlocker(w):
                    w.setText("" if v is None else f"{v:g}")
            ins.transition_error.clear()
        else:
            ins.stack.setCurrentIndex(0)

    def _on_canvas_status_add_requested(self, x: float, y: float) -> None:
        name = self._model.unique_status_name()
        self.push(cmd.AddStatus(self._model, name, (x, y)))
        self.canvas.select("status", name)
        self.inspector.status_name.setFocus()
        self.inspector.status_name.selectAll()

    def _on_add_status_clicked(self) -> None:
        pos = self.canvas.positions()
        x = max((p[0] for p in pos.values()), default=0.0) + 230.0
        y = min((p[1] for p in pos.values()), default=0.0)
        self._on_canvas_status_add_requested(x, y)

    def _on_canvas_transition_requested(self, source: str, target: str) -> None:
        """A new transition uses a tool that does nothing yet in ``source``,
        or a new tool named after the target; the inspector edits it."""
        used = {
            t.get("tool") for t in self._model.transitions() if t.get("from") == source
        }
        tool = next((n for n in self._model.tool_names() if n not in used), None)
        if tool is None:
            base = re.sub(r"\W+", "_", f"to_{target}".lower()).strip("_") or "tool"
            tool = self._model.unique_tool_name(base)
        command = cmd.AddTransition(self._model, source, tool, target)
        self.push(command)
        self.canvas.select("transition", command.index)

    def _on_canvas_statuses_moved(self, positions: dict[str, Position]) -> None:
        self.push(cmd.MoveStatuses(self._model, positions), self.canvas)

    def auto_layout(self, style: str = "layered") -> None:
        """Arrange the statuses (one undo step)."""
        m = self._model
        if style == "circular":
            positions = circular_layout(m.statuses())
        else:
            positions = layered_layout(
                m.statuses(),
                [(t.get("from"), t.get("to")) for t in m.transitions()],
                m.start(),
                self._label_width(),
            )
        self.push(cmd.MoveStatuses(self._model, positions))
        self.canvas.fit()

    def delete_selection(self) -> None:
        kind, key = self.inspected
        if kind == "status":
            self.push(cmd.RemoveStatus(self._model, key))
        elif kind == "transition":
            self.push(cmd.RemoveTransition(self._model, key))
            self.canvas.select("", None)

    def _on_status_name_edited(self) -> None:
        kind, old = self.inspected
        if kind != "status":
            return
        new = self.inspector.status_name.text()
        if new == old:
            return
        problem = self._model.status_name_problem(new, old)
        if problem:
            self.inspector.status_error.setText(problem)
            return
        self.push(cmd.RenameStatus(self._model, old, new))
        self.canvas.select("status", new)

    def _on_status_start_toggled(self, checked: bool) -> None:
        kind, name = self.inspected
        if kind == "status" and checked and name != self._model.start():
            self.push(
                cmd.CallCommand(
                    self._model,
                    f"Start at '{name}'",
                    lambda: self._model.set_start(name),
                )
            )

    def _on_status_terminal_toggled(self, checked: bool) -> None:
        kind, name = self.inspected
        if kind == "status":
            self.push(
                cmd.CallCommand(
                    self._model,
                    f"{'Mark' if checked else 'Unmark'} '{name}' terminal",
                    lambda: self._model.set_terminal(name, checked),
                )
            )

    def _on_status_success_toggled(self, checked: bool) -> None:
        kind, name = self.inspected
        if kind == "status":
            self.push(
                cmd.CallCommand(
                    self._model,
                    f"{'Mark' if checked else 'Unmark'} '{name}' success",
                    lambda: self._model.set_success(name, checked),
                )
            )

    def _on_status_reward_edited(self) -> None:
        kind, name = self.inspected
        if kind != "status":
            return
        value, error = _parse_optional_float(self.inspector.status_reward.text())
        self.inspector.status_error.setText(error)
        if error or value == self._model.status_rewards().get(name):
            return
        self.push(
            cmd.CallCommand(
                self._model,
                f"Set the reward of '{name}'",
                lambda: self._model.set_status_reward(name, value),
            ),
            self.inspector.status_reward,
        )

    def _on_transition_edited(self, field: str) -> None:
        kind, index = self.inspected
        if kind != "transition" or index >= len(self._model.transitions()):
            return
        ins = self.inspector
        t = self._model.transitions()[index]
        value: Any
        error = ""
        if field in ("from", "to"):
            combo = ins.transition_from if field == "from" else ins.transition_to
            value = combo.currentData()
        elif field == "tool":
            value = ins.transition_tool.currentText().strip()
            if value not in self._model.tool_names():
                error = self._model.tool_name_problem(value)
        else:
            w = (
                ins.transition_probability
                if field == "probability"
                else ins.transition_reward
            )
            value, error = _parse_optional_float(w.text())
            if field == "probability" and value is not None and not 0 <= value <= 1:
                error = "A probability is between 0 and 1."
        ins.transition_error.setText(error)
        if error or value == t.get(field):
            return
        self.push(cmd.EditTransition(self._model, index, **{field: value}))
        self.canvas.select("transition", index)

    def _on_tools_item_changed(self, item: QTableWidgetItem) -> None:
        table = self.inspector.tools_table
        row = item.row()
        tools = self._model.tool_names()
        if row >= len(tools):
            return
        name = tools[row]
        if item.column() == 0:
            new = item.text().strip()
            problem = self._model.tool_name_problem(new, name)
            if problem:
                self.message_requested.emit(problem, "error", 6000)
                with QSignalBlocker(table):
                    item.setText(name)
                return
            if new != name:
                self.push(cmd.RenameTool(self._model, name, new), table)
                self._refresh_tools_table()
        else:
            text = item.text().strip()
            self.push(
                cmd.CallCommand(
                    self._model,
                    f"Describe tool '{name}'",
                    lambda: self._model.set_tool_description(name, text),
                ),
                table,
            )

    def _on_add_tool_clicked(self) -> None:
        name = self._model.unique_tool_name()
        self.push(cmd.AddTool(self._model, name))
        table = self.inspector.tools_table
        table.setCurrentCell(table.rowCount() - 1, 0)
        item = table.item(table.rowCount() - 1, 0)
        if item is not None:
            table.editItem(item)

    def _on_remove_tool_clicked(self) -> None:
        row = self.inspector.tools_table.currentRow()
        tools = self._model.tool_names()
        if 0 <= row < len(tools):
            self.push(cmd.RemoveTool(self._model, tools[row]))


__all__ = ["WorkflowEditor", "transition_label"]
