"""Evaluate language-model policies in an env (``llm.evaluate``).

Each model runs ``episodes`` episodes on the same seeds and tasks; the
report gives success rate, mean return, invalid-action rate (a tool that is
not valid in the status, or an answer naming no tool), the rate of answers
naming no tool, the rate of steps where the model picked the expert's tool,
and generation tokens/s. With ``baseline`` set, the report compares the two
(``after - before``). The report is ``report.json`` in the run folder plus
``report.png``, a bar chart drawn with numpy and written with zlib (no
plotting library is installed).
"""

from __future__ import annotations

import random
import struct
import zlib
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import contract
from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.llm.rollouts import EvaluateConfig
from engine.settings import build

if TYPE_CHECKING:
    import numpy as np

REPORT_KEYS = (
    "success_rate",
    "mean_return",
    "invalid_action_rate",
    "unparsed_rate",
    "expert_agreement",
)


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
    if cfg.seed is None:
        cfg = replace(cfg, seed=random.randrange(2**31))
    return cfg


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
) -> dict[str, float]:
    """Run ``policy`` for ``episodes`` episodes; the report's numbers."""
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
        env_kwargs=env_kwargs,
    )
    stats: dict[str, float] = dict(rollout_stats(eps))
    if recorder is not None:
        agree = total = 0
        for ep in iter_traces(recorder.path):
            for st in ep["steps"]:
                total += 1
                agree += int(
                    st.get("tool") is not None
                    and st.get("tool") == st.get("expert_tool")
                )
        stats["expert_agreement"] = agree / total if total else 0.0
    tps = getattr(policy, "tokens_per_second", None)
    if tps is not None:
        stats["tokens_per_s"] = float(tps)
    return stats


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


# ------------------------------------------------------------------ PNG chart
def _png_bytes(img: np.ndarray) -> bytes:
    h, w, _ = img.shape
    raw = b"".join(b"\x00" + img[y].tobytes() for y in range(h))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + tag
            + data
            + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)
        )

    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def bar_chart_png(
    groups: list[dict[str, float]],
    keys: tuple[str, ...] = REPORT_KEYS,
    width: int = 480,
    height: int = 240,
) -> bytes:
    """Grouped bars (one group per key, one bar per model) for values in
    [0, 1] (clipped); no text, colors in order blue, orange, green."""
    import numpy as np

    colors = [(66, 114, 196), (237, 125, 49), (112, 173, 71)]
    img = np.full((height, width, 3), 255, dtype=np.uint8)
    base = height - 20
    img[base, 10 : width - 10] = (80, 80, 80)
    slot = (width - 20) // max(1, len(keys))
    bar = max(2, (slot - 10) // max(1, len(groups)))
    for k, key in enumerate(keys):
        for g, values in enumerate(groups):
            v = float(np.clip(values.get(key, 0.0) or 0.0, 0.0, 1.0))
            x0 = 15 + k * slot + g * bar
            top = base - int(v * (base - 10))
            img[top:base, x0 : x0 + bar - 2] = colors[g % len(colors)]
    return _png_bytes(img)


# ------------------------------------------------------------------ the job
@job_kind(
    "llm.evaluate",
    config=EvaluateConfig,
    check=validate,
    label="Evaluation",
    group="evaluation",
    description="Runs language-model policies in an env: success rate, return, "
    "invalid actions, before/after report.",
    progress_unit="models",
)
def run(ctx: JobContext, cfg: EvaluateConfig) -> dict[str, Any]:
    from engine.llm.rollouts import env_kwargs, llm_policy, resolve_env
    from engine.store.atomic import atomic_write_bytes, atomic_write_json

    # validate() checked env and model and drew the seed.
    assert cfg.env is not None and cfg.model is not None and cfg.seed is not None
    env_ref = resolve_env(cfg.env, ctx.project_dir)
    models = [("after", cfg.model)]
    if cfg.baseline:
        models.insert(0, ("before", cfg.baseline))
    results: dict[str, dict[str, float]] = {}
    for i, (label, ref) in enumerate(models):
        if ctx.should_stop:
            break
        ctx.progress(i, len(models), f"evaluating {label}")
        policy = llm_policy(cfg, ref)
        results[label] = evaluate_policy(
            policy,
            env_ref,
            episodes=cfg.episodes,
            num_envs=cfg.num_envs,
            seed=cfg.seed,
            tasks=cfg.tasks,
            trace_path=ctx.run_dir / f"eval_{label}.jsonl",
            should_stop=lambda: ctx.should_stop,
            env_kwargs=env_kwargs(cfg),
        )
        ctx.metrics(i, {f"eval/{k}": v for k, v in results[label].items()})
    ctx.progress(len(models), len(models))
    report: dict[str, Any] = {
        "env": env_ref,
        "episodes": cfg.episodes,
        "models": dict(models),
        "results": results,
    }
    if "before" in results and "after" in results:
        report["comparison"] = compare(results["before"], results["after"])
    atomic_write_json(ctx.run_dir / contract.REPORT_FILE, report)
    atomic_write_bytes(
        ctx.run_dir / "report.png", bar_chart_png([results[k] for k in results])
    )
    return {
        "report": str(ctx.run_dir / contract.REPORT_FILE),
        "plot": str(ctx.run_dir / "report.png"),
        "results": results,
        "comparison": report.get("comparison"),
    }
