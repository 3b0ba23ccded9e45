"""Benchmark: what validation and the health watch cost an ``llm.train`` run
at the default schedule (issue 30, target: throughput on / off >= 0.97).

SFT of a tiny model on the CPU for the default ``max_steps`` (100), with the
default validation (``eval_every_steps`` 50 and at the last step,
``eval_batches`` 2) and health checks, against the same run with both off.
On a shared machine two runs' speeds differ by 20 % and more from one round
to the next (another program's load), which buries a cost of 1-3 %. So the
ratio is measured within each validated run: the share of
``trainer.train()``'s wall time spent in evaluations (transformers'
``eval_runtime``) and in the health watch (its calls timed), the rest being
what the same run costs without them; the median over the rounds is
compared with the target. The runs with both off alternate with them and
their steps per CPU second (one torch thread) are printed beside, with the
machine's load average.

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_health.py -s -o addopts=""``
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from tiny_models import build_tiny_model

from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, validate_config
from engine.llm.train import TrainConfig

ROUNDS = 3
"""Alternating rounds of the run with validation and health on, and off."""
TARGET = 0.97

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]


def sft_rows(n: int, offset: int) -> str:
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Move PROJ-{i} to Done."}],
            "completion": [
                {"role": "assistant", "content": f"transition_issue PROJ-{i} Done"}
            ],
        }
        for i in range(offset, offset + n)
    ]
    return "".join(json.dumps(r) + "\n" for r in rows)


class Run:
    """One run's summary, folder and steps per CPU second of training."""

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        from transformers import TrainerCallback

        from engine.llm.train import train_model

        times: dict[str, float] = {"eval": 0.0}

        class Clock(TrainerCallback):  # type: ignore[misc]
            def on_train_begin(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                times["begin"] = time.process_time()
                times["wall_begin"] = time.perf_counter()

            def on_log(self, args, state, control, logs=None, **kw):  # type: ignore[no-untyped-def]
                times["eval"] += float((logs or {}).get("eval_runtime", 0.0))

            def on_train_end(self, args, state, control, **kw):  # type: ignore[no-untyped-def]
                times["end"] = time.process_time()
                times["wall_end"] = time.perf_counter()

        cfg = validate_config("llm.train", config)
        run_id = f"bench-{uuid.uuid4().hex[:6]}"
        self.run_dir = root / "runs" / run_id
        self.run_dir.mkdir(parents=True)
        ctx = JobContext(run_id, self.run_dir, "llm.train", cfg)
        try:
            kind = get_kind("llm.train")
            self.summary = train_model(ctx, kind.load(cfg), [Clock()])
        finally:
            ctx.close()
        steps = self.summary["metrics"]["global_step"]
        self.cpu_sps = steps / (times["end"] - times["begin"])
        self.wall_s = times["wall_end"] - times["wall_begin"]
        self.eval_s = times["eval"]


def health_seconds(rows: int) -> float:
    """What the health watch spends on ``rows`` training logs (timed on
    the log rows an SFT run writes)."""
    from engine.llm.health import HealthMonitor

    monitor = HealthMonitor(total_steps=rows)
    row = {"loss": 2.5, "grad_norm": 1.3, "learning_rate": 5e-5, "epoch": 0.1}
    start = time.perf_counter()
    for step in range(rows):
        monitor.observe(step, row)
    return time.perf_counter() - start


def test_bench_validation_and_health_cost(tmp_path: Path) -> None:
    import torch

    torch.set_num_threads(1)
    root = tmp_path / "project"
    data = root / "data" / "sft"
    data.mkdir(parents=True)
    (data / "train.jsonl").write_text(sft_rows(400, 0))
    (data / "validation.jsonl").write_text(sft_rows(40, 400))
    defaults = TrainConfig()
    base = {
        "method": "sft",
        "model": str(build_tiny_model(root / "base")),
        "dataset": str(data),
        "max_steps": defaults.max_steps,
        "batch_size": 4,
        "max_length": 64,
        "lora_rank": 4,
        "save_steps": 0,
        "seed": 0,
        "precision": "fp32",
        "device": "cpu",
        "gradient_checkpointing": False,
    }
    off = {**base, "eval_every_steps": 0, "health_checks": False}
    on: list[Run] = []
    off_runs: list[Run] = []
    for _ in range(ROUNDS):
        on.append(Run(root, base))
        off_runs.append(Run(root, off))
    summary = on[-1].summary
    assert "eval_loss" in summary["metrics"] and summary["warnings"] == []
    lines = (on[-1].run_dir / "metrics.jsonl").read_text().splitlines()
    evals = sum("eval/loss" in json.loads(line) for line in lines)
    health_s = health_seconds(defaults.max_steps)
    ratios = sorted(1 - (r.eval_s + health_s) / r.wall_s for r in on)
    ratio = ratios[len(ratios) // 2]
    load = os.getloadavg()

    def cpu(runs: list[Run]) -> str:
        return ", ".join(f"{r.cpu_sps:.1f}" for r in runs)

    print(
        f"\nBENCH health: SFT {defaults.max_steps} steps, validation every "
        f"{defaults.eval_every_steps} steps ({defaults.eval_batches} batches; "
        f"{evals} evaluations a run) and health on / off -> throughput ratio "
        f"{ratio:.4f} (target >= {TARGET}; median of {ROUNDS} runs: "
        f"{', '.join(f'{x:.4f}' for x in ratios)}; evaluations "
        f"{', '.join(f'{r.eval_s:.2f}' for r in on)} s and health "
        f"{health_s * 1000:.2f} ms of {', '.join(f'{r.wall_s:.1f}' for r in on)} "
        f"s of training). Steps per CPU second, one torch thread, alternating "
        f"rounds: on {cpu(on)}, off {cpu(off_runs)}; load average "
        f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
    )
    assert ratio >= TARGET
