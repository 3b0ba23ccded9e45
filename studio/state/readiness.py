"""The readiness strip's text: what ``training.status`` (the engine's
answer, the same as ``GET /training/status`` of ``serve-http``) says about
retraining, as short lines. No Qt here."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ReadinessText:
    ready: bool
    configured: bool
    """A training flow is set: automatic retraining is on, so "not ready"
    is worth a warning colour (off, it is how every new project starts)."""
    headline: str
    """Ready, or not and why."""
    data: str
    """Trajectories and scenario groups against the rules."""
    hours: str
    """The minimum-hours rule and the time since the last training."""
    schedule: str
    versions: str
    """The agent's latest and deployed versions, the last completed run."""


def _clock(stamp: Any) -> str:
    if not isinstance(stamp, int | float):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(stamp))


def _duration(seconds: float) -> str:
    if seconds % 86400 == 0:
        return f"{seconds / 86400:g} d"
    if seconds % 3600 == 0:
        return f"{seconds / 3600:g} h"
    if seconds % 60 == 0:
        return f"{seconds / 60:g} min"
    return f"{seconds:g} s"


def readiness_text(status: dict[str, Any]) -> ReadinessText:
    readiness = status.get("readiness") or {}
    stats = readiness.get("stats") or {}
    ready = bool(readiness.get("ready"))
    reason = str(readiness.get("reason", ""))
    configured = bool((status.get("settings") or {}).get("flow"))
    if ready:
        headline = "Ready to train."
    elif configured:
        headline = f"Not ready to train: {reason}"
    else:
        headline = f"Automatic retraining is off. {reason}"
    data = (
        f"Trajectories: {stats.get('newTrajectories', 0)} new of "
        f"{stats.get('minTrajectories', '?')} needed "
        f"({stats.get('totalTrajectories', 0)} ended, "
        f"{stats.get('openTrajectories', 0)} recording) · scenario groups: "
        f"{stats.get('scenarioGroups', 0)} of {stats.get('minScenarioGroups', '?')}"
    )
    since = stats.get("hoursSinceLastTraining")
    least = stats.get("minHoursBetween")
    least_text = f"{least:g}" if isinstance(least, int | float) else "?"
    hours = f"At least {least_text} h between trainings" + (
        f" (the last started {since:.1f} h ago)"
        if isinstance(since, int | float)
        else " (never trained)"
    )
    schedule_info = status.get("schedule") or {}
    every = schedule_info.get("everySeconds")
    if isinstance(every, int | float) and every > 0:
        schedule = (
            f"Schedule: every {_duration(float(every))}, next check "
            f"{_clock(schedule_info.get('nextAt'))}"
        )
        last = schedule_info.get("lastCheck") or {}
        if last.get("reason"):
            schedule += f" (last check: {last['reason']})"
        elif last.get("started"):
            schedule += f" (last check started {last['started']})"
        began = schedule_info.get("lastStarted") or {}
        if began.get("started") and began != last:
            schedule += (
                f"; it last started {began['started']} at {_clock(began.get('time'))}"
            )
    else:
        schedule = "No schedule (serve-http --retrain-every keeps one)."
    agent = (status.get("settings") or {}).get("agent") or ""
    latest = status.get("latestModelVersion") or "none"
    deployed = status.get("deployedModelVersion") or "none"
    versions = (
        f"Agent {agent}: latest {latest}, deployed {deployed}"
        if agent
        else "No agent set: versions are not tracked"
    )
    completed = status.get("lastCompleted")
    versions += " · last completed: " + (
        f"{completed.get('name') or completed.get('job_id')} "
        f"({_clock(completed.get('ended'))})"
        if isinstance(completed, dict)
        else "none"
    )
    return ReadinessText(ready, configured, headline, data, hours, schedule, versions)
