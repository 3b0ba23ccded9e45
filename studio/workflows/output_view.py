"""The details pane of the flow editor: what a node's last result says
(state, summary, last metrics, outputs and the files they point at) as HTML,
the flow's overview while no node is picked, and the run's log and raw JSON.

The pane shows what it is handed; the workspace says which node and hands
it the node's result (``FlowRunWatcher``) and metrics."""

from __future__ import annotations

import html
import json
import os
from collections.abc import Iterable, Sequence
from typing import Any

from PySide6.QtCore import QUrl
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import QPlainTextEdit, QTabWidget, QTextBrowser, QWidget

from studio.common import JsonPreview
from widgets.node_graph import STATE_COLORS

OverviewRow = tuple[str, str, dict[str, Any] | None]
"""A node in the overview: its id, its label and its last result (or None)."""

LogLine = tuple[str | None, str]
"""A line of a run's log and the node it belongs to (None: the run's own)."""


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


def _outputs_html(outputs: dict[str, Any]) -> list[str]:
    """One table per output port; a dict's nested ``metrics`` flattened."""
    parts = []
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
    return parts


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
    parts += _outputs_html(result.get("outputs") or {})
    return "".join(parts)


def flow_overview_html(rows: Sequence[OverviewRow]) -> str:
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


class NodeDetailsPane(QTabWidget):
    """Output (HTML), Log and JSON tabs for one node, or for the whole flow
    while ``node_id`` is None."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.node_id: str | None = None
        """The node shown; None: the flow's overview."""
        self.output_view = QTextBrowser()
        self.output_view.setOpenLinks(False)  # files open in their own app
        self.output_view.anchorClicked.connect(self._on_output_view_anchor_clicked)
        self.raw_view = JsonPreview()
        self.log_view = QPlainTextEdit(readOnly=True)
        self.log_view.setMaximumBlockCount(5000)
        self.addTab(self.output_view, "Output")
        self.addTab(self.log_view, "Log")
        self.addTab(self.raw_view, "JSON")

    def show_node(
        self,
        title: str,
        node_id: str,
        result: dict[str, Any] | None,
        metrics: dict[str, float],
        log: Sequence[str],
    ) -> None:
        """Show a node's last result, its metrics and its log lines."""
        self.node_id = node_id
        self.output_view.setHtml(node_details_html(title, node_id, result, metrics))
        self.raw_view.show_value({"node": node_id, **(result or {})})
        self.log_view.setPlainText("\n".join(log))
        self.log_view.setPlaceholderText(
            f"No log lines from {node_id} in the last run."
            if result
            else f"{node_id} has not run yet."
        )

    def show_overview(self, rows: Sequence[OverviewRow], log: Sequence[str]) -> None:
        """Show the whole flow: each node's last state, and the run's log."""
        self.node_id = None
        self.render_overview(rows)
        self.raw_view.clear()
        self.log_view.setPlainText("\n".join(log))
        self.log_view.setPlaceholderText("The log of the flow's last run shows here.")

    def render_overview(self, rows: Sequence[OverviewRow]) -> None:
        """Redraw the overview's states (the log and JSON tabs stay)."""
        self.output_view.setHtml(flow_overview_html(rows))

    def append_log(self, lines: Sequence[LogLine]) -> None:
        """Add the lines of the shown node (all of them for the overview)."""
        shown = [line for node, line in lines if self.node_id in (None, node)]
        if shown:
            self.log_view.appendPlainText("\n".join(shown))

    def clear_results(self) -> None:
        """Nothing shown: the run's results were dropped."""
        self.node_id = None
        self.output_view.clear()
        self.raw_view.clear()
        self.log_view.clear()

    def _on_output_view_anchor_clicked(self, url: QUrl) -> None:
        QDesktopServices.openUrl(url)
