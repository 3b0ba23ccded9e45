"""The designer's Problems pane: what the engine's check of the spec found,
one row a problem, and a line saying whether the env is usable."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

SEVERITY_COLORS = {"error": "#d62728", "warning": "#b8860b", "info": "#1f77b4"}
UNCHECKED = "Problems: press Validate to check."


class ProblemsPanel(QWidget):
    """A line (``label``) over the list of problems (``tree``), as
    ``env.check`` sends them: each has a ``severity``, a ``message`` and the
    ``path`` in the spec at fault."""

    problem_clicked = Signal(str)
    """The user chose the problem at this path of the spec."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel(UNCHECKED)
        self.tree = QTreeWidget()
        self.tree.setColumnCount(3)
        self.tree.setHeaderLabels(["", "Where", "Problem"])
        self.tree.setRootIsDecorated(False)
        for column in (0, 1):
            self.tree.header().setSectionResizeMode(
                column, QHeaderView.ResizeMode.ResizeToContents
            )
        self.tree.itemClicked.connect(self._on_tree_item_clicked)
        self.tree.itemActivated.connect(self._on_tree_item_clicked)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.tree)

    def set_problems(self, problems: list[dict[str, Any]], stale: bool) -> None:
        """List ``problems``, greyed when ``stale`` (the spec was edited
        since the check)."""
        self.tree.clear()
        for p in problems:
            sev = str(p.get("severity", "error"))
            item = QTreeWidgetItem(
                ["●", p.get("path") or "(spec)", str(p.get("message", ""))]
            )
            item.setForeground(0, QColor(SEVERITY_COLORS.get(sev, "#000")))
            item.setToolTip(0, sev)
            item.setToolTip(2, str(p.get("message", "")))
            item.setData(0, Qt.ItemDataRole.UserRole, p.get("path", ""))
            if stale:
                for c in range(3):
                    item.setForeground(c, QColor("#9aa0a6"))
            self.tree.addTopLevelItem(item)
        if stale and problems:
            self.label.setText("Problems (edited since the check — Validate again):")

    def show_unchecked(self) -> None:
        self.label.setText(UNCHECKED)

    def show_checking(self) -> None:
        self.label.setText("Checking in the engine…")

    def show_report(self, report: dict[str, Any]) -> None:
        """The verdict of a check (its problems are set apart)."""
        problems = list(report.get("problems", []))
        n_err = sum(1 for p in problems if p.get("severity") == "error")
        n_warn = sum(1 for p in problems if p.get("severity") == "warning")
        verdict = (
            "<span style='color:#2e9e3e'><b>OK</b></span>"
            if report.get("ok")
            else "<span style='color:#d62728'><b>Not usable</b></span>"
        )
        self.label.setText(
            f"Problems: {verdict} — {n_err} error(s), {n_warn} warning(s)."
        )

    def show_failure(self, message: str) -> None:
        self.label.setText(
            f"<span style='color:#d62728'>The check could not run: {message}</span>"
        )

    def _on_tree_item_clicked(self, item: QTreeWidgetItem, column: int = 0) -> None:
        self.problem_clicked.emit(str(item.data(0, Qt.ItemDataRole.UserRole) or ""))


__all__ = ["SEVERITY_COLORS", "ProblemsPanel"]
