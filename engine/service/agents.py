"""Named agents: their model versions, rollout and ``act`` (no web framework
here; ``engine.service.app`` puts routes on it).

Every model a run or flow for a named agent registers is the agent's next
version (:meth:`engine.store.project.Project.add_version`). The agent's
config (the project's ``agents`` table) pins a version or follows the latest,
and may name a candidate version that gets ``rollout`` percent of requests.
Routing is by a hash of the request's ``key`` when it gives one (the same key
always goes to the same version), else random. A version that fails (its
file gone, an error while acting) falls back once: a candidate to the current
version, the current one to the version before it. Every request's decision
is logged (:class:`engine.store.decisions.DecisionLog`).

Policies and language models act in worker processes
(:class:`engine.rl.act_worker.ActWorker`,
:class:`engine.llm.chat_worker.ChatWorker`): the service imports no torch.
"""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError, quoted
from engine.llm.chat_worker import ChatWorker
from engine.retrain_status import deployed_version
from engine.rl.act_worker import ActWorker
from engine.store.decisions import DecisionLog
from engine.store.paths import checked_name
from engine.store.project import ModelRecord, Project

POLICY_KINDS = ("sb3-policy",)
"""Versions that act on observations; the other versioned kinds (Hugging
Face models and adapters, Ollama models) answer messages."""
OLLAMA_KIND = "ollama"
"""A version served by an Ollama server: its model row's ``metrics`` hold
``ollama_model`` and ``host`` (its file, ``ollama.json``, the same)."""
OLLAMA_TIMEOUT_S = 120.0
DEFAULT_MAX_NEW_TOKENS = 128


class UnknownAgent(EngineError):
    """An agent or version the project does not have (HTTP 404)."""


class ActFailed(EngineError):
    """No version could answer (HTTP 503)."""


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

    def close(self) -> None:
        self.policies.close()
        self.chat.close()
        self.log.close()

    # ------------------------------------------------------------ reading
    def versions(self, name: str) -> list[ModelRecord]:
        checked_name("agent", name)
        found = self.project.versions(name)
        if not found and name not in self.project.agent_names():
            known = ", ".join(self.project.agent_names()) or "none"
            raise UnknownAgent(
                f"There is no agent {name!r} in this project (agents: {known})."
            )
        return found

    def routing(self, name: str) -> dict[str, Any]:
        """The config and the versions it resolves to: ``current`` (the pin,
        or the latest version that is not the candidate) and ``candidate``."""
        versions = [m.version for m in self.versions(name)]
        config = self.project.agent_config(name)
        current = deployed_version(config["pin"], config["candidate"], versions)
        return {**config, "current": current, "latest": max(versions, default=None)}

    def describe(self, name: str) -> dict[str, Any]:
        """``GET /agents/{name}``: versions with lineage, evaluation and
        live outcomes, and the routing."""
        records = self.versions(name)
        routing = self.routing(name)
        outcomes = self.log.outcomes(name)
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
            "follows_latest": routing["pin"] is None,
            "current": shown(routing["current"]),
            "candidate": shown(routing["candidate"]),
            "rollout": routing["rollout"],
            "latest": shown(routing["latest"]),
            "updated": routing["updated"],
            "versions": versions,
            "recent_decisions": self.log.recent(name, 20),
        }

    # ------------------------------------------------------------ writing
    def configure(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """``PUT /agents/{name}``: ``pin`` (a version or None: follow the
        latest), ``candidate`` (a version or None), ``rollout`` (0-100);
        fields left out keep their value."""
        known = {m.version for m in self.versions(name)}
        config = self.project.agent_config(name)
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
        self.project.set_agent_config(
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
        key: str = "",
        deterministic: bool = True,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> dict[str, Any]:
        """Route one request, fall back once if need be, log the decision."""
        started = time.perf_counter()
        records = {m.version: m for m in self.versions(name)}
        routing = self.routing(name)
        candidate, current = routing["candidate"], routing["current"]
        draw = bucket(name, key) if key else random.randrange(100)
        if candidate is not None and (draw < routing["rollout"] or current is None):
            chosen, role = candidate, "candidate"
        elif current is not None:
            chosen, role = current, "current"
        else:
            raise ActFailed(f"Agent {name!r} has no version to act with.")
        if role == "candidate":
            fallback = current
        else:
            older = [v for v in records if v < chosen]
            fallback = max(older) if older else None
        reasons: list[str] = []
        served: int | None = None
        answer: dict[str, Any] = {}
        for version in (chosen, fallback):
            if version is None:
                continue
            try:
                answer = self._answer(
                    name,
                    version,
                    records.get(version),
                    observation,
                    messages,
                    deterministic,
                    max_new_tokens,
                )
            except ConfigError:
                raise  # the request is wrong: no version would do better
            except EngineError as exc:
                reasons.append(f"v{version} failed: {exc}")
                continue
            served = version
            break
        latency_ms = (time.perf_counter() - started) * 1000.0
        reason = " ".join(reasons)
        self.log.record(
            name,
            key=key,
            chosen=chosen,
            role=role,
            served=served,
            reason=reason,
            latency_ms=latency_ms,
        )
        if served is None:
            raise ActFailed(f"Agent {name!r} could not act: {reason}")
        return {
            "agent": name,
            "version": f"v{served}",
            "chosen": f"v{chosen}",
            "role": role,
            "fallback": served != chosen,
            "reason": reason,
            **answer,
            "latency_ms": round(latency_ms, 3),
        }

    def _answer(
        self,
        name: str,
        version: int,
        record: ModelRecord | None,
        observation: Any,
        messages: list[dict[str, str]] | None,
        deterministic: bool,
        max_new_tokens: int,
    ) -> dict[str, Any]:
        if record is None:
            raise EngineError(f"v{version} is no longer in the project.")
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
