"""Readiness and automatic retraining (no web framework here).

The project's retraining settings (:class:`RetrainSettings`, stored in the
project's ``meta`` table) name the flow that trains, the agent whose
trajectories feed it and whose next version it makes, and the rules that
say the data is ready: enough ended trajectories since the last training,
from enough scenarios, and enough hours since the last training started.
``POST /training/trigger`` runs the flow when ready (or forced); with
``serve-http --retrain-every 24h`` a thread does the same by itself. The
runs it started are kept in the same ``meta`` table, so a restarted service
knows its last training.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine import alerts, retrain_status
from engine.errors import ConfigError, EngineError, quoted
from engine.retrain_status import (
    SCHEDULE_FIELDS,
    SCHEDULE_KEY,
    RetrainSettings,
    current_job,
    readiness,
    retrain_runs,
    retrain_settings,
    training_status,
)
from engine.settings import as_dict, build
from engine.store.paths import checked_name

if TYPE_CHECKING:
    from engine.service.agents import Agents
    from engine.store.project import Project
    from engine.store.trajectories import TrajectoryStore

log = logging.getLogger("engine.service")

KEEP_RUNS = 50
"""Retraining runs remembered (the latest last)."""


class NotReady(EngineError):
    """The data is not ready and the trigger was not forced (HTTP 409)."""


def parse_every(text: str) -> float:
    """``24h``, ``30m``, ``90s``, ``1d`` or seconds as seconds; an
    EngineError naming ``--retrain-every`` otherwise."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text or "")
    seconds = 0.0
    if match:
        scale = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match[2]]
        seconds = float(match[1]) * scale
    if seconds <= 0:
        raise EngineError(
            "--retrain-every must be a duration such as 24h, 30m or 90s, "
            f"not {quoted(text)}."
        )
    return seconds


class FlowService(Protocol):
    """What retraining needs of the service that owns it
    (:class:`engine.service.state.Service`): the project, its trajectories
    and agents, a run as ``GET /training/{job_id}`` shows it, and starting a
    flow."""

    project: Project
    trajectories: TrajectoryStore
    agents: Agents

    def job(self, run_id: str) -> dict[str, Any]: ...

    def flow_path(self, name: str) -> Path: ...

    def start_flow(
        self,
        name: str,
        *,
        overrides: dict[str, Any] | None = None,
        only_stale: bool = True,
        targets: list[str] | None = None,
        agent: str = "",
    ) -> str: ...


class Retraining:
    """The service's readiness check, trigger and (with ``every_s``) the
    schedule thread that calls the trigger."""

    def __init__(self, service: FlowService, every_s: float | None = None) -> None:
        self.service = service
        self.every_s = every_s
        self.next_at: float | None = None
        self.last_check: dict[str, Any] | None = None
        """The schedule's last look: when, and what it did or why not."""
        self.last_started: dict[str, Any] | None = None
        """The schedule's last look that started a training (the next looks,
        a second later, find it running and would hide it)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if every_s is not None:
            self.next_at = time.time() + every_s
            self._record_schedule()
            self._thread = threading.Thread(
                target=self._schedule, name="retrain-schedule", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self.every_s = None
            try:
                self._record_schedule()  # cleared: no schedule any more
            except EngineError as exc:
                log.warning("retraining schedule: not cleared (%s)", exc)

    # ------------------------------------------------------------ settings
    def settings(self) -> dict[str, Any]:
        """``GET /training/settings``."""
        return as_dict(retrain_settings(self.service.project))

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Change some settings (checked as one; nothing stored on error)."""
        config = build(RetrainSettings, {**self.settings(), **changes}, "retraining")
        if "flow" in changes and config.flow:
            self.service.flow_path(config.flow)  # a 404 for an unknown flow
        if config.agent:
            checked_name("agent", config.agent)
        stored = as_dict(config)
        self.service.project.set_setting(retrain_status.SETTINGS_KEY, stored)
        return stored

    # ------------------------------------------------------------- status
    def _runs(self) -> list[dict[str, Any]]:
        return retrain_runs(self.service.project)

    def readiness(self) -> dict[str, Any]:
        """Babylon's ``readiness``: ``ready``, ``reason``, ``stats``."""
        return readiness(self.service.project, self.service.trajectories)

    def current_job(self) -> dict[str, Any] | None:
        return current_job(self.service.project, self.service.job)

    def schedule(self) -> dict[str, Any]:
        values = (self.every_s, self.next_at, self.last_check, self.last_started)
        return dict(zip(SCHEDULE_FIELDS, values, strict=True))

    def status(self) -> dict[str, Any]:
        """``GET /training/status`` (Babylon's shape); the promotion gate
        first looks at the agent's new versions, so the deployed version is
        the one ``act`` serves."""
        agent = retrain_settings(self.service.project).agent
        if agent and self.service.project.versions(agent):
            self.service.agents.promotion.state(agent)
        return training_status(
            self.service.project,
            self.service.trajectories,
            self.service.job,
            # Without a schedule of its own: one another server recorded.
            self.schedule() if self.every_s is not None else None,
        )

    def _record_schedule(self) -> None:
        """Keep the schedule in the project for the studio to show."""
        self.service.project.set_setting(
            SCHEDULE_KEY, self.schedule() if self.every_s is not None else {}
        )

    # ------------------------------------------------------------ trigger
    def trigger(
        self, *, force: bool = False, batch_size: int | None = None, by: str = "api"
    ) -> dict[str, Any]:
        """Start the training flow when ready (or forced); NotReady with
        the reason otherwise."""
        with self._lock:  # two triggers at once start one run
            config = retrain_settings(self.service.project)
            if not config.flow:
                raise ConfigError(
                    "flow",
                    "No training flow is set: PUT /training/settings "
                    '{"flow": "<name>"} first.',
                )
            running = self.current_job()
            if running is not None:
                raise NotReady(
                    f"The training run {running['job_id']} the trigger started "
                    "is still running."
                )
            readiness = self.readiness()
            if not readiness["ready"] and not force:
                raise NotReady(f"Not ready to train: {readiness['reason']}")
            overrides: dict[str, Any] = {}
            if batch_size is not None and config.batch_param:
                overrides[config.batch_param] = batch_size
            # Every node runs again: the flow's parameters rarely change
            # between retrainings, and its cache would train nothing new.
            job_id = self.service.start_flow(
                config.flow,
                overrides=overrides,
                only_stale=False,
                agent=config.agent,
            )
            runs = [
                *self._runs(),
                {"run_id": job_id, "time": time.time(), "trigger": by, "force": force},
            ][-KEEP_RUNS:]
            self.service.project.set_setting(retrain_status.RUNS_KEY, {"runs": runs})
        log.info("retraining: started %s (%s)", job_id, by)
        self._tell(job_id, config.flow, config.agent, by, force, readiness)
        return {
            "job_id": job_id,
            "forced": force and not readiness["ready"],
            "readiness": readiness,
        }

    def _tell(
        self,
        job_id: str,
        flow: str,
        agent: str,
        by: str,
        force: bool,
        readiness: dict[str, Any],
    ) -> None:
        """Alert the webhooks that a retraining started (in the
        background)."""
        try:
            urls = alerts.webhook_urls(self.service.project.setting(alerts.SETTING_KEY))
            why = "forced" if force and not readiness["ready"] else "the data is ready"
            fields = {"run_id": job_id, "flow": flow, "agent": agent, "trigger": by}
            text = f"Retraining {job_id} started (flow {flow}, {by}): {why}."
            alerts.SENDER.post(urls, alerts.Alert("retrain.triggered", text, fields))
        except Exception:  # the training started whatever the alert does
            log.exception("The retraining alert was not sent.")

    def _schedule(self) -> None:
        assert self.every_s is not None
        while not self._stop.wait(max(0.0, (self.next_at or 0) - time.time())):
            self.next_at = time.time() + self.every_s
            try:
                started = self.trigger(by="schedule")
                self.last_check = {"time": time.time(), "started": started["job_id"]}
                self.last_started = self.last_check
            except EngineError as exc:
                self.last_check = {"time": time.time(), "reason": str(exc)}
                log.info("retraining schedule: %s", exc)
            except Exception:  # the schedule must outlive one bad check
                log.exception("retraining schedule failed")
            try:
                self._record_schedule()
            except Exception:
                log.exception("retraining schedule: not recorded")
