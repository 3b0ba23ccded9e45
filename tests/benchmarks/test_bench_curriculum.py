"""Benchmark: MaskablePPO on the hardest bundled Jira env, with and without a
curriculum: environment steps to 95 % evaluation success, and what was
reached.

The hardest env is ``jira_release_pipeline``: an issue goes Backlog,
Triage, Ready, In Progress, Code Review, QA, Staging, UAT, Done, one
correct tool a step among three to five valid ones (commenting always
is, and leaves the status); review, QA and the customer may send it back
(probabilistic outcomes), parking or blocking it loses progress, and
closing it (Won't Do, Duplicate, Cancelled) ends the episode as a failure.
The reward is sparse: 1 on reaching the target status, -0.01 a step,
nothing else. 34 of its 40 issues need 7 to 9 transitions (26 wait in the
backlog), one issue each 1 to 6; valid tools picked at random finish a
long issue in about 0.1 % of episodes. A plain run learns the chain from
the few short issues it happens to sample; the curriculum plays issues of
up to 2 steps, then 4, 6, 7, then all (the env as designed), advancing
when 90 % of the last 50 evaluation episodes at the stage succeed, so it
cannot leave a stage sooner than one evaluation later.

The earlier choice, ``jira_status_update`` (issues of 1 to 3 steps with
potential-based status shaping), is learnt by plain MaskablePPO in its
first update (95 % at 3,000 steps); a curriculum there (one step, two,
all) could only cost steps: 95 % at 5,000, curriculum / plain = 1.67.

Both runs: the studio's ``rl.train``, same seed, preset, 8 envs, evaluation
every 1,000 steps over 50 greedy episodes; several seeds, alternating which
run goes first. Figures, all at full difficulty (the curriculum's last
stage; the plain run's every evaluation): steps to the first evaluation at
95 % or more (steps at easier stages count), steps until the mean of 5
evaluations in a row (250 episodes) reaches 80 %, and the mean success of
the last 10 evaluations.

Measured (2026-11-27, seeds 0-2, the same configuration run two at a time
on a loaded 2-core box, 6-12 min a run, about 1 min on an idle one; step
counts are seeded, not timed):
steps to a 95 % evaluation, plain 15,000 / 19,000 / 12,000, curriculum
12,000 / 17,000 / 12,000 (its last stage from 11,000 / 13,000 / 7,000);
curriculum / plain, median = 12,000 / 15,000 = 0.80, 20 % fewer steps (per
seed 0.80, 0.89, 1.00: fewer in two seeds, as many in one). Both runs
plateau before a jump: plain near 0.2 at full difficulty, the curriculum
near 0.6-0.8 at its 7-step stage (the one adding Triage and Blocked).

Run: nice -n 19 .venv/bin/pytest tests/benchmarks/test_bench_curriculum.py -s
-o addopts=""
"""

from __future__ import annotations

import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from engine.envs.curriculum import STAGE_METRIC
from engine.jobs.context import JobContext
from engine.rl.config import validate
from engine.rl.train import run

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "resources" / "examples"
ENV = "rlstudio/jira_release_pipeline-v0"
BUDGET = 40_000
SEEDS = (0, 1, 2)
EVAL_EVERY = 1000
SUCCESS = 0.95
SMOOTH = (5, 0.8)
"""Evaluations averaged, and the rate their mean must reach."""
MEASURED_WITH = {
    "n_steps": 256,
    "batch_size": 64,
    "n_epochs": 10,
    "learning_rate": 3e-4,
}
"""The engine's defaults for 8 env copies, which the figures above were
measured with, pinned: the env's built-in preset (tuned later, to reach a
0.8 mean reward sooner) would change both runs."""
CURRICULUM = {
    "stages": [
        {"max_task_difficulty": 2},
        {"max_task_difficulty": 4},
        {"max_task_difficulty": 6},
        {"max_task_difficulty": 7},
        {},
    ],
    "threshold": 0.9,
    "window": 50,
}

# Six 40,000-step runs, one after another: 5-25 min on two shared cores.
pytestmark = [pytest.mark.bench, pytest.mark.timeout(3600)]


def train(project: Path, seed: int, curriculum: bool) -> dict[str, Any]:
    """One run; its steps to 95 % success at full difficulty (None if never),
    the best full-difficulty success rate, and when it reached each stage."""
    cfg = validate(
        {
            "env": ENV,
            "algo": "MaskablePPO",
            "total_steps": BUDGET,
            "seed": seed,
            "n_envs": 8,
            "eval_every_steps": EVAL_EVERY,
            "eval_episodes": 50,
            "checkpoint_every_steps": 0,
            "torch_threads": 1,
            "hyperparameters": MEASURED_WITH,
            "project_dir": str(project),
            **({"curriculum": CURRICULUM} if curriculum else {}),
        }
    )
    run_dir = project / "runs" / f"{'cur' if curriculum else 'plain'}-{seed}"
    run_dir.mkdir(parents=True)
    t0 = time.perf_counter()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    try:
        run(ctx)
    finally:
        ctx.close()
    wall = time.perf_counter() - t0
    rows = (run_dir / "metrics.jsonl").read_text().splitlines()
    last = len(CURRICULUM["stages"]) - 1
    played = 0 if curriculum else last  # the stage the next evaluation plays
    stages = {played: 0}  # stage -> the step it began at
    full: list[tuple[int, float]] = []  # (step, success) at full difficulty
    for row in map(json.loads, rows):
        if "eval/success_rate" not in row:
            continue
        if played == last:
            full.append((row["step"], row["eval/success_rate"]))
        # an evaluation's row holds the stage after it
        if curriculum and int(row[STAGE_METRIC]) != played:
            played = int(row[STAGE_METRIC])
            stages.setdefault(played, row["step"])
    first_95 = next((step for step, rate in full if rate >= SUCCESS), None)
    n, rate = SMOOTH
    smooth = next(
        (
            full[i + n - 1][0]
            for i in range(len(full) - n + 1)
            if statistics.mean(r for _, r in full[i : i + n]) >= rate
        ),
        None,
    )
    final = statistics.mean(r for _, r in full[-10:]) if full else 0.0
    return {
        "steps_to_95": first_95,
        "steps_to_smooth_80": smooth,
        "final_success": round(final, 3),
        "stages": stages,
        "wall_s": round(wall, 1),
    }


def test_curriculum_against_plain_maskable_ppo(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    results: dict[str, list[dict[str, Any]]] = {"plain": [], "curriculum": []}
    for i, seed in enumerate(SEEDS):
        order = (False, True) if i % 2 == 0 else (True, False)
        for cur in order:
            r = train(tmp_path, seed, cur)
            results["curriculum" if cur else "plain"].append(r)
            print(f"seed {seed} {'curriculum' if cur else 'plain':10s} {r}", flush=True)

    def steps(rs: list[dict[str, Any]], key: str) -> str:
        values = [r[key] for r in rs]
        done = [v for v in values if v is not None]
        shown = [
            f"{v:,}" if v is not None else f"not within {BUDGET:,}" for v in values
        ]
        text = f"{shown} (reached in {len(done)}/{len(rs)} seeds"
        if done:
            text += f", median {statistics.median(done):,.0f}"
        return text + ")"

    def capped(rs: list[dict[str, Any]], key: str) -> float:
        # a run that never got there counts as the whole budget
        return statistics.median(r[key] if r[key] is not None else BUDGET for r in rs)

    print(f"\nMaskablePPO on {ENV}, budget {BUDGET:,} steps, seeds {SEEDS}")
    for name, rs in results.items():
        finals = [r["final_success"] for r in rs]
        print(
            f"  {name:10s} steps to a 95 % evaluation: {steps(rs, 'steps_to_95')}; "
            f"steps to a 5-evaluation mean of 80 %: "
            f"{steps(rs, 'steps_to_smooth_80')}; mean success of the last 10 "
            f"evaluations {finals} (median {statistics.median(finals):.2f})"
        )
    for key in ("steps_to_95", "steps_to_smooth_80"):
        ratio = capped(results["curriculum"], key) / capped(results["plain"], key)
        way = "fewer" if ratio < 1 else "more"
        print(
            f"  curriculum / plain, median {key} (unreached = budget) = "
            f"{ratio:.2f} ({abs(1 - ratio) * 100:.0f} % {way} steps)"
        )
    final_ratio = statistics.median(
        r["final_success"] for r in results["curriculum"]
    ) / max(1e-9, statistics.median(r["final_success"] for r in results["plain"]))
    print(f"  curriculum / plain, median final success = {final_ratio:.3f}")
    # every curriculum run reaches the env as designed and 95 % there, in
    # fewer steps than the plain runs (the median; step counts are seeded,
    # not timed, so the load does not move them)
    assert all(r["steps_to_95"] is not None for r in results["curriculum"]), results
    assert capped(results["curriculum"], "steps_to_95") < capped(
        results["plain"], "steps_to_95"
    ), results
