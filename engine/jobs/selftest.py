"""A diagnostic job: exercises progress, metrics, logs, checkpoints and stop
without any machine-learning library, so a user (Help ▸ Engine self-test) and
the tests can check the whole pipeline in a second."""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.jobs.context import CHECKPOINTS_FOLDER, JobContext
from engine.jobs.lifecycle import read_checkpoint_state
from engine.jobs.registry import job_kind
from engine.settings import build, drawn_seed, setting
from engine.store.atomic import atomic_write_json


@dataclass(frozen=True)
class SelfTestConfig:
    """Settings of a ``selftest`` job."""

    steps: int = setting(200, min=1, unit="steps")
    """Steps to count."""
    step_seconds: float = setting(0.01, min=0, unit="seconds")
    """Wall time each step waits."""
    seed: int | None = setting(None, min=0)
    """Seed of the noise in the metric (None: drawn and recorded)."""
    fail_at_step: int | None = setting(None, min=0)
    """Raise at this step, to exercise the failure path (None: never)."""
    ignore_stop: bool = False
    """Keep counting after a stop request, to exercise the kill path."""


STATE_FILE = "state.json"
"""The self-test's checkpoint in its ``checkpoints/`` folder: the steps done."""


def validate(config: Mapping[str, Any]) -> SelfTestConfig:
    cfg = build(SelfTestConfig, config, "the self-test job")
    return replace(cfg, seed=drawn_seed(cfg.seed))


def summary_on_disk(run_dir: Path, cfg: SelfTestConfig) -> dict[str, Any] | None:
    """The summary of a self-test stopped by force: the steps of its last
    checkpoint (None before its first)."""
    path = run_dir / CHECKPOINTS_FOLDER / STATE_FILE
    if not path.exists():
        return None
    return {"steps": read_checkpoint_state(path)["step"]}


@job_kind(
    "selftest",
    check=validate,
    label="Self-test",
    group="engine",
    resumable=True,
    summary_on_disk=summary_on_disk,
)
def run(ctx: JobContext, cfg: SelfTestConfig) -> dict[str, Any]:
    """Checks the engine end to end: progress, metrics, logs, stop."""
    rng = random.Random(cfg.seed)
    ckpt = ctx.checkpoint_dir / STATE_FILE
    done = 0
    if ctx.resume and ckpt.exists():
        done = json.loads(ckpt.read_text())["step"]
        ctx.log(f"resuming self-test at step {done}")
    ctx.log(f"self-test: {cfg.steps} steps, seed {cfg.seed}")
    for step in range(done, cfg.steps):
        if ctx.should_stop and not cfg.ignore_stop:
            break
        if cfg.fail_at_step is not None and step == cfg.fail_at_step:
            raise RuntimeError(f"self-test failure requested at step {step}")
        value = math.sin(step / 20.0) + rng.gauss(0, 0.1)
        done = step + 1
        ctx.metrics(done, {"selftest/value": value, "selftest/steps_done": done})
        ctx.progress(done, cfg.steps)
        if done % 50 == 0:
            atomic_write_json(ckpt, {"step": done})
            ctx.log(f"checkpoint at step {done}")
        if cfg.step_seconds:
            if cfg.ignore_stop:  # simulates a job that never looks at the flag
                time.sleep(cfg.step_seconds)
            else:
                ctx.wait_for_stop(cfg.step_seconds)
    atomic_write_json(ckpt, {"step": done})
    return {"steps": done}
