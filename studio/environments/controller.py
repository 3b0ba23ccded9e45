"""The environment designer's link to the engine: check a spec, list the
installed gymnasium envs, preview a spec by playing episodes in a job.
Requests never block; answers arrive as signals, and an answer to a request
that a newer one replaced is dropped."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, Signal

from engine import contract
from studio.lifetime import subscribe
from studio.session import Session

if TYPE_CHECKING:
    from engine import protocol


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
    preview_started = Signal(str)
    """The ``env_preview`` run's id."""
    preview_progress = Signal(int, int)
    """Episodes done, episodes in all."""
    preview_finished = Signal(dict)
    """``preview.json`` (see ``engine.envs.preview.preview``); ``frames`` is
    the path of ``frames.npz`` or None."""
    preview_failed = Signal(str)
    """The preview was refused or its run failed or was stopped; one
    sentence."""
    jira_imported = Signal(dict)
    """An ``env.import_jira`` reply: the env made (``name``, ``spec_file``,
    ``issues``, ...)."""
    jira_import_failed = Signal(str)
    """The mock data was refused; one sentence, nothing written."""

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._session = session
        self._check_id = ""
        self._describe_id = ""
        self._preview_token = 0
        self.preview_run_id = ""
        """The run of the preview in flight (empty when none)."""
        self.catalog: list[dict[str, Any]] = []
        session.run_ended.connect(self._on_session_run_ended)
        subscribe(session.state, self, self._on_state_changed)

    def check(
        self, spec: dict[str, Any], path: str = "", *, env_checks: bool = True
    ) -> None:
        """Check ``spec`` (its file ``path`` resolves relative files)."""
        from engine import protocol

        self.check_started.emit()
        req_id = protocol.next_id("env")
        self._check_id = req_id
        self._session.client.request(
            protocol.CheckEnv(id=req_id, spec=spec, path=path, env_checks=env_checks),
            on_reply=lambda r: self._on_check_reply(req_id, r),
            on_error=lambda e: self._on_check_error(req_id, e),
        )

    def request_catalog(self) -> None:
        from engine import protocol

        self._session.client.request(
            protocol.GetEnvCatalog(),
            on_reply=self._on_catalog_reply,
            on_error=lambda e: None,
        )

    def describe(self, env_id: str) -> None:
        """Ask for the spaces of one env (``env_described`` follows)."""
        from engine import protocol

        req_id = protocol.next_id("env")
        self._describe_id = req_id
        self._session.client.request(
            protocol.GetEnvCatalog(id=req_id, ids=[env_id], with_spaces=True),
            on_reply=lambda r: self._on_describe_reply(req_id, r),
            on_error=lambda e: None,
        )

    def import_jira(self, path: str, name: str = "") -> None:
        """Make a workflow env of the mock data file at ``path``."""
        from engine import protocol

        self._session.client.request(
            protocol.ImportJira(path=path, name=name),
            on_reply=lambda r: self.jira_imported.emit(r),
            on_error=lambda e: self.jira_import_failed.emit(e.message),
            owner=self,
        )

    def preview(
        self,
        spec: dict[str, Any],
        path: str = "",
        *,
        episodes: int = 20,
        frames: int = 0,
        trace_episodes: int = 1,
        model: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> None:
        """Play ``episodes`` of the spec document as it is now (saved or
        not) in an ``env_preview`` run; ``path`` is its file, against which
        relative paths resolve. ``model``: a project policy record (``path``,
        ``algo``) instead of the random policy. A preview still running is
        stopped: only the newest one is shown."""
        if self.preview_run_id:
            self._session.stop_run(self.preview_run_id)
        self._preview_token += 1
        token = self._preview_token
        self.preview_run_id = ""
        config: dict[str, Any] = {
            "spec": spec,
            "source": path or None,
            "episodes": int(episodes),
            "trace_episodes": int(trace_episodes),
            "frames": int(frames),
        }
        if seed is not None:
            config["seed"] = int(seed)
        if model is not None:
            config["model"] = str(model["path"])
        policy = f" with {model.get('name', 'a policy')}" if model else ""
        self._session.start_run(
            "env_preview",
            config,
            name=f"Preview {spec.get('name', '')}{policy}",
            on_started=lambda run_id: self._on_preview_started(token, run_id),
            on_error=lambda e: self._on_preview_refused(token, e),
        )

    def stop_preview(self) -> None:
        if self.preview_run_id:
            self._session.stop_run(self.preview_run_id)

    # ----------------------------------------------------------- replies
    def _on_preview_started(self, token: int, run_id: str) -> None:
        if token != self._preview_token:
            self._session.stop_run(run_id)  # a newer preview replaced it
            return
        self.preview_run_id = run_id
        self.preview_started.emit(run_id)

    def _on_preview_refused(self, token: int, error: protocol.Error) -> None:
        if token == self._preview_token:
            self.preview_failed.emit(error.message)

    def _on_state_changed(self, what: str, key: str) -> None:
        if what != "run" or not key or key != self.preview_run_id:
            return
        run = self._session.state.run(key) or {}
        total = int(run.get("progress_total") or 0)
        if total:
            self.preview_progress.emit(int(run.get("progress_done") or 0), total)

    def _on_session_run_ended(self, run_id: str, status: str, reason: str) -> None:
        if not run_id or run_id != self.preview_run_id:
            return
        self.preview_run_id = ""
        # A stopped preview still wrote the episodes it played.
        data = (
            self._read_preview(run_id) if status in ("completed", "stopped") else None
        )
        if data is not None:
            self.preview_finished.emit(data)
        elif status == "completed":
            self.preview_failed.emit("The preview ended without writing its results.")
        else:
            self.preview_failed.emit(
                reason or f"The preview {status} before it finished."
            )

    def _read_preview(self, run_id: str) -> dict[str, Any] | None:
        run_dir = (self._session.state.run(run_id) or {}).get("run_dir")
        if not run_dir:
            return None
        return contract.read_json_object(Path(run_dir) / contract.PREVIEW_FILE)

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
