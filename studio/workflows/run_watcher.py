"""Following the open flow's ``flow.run`` runs: each node's state, outputs,
summary and log lines as the engine reports them, and the flow's last run
as the project remembers it (restored when the flow opens or the project's
runs arrive).

Views do not live here: the watcher says what changed (a node's state, all
results, the run itself, new log lines) and the workspace shows it on the
canvas and in the details pane.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine import flow
from studio.lifetime import subscribe
from studio.session import Session
from studio.state.flow_document import FlowDocumentModel, link_from_key
from studio.state.flow_results import (
    FlowRunResults,
    last_flow_run,
    node_of_log_line,
    read_flow_run,
)
from studio.workflows.controller import FlowController
from studio.workflows.output_view import LogLine

NodeState = tuple[str, float, str]
"""A node's badge: state, progress in [0, 1], message."""


class FlowRunWatcher(QObject):
    """The runs of the flow open in ``model``, started through ``controller``."""

    node_state_changed = Signal(str, str, float, str)
    """A node's badge changed: node id, state (``""``: none), progress,
    message."""
    results_changed = Signal()
    """All results were replaced (restored from the project, or dropped):
    redraw every badge."""
    run_changed = Signal()
    """A run started, is starting, ended or was refused, or the last run
    changed (``busy`` and ``last_run_text`` may say something else)."""
    log_received = Signal(list)
    """New lines of the run's log, as ``[(node id or None, line), ...]``."""
    status_changed = Signal(str, str)
    """A sentence for the status line and its level (info, ok, error)."""
    run_finished = Signal(str, str)
    """The followed run ended: final status, reason (empty when it
    completed)."""

    def __init__(
        self,
        session: Session,
        controller: FlowController,
        model: FlowDocumentModel,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._session = session
        self._state = session.state
        self._controller = controller
        self._model = model
        self.run_id: str | None = None
        """The run followed live (None: none is going on)."""
        self._run_pending = False
        self._early_events: list[tuple[str, Callable[[], None]]] = []
        """Events of a run that arrived before its ``run.started`` reply: the
        run id and the handler call to replay."""
        self.node_results: dict[str, dict[str, Any]] = {}
        self.node_logs: dict[str, list[str]] = {}
        self.run_log: list[str] = []
        self.last_run: FlowRunResults | None = None
        """The finished run whose results show (restored from the project)."""
        self.results_run_id: str | None = None
        """The run the node results come from (live or restored)."""
        self._queued: set[str] = set()
        """Nodes waiting in the run this watcher started."""
        self._running_nodes: set[str] = set()
        self._log_node: str | None = None
        """The node the run's untagged log lines belong to (see
        ``flow_results.split_log``)."""
        self._model_handlers: dict[str, Callable[[str], None]] = {
            "reset": self._on_model_reset,
            "node_removed": self._on_model_node_removed,
            "link_added": self._on_model_link_added,
            "link_removed": self._on_model_link_removed,
            "params": self._mark_stale,
        }
        model.subscribe(self._on_model_changed)
        subscribe(self._state, self, self._on_state_changed)
        controller.run_started.connect(self._on_controller_run_started)
        controller.run_refused.connect(self._on_controller_run_refused)
        controller.node_state_received.connect(self._on_node_state)
        controller.run_log_received.connect(self._on_run_log)
        controller.run_ended.connect(self._on_run_ended)

    # ------------------------------------------------------------ state
    @property
    def busy(self) -> bool:
        """A run is starting or going on."""
        return self.run_id is not None or self._run_pending

    def state_of(self, node_id: str) -> NodeState | None:
        """The node's badge in the results shown (None: no badge)."""
        result = self.node_results.get(node_id)
        if result:
            return result["state"], result["progress"], result["message"]
        if node_id in self._queued:
            return "queued", 0.0, ""
        return None

    def last_run_text(self) -> str:
        """One line about the flow's last run, for the Flow panel."""
        if self.busy:
            return "Running now."
        last = self.last_run
        if last is None:
            return "Never run." if self._model.path else "Not saved yet."
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

    # ------------------------------------------------------- start, stop
    def start(self, path: Path, name: str) -> None:
        """Start the saved flow at ``path`` on the engine; its earlier
        results go and every node waits."""
        self._drop_results()
        self._queued = set(self._model.doc.node_ids())
        self._run_pending = True
        self._early_events = []
        self.status_changed.emit(f"Starting {name}…", "info")
        self.run_changed.emit()
        # Last: a refusal may come at once (no engine) and must be the last
        # word on the status line.
        self._controller.start_run(str(path), True, f"Flow {name}")

    def cancel(self) -> None:
        if self.run_id is not None:
            self._controller.stop_run(self.run_id)
            self.status_changed.emit("Stopping the run…", "info")

    def _drop_results(self) -> None:
        self.node_results = {}
        self.node_logs = {}
        self.run_log = []
        self.last_run = None
        self.results_run_id = None
        self._queued = set()
        self._running_nodes = set()
        self._log_node = None

    def _restore_last_run(self) -> bool:
        """Take the node states, outputs and logs of the open flow's last
        run, as the project keeps them; a run still going on is followed
        live (and can be cancelled). False when there is none."""
        path = self._model.path
        if path is None or not self._state.is_open:
            return False
        run = last_flow_run(self._state.runs.values(), path)
        if run is None:
            return False
        results = read_flow_run(run, self._model.doc)
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
        return True

    # ------------------------------------------------- document, project
    def _on_model_changed(self, what: str, key: str) -> None:
        handler = self._model_handlers.get(what)
        if handler is not None:
            handler(key)

    def _on_model_reset(self, _key: str) -> None:
        # Another flow opened: a run of the one open so far goes on in the
        # engine (the Training workspace shows it); opening that flow again
        # picks it up. The views are rebuilt for the new flow, so no signal.
        self.run_id = None
        self._run_pending = False
        self._early_events = []
        self._drop_results()
        self._restore_last_run()

    def _on_model_node_removed(self, node_id: str) -> None:
        self.node_results.pop(node_id, None)

    def _on_model_link_added(self, key: str) -> None:
        self._mark_stale(link_from_key(key).to_node)

    def _on_model_link_removed(self, key: str) -> None:
        to_node = link_from_key(key).to_node
        if self._model.has_node(to_node):
            self._mark_stale(to_node)

    def _mark_stale(self, node_id: str) -> None:
        """An edit invalidates the node's and its downstream's last results."""
        if self.run_id is not None:
            return
        for stale in flow.stale_nodes(self._model.doc, node_id):
            if stale in self.node_results:
                self.node_results.pop(stale)
                self.node_state_changed.emit(stale, "", 0.0, "")

    def _on_state_changed(self, what: str, key: str) -> None:
        # The project's runs arrive after a flow opened at start-up.
        if what != "reset" or self.results_run_id is not None or self._run_pending:
            return
        if self._restore_last_run():
            self.results_changed.emit()
        self.run_changed.emit()

    # ------------------------------------------------------ run events
    def _on_controller_run_started(self, run_id: str) -> None:
        if not self._run_pending:
            return
        self._run_pending = False
        self.run_id = run_id
        self.results_run_id = run_id
        self.status_changed.emit("Running…", "info")
        early, self._early_events = self._early_events, []
        for event_run, replay in early:
            if event_run == run_id:
                replay()
        self.run_changed.emit()

    def _on_controller_run_refused(self, message: str) -> None:
        if self._run_pending:
            self._run_pending = False
            self._queued = set()
            self.results_changed.emit()
            self.run_changed.emit()
        self.status_changed.emit(message, "error")

    def _held_back(self, run_id: str, replay: Callable[[], None]) -> bool:
        """Whether an event of ``run_id`` is not for the run followed now;
        one that may be for the run starting is kept for its start."""
        if run_id == self.run_id:
            return False
        if self._run_pending:
            self._early_events.append((run_id, replay))
        return True

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
        replay = functools.partial(
            self._on_node_state,
            run_id, node_id, state, progress, message, outputs, summary,
        )  # fmt: skip
        if self._held_back(run_id, replay):
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
        self._queued.discard(node_id)
        if state == "running":
            self._running_nodes.add(node_id)
        else:
            self._running_nodes.discard(node_id)
        self.node_state_changed.emit(node_id, state, progress, message)

    def _on_run_log(self, run_id: str, lines: list[str]) -> None:
        if self._held_back(run_id, functools.partial(self._on_run_log, run_id, lines)):
            return
        self.run_log.extend(lines)
        ids = self._model.doc.node_ids()
        tagged_lines: list[LogLine] = []
        for line in lines:
            tagged = node_of_log_line(line, ids)
            if tagged is not None:
                self._log_node = tagged
            elif len(self._running_nodes) == 1:  # a library printing
                self._log_node = next(iter(self._running_nodes))
            if self._log_node is not None:
                self.node_logs.setdefault(self._log_node, []).append(line)
            tagged_lines.append((self._log_node, line))
        self.log_received.emit(tagged_lines)

    def _on_run_ended(self, run_id: str, status: str, reason: str) -> None:
        replay = functools.partial(self._on_run_ended, run_id, status, reason)
        if self._held_back(run_id, replay):
            return
        self.run_id = None
        self._running_nodes = set()
        self._settle_nodes(run_id, status)
        self.last_run = FlowRunResults(
            run_id=run_id,
            status=status,
            reason=reason,
            ended=time.time(),
            nodes=self.node_results,
        )
        if status == "completed":
            self.status_changed.emit("The run completed.", "ok")
        else:
            self.status_changed.emit(
                f"The run {status}" + (f": {reason}" if reason else "."), "error"
            )
        self.run_changed.emit()
        self.run_finished.emit(status, reason)

    def _settle_nodes(self, run_id: str, status: str) -> None:
        """A run killed after the stop timeout (or one that crashed) reports
        nothing more about its nodes: settle the ones left in the air."""
        for node_id in self._model.doc.node_ids():
            badge = self.state_of(node_id)
            state = badge[0] if badge else ""
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
            self.node_state_changed.emit(node_id, settled, 0.0, message)
        self._queued = set()
