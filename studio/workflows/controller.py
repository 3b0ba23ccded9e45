"""The Workflows workspace's one way to the engine.

Builds the protocol requests (catalog, validation, start and stop of a
``flow.run`` run) and turns the engine's events about flow runs into Qt
signals. Nothing here blocks: replies arrive on callbacks.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from engine import protocol
from studio.engine_client import READY
from studio.session import Session

FLOW_RUN_KIND = "flow.run"


class FlowController(QObject):
    catalog_received = Signal(list)
    """The ``node_types`` list of the engine's catalog (dicts)."""
    catalog_failed = Signal(str)
    validation_received = Signal(dict)
    """``{node_id: [sentence, ...]}`` from the engine (empty: can run)."""
    validation_failed = Signal(str)
    """The engine could not validate (it is down, say); one sentence."""
    run_started = Signal(str)
    """The run id of a flow run this controller started."""
    run_refused = Signal(str)
    """Starting or stopping a run failed; one sentence."""
    node_state_received = Signal(str, str, str, float, str, dict, dict)
    """run id, node id, state, progress, message, outputs, summary (facts
    such as metrics and step counts, sent with ``done`` and ``cached``)."""
    run_log_received = Signal(str, list)
    run_ended = Signal(str, str, str)
    """run id, final status, reason (empty when it completed)."""

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._client = session.client
        self._catalog_pending = False
        self._client.state_changed.connect(self._on_client_state_changed)
        self._client.event_received.connect(self._on_client_event_received)
        session.project_opened.connect(self._on_session_project_opened)
        if self._client.state == READY:
            self.request_catalog()

    # --------------------------------------------------------- requests
    def request_catalog(self) -> None:
        if self._catalog_pending:
            return
        self._catalog_pending = True
        self._client.request(
            protocol.GetFlowCatalog(),
            on_reply=self._on_catalog_reply,
            on_error=self._on_catalog_error,
        )

    def validate(self, document: dict[str, Any]) -> None:
        self._client.request(
            protocol.ValidateFlow(document=document),
            on_reply=lambda r: self.validation_received.emit(dict(r.get("errors", {}))),
            on_error=lambda e: self.validation_failed.emit(e.message),
        )

    def start_run(
        self, flow_path: str, only_stale: bool = True, name: str = ""
    ) -> None:
        self._client.request(
            protocol.StartRun(
                kind=FLOW_RUN_KIND,
                config={"flow_path": flow_path, "only_stale": only_stale},
                name=name,
            ),
            on_reply=lambda r: self.run_started.emit(str(r["run_id"])),
            on_error=lambda e: self.run_refused.emit(e.message),
        )

    def stop_run(self, run_id: str) -> None:
        self._client.request(
            protocol.StopRun(
                run_id=run_id, timeout_s=self._session.settings.stop_timeout_s
            ),
            on_error=lambda e: self.run_refused.emit(e.message),
        )

    # ---------------------------------------------------------- replies
    def _on_catalog_reply(self, result: dict[str, Any]) -> None:
        self._catalog_pending = False
        self.catalog_received.emit(list(result.get("node_types", [])))

    def _on_catalog_error(self, error: protocol.Error) -> None:
        self._catalog_pending = False
        if error.error_type != "EngineGone":  # asked again when it is back
            self.catalog_failed.emit(error.message)

    def _on_client_state_changed(self, state: str) -> None:
        if state == READY:
            self.request_catalog()

    def _on_session_project_opened(self, path: str) -> None:
        self.request_catalog()

    def _on_client_event_received(self, msg: protocol.Message) -> None:
        match msg:
            case protocol.FlowNodeState():
                self.node_state_received.emit(
                    msg.run_id,
                    msg.node_id,
                    msg.state,
                    float(msg.progress),
                    msg.message,
                    dict(msg.outputs),
                    dict(msg.summary),
                )
            case protocol.RunLog(run_id=run_id, lines=lines):
                self.run_log_received.emit(run_id, list(lines))
            case protocol.RunFinished():
                self.run_ended.emit(msg.run_id, msg.status, "")
            case protocol.RunFailed():
                self.run_ended.emit(msg.run_id, "failed", msg.reason)
            case _:
                pass
