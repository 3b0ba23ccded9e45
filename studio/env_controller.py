"""The environment designer's link to the engine: check a spec, list the
installed gymnasium envs. Requests never block; answers arrive as signals,
and an answer to a request that a newer one replaced is dropped."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Signal

from engine import protocol
from studio.session import Session


class EnvController(QObject):
    check_started = Signal()
    check_finished = Signal(dict)
    """The ``env.check`` report: ``ok``, ``problems`` (path, severity,
    message, check), ``stats``."""
    check_failed = Signal(str)
    """The check could not run; one sentence."""
    catalog_received = Signal(list)
    """Gymnasium envs (id, kwargs, max_episode_steps, ...)."""
    env_described = Signal(dict)
    """One env with its spaces (``observation_space``, ``action_space``)."""

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._check_id = ""
        self._describe_id = ""
        self.catalog: list[dict[str, Any]] = []

    def check(
        self, spec: dict[str, Any], path: str = "", *, env_checks: bool = True
    ) -> None:
        """Check ``spec`` (its file ``path`` resolves relative files)."""
        self.check_started.emit()
        req_id = protocol.next_id("env")
        self._check_id = req_id
        self._session.client.request(
            protocol.CheckEnv(id=req_id, spec=spec, path=path, env_checks=env_checks),
            on_reply=lambda r: self._on_check_reply(req_id, r),
            on_error=lambda e: self._on_check_error(req_id, e),
        )

    def request_catalog(self) -> None:
        self._session.client.request(
            protocol.GetEnvCatalog(),
            on_reply=self._on_catalog_reply,
            on_error=lambda e: None,
        )

    def describe(self, env_id: str) -> None:
        """Ask for the spaces of one env (``env_described`` follows)."""
        req_id = protocol.next_id("env")
        self._describe_id = req_id
        self._session.client.request(
            protocol.GetEnvCatalog(id=req_id, ids=[env_id], with_spaces=True),
            on_reply=lambda r: self._on_describe_reply(req_id, r),
            on_error=lambda e: None,
        )

    # ----------------------------------------------------------- replies
    def _on_check_reply(self, req_id: str, result: dict[str, Any]) -> None:
        if req_id == self._check_id:
            self.check_finished.emit(result)

    def _on_check_error(self, req_id: str, error: protocol.Error) -> None:
        if req_id == self._check_id:
            self.check_failed.emit(error.message)

    def _on_catalog_reply(self, result: dict[str, Any]) -> None:
        self.catalog = list(result.get("envs", []))
        self.catalog_received.emit(self.catalog)

    def _on_describe_reply(self, req_id: str, result: dict[str, Any]) -> None:
        envs = result.get("envs") or []
        if req_id == self._describe_id and envs:
            self.env_described.emit(envs[0])
