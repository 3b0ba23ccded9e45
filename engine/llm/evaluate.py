"""Evaluate language-model policies in an env (``llm.evaluate``).

Each model runs ``episodes`` episodes on the same seeds and tasks; the
report gives success rate, mean return, invalid-action rate (a tool that is
not valid in the status, or an answer naming no tool), the rate of answers
naming no tool, the rate of steps where the model picked the expert's tool,
and generation tokens/s. With ``baseline`` set, the report compares the two
(``after - before``). Two reference policies play the same episodes: a
random valid tool (``random``) and, in envs that plan one, the expert's
shortest path (``expert``), so a number can be read against the floor and
the ceiling. Every model's results are also broken down by scenario (the
episode's task), each with an example of a failed episode in its trace
file. The report is ``report.json`` in the run folder, ``report.csv`` (one
row per model and scenario, ``all`` first) and ``report.png`` (matplotlib:
the rates on one axis, mean return on another, a legend of the models);
MLflow gets all three as artifacts (:data:`engine.jobs.tracking.RUN_ARTIFACTS`).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.rollouts import EvaluateConfig
from engine.settings import build, drawn_seed

REPORT_KEYS = (
    "success_rate",
    "mean_return",
    "invalid_action_rate",
    "unparsed_rate",
    "expert_agreement",
)
RATE_KEYS = tuple(k for k in REPORT_KEYS if k != "mean_return")
"""The report's numbers that are fractions (one axis of the chart)."""
CSV_FILE = "report.csv"
PLOT_FILE = "report.png"
CSV_COLUMNS = ("model", "scenario", "episodes", *REPORT_KEYS, "failed_example")


def validate(config: Mapping[str, Any]) -> EvaluateConfig:
    from engine.llm.base import resolve_chat_model

    cfg = build(EvaluateConfig, config, "llm.evaluate")
    if not cfg.model:
        raise ConfigError("model", "model must name a model or adapter folder.")
    cfg = replace(cfg, model=str(resolve_chat_model(cfg.model)))
    if cfg.baseline:
        cfg = replace(cfg, baseline=str(resolve_chat_model(cfg.baseline, "baseline")))
    if not cfg.env:
        raise ConfigError("env", "env must name an environment (id or spec file).")
    return replace(cfg, seed=drawn_seed(cfg.seed))


def evaluate_policy(
    policy: Any,
    env_ref: str,
    *,
    episodes: int,
    num_envs: int = 8,
    seed: int = 0,
    tasks: list[int] | None = None,
    trace_path: Path | None = None,
    should_stop: Any = None,
    env_kwargs: dict[str, Any] | None = None,
    on_episode: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Run ``policy`` for ``episodes`` episodes: the report's numbers, and
    each episode's summary (``task_id``, ``success``, ``return``, ...);
    ``on_episode`` is called with each summary as its episode ends."""
    from engine.llm.rollouts import (
        TraceRecorder,
        collect_rollouts,
        iter_traces,
        rollout_stats,
    )

    recorder = TraceRecorder(trace_path) if trace_path is not None else None
    eps = collect_rollouts(
        env_ref,
        policy,
        episodes=episodes,
        recorder=recorder,
        num_envs=num_envs,
        seed=seed,
        tasks=tasks,
        should_stop=should_stop,
        on_episode=on_episode,
        env_kwargs=env_kwargs,
    )
    stats: dict[str, float] = dict(rollout_stats(eps))
    if recorder is not None:
        agreement: dict[int, tuple[int, int]] = {}
        for ep in iter_traces(recorder.path):
            steps = ep["steps"]
            agreement[int(ep["episode"])] = (
                sum(
                    st.get("tool") is not None
                    and st.get("tool") == st.get("expert_tool")
                    for st in steps
                ),
                len(steps),
            )
        for summary in eps:
            summary["agreement"] = agreement.get(summary.get("trace_episode", -1))
        stats.update(_agreement(eps))
    tps = getattr(policy, "tokens_per_second", None)
    if tps is not None:
        stats["tokens_per_s"] = float(tps)
    return stats, eps


def _agreement(eps: list[dict[str, Any]]) -> dict[str, float]:
    """``expert_agreement`` of episodes whose traces were read."""
    pairs = [e["agreement"] for e in eps if e.get("agreement") is not None]
    if not pairs:
        return {}
    total = sum(n for _, n in pairs)
    return {"expert_agreement": sum(a for a, _ in pairs) / total if total else 0.0}


def by_scenario(eps: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The report's numbers for each scenario (task) of ``eps``, with the
    trace episode of one failure there (None when none failed)."""
    from engine.llm.rollouts import rollout_stats

    scenarios: dict[str, list[dict[str, Any]]] = {}
    for ep in eps:
        scenarios.setdefault(str(ep.get("task_id") or "-"), []).append(ep)
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(scenarios):
        group = scenarios[name]
        failed = next((e for e in group if not e.get("success")), None)
        out[name] = {
            **rollout_stats(group),
            **_agreement(group),
            "failed_example": None if failed is None else failed.get("trace_episode"),
        }
    return out


def compare(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    return {
        k: {
            "before": before.get(k),
            "after": after.get(k),
            "change": (after.get(k, 0.0) or 0.0) - (before.get(k, 0.0) or 0.0),
        }
        for k in REPORT_KEYS
        if k in before or k in after
    }


# ----------------------------------------------------------- CSV and chart
def report_csv(report: dict[str, Any]) -> str:
    """One row per model and scenario (``all`` first), as :data:`CSV_COLUMNS`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for label, stats in report["results"].items():
        rows = [("all", stats), *report["scenarios"].get(label, {}).items()]
        for scenario, row in rows:
            writer.writerow(
                [label, scenario, int(row.get("episodes", 0))]
                + [_cell(row.get(k)) for k in REPORT_KEYS]
                + [_cell(row.get("failed_example"))]
            )
    return out.getvalue()


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def chart_png(results: dict[str, dict[str, float]], title: str) -> bytes:
    """Grouped bars of each model's rates (0 to 1) and, on an axis of its
    own, mean return; axes titled, a legend naming the models."""
    import matplotlib

    matplotlib.use("Agg")  # no display in a job process
    import matplotlib.pyplot as plt
    import numpy as np

    labels = list(results)
    fig, (rates, returns) = plt.subplots(
        1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [4, 1.3]}
    )
    width = 0.8 / max(1, len(labels))
    x = np.arange(len(RATE_KEYS))
    for i, label in enumerate(labels):
        values = [results[label].get(k) or 0.0 for k in RATE_KEYS]
        rates.bar(x + i * width, values, width, label=label)
        returns.bar(i, results[label].get("mean_return") or 0.0, 0.8)
    rates.set_xticks(x + width * (len(labels) - 1) / 2)
    rates.set_xticklabels([k.replace("_", " ") for k in RATE_KEYS], fontsize=8)
    rates.set_ylim(0, 1)
    rates.set_ylabel("fraction of episodes or steps")
    rates.legend(title="model", fontsize=8)
    rates.set_title(title, fontsize=9)
    returns.set_xticks(range(len(labels)))
    returns.set_xticklabels(labels, fontsize=8, rotation=30)
    returns.set_ylabel("mean return")
    returns.axhline(0, color="gray", linewidth=0.6)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    plt.close(fig)
    return buffer.getvalue()


# ------------------------------------------------------------------ the job
@job_kind(
    "llm.evaluate",
    check=validate,
    label="Evaluation",
    group="evaluation",
    progress_unit="episodes",
)
def run(ctx: JobContext, cfg: EvaluateConfig) -> dict[str, Any]:
    """Runs language-model policies in an env: success rate, return, invalid
    actions, before/after report."""
    from engine.llm.policy import ExpertPolicy, RulePolicy, has_expert
    from engine.llm.rollouts import env_kwargs, llm_policy, make_env, resolve_env
    from engine.store.atomic import (
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
    )

    # validate() checked env and model and drew the seed.
    assert cfg.env is not None and cfg.model is not None and cfg.seed is not None
    env_ref = resolve_env(cfg.env, ctx.project_dir)
    models: list[tuple[str, str]] = [("after", cfg.model)]
    if cfg.baseline:
        models.insert(0, ("before", cfg.baseline))
    policies: list[tuple[str, Callable[[], Any]]] = [
        (label, partial(llm_policy, cfg, ref)) for label, ref in models
    ]
    policies.append(("random", partial(RulePolicy, cfg.seed, cfg.system_prompt)))
    probe = make_env(env_ref, **env_kwargs(cfg))
    try:
        planned = has_expert(probe)
    finally:
        probe.close()
    if planned:
        expert = partial(ExpertPolicy, 0.0, cfg.seed, cfg.system_prompt)
        policies.append(("expert", expert))
    else:
        ctx.log(f"{env_ref} plans no expert path: the random policy is the reference")
    results: dict[str, dict[str, float]] = {}
    scenarios: dict[str, dict[str, dict[str, Any]]] = {}
    # Progress counts the episodes of every policy: a model's evaluation
    # takes minutes, and a count per model left the bar still for all of it.
    total = len(policies) * cfg.episodes
    done = 0

    def on_episode(_ep: dict[str, Any], label: str) -> None:
        nonlocal done
        done += 1
        ctx.progress(done, total, f"evaluating {label}")

    for i, (label, make) in enumerate(policies):
        if ctx.should_stop:
            break
        done = i * cfg.episodes  # where this policy's share of the count starts
        ctx.progress(done, total, f"loading {label}")
        results[label], eps = evaluate_policy(
            make(),
            env_ref,
            episodes=cfg.episodes,
            num_envs=cfg.num_envs,
            seed=cfg.seed,
            tasks=cfg.tasks,
            trace_path=ctx.run_dir / f"eval_{label}.jsonl",
            should_stop=lambda: ctx.should_stop,
            env_kwargs=env_kwargs(cfg),
            on_episode=partial(on_episode, label=label),
        )
        scenarios[label] = by_scenario(eps)
        ctx.metrics(i, {f"eval/{k}": v for k, v in results[label].items()})
    ctx.progress(total, total)
    report: dict[str, Any] = {
        "env": env_ref,
        "episodes": cfg.episodes,
        "models": {
            **dict(models),
            **{label: f"{label} policy" for label, _ in policies[len(models) :]},
        },
        "results": results,
        "scenarios": scenarios,
        "traces": {label: f"eval_{label}.jsonl" for label in results},
    }
    if "before" in results and "after" in results:
        report["comparison"] = compare(results["before"], results["after"])
    atomic_write_json(ctx.run_dir / contract.REPORT_FILE, report)
    atomic_write_text(ctx.run_dir / CSV_FILE, report_csv(report))
    atomic_write_bytes(
        ctx.run_dir / PLOT_FILE,
        chart_png(results, f"{Path(env_ref).name}: {cfg.episodes} episodes a model"),
    )
    return {
        "report": str(ctx.run_dir / contract.REPORT_FILE),
        "csv": str(ctx.run_dir / CSV_FILE),
        "plot": str(ctx.run_dir / PLOT_FILE),
        "results": results,
        "comparison": report.get("comparison"),
    }
