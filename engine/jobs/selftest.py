"""A diagnostic job: exercises progress, metrics, logs, checkpoints and stop
without any machine-learning library, so a user (Help ▸ Engine self-test) and
the tests can check the whole pipeline in a second."""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.jobs.context import CHECKPOINTS_FOLDER, JobContext
from engine.jobs.lifecycle import read_checkpoint_state
from engine.settings import checked_config, setting
from engine.store.atomic import atomic_write_json


@dataclass
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


def validate(config: dict[str, Any]) -> dict[str, Any]:
    out = checked_config(SelfTestConfig, config, "the self-test job")
    if out["seed"] is None:
        out["seed"] = random.randrange(2**31)
    return out


def run(ctx: JobContext) -> dict[str, Any]:
    cfg = ctx.config
    steps: int = cfg["steps"]
    ignore_stop: bool = cfg["ignore_stop"]
    rng = random.Random(cfg["seed"])
    ckpt = ctx.checkpoint_dir / STATE_FILE
    done = 0
    if ctx.resume and ckpt.exists():
        done = json.loads(ckpt.read_text())["step"]
        ctx.log(f"resuming self-test at step {done}")
    ctx.log(f"self-test: {steps} steps, seed {cfg['seed']}")
    for step in range(done, steps):
        if ctx.should_stop and not ignore_stop:
            break
        if cfg["fail_at_step"] is not None and step == cfg["fail_at_step"]:
            raise RuntimeError(f"self-test failure requested at step {step}")
        value = math.sin(step / 20.0) + rng.gauss(0, 0.1)
        done = step + 1
        ctx.metrics(done, {"selftest/value": value, "selftest/steps_done": done})
        ctx.progress(done, steps)
        if done % 50 == 0:
            atomic_write_json(ckpt, {"step": done})
            ctx.log(f"checkpoint at step {done}")
        if cfg["step_seconds"]:
            if ignore_stop:  # simulates a job that never looks at the flag
                time.sleep(cfg["step_seconds"])
            else:
                ctx.wait_for_stop(cfg["step_seconds"])
    atomic_write_json(ckpt, {"step": done})
    return {"steps": done}


def summary_on_disk(run_dir: Path, config: dict[str, Any]) -> dict[str, Any] | None:
    """The summary of a self-test stopped by force: the steps of its last
    checkpoint (None before its first)."""
    path = run_dir / CHECKPOINTS_FOLDER / STATE_FILE
    if not path.exists():
        return None
    return {"steps": read_checkpoint_state(path)["step"]}
