"""Episode traces: a recorder API, the rollout loop, and the ``llm.collect`` job.

A trace file is JSON Lines, one episode per line (written when the episode
ends, so a crash loses at most the episodes in flight)::

    {"episode": 3, "env": "<spec path or env id>", "task_id": "RLHUB-104",
     "seed": 7, "policy": "llm:/models/x", "steps": [
        {"t": 0, "messages": [...], "completion": "...", "tool": "merge",
         "action": 4, "parsed": true, "valid": true, "reward": 0.3,
         "reward_breakdown": {...}, "state": {... env.get_state() before ...},
         "valid_tools": [...], "expert_tool": "merge"}, ...],
     "return": 1.28, "length": 4, "success": true, "truncated": false}

Traces live in ``<project>/data/traces/<name>.jsonl``.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import contract
from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.train import SEED_MAX
from engine.settings import build, drawn_seed, setting
from engine.store.paths import checked_name, child

if TYPE_CHECKING:
    from engine.envs.curriculum import Schedule
    from engine.llm.policy import LLMPolicy


class TraceRecorder:
    """Records episodes step by step and appends each finished one as a line.

    ``start_episode`` returns an episode key; ``record_step`` and
    ``end_episode`` take it, so many envs can be recorded at once.
    Thread-safe.
    """

    def __init__(self, path: str | Path, append: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not append and self.path.exists():
            self.path.unlink()
        self._open: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._next = sum(1 for _ in iter_traces(self.path)) if append else 0
        self.episodes_written = 0

    def start_episode(
        self, env: str, *, task_id: str = "", seed: int | None = None, **meta: Any
    ) -> int:
        with self._lock:
            key = self._next
            self._next += 1
            self._open[key] = {
                "episode": key,
                "env": env,
                "task_id": task_id,
                "seed": seed,
                **meta,
                "steps": [],
            }
        return key

    def record_step(
        self,
        episode: int,
        *,
        messages: list[dict[str, str]],
        completion: str,
        tool: str | None,
        action: int,
        parsed: bool,
        valid: bool,
        reward: float,
        reward_breakdown: dict[str, float] | None = None,
        state: dict[str, Any] | None = None,
        **extra: Any,
    ) -> None:
        ep = self._open[episode]
        ep["steps"].append(
            {
                "t": len(ep["steps"]),
                "messages": messages,
                "completion": completion,
                "tool": tool,
                "action": int(action),
                "parsed": bool(parsed),
                "valid": bool(valid),
                "reward": float(reward),
                "reward_breakdown": {
                    k: float(v) for k, v in (reward_breakdown or {}).items()
                },
                "state": state,
                **extra,
            }
        )

    def end_episode(
        self, episode: int, *, success: bool, truncated: bool = False, **extra: Any
    ) -> dict[str, Any]:
        with self._lock:
            ep = self._open.pop(episode)
        steps = ep["steps"]
        ep["return"] = float(sum(s["reward"] for s in steps))
        ep["length"] = len(steps)
        ep["success"] = bool(success)
        ep["truncated"] = bool(truncated)
        ep.update(extra)
        line = json.dumps(ep, default=_jsonable) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
        self.episodes_written += 1
        return ep


def _jsonable(value: Any) -> Any:
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(value)


def iter_traces(path: str | Path) -> Iterator[dict[str, Any]]:
    """Episodes of a trace file (a damaged last line is skipped)."""
    p = Path(path)
    if not p.is_file():
        return
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


# --------------------------------------------------------------------- envs
def resolve_env(ref: str, project_dir: Path | None = None) -> str:
    """A reference that :func:`make_env` accepts in any process: the spec file
    path for designed envs (a path, or a name in ``<project>/envs``), else the
    gymnasium id."""
    p = Path(ref).expanduser()
    if p.suffix == ".json" and p.is_file():
        return str(p.resolve())
    if project_dir is not None:
        for cand in (
            contract.spec_file(project_dir, ref),
            contract.spec_file(project_dir, contract.env_name(ref) or ref),
            Path(project_dir) / ref,
        ):
            if cand.is_file():
                return str(cand.resolve())
    return ref


def make_env(ref: str, **kwargs: Any) -> Any:
    import engine.envs as envs

    try:
        return envs.make(ref, **kwargs)
    except EngineError:
        raise
    except Exception as exc:
        raise ConfigError(
            "env",
            f"The environment {ref!r} cannot be made: {type(exc).__name__}: {exc}",
        ) from exc


# ------------------------------------------------------------------ rollouts
def collect_rollouts(
    env_ref: str,
    policy: Any,
    *,
    episodes: int,
    recorder: TraceRecorder | None = None,
    num_envs: int = 4,
    seed: int = 0,
    tasks: list[int] | None = None,
    policy_name: str = "",
    should_stop: Callable[[], bool] | None = None,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
    env_kwargs: dict[str, Any] | None = None,
    schedule: Schedule | None = None,
) -> list[dict[str, Any]]:
    """Run ``policy`` (anything with ``act(envs) -> list[Decision]``) for
    ``episodes`` episodes on ``num_envs`` envs stepped together, recording
    every step. ``tasks`` restricts the task indices sampled at reset (in
    order, cycling). With a curriculum ``schedule`` every ended episode's
    success is recorded into it, episodes start at its current stage's
    difficulty, and each summary and trace says its ``stage``. Returns the
    episodes' summaries."""
    n = max(1, min(num_envs, episodes))
    envs = [make_env(env_ref, **(env_kwargs or {})) for _ in range(n)]
    rollout = _Rollout(
        env_ref,
        envs,
        episodes=episodes,
        recorder=recorder,
        seed=seed,
        tasks=tasks,
        policy_name=policy_name,
        on_episode=on_episode,
        schedule=schedule,
    )
    active = list(range(n))
    while active:
        if should_stop is not None and should_stop():
            break
        active = rollout.step(active, policy)
    for e in envs:
        e.close()
    return rollout.finished


class _Rollout:
    """The envs of :func:`collect_rollouts` stepped together: each one's
    episode summary, trace key and curriculum stage, the episodes started
    and those finished."""

    def __init__(
        self,
        env_ref: str,
        envs: list[Any],
        *,
        episodes: int,
        recorder: TraceRecorder | None,
        seed: int,
        tasks: list[int] | None,
        policy_name: str,
        on_episode: Callable[[dict[str, Any]], None] | None,
        schedule: Schedule | None,
    ) -> None:
        self.env_ref = env_ref
        self.envs = envs
        self.episodes = episodes
        self.recorder = recorder
        self.seed = seed
        self.tasks = tasks
        self.policy_name = policy_name
        self.on_episode = on_episode
        self.schedule = schedule
        n = len(envs)
        self.stage = [0] * n
        self.keys: list[int | None] = [None] * n
        self.summaries: list[dict[str, Any]] = [{} for _ in range(n)]
        self.started = 0
        self.finished: list[dict[str, Any]] = []
        if schedule is not None:
            for e in envs:
                e.unwrapped.set_difficulty(schedule.difficulty)
        for i in range(n):
            self.reset(i)

    def reset(self, i: int) -> None:
        """Start the next episode on env ``i``: its seed and task, its trace
        and a fresh summary."""
        ep_seed = self.seed * 100003 + self.started
        options = None
        if self.tasks:
            options = {"task": self.tasks[self.started % len(self.tasks)]}
        _, info = self.envs[i].reset(seed=ep_seed, options=options)
        rec_key = -1
        meta: dict[str, Any] = {}
        if self.schedule is not None:
            self.stage[i] = meta["stage"] = self.schedule.stage
        if self.recorder is not None:
            rec_key = self.recorder.start_episode(
                self.env_ref,
                task_id=str(info.get("task_id", "")),
                seed=ep_seed,
                policy=self.policy_name,
                **meta,
            )
        self.keys[i] = rec_key
        self.summaries[i] = {
            "return": 0.0,
            "length": 0,
            "invalid": 0,
            "unparsed": 0,
            "task_id": str(info.get("task_id", "")),
            # its episode number in the trace file (-1: none is recorded)
            "trace_episode": rec_key,
            **meta,
        }
        self.started += 1

    def step(self, active: list[int], policy: Any) -> list[int]:
        """One decision of ``policy`` for each active env, taken and
        recorded; the envs still active after."""
        from engine.llm.policy import (
            env_mask,
            env_state,
            env_tools,
            expert_action,
            has_expert,
        )

        batch = [self.envs[i] for i in active]
        states = [env_state(e) for e in batch]
        valid_sets = [
            [t for t, ok in zip(env_tools(e), env_mask(e), strict=True) if ok]
            for e in batch
        ]
        experts = [
            env_tools(e)[expert_action(e)] if has_expert(e) else None for e in batch
        ]
        decisions = policy.act(batch)
        still: list[int] = []
        for i, env, d, st, vt, ex in zip(
            active, batch, decisions, states, valid_sets, experts, strict=True
        ):
            _, reward, terminated, truncated, info = env.step(d.action)
            s = self.summaries[i]
            s["return"] += float(reward)
            s["length"] += 1
            valid = bool(info.get("valid", True)) and d.parsed
            s["invalid"] += int(not valid)
            s["unparsed"] += int(not d.parsed)
            if self.recorder is not None and self.keys[i] is not None:
                self.recorder.record_step(
                    self.keys[i],
                    messages=d.messages,
                    completion=d.completion,
                    tool=d.tool,
                    action=d.action,
                    parsed=d.parsed,
                    valid=valid,
                    reward=float(reward),
                    reward_breakdown=info.get("reward_breakdown"),
                    state=st,
                    valid_tools=vt,
                    expert_tool=ex,
                    completion_tokens=d.completion_tokens,
                )
            ended = terminated or truncated
            # An env whose episode ended goes on if another starts on it.
            if not ended or self._end_episode(i, info, terminated, truncated):
                still.append(i)
        return still

    def _end_episode(
        self, i: int, info: dict[str, Any], terminated: bool, truncated: bool
    ) -> bool:
        """Close env ``i``'s episode: its trace, the curriculum's record, the
        callback; start the next one if episodes are left (True then)."""
        s = self.summaries[i]
        s["success"] = bool(info.get("is_success", False))
        s["truncated"] = bool(truncated and not terminated)
        key = self.keys[i]
        if self.recorder is not None and key is not None:
            self.recorder.end_episode(
                key,
                success=s["success"],
                truncated=s["truncated"],
            )
        self.finished.append(dict(s))
        # an episode begun at another stage does not count
        schedule = self.schedule
        if (
            schedule is not None
            and self.stage[i] == schedule.stage
            and schedule.record([s["success"]]) is not None
        ):
            for e in self.envs:
                e.unwrapped.set_difficulty(schedule.difficulty)
        if self.on_episode is not None:
            self.on_episode(dict(s))
        if self.started < self.episodes:
            self.reset(i)
            return True
        return False


def rollout_stats(episodes: list[dict[str, Any]]) -> dict[str, float]:
    n = len(episodes)
    if n == 0:
        return {"episodes": 0}
    steps = sum(e["length"] for e in episodes) or 1
    return {
        "episodes": n,
        "success_rate": sum(bool(e.get("success")) for e in episodes) / n,
        "mean_return": sum(e["return"] for e in episodes) / n,
        "mean_length": steps / n,
        "invalid_action_rate": sum(e["invalid"] for e in episodes) / steps,
        "unparsed_rate": sum(e["unparsed"] for e in episodes) / steps,
    }


# ------------------------------------------------------------------ the job
POLICIES = ("llm", "expert", "rule")
FALLBACKS = ("expert", "rule", "noop")


@dataclass(frozen=True)
class PlayConfig:
    """Settings ``llm.collect`` and ``llm.evaluate`` share: both play the env
    with a language-model policy."""

    env: str | None = None
    """The environment: a designed env's spec file or a registered id."""
    model: str | None = None
    """The language model (a model or adapter folder, or a hub id)."""
    episodes: int = setting(16, min=1, max=100_000, unit="episodes")
    """Episodes to play."""
    num_envs: int = setting(4, min=1, max=256, label="Parallel envs")
    """Episodes played together (one batched generation per step)."""
    max_new_tokens: int = setting(16, min=1, max=4096, unit="tokens")
    """Tokens the model may generate per step."""
    greedy: bool = False
    """Always take the most likely tokens instead of sampling."""
    fallback: str = setting("expert", choices=FALLBACKS)
    """What to do when an answer names no tool: expert (the env's expert
    action, where it has one), rule (a random valid tool) or noop (the first
    tool); either way it is counted (``unparsed``) as invalid."""
    system_prompt: str | None = None
    """System prompt; None: one listing the env's tools."""
    tasks: Any = None
    """Task variants to cycle through (None: the env's own)."""
    max_steps: int | None = setting(None, min=1, max=100_000, unit="steps")
    """End an episode after this many steps; None: the env's own limit."""
    seed: int | None = setting(None, min=0, max=SEED_MAX)
    """Seed of the episodes and of sampling (None: drawn and recorded)."""


@dataclass(frozen=True)
class CollectConfig(PlayConfig):
    """Settings of an ``llm.collect`` job."""

    policy: str = setting("llm", choices=POLICIES)
    """Who acts: llm (the model), expert (the env's solver, with noise) or rule
    (a random valid tool)."""
    noise: float = setting(0.2, min=0, max=1)
    """Expert policy only: probability of a random valid tool instead of the
    expert's."""
    temperature: float = setting(1.0, min=0, max=5, exclusive_min=True)
    """Sampling temperature (ignored when greedy)."""
    name: str | None = setting(None, check=checked_name)
    """File name of the traces under ``data/traces/`` (None: the run id)."""
    curriculum: Any = None
    """Stages of difficulty of a designed env, easiest first
    (``engine.envs.curriculum.CurriculumConfig``): the collected episodes'
    success moves it (None: the env as designed)."""


@dataclass(frozen=True)
class EvaluateConfig(PlayConfig):
    """Settings of an ``llm.evaluate`` job."""

    episodes: int = setting(20, min=1, max=100_000, unit="episodes")
    num_envs: int = setting(8, min=1, max=256, label="Parallel envs")
    greedy: bool = True
    fallback: str = setting("noop", choices=FALLBACKS)
    baseline: str | None = None
    """A second model played on the same episodes, for a before/after report."""


def validate_collect(config: Mapping[str, Any]) -> CollectConfig:
    from engine.llm.base import resolve_chat_model

    cfg = build(CollectConfig, config, "llm.collect")
    env = cfg.env
    if not env:
        raise ConfigError("env", "env must name an environment (id or spec file).")
    if cfg.policy == "llm":
        if not cfg.model:
            raise ConfigError("model", "model is required when policy is 'llm'.")
        cfg = replace(cfg, model=str(resolve_chat_model(cfg.model)))
    cfg = replace(cfg, seed=drawn_seed(cfg.seed))
    if cfg.curriculum is not None:
        cfg = replace(cfg, curriculum=check_env_curriculum(cfg.curriculum, env))
    return cfg


def check_env_curriculum(value: Any, env_ref: str) -> dict[str, Any]:
    """A curriculum checked against the env ``env_ref`` makes
    (:func:`engine.envs.curriculum.check_for_env`)."""
    from engine.envs.curriculum import check_for_env

    env = make_env(env_ref)
    try:
        return check_for_env(value, env, env_ref)
    finally:
        env.close()


def env_kwargs(cfg: PlayConfig) -> dict[str, Any]:
    """Keyword arguments for the env: ``max_steps`` caps episode length
    (workflow envs)."""
    return {} if cfg.max_steps is None else {"max_steps": cfg.max_steps}


def llm_policy(cfg: PlayConfig, model: str, **generation: Any) -> LLMPolicy:
    """The language model ``model`` loaded to play as ``cfg`` says (its
    prompt, tokens per step, decoding, batch and fallback); ``generation``,
    more :class:`~engine.llm.policy.GenerationSettings` of the job's own."""
    from engine.llm.policy import GenerationSettings, LLMPolicy

    settings = GenerationSettings(
        max_new_tokens=cfg.max_new_tokens,
        greedy=cfg.greedy,
        batch_size=cfg.num_envs,
        **generation,
    )
    return LLMPolicy.from_pretrained(
        model,
        system_prompt=cfg.system_prompt,
        generation=settings,
        fallback=cfg.fallback,
        seed=cfg.seed,
    )


@job_kind(
    "llm.collect",
    check=validate_collect,
    label="Collect rollouts",
    group="data",
    resumable=True,
    progress_unit="episodes",
)
def run_collect(ctx: JobContext, cfg: CollectConfig) -> dict[str, Any]:
    """Records episodes of a language-model (or rule-based) policy in an env as
    JSONL traces in the project's data/traces/."""
    from engine.llm.policy import (
        ExpertPolicy,
        LLMPolicy,
        RulePolicy,
    )

    # validate_collect() checked env and drew the seed.
    assert cfg.env is not None and cfg.seed is not None
    out_name = cfg.name or ctx.run_id
    path = child(ctx.project_dir, "data/traces", out_name, "name", ".jsonl")
    env_ref = resolve_env(cfg.env, ctx.project_dir)
    if cfg.policy == "llm":
        assert cfg.model is not None
        policy: Any = llm_policy(cfg, cfg.model, temperature=cfg.temperature)
        name = f"llm:{cfg.model}"
    elif cfg.policy == "expert":
        policy = ExpertPolicy(cfg.noise, cfg.seed, cfg.system_prompt)
        name = f"expert(noise={cfg.noise})"
    else:
        policy = RulePolicy(cfg.seed, cfg.system_prompt)
        name = "rule"
    recorder = TraceRecorder(path, append=ctx.resume)
    done = [0]
    schedule = None
    if cfg.curriculum:
        from engine.envs.curriculum import Schedule

        schedule = Schedule(check_env_curriculum(cfg.curriculum, env_ref))

    def on_episode(ep: dict[str, Any]) -> None:
        done[0] += 1
        extra = {}
        if schedule is not None:
            from engine.envs.curriculum import RATE_METRIC, STAGE_METRIC

            # the stage the next episodes play at
            extra[STAGE_METRIC] = float(schedule.stage)
            if schedule.last_rate is not None:
                extra[RATE_METRIC] = schedule.last_rate
        ctx.metrics(
            done[0],
            {
                **extra,
                "rollout/ep_rew": ep["return"],
                "rollout/ep_len": ep["length"],
                "rollout/success": float(ep.get("success", False)),
                # answers naming no tool (they took the fallback) and steps
                # whose tool was not valid in the status, per episode
                "rollout/unparsed_rate": ep["unparsed"] / max(1, ep["length"]),
                "rollout/invalid_rate": ep["invalid"] / max(1, ep["length"]),
            },
        )
        ctx.progress(done[0], cfg.episodes)

    eps = collect_rollouts(
        env_ref,
        policy,
        episodes=cfg.episodes,
        recorder=recorder,
        num_envs=cfg.num_envs,
        seed=cfg.seed,
        tasks=cfg.tasks,
        policy_name=name,
        should_stop=lambda: ctx.should_stop,
        on_episode=on_episode,
        env_kwargs=env_kwargs(cfg),
        schedule=schedule,
    )
    stats = rollout_stats(eps)
    if schedule is not None:
        stats["curriculum_stage"] = schedule.stage
        ctx.log(
            f"curriculum ended at stage {schedule.stage} of {len(schedule.stages) - 1}"
        )
    if isinstance(policy, LLMPolicy):
        stats["tokens_per_s"] = policy.tokens_per_second
    ctx.log(f"collected {len(eps)} episodes into {path}")
    return {"traces": str(path), "env": env_ref, "policy": name, "stats": stats}
