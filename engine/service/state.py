"""What the HTTP service knows: the project's supervisor and the live state of
its runs, with no web framework in sight (``engine.service.app`` puts routes
on it).

The service drives the same :class:`~engine.jobs.supervisor.Supervisor` as
``rl-studio-engine serve``: a run started over HTTP is an ordinary project
run (a row in ``studio.sqlite``, a folder in ``runs/``), so a studio open on
the project shows it live, and runs started in the studio (or by
``rl-studio-engine train``) are listed, read and stopped here. Everything a
route answers is read from the project (the row, ``metrics.jsonl``), except
the rate and ETA of this service's own runs, which come from the jobs'
progress events.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine import contract, flow, protocol
from engine.errors import ConfigError, EngineError, quoted
from engine.jobs.supervisor import Supervisor
from engine.service.agents import Agents
from engine.service.retrain import Retraining
from engine.store import database
from engine.store.paths import checked_name
from engine.store.project import Project, RunRecord
from engine.store.trajectories import TrajectoryStore

log = logging.getLogger("engine.service")

MAX_METRIC_ROWS = 10_000
"""The most metric rows one ``/runs/{id}/metrics`` answer holds; ``next``
says where the following page starts."""
READ_CHUNK_BYTES = 4 << 20
"""How much of a metrics file is read at once."""
MAX_LINE_BYTES = 16 << 20
"""A longer line is no metrics row: its bytes are passed over."""
STOP_TIMEOUT_S = 10.0
"""How long a run stopped over HTTP gets to save and stop by itself."""


class NotFound(EngineError):
    """An env, flow or run the project does not have (HTTP 404)."""


@dataclass
class MetricsTail:
    """Reads the rows appended to a ``metrics.jsonl`` since the last call.

    Rows are counted as :func:`engine.store.metrics.iter_metrics` counts them
    (a corrupt line is no row), so a row index given to one route means the
    same row in another. A torn last line is left for the next call.
    """

    path: Path
    skip: int = 0
    """Rows to pass over before the first one returned."""
    rows_seen: int = 0
    latest: dict[str, Any] = field(default_factory=dict)
    """Each key's latest value (training and evaluation rows hold different
    keys), with the ``step`` and ``time`` of the last row."""
    _offset: int = 0

    def read(self, limit: int | None = None) -> list[dict[str, Any]]:
        """New rows (at most ``limit``), in file order; the file is read in
        chunks, so a long run's file is never read whole."""
        rows: list[dict[str, Any]] = []
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return rows
        size = READ_CHUNK_BYTES
        with fh:
            while limit is None or len(rows) < limit:
                fh.seek(self._offset)
                data = fh.read(size)
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) < size:
                        break  # nothing, or a line still being written
                    if size < MAX_LINE_BYTES:
                        size *= 2  # a line longer than a chunk
                    else:
                        self._offset += len(data)  # no metrics row is that long
                    continue
                size = READ_CHUNK_BYTES
                consumed = 0
                for line in data[:end].split(b"\n"):
                    if limit is not None and len(rows) >= limit:
                        break
                    consumed += len(line) + 1
                    self._take(line, rows)
                self._offset += consumed
        return rows

    def _take(self, line: bytes, rows: list[dict[str, Any]]) -> None:
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return
        if not isinstance(row, dict):
            return
        self.latest.update(row)
        if self.skip > 0:
            self.skip -= 1
            return
        self.rows_seen += 1
        rows.append(row)


def _request_field(field: str) -> str:
    """A config field of ``rl.train`` as ``POST /train`` names it."""
    if field in ("env", "algo", "name"):
        return field
    if field == "total_steps":
        return "steps"
    return "settings." + field.removeprefix("hyperparameters.")


class Service:
    """One project, its supervisor, and the state the routes read."""

    def __init__(
        self,
        project_dir: str | Path,
        examples: Path | None = None,
        retrain_every_s: float | None = None,
    ) -> None:
        self._progress: dict[str, protocol.RunProgress] = {}
        self._latest: dict[str, MetricsTail] = {}
        self._lock = threading.Lock()
        self._closed = False
        self.supervisor = Supervisor(self._on_event, examples=examples)
        self.project: Project = self.supervisor.open_project(
            str(project_dir), create=True, with_examples=examples is not None
        )
        url = database.configured(self.project.path)
        self.database = database.shown(url) if url else "sqlite"
        """Where the stores are: a PostgreSQL URL (no password), or
        ``sqlite`` (the project's files)."""
        self.trajectories = TrajectoryStore(self.project.path)
        self.agents = Agents(self.project)
        self.retraining = Retraining(self, retrain_every_s)
        if self.trajectories.recovered:
            log.info(
                "wrote the trace lines of %d ended trajectories",
                len(self.trajectories.recovered),
            )

    def close(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """The service ends: its runs go on headless and record their own end,
        as when the studio closes (a studio or a restarted service shows them
        and can stop them). Only the first call counts."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.retraining.close()
        self.supervisor.detach(timeout_s)
        self.trajectories.close()
        self.agents.close()

    def _on_event(self, msg: protocol.Message) -> None:
        """The supervisor's events (job threads): progress is kept for rate
        and ETA; the rest is on disk already, or logged."""
        if isinstance(msg, protocol.RunProgress):
            with self._lock:
                self._progress[msg.run_id] = msg
        elif isinstance(msg, protocol.RunFailed):
            log.warning("run %s failed: %s", msg.run_id, msg.reason)
        elif isinstance(msg, protocol.EngineLog):
            log.log(logging.ERROR if msg.level == "error" else logging.INFO, msg.text)

    # ------------------------------------------------------------ starting
    def resolve_env(self, env: str) -> str:
        """The Gymnasium id of ``env``: a designed env's name (a file in the
        project's ``envs/``) or any registered id; NotFound otherwise."""
        from engine.rl.env_info import register_designed_envs, unknown_env_message

        name = env.strip()
        if (
            contract.env_name(name) is None
            and "/" not in name
            and flow.path_name_problem("env", name) is None  # else no file name
        ):
            spec = contract.spec_file(self.project.path, name)
            if spec.is_file():
                name = contract.env_id(name)
        import gymnasium as gym

        register_designed_envs(str(self.project.path))
        if name not in gym.registry:
            raise NotFound(unknown_env_message(name, sorted(gym.registry)))
        return name

    def start_training(
        self,
        env: str,
        *,
        algo: str = "auto",
        steps: int | None = None,
        settings: dict[str, Any] | None = None,
        name: str = "",
    ) -> str:
        """Start an ``rl.train`` run; ``settings`` holds the run dialog's
        settings (:class:`engine.rl.config.TrainConfig` fields, and
        hyperparameters by name or under ``hyperparameters``), checked by the
        job's validator before anything is written."""
        from engine.rl.config import TrainConfig
        from engine.settings import check_value, fields_of

        top_fields = fields_of(TrainConfig)
        if steps is not None:
            # The TrainConfig field's own checks, under the route's name.
            steps_field = replace(top_fields["total_steps"], name="steps")
            steps = check_value(steps_field, steps)
        top: dict[str, Any] = {}
        hyper: dict[str, Any] = {}
        for key, value in (settings or {}).items():
            if key in ("env", "algo", "total_steps", "project_dir"):
                where = {"env": "the path", "total_steps": "steps"}.get(key, key)
                raise ConfigError(
                    f"settings.{key}",
                    f"Give {key} as {where}, not in settings."
                    if key != "project_dir"
                    else "project_dir is the service's project; leave it out.",
                )
            if key == "hyperparameters":
                if not isinstance(value, dict):
                    raise ConfigError(
                        "settings.hyperparameters",
                        "hyperparameters must be a JSON object of names to values.",
                    )
                hyper.update(value)
            elif key in top_fields:
                top[key] = value
            else:
                hyper[key] = value
        # The raw input the rl.train validator checks, as the dialog's would be.
        config = {
            **top,
            "env": self.resolve_env(env),
            "algo": algo,
            **({} if steps is None else {"total_steps": steps}),
            **({"hyperparameters": hyper} if hyper else {}),
        }
        try:
            return self.supervisor.start_run("rl.train", config, name)
        except ConfigError as exc:
            # Name the field as this request spelled it.
            raise ConfigError(_request_field(exc.field), str(exc)) from None

    def flow_path(self, name: str) -> Path:
        path = (
            self.project.path
            / "flows"
            / f"{checked_name('flow name', name)}{flow.FLOW_SUFFIX}"
        )
        if not path.is_file():
            known = ", ".join(d["name"] for d in self.flows()) or "none"
            raise NotFound(
                f"There is no flow {quoted(name)} in this project (flows: {known})."
            )
        return path

    def start_flow(
        self,
        name: str,
        *,
        overrides: dict[str, Any] | None = None,
        only_stale: bool = True,
        targets: list[str] | None = None,
        agent: str = "",
    ) -> str:
        """Run the project's flow ``name`` (``flows/<name>.flow.json``);
        with ``agent``, its model becomes that agent's next version."""
        config = {
            "agent": agent,
            "flow_path": str(self.flow_path(name)),
            "overrides": dict(overrides or {}),
            "only_stale": only_stale,
            "targets": list(targets or []),
        }
        return self.supervisor.start_run("flow.run", config)

    def stop(self, run_id: str) -> None:
        self.run(run_id)  # an unknown id is a 404, not "not running"
        self.supervisor.stop_run(run_id, STOP_TIMEOUT_S, "user")

    # -------------------------------------------------------------- reading
    def run(self, run_id: str) -> RunRecord:
        try:
            checked_name("run id", run_id)
            return self.project.get_run(run_id)
        except EngineError:
            raise NotFound(
                f"There is no run {quoted(run_id)} in this project."
            ) from None

    def runs(self) -> list[RunRecord]:
        return self.project.list_runs()

    def flows(self) -> list[dict[str, Any]]:
        return self.project.list_documents("flows", flow.FLOW_SUFFIX)

    def metrics_path(self, run_id: str) -> Path:
        return self.project.run_dir(self.run(run_id).id) / contract.METRICS_FILE

    def metrics(
        self, run_id: str, since: int = 0, limit: int = MAX_METRIC_ROWS
    ) -> tuple[list[dict[str, Any]], int]:
        """Rows from index ``since`` (at most ``limit``) and the index after
        the last one returned."""
        tail = MetricsTail(self.metrics_path(run_id), skip=since)
        rows = tail.read(limit)
        return rows, since + len(rows)

    def latest_metrics(self, run_id: str) -> dict[str, Any]:
        """Each metric's latest value (read incrementally, cached per run)."""
        with self._lock:
            tail = self._latest.get(run_id)
            if tail is None:
                tail = self._latest[run_id] = MetricsTail(self.metrics_path(run_id))
        tail.read()
        return dict(tail.latest)

    def job(self, run_id: str) -> dict[str, Any]:
        """A run as ``GET /training/{job_id}`` shows it."""
        run = self.run(run_id)
        with self._lock:
            live = self._progress.get(run_id)
        active = run.status in contract.ACTIVE_STATUSES
        done, total = run.progress_done, run.progress_total
        rate: float | None = None
        eta: float | None = None
        if live is not None and active:
            done, total, rate, eta = live.done, live.total, live.rate, live.eta_s
        elif run.started:
            # A run of another process (the studio's, a terminal's) or one
            # that ended: the average rate over its life so far.
            elapsed = (run.ended or time.time()) - run.started
            if elapsed > 0 and done > 0:
                rate = done / elapsed
                if active and total > done:
                    eta = (total - done) / rate
        return {
            "job_id": run.id,
            "name": run.name,
            "kind": run.kind,
            "status": run.status,
            "progress": {
                "done": done,
                "total": total,
                "fraction": min(1.0, done / total) if total > 0 else 0.0,
            },
            "steps_per_s": rate,
            "eta_s": 0.0 if run.status == "completed" else eta,
            "last_metrics": self.latest_metrics(run_id),
            "error": run.reason or None
            if run.status in ("failed", "interrupted")
            else None,
            "reason": run.reason,
            "created": run.created,
            "started": run.started,
            "ended": run.ended,
            "summary": run.summary,
        }

    def envs(self) -> list[dict[str, Any]]:
        """The project's designed envs (by name and id), then every
        registered Gymnasium id."""
        from engine.envs import catalog

        out: list[dict[str, Any]] = []
        for doc in self.project.list_documents("envs", contract.SPEC_SUFFIX):
            out.append(
                {
                    "id": contract.env_id(doc["name"]),
                    "name": doc["name"],
                    "source": "designed",
                    "kind": doc.get("kind", ""),
                    "description": doc.get("description", ""),
                    **({"error": doc["error"]} if "error" in doc else {}),
                }
            )
        designed = {e["id"] for e in out}
        for entry in catalog(with_spaces=False):
            if entry["id"] not in designed:
                out.append({"id": entry["id"], "name": entry["id"], "source": "gym"})
        return out
