"""``rl-studio-engine serve``: the protocol on stdin/stdout.

The main thread reads requests line by line; each is answered by a handler
on a small thread pool so that a slow request (an env check, a catalog with
spaces) never delays a ``ping`` or a ``run.stop``. Every handler's failure is
turned into an ``error`` reply; nothing escapes, and the engine keeps
serving. The real stdout is reserved for protocol lines: ``sys.stdout`` and
fd 1 point at stderr, which the studio shows in its log panel.
"""

from __future__ import annotations

import argparse
import getpass
import json
import logging
import os
import sys
import threading
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import IO, Any, TextIO

from engine import contract, protocol
from engine.errors import ConfigError, EngineError, bounded
from engine.jobs.context import private_event_stream
from engine.jobs.registry import kinds, run_schema
from engine.jobs.supervisor import Supervisor
from engine.llm.chat_worker import ChatWorker
from engine.retrain_status import training_status
from engine.store.decisions import DecisionLog
from engine.store.promotion import Promotion, named_rule_env
from engine.store.trajectories import TrajectoryStore
from resources import resource_path

ENGINE_VERSION = "0.1.0"
EXIT_GRACE_S = 2.0
"""How long requests still running at shutdown get before the engine exits
without them (they are answered with an error)."""
HEAVY_MODULES = ("torch", "transformers", "trl", "stable_baselines3", "peft")
log = logging.getLogger("engine.server")

Handler = Callable[[Any], Mapping[str, Any]]


def examples_dir() -> Path:
    """Bundled examples, laid out like a project, copied into new projects."""
    return resource_path("examples")


class Server:
    def __init__(self, out: TextIO, stop_timeout_s: float = 10.0) -> None:
        self._out = out
        self._write_lock = threading.Lock()
        # Requests that touch project or run state are answered in the order
        # they came (a run.start right after project.open must see it); slow
        # read-only ones run beside them.
        self._ordered = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ordered")
        self._parallel = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="parallel"
        )
        # Requests that wait on other machines (the Hub, Ollama) get threads
        # of their own: an unreachable server must not hold the local
        # read-only requests behind it (a Hub search that timed out after
        # 24 s used to delay every env check and catalog).
        self._network = ThreadPoolExecutor(max_workers=4, thread_name_prefix="network")
        self._queued: dict[Future[None], protocol.Request] = {}
        self._queued_lock = threading.Lock()
        self._abandoned: set[int] = set()  # requests answered at shutdown
        self.stalled = False
        """A request still ran when serving ended (its thread is abandoned)."""
        self._stop_timeout_s = stop_timeout_s
        self._done = threading.Event()
        self._stop_reason = ""  # why runs stop when serving ends (STOP_REASONS)
        self.supervisor = Supervisor(self.send, examples=examples_dir())
        self._handlers: dict[type[protocol.Message], Handler] = {
            protocol.Hello: self._on_hello,
            protocol.Ping: self._on_ping,
            protocol.Shutdown: self._on_shutdown,
            protocol.OpenProject: self._on_open_project,
            protocol.GetProjectSnapshot: self._on_snapshot,
            protocol.StartRun: self._on_start_run,
            protocol.StopRun: self._on_stop_run,
            protocol.ResumeRun: self._on_resume_run,
            protocol.AnnotateRun: self._on_annotate_run,
            protocol.ListRuns: self._on_list_runs,
            protocol.GetRunSchema: self._on_run_schema,
            protocol.DetectHardware: self._on_detect_hardware,
            protocol.GetHardwareUsage: self._on_hardware_usage,
            protocol.CheckEnv: self._on_check_env,
            protocol.ImportJira: self._on_import_jira,
            protocol.GetEnvCatalog: self._on_env_catalog,
            protocol.GetFlowCatalog: self._on_flow_catalog,
            protocol.ValidateFlow: self._on_validate_flow,
            protocol.GetModelLineage: self._on_model_lineage,
            protocol.DeleteModel: self._on_delete_model,
            protocol.ListOllamaModels: self._on_ollama_list,
            protocol.SearchHub: self._on_hub_search,
            protocol.PreviewData: self._on_data_preview,
            protocol.DeleteOllamaModel: self._on_ollama_delete,
            protocol.Chat: self._on_chat,
            protocol.GetTrainingStatus: self._on_training_status,
            protocol.GetAgents: self._on_agents,
            protocol.PromoteAgent: self._on_promote_agent,
            protocol.RollbackAgent: self._on_rollback_agent,
            protocol.SwitchAgent: self._on_switch_agent,
        }
        # Answered on the reading thread: cheap, and latency matters.
        self._inline = {protocol.Ping, protocol.Hello}
        self._slow_readonly = {
            protocol.CheckEnv,
            protocol.GetEnvCatalog,
            protocol.DetectHardware,
            protocol.GetHardwareUsage,
            protocol.GetRunSchema,
            # Reads the project and the trajectory store (its own file).
            protocol.GetTrainingStatus,
        }
        # Network and generation: may take seconds, touch no project state.
        self._waits_on_network = {
            protocol.ListOllamaModels,
            protocol.SearchHub,
            # A Hub dataset is downloaded to be previewed.
            protocol.PreviewData,
            protocol.DeleteOllamaModel,
            protocol.Chat,
        }
        self.chat_worker = ChatWorker()

    # ------------------------------------------------------------ output
    def send(self, msg: protocol.Message) -> None:
        try:
            line = protocol.encode(msg) + "\n"
        except (TypeError, ValueError) as exc:
            # A result JSON cannot carry (NaN, an object): answer anyway.
            log.error("could not encode %s: %s", msg.TYPE, exc)
            msg = protocol.Error(
                reply_to=getattr(msg, "reply_to", None),
                error_type="EngineError",
                message=f"The engine could not encode its answer ({exc}).",
            )
            line = protocol.encode(msg) + "\n"
        with self._write_lock:
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, ValueError):
                self._done.set()  # the studio is gone

    # ------------------------------------------------------------- input
    def serve(self, stream: IO[bytes]) -> int:
        """Answer the lines of ``stream`` (bytes: invalid UTF-8 is a
        malformed line, not a crash) until it ends or ``shutdown``."""
        limit = protocol.MAX_LINE_BYTES
        while not self._done.is_set():
            line = stream.readline(limit + 1)
            if not line:
                break
            if len(line) > limit and not line.endswith(b"\n"):
                while line and not line.endswith(b"\n"):  # skip the rest
                    line = stream.readline(limit)
                self.send(
                    protocol.Error(
                        error_type="ProtocolError",
                        message=f"Malformed message: the line is longer than "
                        f"{limit:,} bytes.",
                    )
                )
                continue
            if line.strip():
                self.handle_line(line)
        if self._stop_reason:
            self.supervisor.shutdown(self._stop_timeout_s, self._stop_reason)
        else:
            # No shutdown request: the studio vanished (its pipe closed). The
            # runs go on headless; a studio opened later shows them.
            self.supervisor.detach(self._stop_timeout_s)
        self.chat_worker.close()
        self._ordered.shutdown(wait=True, cancel_futures=True)
        self._parallel.shutdown(wait=False, cancel_futures=True)
        self._network.shutdown(wait=False, cancel_futures=True)
        # Requests still queued were cancelled; those still running (a
        # stalled Ollama server, a slow catalog) get EXIT_GRACE_S. Both are
        # answered all the same, and none keeps the engine alive (run()).
        with self._queued_lock:
            running = [f for f in self._queued if not f.cancelled()]
        wait(running, timeout=EXIT_GRACE_S)
        with self._queued_lock:
            unanswered = [
                m for f, m in self._queued.items() if f.cancelled() or not f.done()
            ]
            self._abandoned.update(id(m) for m in unanswered)
            self.stalled = any(not f.done() for f in self._queued)
        for msg in unanswered:
            self.send(
                protocol.Error(
                    reply_to=msg.id,
                    error_type="EngineError",
                    message="The engine shut down before answering this request.",
                )
            )
        return 0

    def handle_line(self, line: str | bytes) -> None:
        """Answer one line: every line gets exactly one reply or error."""
        reply_to: str | None = None
        try:
            data = protocol.parse(line)
            reply_to = data["id"] = self._request_id(data)
            msg = protocol.from_dict(data)
        except protocol.UnknownMessageType as exc:
            self.send(
                protocol.Error(
                    reply_to=reply_to,
                    error_type="UnknownRequest",
                    message=f"The engine does not know this request ({exc}).",
                )
            )
            return
        except protocol.ProtocolError as exc:
            if reply_to is None:
                # Refused while parsing: answer the id all the same if it
                # can be read, so the sender's request does not hang.
                reply_to = protocol.request_id_of(line)
            self.send(
                protocol.Error(
                    reply_to=reply_to,
                    error_type="ProtocolError",
                    message=f"Malformed message: {exc}.",
                    field=exc.field,
                )
            )
            return
        if not isinstance(msg, protocol.Request):
            self.send(
                protocol.Error(
                    error_type="ProtocolError",
                    message=f"{msg.TYPE!r} is not a request the engine answers.",
                )
            )
            return
        if isinstance(msg, protocol.Shutdown) and not msg.keep_runs:
            # Known at once: the studio may close the pipe right after. Runs
            # kept go on headless, as when the pipe closes without a word.
            self._stop_reason = "engine_restart" if msg.restart else "user"
        handler = self._handlers.get(type(msg))
        if handler is None:
            self.send(
                protocol.Error(
                    reply_to=msg.id,
                    error_type="UnknownRequest",
                    message=f"The engine has no handler for {msg.TYPE!r}.",
                )
            )
            return
        if type(msg) in self._inline:
            self._answer(handler, msg)
        elif type(msg) in self._waits_on_network:
            self._queue(self._network, handler, msg)
        elif type(msg) in self._slow_readonly:
            self._queue(self._parallel, handler, msg)
        else:
            self._queue(self._ordered, handler, msg)

    def _queue(
        self, pool: ThreadPoolExecutor, handler: Handler, msg: protocol.Request
    ) -> None:
        future = pool.submit(self._answer, handler, msg)
        with self._queued_lock:
            self._queued[future] = msg
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[None]) -> None:
        if not future.cancelled():
            with self._queued_lock:
                self._queued.pop(future, None)

    @staticmethod
    def _request_id(data: dict[str, Any]) -> str:
        """The id to answer: a malformed one (a number, too long) is logged
        and answered by its JSON text, so the sender can still match it."""
        value = data.get("id", "")
        if isinstance(value, str) and len(value) <= protocol.MAX_ID_CHARS:
            return value
        text = json.dumps(value)[: protocol.MAX_ID_CHARS]
        log.warning(
            "request id %s is not a string of at most %d characters; answering to %r",
            text[:40],
            protocol.MAX_ID_CHARS,
            text,
        )
        return text

    def _answer(self, handler: Handler, msg: protocol.Request) -> None:
        try:
            result = handler(msg)
        except EngineError as exc:
            self._reply(
                msg,
                protocol.Error(
                    reply_to=msg.id,
                    error_type=type(exc).__name__,
                    message=bounded(str(exc)),
                    traceback=traceback.format_exc(),
                    field=getattr(exc, "field", ""),
                ),
            )
            return
        except Exception as exc:
            log.exception("handler for %s failed", msg.TYPE)
            self._reply(
                msg,
                protocol.Error(
                    reply_to=msg.id,
                    error_type=type(exc).__name__,
                    message=bounded(f"The engine failed on {msg.TYPE!r}: {exc}"),
                    traceback=traceback.format_exc(),
                ),
            )
            return
        self._reply(msg, protocol.Reply(reply_to=msg.id, result=dict(result)))

    def _reply(self, msg: protocol.Request, answer: protocol.Message) -> None:
        with self._queued_lock:
            if id(msg) in self._abandoned:
                return  # answered at shutdown already
        self.send(answer)

    # ---------------------------------------------------------- handlers
    def _on_hello(self, msg: protocol.Hello) -> dict[str, Any]:
        if msg.protocol_version != protocol.PROTOCOL_VERSION:
            raise EngineError(
                f"The studio speaks protocol {msg.protocol_version} but this engine "
                f"speaks {protocol.PROTOCOL_VERSION}; reinstall so both match."
            )
        return {
            "protocol_version": protocol.PROTOCOL_VERSION,
            "engine_version": ENGINE_VERSION,
            "pid": os.getpid(),
            "python": sys.version.split()[0],
            "job_kinds": {k.name: k.catalog_entry() for k in kinds().values()},
            # Heavy libraries belong in job and worker processes; listed so
            # that a test (or a curious user) can see none crept in here.
            "heavy_modules": sorted(m for m in HEAVY_MODULES if m in sys.modules),
        }

    def _on_ping(self, msg: protocol.Ping) -> dict[str, Any]:
        return {"payload": msg.payload}

    def _on_shutdown(self, msg: protocol.Shutdown) -> dict[str, Any]:
        self._done.set()
        return {}

    def _on_open_project(self, msg: protocol.OpenProject) -> contract.ProjectSnapshot:
        project = self.supervisor.open_project(msg.path, msg.create, msg.with_examples)
        return project.snapshot()

    def _on_snapshot(
        self, msg: protocol.GetProjectSnapshot
    ) -> contract.ProjectSnapshot:
        return self.supervisor.require_project().snapshot()

    def _on_start_run(self, msg: protocol.StartRun) -> contract.RunIdReply:
        return {"run_id": self.supervisor.start_run(msg.kind, msg.config, msg.name)}

    def _on_stop_run(self, msg: protocol.StopRun) -> contract.RunIdReply:
        self.supervisor.stop_run(msg.run_id, msg.timeout_s, "user")
        return {"run_id": msg.run_id}

    def _on_resume_run(self, msg: protocol.ResumeRun) -> contract.RunIdReply:
        return {"run_id": self.supervisor.resume_run(msg.run_id)}

    def _on_annotate_run(self, msg: protocol.AnnotateRun) -> dict[str, Any]:
        run = self.supervisor.require_project().annotate_run(
            msg.run_id, msg.tags, msg.note
        )
        return {"run_id": run.id, "tags": run.tags, "note": run.note}

    def _on_list_runs(self, msg: protocol.ListRuns) -> contract.RunListReply:
        runs = self.supervisor.require_project().list_runs()
        return {"runs": [r.to_dict() for r in runs]}

    def _on_training_status(self, msg: protocol.GetTrainingStatus) -> dict[str, Any]:
        project = self.supervisor.require_project()
        # A reader: a serve-http on the same project writes the store.
        store = TrajectoryStore(project.path, recover=False)
        try:
            return training_status(project, store)
        finally:
            store.close()

    def _on_run_schema(self, msg: protocol.GetRunSchema) -> dict[str, Any]:
        values = dict(msg.values)
        kind = kinds().get(msg.kind)
        project = self.supervisor.project
        if kind is not None and kind.project_field and project is not None:
            # The form may offer what the project holds (its presets).
            values.setdefault(kind.project_field, str(project.path))
        return {"fields": run_schema(msg.kind, values)}

    def _on_flow_catalog(self, msg: protocol.GetFlowCatalog) -> dict[str, Any]:
        from engine import flow
        from engine.nodes import catalog

        return {
            "node_types": catalog(),
            "port_types": list(flow.PORT_TYPES),
            "format_version": flow.FORMAT_VERSION,
        }

    def _on_validate_flow(self, msg: protocol.ValidateFlow) -> dict[str, Any]:
        from engine.nodes import validate_flow

        return {"errors": validate_flow(path=msg.path, document=msg.document)}

    def _on_check_env(self, msg: protocol.CheckEnv) -> dict[str, Any]:
        from engine.envs import check_spec
        from engine.envs.spec import parse_spec

        if msg.spec is not None:
            # Parse with the file's place so relative paths (mock data, a
            # python file) resolve against its project.
            built, _ = parse_spec(msg.spec, source=msg.path or None)
            target: Any = built if built is not None else msg.spec
        elif msg.path:
            target = msg.path
        else:
            raise EngineError("env.check needs a spec or a path.")
        report = check_spec(target, steps=msg.steps, env_checks=msg.env_checks)
        return report.to_dict()

    def _on_import_jira(self, msg: protocol.ImportJira) -> dict[str, Any]:
        from engine.envs.jira import import_jira, read_mock_data_file

        project = self.supervisor.require_project()
        file = Path(msg.path)
        made = import_jira(
            project.path,
            read_mock_data_file(file),
            name=msg.name,
            default_name=file.stem,
            source=file.name,
        )
        self.send(protocol.ProjectChanged(what="envs"))
        return made.to_dict()

    def _on_env_catalog(self, msg: protocol.GetEnvCatalog) -> dict[str, Any]:
        from engine.envs import catalog
        from engine.envs.registry import describe_env

        if msg.with_spaces and not 0 < len(msg.ids) <= protocol.MAX_DESCRIBED_ENVS:
            raise EngineError(
                "Name the envs whose spaces you want in ids, at most "
                f"{protocol.MAX_DESCRIBED_ENVS}: describing one means making it."
            )
        envs = catalog(with_spaces=False)
        if msg.ids:
            wanted = set(msg.ids)
            envs = [e for e in envs if e["id"] in wanted]
        if msg.with_spaces:
            for entry in envs:
                entry.update(describe_env(entry["id"]))
        return {"envs": envs}

    def _on_detect_hardware(self, msg: protocol.DetectHardware) -> dict[str, Any]:
        from engine.hardware import detect

        return detect().to_dict()

    def _on_hardware_usage(self, msg: protocol.GetHardwareUsage) -> dict[str, Any]:
        from engine.hardware import gpu_usage

        return {"gpus": [g.to_dict() for g in gpu_usage()]}

    # ------------------------------------------------------------ models
    def _on_model_lineage(self, msg: protocol.GetModelLineage) -> dict[str, Any]:
        project = self.supervisor.require_project()
        models = project.list_models()
        if not any(m.id == msg.model_id for m in models):
            raise EngineError(f"There is no model {msg.model_id!r} in this project.")
        # Some jobs name a parent model by its folder, not its id (a merge
        # names the adapter folder); follow those into that model's ancestry.
        by_path: dict[str, str] = {}
        for m in models:
            by_path[m.path] = by_path[str(Path(m.path).parent)] = m.id
        links: list[tuple[str, str, str]] = []
        todo, seen = [msg.model_id], set[str]()
        while todo and len(seen) < 100:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            for link in project.lineage(node):
                if link not in links:
                    links.append(link)
                parent_id = by_path.get(link[0])
                if parent_id is not None and parent_id not in seen:
                    todo.append(parent_id)
        return {"links": [list(link) for link in links]}

    def _on_delete_model(self, msg: protocol.DeleteModel) -> dict[str, Any]:
        self.supervisor.require_project().delete_model(msg.model_id)
        self.send(protocol.ProjectChanged(what="models"))
        return {"model_id": msg.model_id}

    # ------------------------------------------------------------ agents
    def _agents(self, change: Callable[[Promotion], object]) -> dict[str, Any]:
        """Apply ``change`` with the promotion gate the service and
        ``rl-studio-engine agent`` use, then every agent's overview."""
        log = DecisionLog(self.supervisor.require_project().path)
        try:
            gate = Promotion(self.supervisor.require_project(), log)
            change(gate)
            return gate.overviews()
        finally:
            log.close()

    def _on_agents(self, msg: protocol.GetAgents) -> dict[str, Any]:
        return self._agents(lambda gate: None)

    def _on_promote_agent(self, msg: protocol.PromoteAgent) -> dict[str, Any]:
        why = _why(msg.why, "promote")
        by = msg.by or getpass.getuser()
        return self._agents(lambda gate: gate.promote(msg.agent, msg.version, by, why))

    def _on_rollback_agent(self, msg: protocol.RollbackAgent) -> dict[str, Any]:
        why = _why(msg.why, "roll back")
        by = msg.by or getpass.getuser()
        return self._agents(lambda gate: gate.rollback(msg.agent, by, why))

    def _on_switch_agent(self, msg: protocol.SwitchAgent) -> dict[str, Any]:
        # The env a rule policy would use is named here; whether it has an
        # expert action the service finds out by building it (it imports
        # Gymnasium, this process answers without).
        return self._agents(
            lambda gate: gate.switch(msg.agent, msg.rl_enabled, named_rule_env)
        )

    def _on_data_preview(self, msg: protocol.PreviewData) -> dict[str, Any]:
        from engine.llm import data_import

        cfg = data_import.validate_import(msg.values)
        return data_import.preview(
            cfg.source,
            cfg.format,
            cfg.columns,
            cfg.method,
            rows=msg.rows,
            split_name=cfg.split_name,
        )

    def _on_hub_search(self, msg: protocol.SearchHub) -> dict[str, Any]:
        from engine.llm import hub

        return {"endpoint": hub.endpoint(), "models": hub.search(msg.query, msg.limit)}

    def _on_ollama_list(self, msg: protocol.ListOllamaModels) -> dict[str, Any]:
        from engine.ollama import DEFAULT_HOST, OllamaClient, check_host

        client = OllamaClient(check_host(msg.host or DEFAULT_HOST), timeout=5.0)
        version = client.version()
        return {
            "host": client.host,
            "version": version,
            "models": client.list_models(),
        }

    def _on_ollama_delete(self, msg: protocol.DeleteOllamaModel) -> dict[str, Any]:
        from engine.ollama import DEFAULT_HOST, OllamaClient, check_host

        if not msg.name:
            raise EngineError("Name the Ollama model to delete.")
        OllamaClient(check_host(msg.host or DEFAULT_HOST), timeout=10.0).delete(
            msg.name
        )
        return {"name": msg.name}

    def _on_chat(self, msg: protocol.Chat) -> dict[str, Any]:
        messages = [
            {"role": str(m.get("role", "user")), "content": str(m.get("content", ""))}
            for m in msg.messages
            if isinstance(m, dict)
        ]
        if not messages:
            raise EngineError("A chat needs at least one message.")
        if not msg.model:
            raise EngineError("Choose a model to chat with.")
        folder = Path(msg.model).expanduser()
        if folder.is_dir():
            # Generation loads torch and a model: never in this process.
            turn = self.chat_worker.chat_turn(
                folder, messages, max(1, msg.max_new_tokens)
            )
        else:
            turn = self._chat_ollama(msg.model, msg.host, messages)
        return {**turn, "model": msg.model}

    def _chat_ollama(
        self, name: str, host: str, messages: list[dict[str, str]]
    ) -> dict[str, Any]:
        from engine.ollama import DEFAULT_HOST, OllamaClient, check_host

        client = OllamaClient(check_host(host or DEFAULT_HOST), timeout=120.0)
        return client.chat_turn(name, messages)


# ---------------------------------------------------------------- CLI
def _why(text: str, action: str) -> str:
    """A hand promotion's or rollback's reason, which the log keeps."""
    if not text.strip():
        raise ConfigError("why", f"Say why you {action} (kept in the promotion log).")
    return text


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=10.0,
        help="seconds a run gets to stop by itself at shutdown (default 10)",
    )


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="engine %(levelname)s: %(message)s",
    )
    # PyOpenGL (MuJoCo's renderer) says at INFO that an optional speed-up
    # is absent; the studio's log is for what a user acts on.
    logging.getLogger("OpenGL").setLevel(logging.WARNING)
    out = private_event_stream()
    server = Server(out, stop_timeout_s=args.stop_timeout)
    code = server.serve(sys.stdin.buffer)
    if server.stalled:
        # The thread of a request that did not end would hold the exit.
        sys.stderr.flush()
        os._exit(code)
    return code
