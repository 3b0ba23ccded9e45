"""The Models workspace's side of the engine.

Turns the model manager's intents (delete, lineage, Ollama list, chat,
evaluate, play, export, deploy, one-click export to Ollama) into engine
requests and runs, and tells the workspace how they ended. Long actions are
ordinary runs (they appear in the Training list too); the controller keeps
track of the ones it started by purpose.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from engine import contract, protocol
from engine.contract import DEFAULT_OLLAMA_HOST
from studio.lifetime import guard, owner_of
from studio.session import Session
from studio.state.model_catalog import on_server

ErrorCallback = Callable[[str], None]


def ollama_name_for(name: str) -> str:
    """A valid Ollama model name made from a model's name."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip()).strip("-._").lower()
    return safe or "rl-studio-model"


@dataclass
class ActionRun:
    """A run the controller started, and what it was for."""

    run_id: str
    purpose: str
    """``evaluate``, ``play``, ``export.gguf``, ``export.onnx``, ``deploy``."""
    model_id: str
    config: dict[str, Any] = field(default_factory=dict)


class OllamaExport(QObject):
    """The one-click Export to Ollama: one ``export.ollama`` run (merge →
    GGUF → deploy, chained in the engine) followed until it ends.

    ``changed`` fires when the run starts or progresses, ``finished(ok,
    message)`` once; the final message ends with ``ollama run NAME`` (or says
    where the bundle was written when no Ollama server answered).
    """

    changed = Signal()
    finished = Signal(bool, str)

    def __init__(
        self,
        session: Session,
        model: dict[str, Any],
        config: dict[str, Any],
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._session = session
        self.model = model
        self.config = config
        self.name = str(config["name"])
        self.run_id = ""
        self.message = ""
        self.done = False
        self.ok = False
        session.run_ended.connect(self._on_session_run_ended)
        self._unsubscribe = session.state.subscribe(self._on_state_changed)

    def follow(self, run_id: str) -> None:
        """Follow the ``export.ollama`` run the export dialog started."""
        self._on_started(run_id)

    def run(self) -> dict[str, Any]:
        return (self._session.state.run(self.run_id) or {}) if self.run_id else {}

    def progress(self) -> tuple[float, float]:
        """(done, total): the run's stages, each one unit."""
        run = self.run()
        return float(run.get("progress_done") or 0), float(
            run.get("progress_total") or 0
        )

    def stage_text(self) -> str:
        """What the engine says it is doing (``Export GGUF: tensor 3/20``)."""
        return str(self.run().get("progress_message") or "")

    def stop(self) -> None:
        if self.run_id and not self.done:
            self._session.stop_run(self.run_id)

    def _on_started(self, run_id: str) -> None:
        self.run_id = run_id
        self.changed.emit()

    def _on_state_changed(self, what: str, key: str) -> None:
        if what == "run" and self.run_id and key == self.run_id:
            self.changed.emit()

    def _on_session_run_ended(self, run_id: str, status: str, reason: str) -> None:
        if self.done or not self.run_id or run_id != self.run_id:
            return
        if status != "completed":
            self._finish(False, reason or f"The export {status}.")
            return
        summary = self.run().get("summary") or {}
        deploy = summary.get("deploy") or {}
        if summary.get("stopped"):
            self._finish(False, "The export stopped.")
        elif deploy.get("deployed"):
            host = deploy.get("host", self.config.get("host", ""))
            self._finish(
                True, f"{self.name} is deployed on {host}.\nollama run {self.name}"
            )
        else:
            self._finish(
                True,
                f"{deploy.get('message', 'No Ollama server answered.')}\n"
                f"Then: ollama run {self.name}",
            )

    def _finish(self, ok: bool, message: str) -> None:
        if self.done:
            return
        self.done, self.ok, self.message = True, ok, message
        self._session.run_ended.disconnect(self._on_session_run_ended)
        self._unsubscribe()
        self.changed.emit()
        self.finished.emit(ok, message)


class ModelsController(QObject):
    ollama_models_changed = Signal(list)
    """The connected Ollama server's models as ``/api/tags`` entries."""
    ollama_failed = Signal(str)
    """Listing the Ollama models failed; one sentence."""
    action_started = Signal(str, str)
    """run id, purpose."""
    action_ended = Signal(str, str, str, str)
    """run id, purpose, final status, reason."""
    failed = Signal(str)
    """A request failed; one sentence to show."""
    agents_changed = Signal(dict)
    """The project's agents as an ``agent.list`` reply says (after a read,
    a promotion, a rollback or a switch)."""
    agents_failed = Signal(str)
    """Reading or changing the agents failed; one sentence."""

    def __init__(self, session: Session, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.session = session
        self.ollama_host = DEFAULT_OLLAMA_HOST
        # Only the answer to the latest listing counts: the engine may answer
        # an older one (a host that took long to refuse) after a newer one.
        self._ollama_asked = 0
        self.ollama_models: list[dict[str, Any]] = []
        self.ollama_error = ""
        self.ollama_listed_host: str | None = None
        """The server ``ollama_models`` lists (it answered); None before a
        listing and after one failed."""
        self.actions: dict[str, ActionRun] = {}
        session.run_ended.connect(self._on_session_run_ended)

    @property
    def client(self):  # type: ignore[no-untyped-def]
        return self.session.client

    # ------------------------------------------------------------ models
    def request_lineage(
        self, model_id: str, on_links: Callable[[list[list[str]]], None]
    ) -> None:
        self.client.request(
            protocol.GetModelLineage(model_id=model_id),
            on_reply=lambda r: on_links([list(x) for x in r.get("links", [])]),
            on_error=lambda e: self.failed.emit(e.message),
            owner=owner_of(on_links),
        )

    def delete_model(
        self, model: dict[str, Any], on_done: Callable[[], None] | None = None
    ) -> None:
        """Delete a registered model, or an Ollama model from its server (a
        record of the server's list; a registered deployment is forgotten
        by the project, the server keeps it)."""
        on_done = guard(on_done)
        if on_server(model):
            self.client.request(
                protocol.DeleteOllamaModel(
                    host=str(model.get("host") or self.ollama_host),
                    name=str(model["name"]),
                ),
                on_reply=lambda r: self._after_ollama_delete(on_done),
                on_error=lambda e: self.failed.emit(e.message),
            )
            return
        self.client.request(
            protocol.DeleteModel(model_id=str(model["id"])),
            on_reply=lambda r: self._after_delete(on_done),
            on_error=lambda e: self.failed.emit(e.message),
        )

    def _after_delete(self, on_done: Callable[[], None] | None) -> None:
        self.session.refresh_project()
        if on_done:
            on_done()

    def _after_ollama_delete(self, on_done: Callable[[], None] | None) -> None:
        self.refresh_ollama()
        if on_done:
            on_done()

    # ------------------------------------------------------------ agents
    def request_agents(self) -> None:
        """Ask for the agents (the gate decides the versions it has not
        seen first)."""
        self._agents(protocol.GetAgents())

    def promote_agent(self, agent: str, version: int, why: str) -> None:
        self._agents(protocol.PromoteAgent(agent=agent, version=version, why=why))

    def rollback_agent(self, agent: str, why: str) -> None:
        self._agents(protocol.RollbackAgent(agent=agent, why=why))

    def switch_agent(self, agent: str, on: bool) -> None:
        """Turn ``agent``'s RL switch ('' = the project's) on or off."""
        self._agents(protocol.SwitchAgent(agent=agent, rl_enabled=on))

    def _agents(self, msg: protocol.Request) -> None:
        self.client.request(
            msg,
            on_reply=lambda r: self.agents_changed.emit(r),
            on_error=lambda e: self.agents_failed.emit(e.message),
            owner=self,
        )

    # ------------------------------------------------------------ Ollama
    def refresh_ollama(self, host: str | None = None) -> None:
        if host is not None:
            self.ollama_host = host.strip() or DEFAULT_OLLAMA_HOST
        self._ollama_asked += 1
        asked = self._ollama_asked
        self.client.request(
            protocol.ListOllamaModels(host=self.ollama_host),
            on_reply=lambda r: (
                self._on_ollama_list(r) if asked == self._ollama_asked else None
            ),
            on_error=lambda e: (
                self._on_ollama_error(e) if asked == self._ollama_asked else None
            ),
            owner=self,
        )

    def _on_ollama_list(self, result: dict[str, Any]) -> None:
        self.ollama_error = ""
        self.ollama_host = str(result.get("host") or self.ollama_host)
        self.ollama_version = str(result.get("version", ""))
        self.ollama_models = list(result.get("models") or [])
        self.ollama_listed_host = self.ollama_host
        self.ollama_models_changed.emit(self.ollama_models)

    def _on_ollama_error(self, error: protocol.Error) -> None:
        self.ollama_error = error.message
        self.ollama_models = []
        self.ollama_listed_host = None
        self.ollama_models_changed.emit([])
        self.ollama_failed.emit(error.message)

    # -------------------------------------------------------------- chat
    def chat(
        self,
        model_ref: str,
        messages: list[dict[str, str]],
        on_reply: Callable[[dict[str, Any]], None],
        on_error: ErrorCallback,
        host: str | None = None,
        max_new_tokens: int = 128,
    ) -> None:
        """One turn: ``model_ref`` is an Ollama name or a local HF folder;
        ``on_reply`` gets the engine's answer (``reply``, ``tokens``,
        ``seconds``, ``load_seconds``)."""
        self.client.request(
            protocol.Chat(
                model=model_ref,
                host=host or self.ollama_host,
                messages=messages,
                max_new_tokens=max_new_tokens,
            ),
            on_reply=lambda r: on_reply(dict(r)),
            on_error=lambda e: on_error(e.message),
            owner=owner_of(on_reply, on_error),
        )

    # -------------------------------------------------------------- runs
    def start_action(
        self,
        purpose: str,
        kind: str,
        config: dict[str, Any],
        model: dict[str, Any],
        name: str = "",
        on_error: ErrorCallback | None = None,
    ) -> None:
        on_error = guard(on_error)  # the dialog that asked may close meanwhile

        def started(run_id: str) -> None:
            self.adopt_action(run_id, purpose, model, config)

        self.session.start_run(
            kind,
            config,
            name=name or f"{purpose.title()} {model.get('name', '')}".strip(),
            on_started=started,
            on_error=lambda e: (on_error or self.failed.emit)(e.message),
        )

    def evaluate(self, model: dict[str, Any], episodes: int = 10) -> None:
        """Roll the policy out for ``episodes`` episodes (``env_preview``)."""
        self.start_action(
            "evaluate",
            "env_preview",
            self._preview_config(model, episodes=episodes, trace=0, frames=0),
            model,
            name=f"Evaluate {model.get('name', '')}",
        )

    def play(self, model: dict[str, Any], frames: int = 300) -> None:
        """One episode with its step trace and up to ``frames`` frames; an env
        that cannot draw is played without, and ``preview.json``'s
        ``frames_note`` says why."""
        self.start_action(
            "play",
            "env_preview",
            self._preview_config(model, episodes=1, trace=1, frames=frames),
            model,
            name=f"Play {model.get('name', '')}",
        )

    def download_from_hub(self, repo_id: str, revision: str = "main") -> None:
        """A ``hub.download`` run: the model into the Hugging Face cache, with
        progress in bytes; Stop keeps what came, and a new download resumes."""
        self.start_action(
            "hub.download",
            "hub.download",
            {"repo_id": repo_id.strip(), "revision": revision.strip() or "main"},
            {"id": ""},
            name=f"Download {repo_id.strip()}",
        )

    @staticmethod
    def _preview_config(
        model: dict[str, Any], episodes: int, trace: int, frames: int
    ) -> dict[str, Any]:
        return {
            "spec": str(model.get("env", "")),
            "episodes": int(episodes),
            "trace_episodes": int(trace),
            "frames": int(frames),
            "model": str(model["path"]),
        }

    def export_onnx(self, model: dict[str, Any]) -> None:
        self.start_action(
            "export.onnx",
            "export.onnx",
            {
                "policy": str(model["path"]),
                # Named after its model, not SB3's model.zip.
                "name": str(model.get("name") or "") or None,
                "parents": [str(model["id"])],
            },
            model,
            name=f"Export ONNX {model.get('name', '')}",
        )

    # The settings an action fixes from the model it starts from (its
    # dialog shows the rest, in the engine's form for the kind).
    @staticmethod
    def gguf_source(model: dict[str, Any]) -> dict[str, Any]:
        """``export.gguf``: the model or adapter folder, and its lineage."""
        return {
            "model_dir": model_folder(model),
            "adapter": model.get("kind") == "lora-adapter",
            "parents": [str(model["id"])],
        }

    @staticmethod
    def record_source(model: dict[str, Any]) -> dict[str, Any]:
        """``rl.record``: the policy file and the env it was trained on."""
        return {"model": str(model["path"]), "env": str(model.get("env", ""))}

    @staticmethod
    def hub_push_source(model: dict[str, Any]) -> dict[str, Any]:
        """``rl.hub_push``: the policy file, its env and algorithm."""
        return {
            "model": str(model["path"]),
            "env": str(model.get("env", "")) or None,
            "algo": str(model.get("algo", "")) or None,
        }

    @staticmethod
    def continue_source(model: dict[str, Any]) -> dict[str, Any]:
        """``rl.train`` continuing the policy: its env and algorithm, and the
        model to start from (by id: the engine finds its file)."""
        return {
            "env": str(model.get("env", "")),
            "algo": str(model.get("algo", "")) or "auto",
            "start_from": str(model["id"]),
        }

    @staticmethod
    def deploy_source(model: dict[str, Any]) -> dict[str, Any]:
        """``deploy.ollama``: the GGUF file, and its lineage."""
        return {"gguf": str(model["path"]), "parents": [str(model["id"])]}

    @staticmethod
    def one_click_source(model: dict[str, Any]) -> dict[str, Any]:
        """``export.ollama``: a GGUF file as it is, else the model or adapter
        folder, and its lineage."""
        path = model.get("path", "")
        source = path if model.get("kind") == "gguf" else model_folder(model)
        return {"model": str(source), "parents": [str(model["id"])]}

    def adopt_action(
        self, run_id: str, purpose: str, model: dict[str, Any], config: dict[str, Any]
    ) -> None:
        """Follow a run started for ``model`` (by a dialog) as an action."""
        self.actions[run_id] = ActionRun(run_id, purpose, str(model["id"]), config)
        self.action_started.emit(run_id, purpose)

    def follow_export(
        self, model: dict[str, Any], run_id: str, config: dict[str, Any]
    ) -> OllamaExport:
        """The one-click export the dialog started, followed until it ends."""
        export = OllamaExport(self.session, model, config, parent=self)
        export.follow(run_id)
        return export

    def _on_session_run_ended(self, run_id: str, status: str, reason: str) -> None:
        action = self.actions.get(run_id)
        if action is None:
            return
        self.action_ended.emit(run_id, action.purpose, status, reason)

    # ----------------------------------------------------------- results
    def run_dir(self, run_id: str) -> Path | None:
        run = self.session.state.run(run_id) or {}
        return Path(run["run_dir"]) if run.get("run_dir") else None

    def run_summary(self, run_id: str) -> dict[str, Any]:
        """What a finished action run returned (empty while it runs)."""
        return dict((self.session.state.run(run_id) or {}).get("summary") or {})

    def read_preview(self, run_id: str) -> dict[str, Any] | None:
        """The ``preview.json`` an evaluate/play run wrote (None if absent)."""
        folder = self.run_dir(run_id)
        if folder is None:
            return None
        return contract.read_json_object(folder / contract.PREVIEW_FILE)


def model_folder(model: dict[str, Any]) -> str:
    """The folder of an HF model or adapter (its path may name the folder
    itself or a file inside it)."""
    path = Path(str(model.get("path", "")))
    return str(path if path.is_dir() else path.parent)
