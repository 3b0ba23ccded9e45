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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine import contract
from engine.errors import ConfigError, EngineError
from engine.settings import checked_config, defaults_of, fields_of, setting
from engine.store.paths import checked_name

if TYPE_CHECKING:
    from engine.service.state import Service

log = logging.getLogger("engine.service")

SETTINGS_KEY = "retrain"
RUNS_KEY = "retrain-runs"
KEEP_RUNS = 50
"""Retraining runs remembered (the latest last)."""


class NotReady(EngineError):
    """The data is not ready and the trigger was not forced (HTTP 409)."""


@dataclass
class RetrainSettings:
    """When and how the project retrains by itself."""

    flow: str = setting("", group="Retraining", label="Training flow")
    """The project flow that trains (``flows/<name>.flow.json``)."""
    agent: str = setting("", group="Retraining")
    """The agent whose recorded trajectories count and whose next version
    the flow's model becomes ('' = every trajectory, no version)."""
    min_trajectories: int = setting(100, min=1, unit="trajectories", group="Retraining")
    """Ended trajectories needed since the last training."""
    min_scenario_groups: int = setting(1, min=1, unit="scenarios", group="Retraining")
    """Distinct scenarios those trajectories must cover."""
    min_hours_between: float = setting(24.0, min=0, unit="hours", group="Retraining")
    """Hours from one training's start to the next (forcing skips it)."""
    batch_param: str = setting("", group="Retraining")
    """The flow parameter (``node_id.param``) the trigger's ``batchSize``
    sets ('' = batchSize is not passed on)."""


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
            f"--retrain-every must be a duration such as 24h, 30m or 90s, not {text!r}."
        )
    return seconds


class Retraining:
    """The service's readiness check, trigger and (with ``every_s``) the
    schedule thread that calls the trigger."""

    def __init__(self, service: Service, every_s: float | None = None) -> None:
        self.service = service
        self.every_s = every_s
        self.next_at: float | None = None
        self.last_check: dict[str, Any] | None = None
        """The schedule's last look: when, and what it did or why not."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if every_s is not None:
            self.next_at = time.time() + every_s
            self._thread = threading.Thread(
                target=self._schedule, name="retrain-schedule", daemon=True
            )
            self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    # ------------------------------------------------------------ settings
    def settings(self) -> dict[str, Any]:
        stored = self.service.project.setting(SETTINGS_KEY)
        known = fields_of(RetrainSettings)
        return {
            **defaults_of(RetrainSettings),
            **{k: v for k, v in stored.items() if k in known},
        }

    def configure(self, changes: dict[str, Any]) -> dict[str, Any]:
        """Change some settings (checked as one; nothing stored on error)."""
        config = checked_config(
            RetrainSettings, {**self.settings(), **changes}, "retraining"
        )
        if "flow" in changes and config["flow"]:
            self.service.flow_path(config["flow"])  # a 404 for an unknown flow
        if config["agent"]:
            checked_name("agent", config["agent"])
        self.service.project.set_setting(SETTINGS_KEY, config)
        return config

    # ------------------------------------------------------------- status
    def _runs(self) -> list[dict[str, Any]]:
        runs = self.service.project.setting(RUNS_KEY).get("runs", [])
        return [r for r in runs if isinstance(r, dict)]

    def readiness(self) -> dict[str, Any]:
        """Babylon's ``readiness``: ``ready``, ``reason``, ``stats``."""
        config = self.settings()
        runs = self._runs()
        last_start = float(runs[-1]["time"]) if runs else 0.0
        counts = self.service.trajectories.counts(config["agent"], last_start)
        hours = (time.time() - last_start) / 3600.0 if runs else None
        stats = {
            "totalTrajectories": counts["total"],
            "newTrajectories": counts["new"],
            "scenarioGroups": counts["scenarios"],
            "openTrajectories": counts["open"],
            "hoursSinceLastTraining": None if hours is None else round(hours, 3),
            "minTrajectories": config["min_trajectories"],
            "minScenarioGroups": config["min_scenario_groups"],
            "minHoursBetween": config["min_hours_between"],
        }
        since = " since the last training" if runs else ""
        if not config["flow"]:
            reason = "No training flow is set (PUT /training/settings with a flow)."
        elif counts["new"] < config["min_trajectories"]:
            reason = (
                f"{counts['new']} of {config['min_trajectories']} trajectories "
                f"recorded{since}."
            )
        elif counts["scenarios"] < config["min_scenario_groups"]:
            reason = (
                f"{counts['scenarios']} of {config['min_scenario_groups']} scenario "
                f"groups recorded{since}."
            )
        elif hours is not None and hours < config["min_hours_between"]:
            reason = (
                f"The last training started {hours:.1f} h ago; the next may start "
                f"after {config['min_hours_between']:g} h."
            )
        else:
            return {"ready": True, "reason": "Ready to train!", "stats": stats}
        return {"ready": False, "reason": reason, "stats": stats}

    def _job(self, entry: dict[str, Any]) -> dict[str, Any] | None:
        try:
            job = self.service.job(str(entry["run_id"]))
        except EngineError:
            return None  # its row is gone
        return {
            **{k: job[k] for k in ("job_id", "name", "status", "progress", "error")},
            "trigger": entry.get("trigger", ""),
            "started": job["started"] or entry.get("time"),
            "ended": job["ended"],
        }

    def current_job(self) -> dict[str, Any] | None:
        for entry in reversed(self._runs()):
            job = self._job(entry)
            if job is not None and job["status"] in contract.ACTIVE_STATUSES:
                return job
        return None

    def status(self) -> dict[str, Any]:
        """``GET /training/status`` (Babylon's shape)."""
        config = self.settings()
        last_completed = None
        for entry in reversed(self._runs()):
            job = self._job(entry)
            if job is not None and job["status"] == "completed":
                last_completed = job
                break
        latest = deployed = None
        if config["agent"]:
            try:
                routing = self.service.agents.routing(config["agent"])
            except EngineError:
                routing = {}
            if routing.get("latest"):
                latest = f"v{routing['latest']}"
            if routing.get("current"):
                deployed = f"v{routing['current']}"
        counts = self.service.trajectories.counts(config["agent"])
        return {
            "readiness": self.readiness(),
            "currentJob": self.current_job(),
            "lastCompleted": last_completed,
            "latestModelVersion": latest,
            "deployedModelVersion": deployed,
            "dataRates": {
                "trajectoriesLastHour": counts["last_hour"],
                "trajectoriesLastDay": counts["last_day"],
                "stepsLastHour": counts["steps_last_hour"],
            },
            "schedule": {
                "everySeconds": self.every_s,
                "nextAt": self.next_at,
                "lastCheck": self.last_check,
            },
            "settings": config,
        }

    # ------------------------------------------------------------ trigger
    def trigger(
        self, *, force: bool = False, batch_size: int | None = None, by: str = "api"
    ) -> dict[str, Any]:
        """Start the training flow when ready (or forced); NotReady with
        the reason otherwise."""
        with self._lock:  # two triggers at once start one run
            config = self.settings()
            if not config["flow"]:
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
            if batch_size is not None and config["batch_param"]:
                overrides[config["batch_param"]] = batch_size
            # Every node runs again: the flow's parameters rarely change
            # between retrainings, and its cache would train nothing new.
            job_id = self.service.start_flow(
                config["flow"],
                overrides=overrides,
                only_stale=False,
                agent=config["agent"],
            )
            runs = [
                *self._runs(),
                {"run_id": job_id, "time": time.time(), "trigger": by, "force": force},
            ][-KEEP_RUNS:]
            self.service.project.set_setting(RUNS_KEY, {"runs": runs})
        log.info("retraining: started %s (%s)", job_id, by)
        return {
            "job_id": job_id,
            "forced": force and not readiness["ready"],
            "readiness": readiness,
        }

    def _schedule(self) -> None:
        assert self.every_s is not None
        while not self._stop.wait(max(0.0, (self.next_at or 0) - time.time())):
            self.next_at = time.time() + self.every_s
            try:
                started = self.trigger(by="schedule")
                self.last_check = {"time": time.time(), "started": started["job_id"]}
            except EngineError as exc:
                self.last_check = {"time": time.time(), "reason": str(exc)}
                log.info("retraining schedule: %s", exc)
            except Exception:  # the schedule must outlive one bad check
                log.exception("retraining schedule failed")
