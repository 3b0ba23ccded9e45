"""Promotion with a gate, and the settings that say how an agent is served:
the one code the service's routes (:mod:`engine.service.agents`), the
command line ``rl-studio-engine agent`` and the studio's Agents view (the
``agent.*`` requests of ``rl-studio-engine serve``) read and decide with.
It lives in the store, below both the service and the studio's engine
(``engine.server``, which may not import ``engine.service``), because it is
the reading and writing of the project's promotion log and settings.

A version an agent gains (a run or flow trained it, or it was added) is a
*candidate* until the gate looks at it: it is promoted to current when its
evaluation (:attr:`AgentSettings.gate_metric` of its model's recorded
metrics, the evaluation its run made on the agent's evaluation env) is at
least the current version's minus :attr:`AgentSettings.tolerance`, and its
run's summary lists no ``warnings``; otherwise it stays a candidate with
the reason in one sentence. A person may promote any version, or roll the
current one back to the version promoted before it.

Every decision is an entry of the promotion log
(:meth:`engine.store.decisions.DecisionLog.append_promotions`), and the
state (which versions were decided, which is current, what came before) is
that log replayed (:func:`replay`), so it is stored once.

The switch: :class:`ServingSettings` (the project's, over the environment's
``USE_RL_MODEL``, ``RL_FALLBACK_TO_BASE`` and ``BASE_MODEL``) and each
agent's own ``rl_enabled``; with either off, ``act`` answers from the base
model or the rule policy. Both are kept in the agents store
(:mod:`engine.store.agent_catalog`, under :data:`SERVING_KEY` and
:data:`AGENT_KEY_PREFIX`), with the versions and routing, so that services
sharing one database serve alike.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine import alerts
from engine.errors import EngineError
from engine.settings import as_dict, build, load, setting
from engine.store.agent_catalog import AGENT_KEY_PREFIX, SERVING_KEY
from engine.store.decisions import DecisionLog, GateState, replay
from engine.store.paths import checked_name
from engine.store.project import ModelRecord, Project

ENV_DEFAULTS = {
    "rl_enabled": "USE_RL_MODEL",
    "fallback_to_base": "RL_FALLBACK_TO_BASE",
    "base_model": "BASE_MODEL",
}
"""The environment variables of the agent-training service whose values,
when set, are the defaults of :class:`ServingSettings`' fields."""
ALERTED = {
    "promoted": "version.promoted",
    "promote": "version.promoted",
    "rollback": "version.rolled_back",
}
"""The promotion log's actions that alert the webhooks, and their events."""
OVERVIEW_LOG_ENTRIES = 20
"""How many of an agent's last promotion log entries its overview shows."""
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")


class UnknownAgent(EngineError):
    """An agent or version the project does not have (HTTP 404)."""


class NoPrevious(EngineError):
    """A rollback with no version promoted before the current one (HTTP 409)."""


class NoFallback(EngineError):
    """The switch is off and nothing else can answer (HTTP 409)."""


@dataclass(frozen=True)
class ServingSettings:
    """How every agent of the project is served."""

    rl_enabled: bool = setting(True, group="Serving", label="Serve RL models")
    """Answer ``act`` with the agents' trained versions; off: with the base
    model, or the rule policy (``USE_RL_MODEL``)."""
    fallback_to_base: bool = setting(True, group="Serving")
    """When every version fails, answer with the base model before the rule
    policy (``RL_FALLBACK_TO_BASE``)."""
    base_model: str = setting("", group="Serving")
    """The base model: a registered model's id or name ('' = none;
    ``BASE_MODEL``)."""


@dataclass(frozen=True)
class AgentSettings:
    """How one agent is promoted and served."""

    rl_enabled: bool = setting(True, group="Agent", label="Serve RL models")
    """This agent answers with its versions (the project's switch must be
    on too)."""
    tolerance: float = setting(0.0, min=0, group="Agent")
    """How far below the current version's evaluation a candidate may be
    and still be promoted."""
    gate_metric: str = setting("eval/mean_reward", group="Agent")
    """The recorded evaluation the gate compares ('' = none: a version is
    promoted when its run has no warnings)."""
    higher_is_better: bool = setting(True, group="Agent")
    """False for a metric such as a loss."""
    base_model: str = setting("", group="Agent")
    """This agent's base model ('' = the project's)."""
    rule_env: str = setting("", group="Agent")
    """The env whose expert action is the rule policy ('' = the env of the
    agent's latest version)."""


def _env_default(name: str, kind: type) -> Any:
    text = os.environ.get(ENV_DEFAULTS[name])
    if text is None:
        return None
    if kind is bool:
        word = text.strip().lower()
        if word not in TRUE_WORDS + FALSE_WORDS:
            raise EngineError(
                f"{ENV_DEFAULTS[name]} must be true or false, not {text[:40]!r}."
            )
        return word in TRUE_WORDS
    return text.strip()


def serving_settings(project: Project) -> ServingSettings:
    """The stored settings over the environment's over the defaults."""
    env = {
        name: value
        for name, kind in (
            ("rl_enabled", bool),
            ("fallback_to_base", bool),
            ("base_model", str),
        )
        if (value := _env_default(name, kind)) is not None
    }
    return load(ServingSettings, {**env, **project.agent_catalog.setting(SERVING_KEY)})


def agent_settings(project: Project, agent: str) -> AgentSettings:
    return load(AgentSettings, project.agent_catalog.setting(AGENT_KEY_PREFIX + agent))


def configure_serving(project: Project, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Change the project's serving settings (checked as one). Only the
    fields ever set are stored: the others keep following the
    environment's variables. The settings in force after."""
    config = as_dict(
        build(
            ServingSettings,
            {**as_dict(serving_settings(project)), **changes},
            "serving",
        )
    )
    catalog = project.agent_catalog
    kept = {**catalog.setting(SERVING_KEY), **changes}
    catalog.set_setting(SERVING_KEY, {k: config[k] for k in config if k in kept})
    return config


def configure_agent(
    project: Project,
    agent: str,
    changes: Mapping[str, Any],
    check: Callable[[AgentSettings], None] | None = None,
) -> dict[str, Any]:
    """Change one agent's settings (checked as one, and by ``check``;
    nothing stored on error)."""
    checked_name("agent", agent)
    current = as_dict(agent_settings(project, agent))
    config = build(AgentSettings, {**current, **changes}, "agent")
    if check is not None:
        check(config)
    stored = as_dict(config)
    project.agent_catalog.set_setting(AGENT_KEY_PREFIX + agent, stored)
    return stored


RuleEnv = Callable[[AgentSettings, list[ModelRecord]], str]
"""The env of an agent's rule policy given its settings and versions ('' =
none)."""


def named_rule_env(settings: AgentSettings, records: list[ModelRecord]) -> str:
    """The env an agent's rule policy would use: its setting, or the env
    of its latest version that names one (whether that env has an expert
    action is the service's to find out: it builds the env)."""
    envs = [m.env for m in records if m.env]
    return settings.rule_env or (envs[-1] if envs else "")


def switch_check(
    project: Project, agent: str, rule_env: Callable[[AgentSettings], str]
) -> Callable[[AgentSettings], None]:
    """The check of :func:`configure_agent` that refuses switching ``agent``
    off when it has no base model and no rule policy to answer instead."""

    def check(new: AgentSettings) -> None:
        if new.rl_enabled:
            return
        base = new.base_model or serving_settings(project).base_model
        if not base and not rule_env(new):
            raise NoFallback(
                f"Agent {agent!r} cannot be switched off: it has no base "
                "model and no rule policy to answer instead."
            )

    return check


def _shown(value: float) -> str:
    return f"{value:.4g}"


def gate(
    settings: AgentSettings,
    record: ModelRecord,
    current: ModelRecord | None,
    warnings: list[str],
) -> tuple[bool, str]:
    """Whether ``record`` is promoted over ``current``, and why (one
    sentence)."""
    v = f"v{record.version}"
    if warnings:
        return (
            False,
            f"{v} stays a candidate: its run warned: {warnings[0].rstrip('.')}.",
        )
    if current is None:
        return True, f"{v} promoted: the agent had no current version."
    cur = f"v{current.version}"
    metric = settings.gate_metric
    if not metric:
        return True, f"{v} promoted over {cur}: no evaluation metric is set to compare."
    mine, theirs = record.metrics.get(metric), current.metrics.get(metric)
    if not isinstance(mine, int | float) or isinstance(mine, bool):
        return (
            False,
            f"{v} stays a candidate: it has no {metric} to compare with {cur}'s.",
        )
    if not isinstance(theirs, int | float) or isinstance(theirs, bool):
        return True, f"{v} promoted: the current {cur} has no {metric} to compare with."
    tol = settings.tolerance
    if settings.higher_is_better:
        ok, bound, word = mine >= theirs - tol, "minus", "below"
    else:
        ok, bound, word = mine <= theirs + tol, "plus", "above"
    told = f"{cur}'s {_shown(theirs)} {bound} the tolerance {_shown(tol)}"
    if ok:
        return True, f"{v} promoted: {metric} {_shown(mine)} is within {told}."
    return False, f"{v} stays a candidate: {metric} {_shown(mine)} is {word} {told}."


def run_warnings(project: Project, record: ModelRecord) -> list[str]:
    """The ``warnings`` of the run that trained ``record`` (none when it has
    no run, or its summary lists none)."""
    if not record.source_run:
        return []
    try:
        summary = project.get_run(record.source_run).summary
    except EngineError:
        return []
    found = summary.get("warnings") if isinstance(summary, dict) else None
    return [str(w) for w in found] if isinstance(found, list) else []


class Promotion:
    """The gate, manual promotion and rollback of a project's agents."""

    def __init__(self, project: Project, log: DecisionLog) -> None:
        self.project = project
        self.log = log

    def state(self, agent: str, versions: list[ModelRecord] | None = None) -> GateState:
        """Decide every version the gate has not seen (oldest first), then
        the state. ``versions``: the agent's, when the caller read them."""
        if versions is None:
            versions = agent_versions(self.project, agent)
        records = {m.version: m for m in versions}
        known = replay(self.log.promotions(agent))
        if set(records) <= known.decided:
            return known  # nothing to decide: the common case, one read
        settings = agent_settings(self.project, agent)

        decided: list[tuple[int, str, str, str]] = []

        def decide(log: list[dict[str, Any]]) -> list[tuple[int, str, str, str]]:
            state = replay(log)
            added: list[tuple[int, str, str, str]] = []
            for version in sorted(set(records) - state.decided):
                record = records[version]
                current = records.get(state.current) if state.current else None
                ok, reason = gate(
                    settings, record, current, run_warnings(self.project, record)
                )
                action = "promoted" if ok else "refused"
                added.append((version, action, "gate", reason))
                state = replay([*log, *_as_log(added)])
            decided[:] = added  # the last call's: the one appended
            return added

        state = replay(self.log.append_promotions(agent, decide))
        self._tell(agent, decided)
        return state

    def promote(self, agent: str, version: int, by: str, why: str) -> GateState:
        """Make ``version`` current by hand."""
        check_version(self.project, agent, version)
        self.state(agent)  # the gate decides what it has not, first
        sentence = f"v{version} promoted by {by}: {why.strip().rstrip('.')}."
        entry = (version, "promote", by, sentence)
        log = self.log.append_promotions(agent, lambda _log: [entry])
        self._unpin(agent)
        self._tell(agent, [entry])
        return replay(log)

    def rollback(self, agent: str, by: str, why: str) -> GateState:
        """The current version goes; the one promoted before it is current."""
        agent_versions(self.project, agent)
        self.state(agent)

        decided: list[tuple[int, str, str, str]] = []

        def decide(log: list[dict[str, Any]]) -> list[tuple[int, str, str, str]]:
            state = replay(log)
            if state.current is None or state.previous is None:
                raise NoPrevious(
                    f"Agent {agent!r} has no version promoted before "
                    f"{'its current one' if state.current else 'now'} to roll back to."
                )
            sentence = (
                f"v{state.current} rolled back to v{state.previous} by {by}: "
                f"{why.strip().rstrip('.')}."
            )
            decided[:] = [(state.current, "rollback", by, sentence)]
            return decided

        state = replay(self.log.append_promotions(agent, decide))
        self._unpin(agent)
        self._tell(agent, decided)
        return state

    def _unpin(self, agent: str) -> None:
        """Clear the agent's pin after a promotion or rollback by hand: it
        would hide the change."""
        config = self.project.agent_catalog.config(agent)
        if config["pin"] is not None:
            self.project.agent_catalog.set_config(
                agent,
                pin=None,
                candidate=config["candidate"],
                rollout=config["rollout"],
            )

    def routing(
        self, agent: str, records: list[ModelRecord] | None = None
    ) -> dict[str, Any]:
        """The agent's config (``pin``, ``candidate``, ``rollout``,
        ``updated``) and the versions it resolves to: ``current`` (the pin,
        or the version the gate or a person promoted last), ``previous``
        (the one promoted before it, else the newest older version),
        ``latest``, and ``gate``, the promotion state. ``records``: the
        agent's versions, when the caller read them."""
        records = agent_versions(self.project, agent) if records is None else records
        versions = [m.version for m in records]
        gate = self.state(agent, records)
        config = self.project.agent_catalog.config(agent)
        pinned = config["pin"]
        current = pinned if pinned is not None else gate.current
        previous = gate.previous if pinned is None else None
        if previous is None and current is not None:
            older = [v for v in versions if v < current]
            previous = max(older) if older else None
        return {
            **config,
            "current": current,
            "previous": previous,
            "latest": max(versions, default=None),
            "gate": gate,
        }

    def switch(self, agent: str, on: bool, rule_env: RuleEnv) -> bool:
        """Turn ``agent``'s RL switch (``''``: the project's) on or off;
        whether it is on after. Switching an agent off that has neither a
        base model nor a rule policy (``rule_env`` names the env of its
        rule policy, '' for none) is refused: nothing could answer."""
        if not agent:
            return bool(
                configure_serving(self.project, {"rl_enabled": on})["rl_enabled"]
            )
        records = agent_versions(self.project, agent)
        check = switch_check(self.project, agent, lambda s: rule_env(s, records))
        return bool(
            configure_agent(self.project, agent, {"rl_enabled": on}, check)[
                "rl_enabled"
            ]
        )

    def overview(self, agent: str) -> dict[str, Any]:
        """What the studio's Agents view shows of ``agent``: its versions
        (oldest first) with their role, the gate's status and reason, the
        evaluation the gate compares and their runs' warnings; the routing;
        its switch and gate settings; its last promotion log entries."""
        records = agent_versions(self.project, agent)
        routing = self.routing(agent, records)
        gate: GateState = routing["gate"]
        settings = agent_settings(self.project, agent)
        metric = settings.gate_metric

        def role(v: int) -> str:
            if v == routing["current"]:
                return "current"
            if v == routing["candidate"] or gate.status.get(v) == "candidate":
                return "candidate"
            return "previous" if v == routing["previous"] else ""

        def shown(v: int | None) -> str | None:
            return None if v is None else f"v{v}"

        return {
            "name": agent,
            "current": shown(routing["current"]),
            "previous": shown(routing["previous"]),
            "candidate": shown(routing["candidate"]),
            "pin": shown(routing["pin"]),
            "rl_enabled": settings.rl_enabled,
            "gate_metric": metric,
            "tolerance": settings.tolerance,
            "higher_is_better": settings.higher_is_better,
            "versions": [
                {
                    "version": f"v{m.version}",
                    "role": role(m.version),
                    "status": gate.status.get(m.version, "candidate"),
                    "reason": gate.reason.get(m.version, ""),
                    "evaluation": m.metrics.get(metric) if metric else None,
                    "warnings": run_warnings(self.project, m),
                    "model_id": m.id,
                    "name": m.name,
                    "kind": m.kind,
                    "env": m.env,
                    "algo": m.algo,
                    "created": m.created,
                }
                for m in records
            ],
            "log": self.log.promotions(agent)[-OVERVIEW_LOG_ENTRIES:],
        }

    def overviews(self) -> dict[str, Any]:
        """Every agent's :meth:`overview`, and the project's switch."""
        return {
            "rl_enabled": serving_settings(self.project).rl_enabled,
            "agents": [self.overview(a) for a in self.project.agent_catalog.names()],
        }

    def _tell(self, agent: str, entries: list[tuple[int, str, str, str]]) -> None:
        """Alert the webhooks of the promotions and rollbacks in ``entries``
        (in the background; a refused candidate is no alert)."""
        told = [e for e in entries if e[1] in ALERTED]
        if not told:
            return
        try:
            urls = alerts.webhook_urls(self.project.setting(alerts.SETTING_KEY))
            for version, action, by, reason in told:
                event = ALERTED[action]
                fields = {"agent": agent, "version": f"v{version}", "by": by}
                alert = alerts.Alert(event, f"Agent {agent}: {reason}", fields)
                alerts.SENDER.post(urls, alert)
        except Exception:  # the decision is recorded whatever the alert does
            alerts.log.exception("The promotion alert of agent %s was not sent.", agent)


def agent_versions(project: Project, agent: str) -> list[ModelRecord]:
    """The agent's versions, oldest first; UnknownAgent for an agent the
    project does not have."""
    checked_name("agent", agent)
    found = project.versions(agent)
    if not found and agent not in project.agent_catalog.names():
        known = ", ".join(project.agent_catalog.names()) or "none"
        raise UnknownAgent(
            f"There is no agent {agent!r} in this project (agents: {known})."
        )
    return found


def check_version(project: Project, agent: str, version: int) -> ModelRecord:
    """The agent's ``version``; UnknownAgent naming the versions it has."""
    records = agent_versions(project, agent)
    for record in records:
        if record.version == version:
            return record
    have = ", ".join(f"v{m.version}" for m in records) or "none"
    raise UnknownAgent(f"Agent {agent!r} has no version v{version} (versions: {have}).")


def _as_log(entries: list[tuple[int, str, str, str]]) -> list[dict[str, Any]]:
    return [{"version": v, "action": a, "by": b, "reason": r} for v, a, b, r in entries]
