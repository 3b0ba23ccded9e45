"""Benchmark: ``llm.train`` on 2 CPU processes (accelerate, gloo) against 1,
for SFT and GRPO on the tiny test model, at the same effective batch.

- 1 process: ``batch_size`` B, ``gradient_accumulation_steps`` 2;
- 2 processes: ``batch_size`` B, ``gradient_accumulation_steps`` 1.

Both see 2B sequences (SFT) or completions (GRPO) per optimizer step, and
with accelerate's batch sharding the same ones: the single process's two
micro-batches are the two ranks' batches. Samples/s is measured over
``trainer.train`` (the summary's ``wall_s``; the launch and the model
loading are reported beside it). Gradient averaging is checked twice:

- SFT's loss curve on 2 processes equals the single-process one within a
  tolerance (same samples, same seed, losses averaged over the ranks' tokens;
  the step that crosses the epoch end splits its rows differently, hence a
  tolerance rather than equality);
- after GRPO (sampled completions differ per rank), both ranks hold the same
  trained weights (the digest each rank logs).

Each process runs cores / processes torch threads (accelerate's choice for
CPU ranks; the single process is given the same), so the ratio compares one
process with two, not thread contention. On a 2-core machine the two
processes share the cores: the figure says what the gloo path costs or gains
here, not what GPUs gain.

Run: ``.venv/bin/pytest tests/benchmarks/test_bench_scaleout.py -s -o addopts=""``
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import pytest
from test_llm_scaleout import Project, metrics_rows, train

pytestmark = [pytest.mark.bench, pytest.mark.timeout(1800)]

STEPS = 6
BATCH = 2
DIGEST = re.compile(r"\[rank (\d+)\] trained weights digest (\w+)$")


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Project:
    return Project(tmp_path_factory.mktemp("bench-scaleout"))


def measure(project: Project, method: str, processes: int) -> dict[str, Any]:
    over = {
        "max_steps": STEPS,
        "batch_size": BATCH,
        "num_processes": processes,
        "gradient_accumulation_steps": 2 // processes,
        "num_generations": 2,
        "learning_rate": 1e-3,
    }
    ctx = project.context(project.config(method, **over))
    import torch

    threads = torch.get_num_threads()
    # accelerate gives each CPU rank cores / processes threads; the single
    # process gets as many per process, so the ratio compares processes,
    # not OpenMP thread contention (printed beside it: the default).
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))
    t0 = time.monotonic()
    try:
        summary = train(ctx)
    finally:
        torch.set_num_threads(threads)
    total = time.monotonic() - t0
    wall = summary["metrics"]["wall_s"]
    samples = STEPS * BATCH * 2
    losses = [r["train/loss"] for r in metrics_rows(ctx.run_dir) if "train/loss" in r]
    digests = dict(m.groups() for m in map(DIGEST.match, ctx.lines) if m)
    return {
        "samples_per_s": samples / wall,
        "wall_s": wall,
        "total_s": total,
        "losses": losses,
        "digests": digests,
    }


@pytest.mark.parametrize("method", ["sft", "grpo"])
def test_two_processes_against_one(project: Project, method: str) -> None:
    one = measure(project, method, 1)
    two = measure(project, method, 2)
    ratio = two["samples_per_s"] / one["samples_per_s"]
    direction = "faster" if ratio >= 1 else "slower"
    print(
        f"\n{method.upper()} on the tiny model, effective batch {BATCH * 2}, "
        f"{STEPS} steps:\n"
        f"  1 process:   {one['samples_per_s']:.2f} samples/s "
        f"(train {one['wall_s']:.1f} s, job {one['total_s']:.1f} s)\n"
        f"  2 processes: {two['samples_per_s']:.2f} samples/s "
        f"(train {two['wall_s']:.1f} s, job {two['total_s']:.1f} s with the launch)\n"
        f"  2 processes / 1 process = {ratio:.2f} "
        f"({abs(ratio - 1) * 100:.0f} % {direction})"
    )
    assert len(one["losses"]) == len(two["losses"]) == STEPS
    if method == "sft":
        # Same samples per step: the averaged gradients give the same curve.
        print(f"  loss 1 process:   {[round(x, 4) for x in one['losses']]}")
        print(f"  loss 2 processes: {[round(x, 4) for x in two['losses']]}")
        assert two["losses"] == pytest.approx(one["losses"], rel=2e-3, abs=1e-4)
    else:
        print(f"  rank weight digests after training: {two['digests']}")
        assert set(two["digests"]) == {"0", "1"}
        assert two["digests"]["0"] == two["digests"]["1"]
    assert ratio > 0.2  # the gloo path must not collapse
