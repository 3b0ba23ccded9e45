"""Readiness to retrain and the training status of a project, declared once.

``rl-studio-engine serve-http`` answers ``GET /training/status`` with
:func:`training_status`, and the studio's own engine answers its
``training.status`` request with the same function, so the desktop shows
what the HTTP API says. No web framework here (the studio's engine imports
this module).

The retraining settings (:class:`RetrainSettings`) and the runs retraining
started live in the project's ``meta`` table; so does the schedule of a
``serve-http --retrain-every`` (:data:`SCHEDULE_KEY`), which that process
records while it runs and clears when it stops.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine import contract
from engine.errors import EngineError
from engine.settings import as_dict, load, setting
from engine.store.decisions import promoted_version
from engine.store.project import Project
from engine.store.trajectories import TrajectoryStore

SETTINGS_KEY = "retrain"
RUNS_KEY = "retrain-runs"
SCHEDULE_KEY = "retrain-schedule"
"""The schedule a running ``serve-http --retrain-every`` records."""
SCHEDULE_GRACE_S = 120.0
"""A recorded schedule whose next check is this far overdue belongs to a
server that died without clearing it: shown as no schedule."""

JobLookup = Callable[[str], dict[str, Any]]
"""A run's status by id (``GET /training/{job_id}``'s keys), EngineError
when the project has no such run."""


@dataclass(frozen=True)
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


def retrain_settings(project: Project) -> RetrainSettings:
    """The stored settings over their defaults (a setting an older version
    stored and this one dropped is left out)."""
    return load(RetrainSettings, project.setting(SETTINGS_KEY))


def retrain_runs(project: Project) -> list[dict[str, Any]]:
    """The runs retraining started (``run_id``, ``time``, ``trigger``), the
    latest last."""
    runs = project.setting(RUNS_KEY).get("runs", [])
    return [r for r in runs if isinstance(r, dict)]


def deployed_version(project: Project, agent: str) -> int | None:
    """The version ``agent`` serves: its pin, or the version promoted last
    (the promotion gate's log, :mod:`engine.store.promotion`)."""
    pin = project.agent_catalog.config(agent)["pin"]
    return int(pin) if pin is not None else promoted_version(project.path, agent)


def readiness(project: Project, trajectories: TrajectoryStore) -> dict[str, Any]:
    """Babylon's ``readiness``: ``ready``, ``reason``, ``stats``."""
    config = retrain_settings(project)
    runs = retrain_runs(project)
    last_start = float(runs[-1]["time"]) if runs else 0.0
    counts = trajectories.counts(config.agent, last_start)
    hours = (time.time() - last_start) / 3600.0 if runs else None
    stats = {
        "totalTrajectories": counts["total"],
        "newTrajectories": counts["new"],
        "scenarioGroups": counts["scenarios"],
        "openTrajectories": counts["open"],
        "hoursSinceLastTraining": None if hours is None else round(hours, 3),
        "minTrajectories": config.min_trajectories,
        "minScenarioGroups": config.min_scenario_groups,
        "minHoursBetween": config.min_hours_between,
    }
    since = " since the last training" if runs else ""
    if not config.flow:
        reason = "No training flow is set (PUT /training/settings with a flow)."
    elif counts["new"] < config.min_trajectories:
        reason = (
            f"{counts['new']} of {config.min_trajectories} trajectories "
            f"recorded{since}."
        )
    elif counts["scenarios"] < config.min_scenario_groups:
        reason = (
            f"{counts['scenarios']} of {config.min_scenario_groups} scenario "
            f"groups recorded{since}."
        )
    elif hours is not None and hours < config.min_hours_between:
        reason = (
            f"The last training started {hours:.1f} h ago; the next may start "
            f"after {config.min_hours_between:g} h."
        )
    else:
        return {"ready": True, "reason": "Ready to train!", "stats": stats}
    return {"ready": False, "reason": reason, "stats": stats}


def run_job(project: Project, run_id: str) -> dict[str, Any]:
    """A run's status from its row alone (what a process that does not
    supervise it knows)."""
    run = project.get_run(run_id)
    done, total = run.progress_done, run.progress_total
    return {
        "job_id": run.id,
        "name": run.name,
        "status": run.status,
        "progress": {
            "done": done,
            "total": total,
            "fraction": min(1.0, done / total) if total > 0 else 0.0,
        },
        "error": run.reason or None
        if run.status in ("failed", "interrupted")
        else None,
        "started": run.started,
        "ended": run.ended,
    }


def retrain_job(job: JobLookup, entry: dict[str, Any]) -> dict[str, Any] | None:
    """A run retraining started, as the status shows it (None: its row is
    gone)."""
    try:
        found = job(str(entry["run_id"]))
    except EngineError:
        return None
    return {
        **{k: found[k] for k in ("job_id", "name", "status", "progress", "error")},
        "trigger": entry.get("trigger", ""),
        "started": found["started"] or entry.get("time"),
        "ended": found["ended"],
    }


def current_job(project: Project, job: JobLookup) -> dict[str, Any] | None:
    """The retraining run still going, if any."""
    for entry in reversed(retrain_runs(project)):
        found = retrain_job(job, entry)
        if found is not None and found["status"] in contract.ACTIVE_STATUSES:
            return found
    return None


SCHEDULE_FIELDS = ("everySeconds", "nextAt", "lastCheck", "lastStarted")
"""A schedule's status: its period, its next look, its last look (what it did
or why not) and the last look that started a training (kept when later looks
find nothing to do)."""


def recorded_schedule(project: Project) -> dict[str, Any]:
    """The schedule a running ``serve-http --retrain-every`` recorded
    (:data:`SCHEDULE_FIELDS`); all None without one."""
    schedule = project.setting(SCHEDULE_KEY)
    next_at = schedule.get("nextAt")
    if (
        not schedule.get("everySeconds")
        or not isinstance(next_at, int | float)
        or time.time() > next_at + SCHEDULE_GRACE_S
    ):
        return dict.fromkeys(SCHEDULE_FIELDS)
    return {k: schedule.get(k) for k in SCHEDULE_FIELDS}


def training_status(
    project: Project,
    trajectories: TrajectoryStore,
    job: JobLookup | None = None,
    schedule: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """``GET /training/status`` (Babylon's shape): readiness, the current
    and last completed retraining, the agent's latest and deployed
    versions, data rates, the schedule (``schedule``, or the recorded one)
    and the settings."""
    lookup: JobLookup = job or (lambda run_id: run_job(project, run_id))
    config = retrain_settings(project)
    last_completed = None
    for entry in reversed(retrain_runs(project)):
        found = retrain_job(lookup, entry)
        if found is not None and found["status"] == "completed":
            last_completed = found
            break
    latest = deployed = None
    if config.agent:
        versions = [m.version for m in project.versions(config.agent)]
        current = deployed_version(project, config.agent)
        if versions:
            latest = f"v{max(versions)}"
        if current:
            deployed = f"v{current}"
    counts = trajectories.counts(config.agent)
    return {
        "readiness": readiness(project, trajectories),
        "currentJob": current_job(project, lookup),
        "lastCompleted": last_completed,
        "latestModelVersion": latest,
        "deployedModelVersion": deployed,
        "dataRates": {
            "trajectoriesLastHour": counts["last_hour"],
            "trajectoriesLastDay": counts["last_day"],
            "stepsLastHour": counts["steps_last_hour"],
        },
        "schedule": schedule if schedule is not None else recorded_schedule(project),
        "settings": as_dict(config),
    }
