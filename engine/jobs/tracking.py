"""Every run to MLflow, when the project has a tracking URI.

The URI comes from ``MLFLOW_TRACKING_URI`` (:data:`contract.TRACKING_URI_ENV`),
which the studio sets from Settings and the CLI from ``--mlflow-uri``. Without
it, or without the ``mlflow`` package (the ``rl-studio[mlflow]`` extra),
:func:`start` returns None and nothing imports mlflow.

One hook in the lifecycle (:func:`engine.jobs.lifecycle.execute`) serves
every job kind: the tracker logs the resolved config as parameters (flattened,
``hyperparameters.learning_rate``), receives each batch of metric rows the
context flushes (so the metrics stream is the one ``metrics.jsonl`` gets, with
its steps), and at the end logs the run folder's records and the final
model files where small, ends the MLflow run with the run's status and
registers the models of a run that reached its target (``stopped_by`` is
``target``, or ``best_eval_reward >= target_eval_reward``) in the model
registry, with the studio's lineage as tags. Tags link the MLflow run to the
project's run id; the MLflow run id is kept in the run folder
(:data:`contract.MLFLOW_RUN_FILE`), so a resumed run continues it.

Everything MLflow does happens on the tracker's own thread, fed by a queue:
the training thread never waits for the server. A tracking server (http,
https) is spoken to over MLflow's REST API with the standard library
(:class:`_RestClient`), so the job never imports mlflow (about 1.5 s of CPU
holding the GIL); other stores go through mlflow's client
(:class:`_LibraryClient`). A server that does not answer
costs one warning in the run's log; from then on what would have been sent is
appended to the run folder's spool (:data:`contract.MLFLOW_SPOOL_FILE`), the
server is retried every :data:`RETRY_S` seconds and once more at the end, and
the spool is replayed in order once it answers (or when the run is resumed, or
by :func:`replay`), so no metric is lost.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import queue
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

from engine import contract
from engine.errors import ConfigError
from engine.store.atomic import atomic_write_json, atomic_write_text

BATCH_S = 1.0
"""Metric rows are gathered this long before one request sends them."""
RETRY_S = 5.0
"""How often an unreachable server is tried again while the run goes on."""
REQUEST_TIMEOUT_S = 10
"""Each request's timeout (mlflow's own default retries for minutes)."""
FINISH_TIMEOUT_S = 60.0
"""How long the end of a run waits for the tracker to send what is queued."""
MODEL_ARTIFACT_MAX_BYTES = 100 * 2**20
"""Model files (or folders) up to this size are logged as artifacts."""
PARAM_VALUE_MAX = 6000
"""MLflow's limit on a parameter value's length."""
RUN_ARTIFACTS = (
    contract.CONFIG_FILE,
    contract.RESULT_FILE,
    contract.REPORT_FILE,
    contract.FLOW_STATE_FILE,
    "reproduce.json",
    "report.csv",  # llm.evaluate's, beside report.json
    "report.png",
)
"""The run folder's records logged as artifacts, where the run has them."""
RUN_ARTIFACT_FOLDERS = (contract.VIDEOS_FOLDER,)
"""Run-folder folders whose files are logged as artifacts under their name
(a training run's evaluation videos)."""
STATUSES = {
    "completed": "FINISHED",
    "failed": "FAILED",
    "stopped": "KILLED",
    "interrupted": "KILLED",
}
"""Run status -> MLflow run status."""
URI_SCHEMES = (
    "http",
    "https",
    "file",
    "sqlite",
    "postgresql",
    "mysql",
    "mssql",
    "databricks",
    "databricks-uc",
    "uc",
)
"""Schemes of the tracking URIs MLflow understands (``postgresql+psycopg2``
counts as ``postgresql``); a URI without a scheme is a local folder."""
_REJECTED = {
    "INVALID_PARAMETER_VALUE",
    "RESOURCE_ALREADY_EXISTS",
    "RESOURCE_DOES_NOT_EXIST",
    "BAD_REQUEST",
    "INVALID_STATE",
}
"""MLflow error codes meaning the server answered and refused the request
(retrying would not help), as against not answering."""


def check_uri(uri: str) -> str:
    """``uri`` stripped, or a ConfigError (field ``mlflow_uri``) in one
    sentence when MLflow could not use it."""
    text = uri.strip()
    problem = ""
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        problem = "its host or port is not valid"
    else:
        scheme = parts.scheme.lower()
        if not text or any(c.isspace() or ord(c) < 32 for c in text):
            problem = "it is empty or holds spaces"
        elif len(scheme) > 1 and scheme.split("+")[0] not in URI_SCHEMES:
            problem = f"MLflow has no {scheme!r} store"
        elif scheme in ("http", "https") and not parts.hostname:
            problem = "it names no host"
    if problem:
        raise ConfigError(
            "mlflow_uri",
            f"The MLflow tracking URI {uri!r} cannot be used ({problem}); give "
            "http://host:port, file:/folder, sqlite:///file.db or a folder.",
        )
    return text


def tracking_uri() -> str:
    """The tracking URI runs log to; empty when tracking is off."""
    return os.environ.get(contract.TRACKING_URI_ENV, "").strip()


def end_queue(
    ops: queue.SimpleQueue[Any],
    sender: threading.Thread,
    log: Callable[[str], None],
    who: str,
    lost: str,
) -> None:
    """End a tracker's queue ``ops`` and wait up to :data:`FINISH_TIMEOUT_S`
    for its ``sender`` thread; one logged sentence when it is still busy
    then: ``who`` is, and what is ``lost``."""
    ops.put(None)
    sender.join(FINISH_TIMEOUT_S)
    if sender.is_alive():
        log(f"{who} is still busy after {FINISH_TIMEOUT_S:g} s; {lost}.")


class RunTracker(Protocol):
    """Where a run's flushed metric rows go, and its end."""

    def metrics(self, rows: list[dict[str, Any]]) -> None: ...

    def finish(self, status: str, summary: Mapping[str, Any] | None) -> None: ...


class Trackers:
    """Several trackers fed as one (MLflow and Weights & Biases)."""

    def __init__(self, trackers: list[RunTracker]) -> None:
        self.trackers = trackers

    def metrics(self, rows: list[dict[str, Any]]) -> None:
        for tracker in self.trackers:
            tracker.metrics(rows)

    def finish(self, status: str, summary: Mapping[str, Any] | None) -> None:
        for tracker in self.trackers:
            tracker.finish(status, summary)


def combined(trackers: list[RunTracker | None]) -> RunTracker | None:
    """The trackers that are on, as one; None when none is."""
    found = [t for t in trackers if t is not None]
    if len(found) > 1:
        return Trackers(found)
    return found[0] if found else None


def start(ctx: Any) -> Tracker | None:
    """A tracker logging ``ctx``'s run (a :class:`JobContext`), or None when
    there is no tracking URI or mlflow is not installed (said once in the
    run's log). A malformed URI is a ConfigError."""
    uri = tracking_uri()
    if not uri:
        return None
    uri = check_uri(uri)
    # Only looked up: a tracking server is spoken to over its REST API, and
    # importing mlflow costs seconds of CPU.
    if importlib.util.find_spec("mlflow") is None:
        ctx.log(
            f"{contract.TRACKING_URI_ENV} is set but mlflow is not installed; "
            "install rl-studio[mlflow] to track runs in MLflow."
        )
        return None
    return Tracker(ctx, uri)


def flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested settings as MLflow parameters: ``a.b`` keys, lists as JSON,
    values cut to MLflow's length limit."""
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, name + "."))
            continue
        text = (
            value
            if isinstance(value, str)
            else json.dumps(value, separators=(",", ":"), default=str)
        )
        out[metric_key(name)] = text[:PARAM_VALUE_MAX]
    return out


def reached_target(config: Mapping[str, Any], summary: Mapping[str, Any]) -> bool:
    """Whether the run reached its target (the models the registry gets)."""
    if summary.get("stopped_by") == "target":
        return True
    target, best = config.get("target_eval_reward"), summary.get("best_eval_reward")
    return (
        isinstance(target, int | float)
        and isinstance(best, int | float)
        and best >= target
    )


def metric_key(name: str) -> str:
    """A metric's name as the trackers log it (W&B too: the same names)."""
    # MLflow keys: alphanumerics, underscores, dashes, periods, spaces, slashes.
    return re.sub(r"[^\w\-. /]", "_", name)[:250]


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size


class _Unreachable(Exception):
    """The server did not answer (as against refusing a request)."""


class Tracker:
    """One studio run's MLflow run, fed from a queue by its own thread."""

    def __init__(
        self,
        ctx: Any,
        uri: str,
        *,
        thread: bool = True,
    ) -> None:
        _client_environment()
        self.uri = uri
        self.run_dir = Path(ctx.run_dir)
        self.studio_run_id: str = ctx.run_id
        self.kind: str = ctx.kind
        self.project_dir = Path(ctx.project_dir)
        self._log: Callable[[str], None] = ctx.log
        self.config: dict[str, Any] = dict(ctx.config)
        self.run_id: str | None = None
        """The MLflow run id, once the server gave or confirmed one."""
        self.offline = False
        self.warned = False
        self._client: _Client | None = None
        self._next_try = 0.0
        self._spool = self.run_dir / contract.MLFLOW_SPOOL_FILE
        resumed = bool(getattr(ctx, "resume", False))
        self._resumed_past = _sent_through(self.run_dir) if resumed else None
        """A resumed run's steps up to here reached MLflow (or its spool)
        before the run was interrupted; they are not sent again (see
        :meth:`metrics`)."""
        self._sent_step: int | None = None
        self._queue: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(
            target=self._loop, name="mlflow-tracker", daemon=True
        )
        if thread:  # without: only :meth:`_try_replay` (:func:`replay`)
            self._put({"op": "params", "params": flatten(self.config)})
            self._thread.start()

    # ------------------------------------------------ the training side
    def metrics(self, rows: list[dict[str, Any]]) -> None:
        """Queue flushed metric rows (``step`` and values).

        A run resumed after a crash trains again from its last checkpoint:
        rows for steps MLflow already has from before the crash are dropped
        (MLflow cannot delete points), so no step appears twice there; its
        curve keeps the first attempt's values up to that step."""
        if self._resumed_past is not None:
            past = self._resumed_past
            rows = [r for r in rows if int(r.get("step", 0)) > past]
        if rows:
            self._put({"op": "metrics", "ts": int(time.time() * 1000), "rows": rows})

    def finish(self, status: str, summary: Mapping[str, Any] | None) -> None:
        """Queue the run's end (artifacts, status, registry) and wait up to
        :data:`FINISH_TIMEOUT_S` for the queue to be sent or spooled."""
        summary = dict(summary or {})
        models = [m for m in summary.get("models") or [] if isinstance(m, dict)]
        register = status in ("completed", "stopped") and reached_target(
            self.config, summary
        )
        self._put(
            {
                "op": "finish",
                "status": STATUSES.get(status, "FINISHED"),
                "models": models,
                "register": register,
            }
        )
        end_queue(
            self._queue,
            self._thread,
            self._log,
            f"MLflow at {self.uri}",
            "the rest is not sent",
        )

    def _put(self, op: dict[str, Any]) -> None:
        self._queue.put(op)

    # ------------------------------------------------ the tracker thread
    def _loop(self) -> None:
        # A spool left by an earlier part of this run (the server was away
        # when it ended) goes first.
        if self._spool.exists():
            self.offline = True
        done = False
        while not done:
            ops: list[dict[str, Any]] = []
            item = self._queue.get()
            deadline = time.monotonic() + BATCH_S
            while item is not None:
                ops.append(item)
                if item["op"] == "finish":
                    item = self._queue.get()  # the None after it
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    item = self._queue.get(timeout=remaining)
                except queue.Empty:
                    break
            done = item is None
            try:
                self._handle(_merge(ops), last=done)
            except Exception as exc:  # never let tracking end the run
                self._log(f"MLflow tracking stopped: {type(exc).__name__}: {exc}")
                return

    def _handle(self, ops: list[dict[str, Any]], *, last: bool) -> None:
        if self.offline and (last or time.monotonic() >= self._next_try):
            self._try_replay()
        if self.offline:
            self._append_spool(ops)
            if last:
                self._log(
                    f"MLflow at {self.uri} did not answer; what it missed is kept "
                    f"in {self._spool} and is sent when the run is resumed "
                    "(or by engine.jobs.tracking.replay)."
                )
            return
        for i, op in enumerate(ops):
            try:
                self._send(op)
            except _Unreachable as exc:
                self._go_offline(exc)
                self._append_spool(ops[i:])
                return

    def _go_offline(self, exc: BaseException) -> None:
        self.offline = True
        self._next_try = time.monotonic() + RETRY_S
        if not self.warned:
            self.warned = True
            self._log(
                f"warning: MLflow at {self.uri} does not answer ({exc}); the run "
                f"goes on, its metrics wait in {contract.MLFLOW_SPOOL_FILE} and "
                "are sent when the server answers."
            )

    def _try_replay(self) -> None:
        """Send the spool, in order; back online when all of it went."""
        lines = _read_lines(self._spool)
        for i, op in enumerate(lines):
            try:
                self._send(op)
            except _Unreachable as exc:
                self._go_offline(exc)
                atomic_write_text(self._spool, _lines(lines[i:]))
                return
        self._spool.unlink(missing_ok=True)
        self.offline = False

    def _append_spool(self, ops: list[dict[str, Any]]) -> None:
        with open(self._spool, "a", encoding="utf-8") as fh:
            fh.write(_lines(ops))

    # ---------------------------------------------------- MLflow calls
    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """One client call; :class:`_Unreachable` passes. A refused request
        is said in the log and gives None."""
        try:
            return fn(*args, **kwargs)
        except _Refused as exc:
            self._log(f"MLflow refused a request: {exc}")
            return None

    def _client_for(self) -> _Client:
        if self._client is None:
            scheme = urlsplit(self.uri).scheme.lower()
            # Over HTTP the tracker speaks MLflow's REST API itself: importing
            # mlflow takes ~1.5 s of CPU holding the GIL, several percent of a
            # short run. Other stores (a folder, a database) need mlflow's.
            self._client = (
                _RestClient(self.uri)
                if scheme in ("http", "https")
                else _LibraryClient(self.uri)
            )
        return self._client

    def _ensure_run(self) -> str:
        if self.run_id is not None:
            return self.run_id
        client = self._client_for()
        record = contract.read_json_object(self.run_dir / contract.MLFLOW_RUN_FILE)
        if record and record.get("uri") == self.uri and record.get("run_id"):
            run_id = str(record["run_id"])
            # A resumed run continues its MLflow run.
            self._call(client.update_run, run_id, "RUNNING")
            self.run_id = run_id
            return run_id
        experiment_id = client.experiment_id(f"rl-studio/{self.project_dir.name}")
        started = contract.read_json_object(self.run_dir / contract.CONFIG_FILE)
        run_id = client.create_run(
            experiment_id,
            str((started or {}).get("name") or self.studio_run_id),
            {
                "rlstudio.run_id": self.studio_run_id,
                "rlstudio.kind": self.kind,
                "rlstudio.project": str(self.project_dir),
                "rlstudio.run_dir": str(self.run_dir),
            },
        )
        self.run_id = run_id
        atomic_write_json(
            self.run_dir / contract.MLFLOW_RUN_FILE,
            {"uri": self.uri, "run_id": run_id, "experiment_id": experiment_id},
        )
        return run_id

    def _send(self, op: dict[str, Any]) -> None:
        run_id = self._ensure_run()
        client = self._client_for()
        if op["op"] == "params":
            self._send_params(client, run_id, op["params"])
        elif op["op"] == "metrics":
            for batch in _metric_batches(op["rows"], int(op["ts"])):
                self._call(client.log_batch, run_id, batch, [])
            self._note_sent(op["rows"])
        elif op["op"] == "finish":
            self._send_finish(client, run_id, op)

    def _note_sent(self, rows: list[dict[str, Any]]) -> None:
        """Keep the highest step sent in the run record, for a resume."""
        steps = [int(r.get("step", 0)) for r in rows]
        top = max(steps, default=None)
        if top is None or (self._sent_step is not None and top <= self._sent_step):
            return
        self._sent_step = top
        record = contract.read_json_object(self.run_dir / contract.MLFLOW_RUN_FILE)
        if record:
            atomic_write_json(
                self.run_dir / contract.MLFLOW_RUN_FILE,
                {**record, "sent_through_step": top},
            )

    def _send_params(
        self, client: _Client, run_id: str, params: dict[str, str]
    ) -> None:
        logged = self._call(client.params, run_id) or {}
        # A resumed run keeps the values it started with (MLflow refuses a
        # changed parameter); what changed (total_steps) is a tag.
        fresh = [{"key": k, "value": v} for k, v in params.items() if k not in logged]
        changed = {k: v for k, v in params.items() if k in logged and logged[k] != v}
        for i in range(0, len(fresh), 100):
            self._call(client.log_batch, run_id, [], fresh[i : i + 100])
        for key, value in changed.items():
            self._call(client.set_tag, run_id, f"rlstudio.resumed.{key}", value)

    def _send_finish(self, client: _Client, run_id: str, op: dict[str, Any]) -> None:
        for name in RUN_ARTIFACTS:
            path = self.run_dir / name
            if path.is_file():
                self._call(client.log_artifact, run_id, path, "")
        for folder in RUN_ARTIFACT_FOLDERS:
            kept = self.run_dir / folder
            for path in sorted(kept.glob("*")) if kept.is_dir() else []:
                if path.is_file() and not path.name.startswith("."):
                    self._call(client.log_artifact, run_id, path, folder)
        for i, model in enumerate(op["models"]):
            path = Path(str(model.get("file") or ""))
            if not path.exists() or _size(path) > MODEL_ARTIFACT_MAX_BYTES:
                continue
            folder = (
                f"models/{metric_key(str(model.get('name') or i)).replace(' ', '_')}"
            )
            files = (
                [p for p in sorted(path.rglob("*")) if p.is_file()]
                if path.is_dir()
                else [path, *(Path(e) for e in model.get("extra_files") or [])]
            )
            for file in files:
                if file.is_file():
                    sub = file.parent.relative_to(path) if path.is_dir() else Path()
                    where = (Path(folder) / sub).as_posix()
                    self._call(client.log_artifact, run_id, file, where)
            if op["register"]:
                self._register(client, run_id, model, folder)
        self._call(client.update_run, run_id, op["status"], int(time.time() * 1000))

    def _register(
        self, client: _Client, run_id: str, model: Mapping[str, Any], folder: str
    ) -> None:
        """A model version of the registered model named like the studio's,
        with the studio's lineage as tags."""
        name = str(model.get("name") or self.studio_run_id).replace("/", "-")
        lineage = {
            "rlstudio.run_id": self.studio_run_id,
            "rlstudio.kind": self.kind,
            "rlstudio.project": str(self.project_dir),
            "rlstudio.model_kind": str(model.get("kind", "")),
            "rlstudio.file": str(model.get("file", "")),
        }
        for key in ("env", "algo", "base"):
            if model.get(key):
                lineage[f"rlstudio.{key}"] = str(model[key])
        if model.get("parents"):
            lineage["rlstudio.parents"] = json.dumps(model["parents"])
        for key, value in (model.get("metrics") or {}).items():
            lineage[f"rlstudio.metric.{key}"] = str(value)
        version = self._call(
            client.register, name, f"runs:/{run_id}/{folder}", run_id, lineage
        )
        if version is not None:
            self._log(f"registered {name} version {version} in MLflow")


class _Refused(Exception):
    """The server answered and refused the request (retrying would not help)."""


class _Client:
    """What the tracker asks of MLflow, in plain data. Methods raise
    :class:`_Unreachable` when the store does not answer and
    :class:`_Refused` when it refuses."""

    def experiment_id(self, name: str) -> str:
        """The experiment ``name``'s id, created if missing."""
        raise NotImplementedError

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str]) -> str:
        raise NotImplementedError

    def params(self, run_id: str) -> dict[str, str]:
        raise NotImplementedError

    def update_run(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        raise NotImplementedError

    def log_batch(
        self, run_id: str, metrics: list[dict[str, Any]], params: list[dict[str, str]]
    ) -> None:
        raise NotImplementedError

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        raise NotImplementedError

    def log_artifact(self, run_id: str, path: Path, artifact_path: str) -> None:
        raise NotImplementedError

    def register(
        self, name: str, source: str, run_id: str, tags: dict[str, str]
    ) -> str:
        """A new version of registered model ``name`` (made if missing)."""
        raise NotImplementedError


class _RestClient(_Client):
    """MLflow's REST API over the standard library (a tracking server)."""

    def __init__(self, uri: str) -> None:
        self.base = uri.rstrip("/")
        self.headers = {"Content-Type": "application/json"}
        token = os.environ.get("MLFLOW_TRACKING_TOKEN")
        user = os.environ.get("MLFLOW_TRACKING_USERNAME")
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif user:
            import base64

            pair = f"{user}:{os.environ.get('MLFLOW_TRACKING_PASSWORD', '')}"
            self.headers["Authorization"] = "Basic " + base64.b64encode(
                pair.encode()
            ).decode("ascii")
        self._artifact_uris: dict[str, str] = {}

    def _request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> dict[str, Any]:
        import urllib.error
        import urllib.parse
        import urllib.request

        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = dict(self.headers)
        if data is None and body is not None:
            data = json.dumps(body).encode("utf-8")
        elif data is not None:
            headers["Content-Type"] = "application/octet-stream"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT_S) as answer:
                text = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")
            with contextlib.suppress(ValueError, AttributeError):
                error = json.loads(detail)
                detail = f"{error.get('error_code', '')}: {error.get('message', '')}"
            if 400 <= exc.code < 500 and exc.code not in (408, 429):
                raise _Refused(f"HTTP {exc.code} {detail[:300]}") from exc
            raise _Unreachable(f"HTTP {exc.code}") from exc
        except (OSError, ValueError) as exc:  # URLError, timeouts, resets
            reason = getattr(exc, "reason", exc)
            raise _Unreachable(f"{type(exc).__name__}: {reason}") from exc
        try:
            out = json.loads(text or b"{}")
        except ValueError as exc:
            raise _Unreachable("an answer that is not JSON") from exc
        return out if isinstance(out, dict) else {}

    def _api(self, method: str, endpoint: str, body: Any = None, **query: str) -> Any:
        return self._request(method, f"/api/2.0/mlflow/{endpoint}", body, query=query)

    def experiment_id(self, name: str) -> str:
        try:
            found = self._api("GET", "experiments/get-by-name", experiment_name=name)
            return str(found["experiment"]["experiment_id"])
        except _Refused as exc:
            if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
                raise
        return str(
            self._api("POST", "experiments/create", {"name": name})["experiment_id"]
        )

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str]) -> str:
        run = self._api(
            "POST",
            "runs/create",
            {
                "experiment_id": experiment_id,
                "run_name": name,
                "start_time": int(time.time() * 1000),
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
        )["run"]
        run_id = str(run["info"]["run_id"])
        self._artifact_uris[run_id] = str(run["info"].get("artifact_uri", ""))
        return run_id

    def _run(self, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self._api("GET", "runs/get", run_id=run_id)["run"]
        self._artifact_uris[run_id] = str(run["info"].get("artifact_uri", ""))
        return run

    def params(self, run_id: str) -> dict[str, str]:
        rows = self._run(run_id).get("data", {}).get("params", [])
        return {str(p["key"]): str(p.get("value", "")) for p in rows}

    def update_run(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        body: dict[str, Any] = {"run_id": run_id, "status": status}
        if end_ms is not None:
            body["end_time"] = end_ms
        self._api("POST", "runs/update", body)

    def log_batch(
        self, run_id: str, metrics: list[dict[str, Any]], params: list[dict[str, str]]
    ) -> None:
        body = {"run_id": run_id, "metrics": metrics, "params": params, "tags": []}
        self._api("POST", "runs/log-batch", body)

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._api(
            "POST", "runs/set-tag", {"run_id": run_id, "key": key, "value": value}
        )

    def log_artifact(self, run_id: str, path: Path, artifact_path: str) -> None:
        root = self._artifact_uris.get(run_id) or str(
            self._run(run_id)["info"].get("artifact_uri", "")
        )
        parts = urlsplit(root)
        where = "/".join(p for p in (artifact_path.strip("/"), path.name) if p)
        if parts.scheme == "mlflow-artifacts":
            # the server stores it (--serve-artifacts, its default)
            self._request(
                "PUT",
                f"/api/2.0/mlflow-artifacts/artifacts{parts.path.rstrip('/')}/{where}",
                data=path.read_bytes(),
            )
        elif parts.scheme in ("", "file"):
            # the server writes to a folder this machine sees
            folder = Path(parts.path if parts.scheme else root) / artifact_path
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, folder / path.name)
        else:
            _LibraryClient(self.base).log_artifact(run_id, path, artifact_path)

    def register(
        self, name: str, source: str, run_id: str, tags: dict[str, str]
    ) -> str:
        try:
            self._api("GET", "registered-models/get", name=name)
        except _Refused as exc:
            if "RESOURCE_DOES_NOT_EXIST" not in str(exc):
                raise
            self._api("POST", "registered-models/create", {"name": name})
        version = self._api(
            "POST",
            "model-versions/create",
            {
                "name": name,
                "source": source,
                "run_id": run_id,
                "tags": [{"key": k, "value": v} for k, v in tags.items()],
            },
        )["model_version"]
        return str(version["version"])


class _LibraryClient(_Client):
    """mlflow's own client, for stores other than a tracking server."""

    def __init__(self, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(tracking_uri=uri, registry_uri=uri)

    def _do(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        from mlflow.exceptions import MlflowException

        try:
            return fn(*args, **kwargs)
        except MlflowException as exc:
            text = str(exc).splitlines()[0][:300]
            if exc.error_code in _REJECTED:
                raise _Refused(f"{exc.error_code}: {text}") from exc
            raise _Unreachable(text) from exc
        except OSError as exc:
            raise _Unreachable(f"{type(exc).__name__}: {exc}") from exc

    def experiment_id(self, name: str) -> str:
        found = self._do(self.client.get_experiment_by_name, name)
        if found is not None:
            return str(found.experiment_id)
        return str(self._do(self.client.create_experiment, name))

    def create_run(self, experiment_id: str, name: str, tags: dict[str, str]) -> str:
        run = self._do(self.client.create_run, experiment_id, run_name=name, tags=tags)
        return str(run.info.run_id)

    def params(self, run_id: str) -> dict[str, str]:
        return dict(self._do(self.client.get_run, run_id).data.params)

    def update_run(self, run_id: str, status: str, end_ms: int | None = None) -> None:
        if end_ms is None:
            self._do(self.client.update_run, run_id, status=status)
        else:
            self._do(self.client.set_terminated, run_id, status=status, end_time=end_ms)

    def log_batch(
        self, run_id: str, metrics: list[dict[str, Any]], params: list[dict[str, str]]
    ) -> None:
        from mlflow.entities import Metric, Param

        self._do(
            self.client.log_batch,
            run_id,
            metrics=[
                Metric(m["key"], m["value"], m["timestamp"], m["step"]) for m in metrics
            ],
            params=[Param(p["key"], p["value"]) for p in params],
        )

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self._do(self.client.set_tag, run_id, key, value)

    def log_artifact(self, run_id: str, path: Path, artifact_path: str) -> None:
        self._do(self.client.log_artifact, run_id, str(path), artifact_path or None)

    def register(
        self, name: str, source: str, run_id: str, tags: dict[str, str]
    ) -> str:
        from mlflow.exceptions import MlflowException

        try:
            self.client.get_registered_model(name)
        except MlflowException as exc:
            if exc.error_code != "RESOURCE_DOES_NOT_EXIST":
                raise _Unreachable(str(exc).splitlines()[0][:200]) from exc
            self._do(self.client.create_registered_model, name)
        version = self._do(
            self.client.create_model_version, name, source, run_id=run_id, tags=tags
        )
        return str(version.version)


def _client_environment() -> None:
    """Settings of mlflow's client, unless the user gave their own."""
    # mlflow retries a refused connection with backoff for minutes; the
    # tracker has its own retry queue, so one quick try is enough.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(REQUEST_TIMEOUT_S))
    # Its "View run at" lines would land in the middle of `train`'s JSON.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def _sent_through(run_dir: Path) -> int | None:
    """The highest step an earlier part of the run sent to MLflow or left in
    its spool (which is sent before anything new); None if there is none."""
    record = contract.read_json_object(run_dir / contract.MLFLOW_RUN_FILE) or {}
    sent = record.get("sent_through_step")
    steps = [int(sent)] if isinstance(sent, int) else []
    for op in _read_lines(run_dir / contract.MLFLOW_SPOOL_FILE):
        if op.get("op") == "metrics":
            steps += [int(r.get("step", 0)) for r in op.get("rows") or []]
    return max(steps, default=None)


def _merge(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Consecutive metric batches as one (one request instead of several)."""
    out: list[dict[str, Any]] = []
    for op in ops:
        if op["op"] == "metrics" and out and out[-1]["op"] == "metrics":
            out[-1] = {**op, "rows": [*out[-1]["rows"], *op["rows"]]}
        else:
            out.append(op)
    return out


def _metric_batches(
    rows: list[dict[str, Any]], ts: int
) -> Iterator[list[dict[str, Any]]]:
    """Metrics in lists of at most 1000 (the limit of ``log-batch``)."""
    batch: list[dict[str, Any]] = []
    for row in rows:
        step = int(row.get("step", 0))
        for key, value in row.items():
            if key in ("step", "time") or not isinstance(value, int | float):
                continue
            batch.append(
                {
                    "key": metric_key(key),
                    "value": float(value),
                    "timestamp": ts,
                    "step": step,
                }
            )
            if len(batch) == 1000:
                yield batch
                batch = []
    if batch:
        yield batch


def _lines(ops: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(op, separators=(",", ":")) + "\n" for op in ops)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                op = json.loads(line)
                if isinstance(op, dict) and "op" in op:
                    out.append(op)
    return out


def replay(run_dir: Path, uri: str | None = None) -> bool:
    """Send a finished run's spool to MLflow (default: the URI the run used,
    else :func:`tracking_uri`); True when nothing is left to send."""
    from types import SimpleNamespace

    run_dir = Path(run_dir)
    spool = run_dir / contract.MLFLOW_SPOOL_FILE
    if not spool.exists():
        return True
    record = contract.read_json_object(run_dir / contract.CONFIG_FILE) or {}
    mlflow_run = contract.read_json_object(run_dir / contract.MLFLOW_RUN_FILE) or {}
    uri = check_uri(uri or str(mlflow_run.get("uri") or "") or tracking_uri())
    ctx = SimpleNamespace(
        run_id=str(record.get("run_id", run_dir.name)),
        run_dir=run_dir,
        kind=str(record.get("kind", "")),
        config=dict(record.get("config") or {}),
        project_dir=run_dir.parent.parent,
        log=lambda _text: None,
    )
    tracker = Tracker(ctx, uri, thread=False)
    tracker._try_replay()
    return not spool.exists()
