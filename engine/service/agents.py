"""Named agents: their model versions, rollout and ``act`` (no web framework
here; ``engine.service.app`` puts routes on it).

Every model a run or flow for a named agent registers is the agent's next
version (:meth:`engine.store.project.Project.add_version`), and becomes
current only through the promotion gate (:mod:`engine.store.promotion`).
Versions and config live in the agents store
(:mod:`engine.store.agent_catalog`), which services on one PostgreSQL
database share; a version another project registered answers here only
when it needs no files (an Ollama model), else the chain goes on. The
agent's config pins a version or follows the promoted one, and may name a
candidate version that gets ``rollout`` percent of requests. Routing is by
a hash of the request's ``key`` when it gives one (the same key always goes
to the same version), else random.

Answers come down a chain, each step's failure recorded with its reason: the
version routing chose, then the previous version (a candidate's: the
current; the current's: the one promoted before it), then the base model
(when ``fallback_to_base``), then the rule policy
(:mod:`engine.service.rule_policy`). With the switch off (``rl_enabled``,
the project's or the agent's), the chain is the base model, then the rule
policy. Every request's decision is logged
(:class:`engine.store.decisions.DecisionLog`).

Policies and language models act in worker processes
(:class:`engine.rl.act_worker.ActWorker`,
:class:`engine.llm.chat_worker.ChatWorker`): the service imports no torch.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import alerts
from engine.errors import ConfigError, EngineError, quoted
from engine.llm.chat_worker import ChatWorker
from engine.rl.act_worker import ActWorker
from engine.service.rule_policy import RulePolicies
from engine.settings import as_dict
from engine.store.decisions import DecisionLog, GateState
from engine.store.paths import checked_name
from engine.store.project import ModelRecord, Project
from engine.store.promotion import (
    AgentSettings,
    NoFallback,
    Promotion,
    UnknownAgent,
    agent_settings,
    agent_versions,
    configure_agent,
    named_rule_env,
    serving_settings,
    switch_check,
)

__all__ = ["ActFailed", "Agents", "NoFallback", "UnknownAgent"]

POLICY_KINDS = ("sb3-policy",)
"""Versions that act on observations; the other versioned kinds (Hugging
Face models and adapters, Ollama models) answer messages."""
FALLBACK_ALERT_EVERY_S = 60.0
"""An agent's fallbacks alert the webhooks at most this often (a broken
version under load falls back on every request)."""
OLLAMA_KIND = "ollama"
"""A version served by an Ollama server: its model row's ``metrics`` hold
``ollama_model`` and ``host`` (its file, ``ollama.json``, the same)."""
REQUEST_FIELDS = ("observation", "messages", "state", "max_new_tokens")
"""A ConfigError naming one of these is the request's fault, answered at
once; any other is the model's, and the chain goes on."""
OLLAMA_TIMEOUT_S = 120.0
DEFAULT_MAX_NEW_TOKENS = 128


class ActFailed(EngineError):
    """No version could answer (HTTP 503)."""


@dataclass(frozen=True)
class Serving:
    """How an agent is served, read once per request."""

    why_off: str
    """Why the switch is off ('' = on: the agent's versions answer)."""
    base_model: str
    """The base model's id or name ('' = none)."""
    fallback_to_base: bool
    rule_env: str
    """The env whose expert action answers last ('' = no rule policy)."""


Step = tuple[str, int | None]
"""One link of the answer chain: ``("version", n)``, ``("base", None)`` or
``("rule", None)``."""


def version_number(field: str, value: object) -> int:
    """``"v2"``, ``2`` or ``"2"`` as 2; a ConfigError otherwise."""
    text = str(value).strip().lower()
    if isinstance(value, bool) or not isinstance(value, int | str):
        text = ""
    digits = text[1:] if text.startswith("v") else text
    if not digits.isdigit() or int(digits) < 1:
        raise ConfigError(
            field, f"{field} must be a version such as 'v2' or 2, not {quoted(value)}."
        )
    return int(digits)


def bucket(agent: str, key: str) -> int:
    """0-99, the same for the same agent and key."""
    digest = hashlib.sha256(f"{agent}\0{key}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % 100


class Agents:
    def __init__(self, project: Project) -> None:
        self.project = project
        self.log = DecisionLog(project.path)
        self.policies = ActWorker(project.path)
        self.chat = ChatWorker()
        self.rules = RulePolicies(project.path)
        self.promotion = Promotion(project, self.log)
        self._alerted: dict[str, tuple[float, int]] = {}
        self._alert_lock = threading.Lock()
        """By agent: when its last fallback alert went, and the fallbacks
        since that were not told."""

    def close(self) -> None:
        self.policies.close()
        self.chat.close()
        self.rules.close()
        self.log.close()

    # ------------------------------------------------------------ reading
    def versions(self, name: str) -> list[ModelRecord]:
        return agent_versions(self.project, name)

    def routing(
        self, name: str, records: list[ModelRecord] | None = None
    ) -> dict[str, Any]:
        """:meth:`engine.store.promotion.Promotion.routing`."""
        return self.promotion.routing(name, records)

    def serving(self, name: str, records: list[ModelRecord]) -> Serving:
        """How ``name`` is served now (read once per request)."""
        project, agent = (
            serving_settings(self.project),
            agent_settings(self.project, name),
        )
        why_off = (
            "the project's RL switch is off"
            if not project.rl_enabled
            else f"agent {name!r}'s RL switch is off"
            if not agent.rl_enabled
            else ""
        )
        return Serving(
            why_off=why_off,
            base_model=agent.base_model or project.base_model,
            fallback_to_base=project.fallback_to_base,
            rule_env=self._rule_env(agent, records),
        )

    def describe(self, name: str) -> dict[str, Any]:
        """``GET /agents/{name}``: versions with lineage, evaluation and
        live outcomes, and the routing."""
        records = self.versions(name)
        routing = self.routing(name, records)
        gate: GateState = routing["gate"]
        outcomes = self.log.outcomes(name)
        serving = self.serving(name, records)
        versions = []
        for m in records:
            role = (
                "candidate"
                if m.version == routing["candidate"]
                else "current"
                if m.version == routing["current"]
                else ""
            )
            versions.append(
                {
                    "version": f"v{m.version}",
                    "role": role,
                    "status": gate.status.get(m.version, "candidate"),
                    "gate": gate.reason.get(m.version, ""),
                    "model_id": m.id,
                    "name": m.name,
                    "kind": m.kind,
                    "created": m.created,
                    "source_run": m.source_run,
                    "env": m.env,
                    "algo": m.algo,
                    "base": m.base,
                    "evaluation": m.metrics,
                    "lineage": [
                        {"parent": p, "child": c, "relation": r}
                        for p, c, r in self.project.lineage(m.id)
                    ],
                    "file_present": Path(m.path).exists(),
                    "outcomes": outcomes.get(
                        m.version,
                        {
                            "requests": 0,
                            "errors": 0,
                            "fallbacks": 0,
                            "served": 0,
                            "mean_latency_ms": None,
                            "last_reason": "",
                        },
                    ),
                }
            )

        def shown(v: int | None) -> str | None:
            return None if v is None else f"v{v}"

        return {
            "name": name,
            "pin": shown(routing["pin"]),
            "follows_promoted": routing["pin"] is None,
            "current": shown(routing["current"]),
            "previous": shown(routing["previous"]),
            "candidate": shown(routing["candidate"]),
            "rollout": routing["rollout"],
            "latest": shown(routing["latest"]),
            "updated": routing["updated"],
            "versions": versions,
            "rl_enabled": not serving.why_off,
            "switch_reason": serving.why_off,
            "base_model": serving.base_model,
            "rule_env": serving.rule_env,
            "settings": as_dict(agent_settings(self.project, name)),
            "answered_by": self.log.answered_by(name),
            "promotions": self.log.promotions(name)[-20:],
            "recent_decisions": self.log.recent(name, 20),
        }

    def promote(self, name: str, version: object, by: str, why: str) -> dict[str, Any]:
        """Make ``version`` current by hand (a pin is cleared: it would
        hide the promotion)."""
        self.promotion.promote(name, version_number("version", version), by, why)
        return self.describe(name)

    def rollback(self, name: str, by: str, why: str) -> dict[str, Any]:
        """Back to the version promoted before the current one."""
        self.promotion.rollback(name, by, why)
        return self.describe(name)

    def configure_settings(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """``PUT /agents/{name}/settings``: the gate's tolerance and metric,
        the switch, the base model and the rule policy's env. Switching an
        agent off that has neither a base model nor a rule policy is
        refused: nothing could answer."""
        records = self.versions(name)
        check = switch_check(self.project, name, lambda s: self._rule_env(s, records))
        configure_agent(self.project, name, changes, check)
        return self.describe(name)

    # ------------------------------------------------------------ writing
    def configure(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """``PUT /agents/{name}``: ``pin`` (a version or None: follow the
        latest), ``candidate`` (a version or None), ``rollout`` (0-100);
        fields left out keep their value."""
        known = {m.version for m in self.versions(name)}
        config = self.project.agent_catalog.config(name)
        for field in ("pin", "candidate"):
            if field in changes:
                value = changes[field]
                number = None if value is None else version_number(field, value)
                if number is not None and number not in known:
                    have = ", ".join(f"v{v}" for v in sorted(known)) or "none"
                    raise UnknownAgent(
                        f"Agent {name!r} has no version v{number} (versions: {have})."
                    )
                config[field] = number
        if "rollout" in changes:
            rollout = changes["rollout"]
            if (
                isinstance(rollout, bool)
                or not isinstance(rollout, int)
                or not 0 <= rollout <= 100
            ):
                raise ConfigError(
                    "rollout",
                    "rollout must be a whole percentage from 0 to 100, "
                    f"not {quoted(rollout)}.",
                )
            config["rollout"] = rollout
        self.project.agent_catalog.set_config(
            name,
            pin=config["pin"],
            candidate=config["candidate"],
            rollout=config["rollout"],
        )
        return self.describe(name)

    def add_version(
        self,
        name: str,
        model_id: str | None = None,
        *,
        ollama_model: str | None = None,
        host: str = "",
    ) -> dict[str, Any]:
        """Make a registered model (``model_id``) or a model deployed to an
        Ollama server (``ollama_model`` at ``host``) the agent's next
        version."""
        import json
        import tempfile

        from engine.ollama import DEFAULT_HOST, check_host, check_model_name

        checked_name("agent", name)
        if (model_id is None) == (ollama_model is None):
            raise ConfigError(
                "model_id", "Give either model_id or ollama_model (one of them)."
            )
        if ollama_model is not None:
            try:
                facts = {
                    "ollama_model": check_model_name(ollama_model),
                    "host": check_host(host or DEFAULT_HOST),
                }
            except EngineError as exc:
                field = "host" if "address" in str(exc) else "ollama_model"
                raise ConfigError(field, str(exc)) from None
            with tempfile.TemporaryDirectory() as tmp:
                file = Path(tmp) / "ollama.json"
                file.write_text(json.dumps(facts), encoding="utf-8")
                model_id = self.project.register_model(
                    name=facts["ollama_model"],
                    kind=OLLAMA_KIND,
                    files=[file],
                    metrics=facts,
                ).id
        elif not any(m.id == model_id for m in self.project.list_models()):
            raise UnknownAgent(f"There is no model {quoted(model_id)} in this project.")
        assert model_id is not None
        record = self.project.add_version(name, model_id)
        return {"agent": name, "version": f"v{record.version}", "model_id": record.id}

    # ---------------------------------------------------------------- act
    def act(
        self,
        name: str,
        *,
        observation: Any = None,
        messages: list[dict[str, str]] | None = None,
        state: Any = None,
        key: str = "",
        deterministic: bool = True,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> dict[str, Any]:
        """Route one request down the answer chain, log the decision."""
        started = time.perf_counter()
        found = self.versions(name)
        records = {m.version: m for m in found}
        routing = self.routing(name, found)
        serving = self.serving(name, found)
        chosen, role, chain = self._chain(name, routing, serving, key)
        if serving.why_off and not chain:
            raise NoFallback(
                f"Agent {name!r} cannot answer with {serving.why_off}: it has "
                "no base model and no rule policy."
            )
        reasons = [f"Switched off: {serving.why_off}."] if serving.why_off else []
        answered: Step | None = None
        answer: dict[str, Any] = {}
        for step in chain:
            try:
                answer = self._answer_step(
                    name,
                    step,
                    records,
                    serving,
                    observation,
                    messages,
                    state,
                    deterministic,
                    max_new_tokens,
                )
            except EngineError as exc:
                field = exc.field if isinstance(exc, ConfigError) else ""
                if field.split(".")[0] in REQUEST_FIELDS:
                    raise  # the request is wrong: no step would do better
                # The model is (gone, no weights, unreachable): the next step.
                reasons.append(f"{_step_name(step)} failed: {str(exc).rstrip('.')}.")
                continue
            answered = step
            break
        latency_ms = (time.perf_counter() - started) * 1000.0
        reason = " ".join(reasons)
        served = answered[1] if answered and answered[0] == "version" else None
        self.log.record(
            name,
            key=key,
            chosen=chosen or 0,
            role=role,
            served=served,
            reason=reason,
            latency_ms=latency_ms,
            answered_by=answered[0] if answered else "",
        )
        if len(reasons) > bool(serving.why_off):  # a step failed
            self._tell_fallback(name, answered, reason)
        if answered is None:
            raise ActFailed(f"Agent {name!r} could not act: {reason}")
        return {
            "agent": name,
            "version": _step_name(answered),
            "answered_by": answered[0],
            "chosen": None if chosen is None else f"v{chosen}",
            "role": role,
            "fallback": answered != ("version", chosen),
            "reason": reason,
            **answer,
            "latency_ms": round(latency_ms, 3),
        }

    def _tell_fallback(self, name: str, answered: Step | None, reason: str) -> None:
        """Alert the webhooks that ``act`` fell back (or found no answer), at
        most once per :data:`FALLBACK_ALERT_EVERY_S` and agent, counting
        those between."""
        now = time.monotonic()
        with self._alert_lock:  # requests act in several threads
            if name in self._alerted:
                last, untold = self._alerted[name]
                if now - last < FALLBACK_ALERT_EVERY_S:
                    self._alerted[name] = (last, untold + 1)
                    return
            else:
                untold = 0
            self._alerted[name] = (now, 0)
        try:
            urls = alerts.webhook_urls(self.project.setting(alerts.SETTING_KEY))
            by = _step_name(answered) if answered else "nothing"
            more = f" ({untold} more since the last alert)" if untold else ""
            text = f"Agent {name} answered with {by}{more}: {reason}"
            fields = {"agent": name, "answered_by": by, "reason": reason}
            alerts.SENDER.post(urls, alerts.Alert("fallback.used", text, fields))
        except Exception:  # the answer goes out whatever the alert does
            alerts.log.exception("The fallback alert of agent %s was not sent.", name)

    def _chain(
        self, name: str, routing: dict[str, Any], serving: Serving, key: str
    ) -> tuple[int | None, str, list[Step]]:
        """The version routing chose, its role, and the steps to try in
        order."""
        extra: list[Step] = []
        if serving.base_model and (serving.fallback_to_base or serving.why_off):
            extra.append(("base", None))
        if serving.rule_env:
            extra.append(("rule", None))
        if serving.why_off:
            return None, "switched off", extra
        candidate, current = routing["candidate"], routing["current"]
        draw = bucket(name, key) if key else random.randrange(100)
        if candidate is not None and (draw < routing["rollout"] or current is None):
            chosen, role, fallback = candidate, "candidate", current
        elif current is not None:
            chosen, role, fallback = current, "current", routing["previous"]
        else:
            raise ActFailed(f"Agent {name!r} has no promoted version to act with.")
        versions: list[Step] = [("version", chosen)]
        if fallback is not None and fallback != chosen:
            versions.append(("version", fallback))
        return chosen, role, versions + extra

    def _rule_env(self, settings: AgentSettings, records: list[ModelRecord]) -> str:
        """The env of the agent's rule policy ('' = none): its setting, or
        the env of its latest version that names one."""
        chosen = named_rule_env(settings, records)
        if not chosen:
            return ""
        try:
            self.rules.check(chosen)
        except EngineError:
            return ""
        return chosen

    def _answer_step(
        self,
        name: str,
        step: Step,
        records: dict[int, ModelRecord],
        serving: Serving,
        observation: Any,
        messages: list[dict[str, str]] | None,
        state: Any,
        deterministic: bool,
        max_new_tokens: int,
    ) -> dict[str, Any]:
        what, version = step
        if what == "rule":
            found = self.rules.act(serving.rule_env, observation, state)
            if messages and observation is None:
                return {"reply": found["tool"], "action": found["action"]}
            return {"action": found["action"]}
        if what == "base":
            wanted = serving.base_model
            record = next(
                (m for m in self.project.list_models() if wanted in (m.id, m.name)),
                None,
            )
            if record is None:
                raise EngineError(f"There is no model {wanted!r} in this project.")
        else:
            assert version is not None
            record = records.get(version)
            if record is None:
                raise EngineError(f"v{version} is no longer in the project.")
            if record.kind != OLLAMA_KIND and not self.project.model_here(record.id):
                # Registered by another project sharing the agents store
                # (another machine's service): its files are there.
                raise EngineError(
                    f"v{version} is the model {record.id} of another project "
                    f"folder, not of {self.project.path}, so it cannot be "
                    "loaded here."
                )
        return self._answer(
            name, record, observation, messages, deterministic, max_new_tokens
        )

    def _answer(
        self,
        name: str,
        record: ModelRecord,
        observation: Any,
        messages: list[dict[str, str]] | None,
        deterministic: bool,
        max_new_tokens: int,
    ) -> dict[str, Any]:
        if record.kind in POLICY_KINDS:
            if observation is None:
                raise ConfigError(
                    "observation",
                    f"observation is required: agent {name!r} acts with a policy.",
                )
            action = self.policies.act(Path(record.path), observation, deterministic)
            return {"action": action}
        if not messages:
            raise ConfigError(
                "messages",
                f"messages are required: agent {name!r} acts with a language model.",
            )
        if record.kind == OLLAMA_KIND:
            from engine.ollama import OllamaClient, check_host

            facts = record.metrics
            client = OllamaClient(
                check_host(str(facts.get("host", ""))), timeout=OLLAMA_TIMEOUT_S
            )
            return {"reply": client.chat(str(facts.get("ollama_model")), messages)}
        folder = Path(record.path)
        if not folder.exists():
            raise EngineError(f"The model folder {folder} does not exist.")
        reply = self.chat.chat(folder, messages, max_new_tokens)
        return {"reply": reply}


def _step_name(step: Step) -> str:
    what, version = step
    return f"v{version}" if what == "version" else what
