"""Shared by the preset benchmarks (test_bench_rl.py, test_bench_presets.py):
time to a target eval reward for a built-in preset against RL Zoo's
published settings (rl-baselines3-zoo hyperparams/*.yml) run as a bare
stable-baselines3 script with SB3's own EvalCallback and reward-threshold
stop on the studio's evaluation schedule.

The two alternate (``alternate``), the order flipping every seed, so a
machine getting busier or quieter hits both alike; the figure is the ratio
of the medians of wall seconds (CPU seconds printed beside: other processes
on a shared machine bend wall time more). A run that never reaches the
target counts its full time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.jobs.context import JobContext
from engine.rl.config import validate
from engine.rl.train import run


@dataclass(frozen=True)
class Tuned:
    """A built-in preset and the RL Zoo settings it is measured against."""

    env: str
    algo: str
    target: float
    budget: int
    """Most environment steps of either run (its full time counts when the
    target is not reached)."""
    zoo: dict[str, Any] = field(default_factory=dict)
    """RL Zoo's hyperparameters as SB3 keyword arguments, plus ``n_envs``
    and ``normalize``; a value ``"lin_<x>"`` is rl_zoo3's linear schedule
    from x to 0."""


Outcome = tuple[float, int, bool, float]
"""(wall seconds, steps, reached the target, CPU seconds of this process)."""


def studio_to_target(folder: Path, case: Tuned, seed: int) -> Outcome:
    """The studio's built-in preset, stopping at the target."""
    cfg = validate(
        {
            "env": case.env,
            "algo": case.algo,
            "seed": seed,
            "total_steps": case.budget,
            "target_eval_reward": case.target,
            "checkpoint_every_steps": 0,
        }
    )
    run_dir = folder / "runs" / f"target-{seed}-{time.monotonic_ns()}"
    t0, c0 = time.perf_counter(), time.process_time()
    ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    wall = time.perf_counter() - t0
    reached = summary.get("stopped_by") == "target"
    return wall, int(summary["total_steps"]), reached, time.process_time() - c0


def _zoo_value(value: Any) -> Any:
    """rl_zoo3's ``lin_<x>``: a schedule from x at the start to 0 at the end."""
    if isinstance(value, str) and value.startswith("lin_"):
        start = float(value[4:])
        schedule: Callable[[float], float] = lambda progress: progress * start  # noqa: E731
        return schedule
    return value


def zoo_to_target(case: Tuned, seed: int, eval_every: int, episodes: int) -> Outcome:
    """RL Zoo's settings as a bare SB3 script, evaluating like the studio."""
    import stable_baselines3
    import torch
    from stable_baselines3.common.callbacks import (
        EvalCallback,
        StopTrainingOnRewardThreshold,
    )
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecEnv, VecNormalize

    kwargs = {key: _zoo_value(value) for key, value in case.zoo.items()}
    n_envs = kwargs.pop("n_envs", 1)
    normalize = kwargs.pop("normalize", False)
    t0, c0 = time.perf_counter(), time.process_time()
    torch.set_num_threads(1)
    env: VecEnv = make_vec_env(case.env, n_envs=n_envs, seed=seed)
    eval_env: VecEnv = make_vec_env(case.env, n_envs=1, seed=seed + 10_000)
    if normalize:  # rl_zoo3: VecNormalize with the algorithm's gamma
        env = VecNormalize(env, gamma=kwargs["gamma"])
        eval_env = VecNormalize(
            eval_env, gamma=kwargs["gamma"], training=False, norm_reward=False
        )
    algo_class = getattr(stable_baselines3, case.algo)
    model = algo_class("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
    stop = StopTrainingOnRewardThreshold(reward_threshold=case.target, verbose=0)
    callback = EvalCallback(
        eval_env,
        callback_on_new_best=stop,
        eval_freq=max(1, eval_every // n_envs),
        n_eval_episodes=episodes,
        deterministic=True,
        verbose=0,
    )
    model.learn(case.budget, callback=callback)
    reached = callback.best_mean_reward >= case.target
    env.close()
    eval_env.close()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, int(model.num_timesteps), reached, cpu


Runner = Callable[[int], Outcome]
"""One run on a seed."""


def alternate(
    seeds: tuple[int, ...], first: tuple[str, Runner], second: tuple[str, Runner]
) -> tuple[list[Outcome], list[Outcome]]:
    """Both runners on each seed, ``second`` first on the 1st, 3rd, ... seed
    and ``first`` first on the others, so a machine getting busier or
    quieter hits both alike; prints each run as it ends (a
    loaded machine makes the whole long). Returns each runner's outcomes."""
    rows: dict[str, list[Outcome]] = {first[0]: [], second[0]: []}
    for i, seed in enumerate(seeds):
        for name, runner in (second, first) if i % 2 == 0 else (first, second):
            rows[name].append(runner(seed))
            w, n, ok, c = rows[name][-1]
            print(
                f"  {name} seed {seed}: {w:.1f} s ({c:.1f} CPU s) / {n:,} "
                f"steps{'' if ok else ' (not reached)'}",
                flush=True,
            )
    return rows[first[0]], rows[second[0]]


@dataclass(frozen=True)
class Medians:
    """``ours`` against ``theirs``: ratios of the medians over the seeds."""

    wall: float
    cpu: float
    steps: float
    ours_wall: float
    theirs_wall: float

    @staticmethod
    def of(ours: list[Outcome], theirs: list[Outcome]) -> Medians:
        def median(rows: list[Outcome], i: int) -> float:
            return statistics.median(row[i] for row in rows)

        return Medians(
            wall=median(ours, 0) / median(theirs, 0),
            cpu=median(ours, 3) / median(theirs, 3),
            steps=median(ours, 1) / median(theirs, 1),
            ours_wall=median(ours, 0),
            theirs_wall=median(theirs, 0),
        )


def way(ratio: float, what: str = "") -> str:
    """'12 % less time' for 0.88 (lower is better)."""
    return f"{abs(1 - ratio) * 100:.0f} % {'less' if ratio < 1 else 'more'}{what}"


def report(head: str, m: Medians, sides: dict[str, list[Outcome]]) -> None:
    """Print the BENCH line (``head``, then the ratios in ``m`` of the two
    ``sides``, ours first) and each side's runs on a line of its own."""
    (ours, ours_rows), (theirs, theirs_rows) = sides.items()
    print()
    print(
        f"{head}; {ours}/{theirs} = {m.wall:.2f} (lower is better; "
        f"{way(m.wall, ' time')}); CPU seconds {ours}/{theirs} = {m.cpu:.2f} "
        f"({way(m.cpu)}); median steps {ours}/{theirs} = {m.steps:.2f}; reached "
        f"{times_reached(ours_rows)} against {times_reached(theirs_rows)} of "
        f"{len(ours_rows)}; {load()}"
    )
    for name, rows in sides.items():
        print(
            f"  {name}: "
            + ", ".join(
                f"{w:.1f} s ({c:.1f} CPU s) / {n:,} steps"
                + ("" if ok else " (not reached)")
                for w, n, ok, c in rows
            )
        )


def times_reached(rows: list[Outcome]) -> int:
    """How many runs reached the target."""
    return sum(ok for _, _, ok, _ in rows)


def load() -> str:
    return f"load average (1 min) {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"


def race(
    folder: Path, case: Tuned, seeds: tuple[int, ...], title: str
) -> tuple[float, list[Outcome], list[Outcome]]:
    """The preset and RL Zoo's settings on each seed, alternating; prints
    each run as it ends and the summary line headed ``title``. Returns
    (preset/zoo ratio of median wall seconds, preset runs, zoo runs)."""
    defaults = validate({"env": case.env, "algo": case.algo})
    every, episodes = defaults["eval_every_steps"], defaults["eval_episodes"]
    # Warm-up, not counted: the first torch optimizer imports torch._dynamo.
    zoo_to_target(replace(case, budget=2_000), 99, every, episodes)
    studio, zoo = alternate(
        seeds,
        ("studio", lambda seed: studio_to_target(folder, case, seed)),
        ("zoo", lambda seed: zoo_to_target(case, seed, every, episodes)),
    )
    m = Medians.of(studio, zoo)
    report(
        f"BENCH {title} time to eval reward {case.target:g} on {case.env} "
        f"({case.algo}, seeds {seeds[0]}-{seeds[-1]}): preset {m.ours_wall:.1f} s, "
        f"RL Zoo settings bare SB3 {m.theirs_wall:.1f} s (median, alternating; "
        f"eval every {every:,} steps, {episodes} episodes)",
        m,
        {"preset": studio, "zoo": zoo},
    )
    return m.wall, studio, zoo


# --------------------------------------------------------------------------
# Designed envs (resources/examples/envs): RL Zoo has no settings for them, so
# a tuned preset races what a run gets without one, the engine's defaults.
# --------------------------------------------------------------------------

EXAMPLES = Path(__file__).resolve().parents[2] / "resources" / "examples"


@dataclass(frozen=True)
class Designed:
    """A built-in preset for a bundled designed env and the target it races
    the engine's defaults to (the settings a run had before the preset)."""

    env: str
    """``rlstudio/<name>-v0``."""
    algo: str
    target: float
    budget: int
    """Most environment steps of either run (its full time counts when the
    target is not reached)."""


def bundled_project(folder: Path) -> Path:
    """A project folder holding the bundled designed envs and their data."""
    import shutil

    if not (folder / "envs").exists():
        shutil.copytree(EXAMPLES / "envs", folder / "envs")
        shutil.copytree(EXAMPLES / "data", folder / "data")
    return folder


def designed_to_target(
    project: Path, case: Designed, seed: int, *, preset: bool
) -> Outcome:
    """A run of ``case`` stopping at its target: with the built-in preset,
    or (``preset=False``) with the engine's defaults, as before the preset
    existed (the env's entry is left out of the built-in presets meanwhile)."""
    from engine.rl.presets import builtin_presets

    presets = builtin_presets()  # the one cached dict validation reads

    config = {
        "env": case.env,
        "algo": case.algo,
        "seed": seed,
        "total_steps": case.budget,
        "target_eval_reward": case.target,
        "checkpoint_every_steps": 0,
        "project_dir": str(project),
    }
    # Without the preset the env's entry is out of the presets for the whole run,
    # so the run's log says it has none.
    saved = None if preset else presets.pop(case.env, None)
    try:
        cfg = validate(config)
        name = f"{'preset' if preset else 'default'}-{seed}-{time.monotonic_ns()}"
        run_dir = project / "runs" / name
        t0, c0 = time.perf_counter(), time.process_time()
        ctx = JobContext(run_dir.name, run_dir, "rl.train", cfg, events=None)
        summary = run(ctx)
        ctx.close()
    finally:
        if saved is not None:
            presets[case.env] = saved
    wall = time.perf_counter() - t0
    reached = summary.get("stopped_by") == "target"
    return wall, int(summary["total_steps"]), reached, time.process_time() - c0


def race_defaults(
    folder: Path, case: Designed, seeds: tuple[int, ...], title: str
) -> tuple[float, list[Outcome], list[Outcome]]:
    """The built-in preset and the engine's defaults on each seed,
    alternating; prints each run as it ends and the summary line headed
    ``title``. Returns (preset/default ratio of median wall seconds, preset
    runs, default runs)."""
    project = bundled_project(folder)
    # Warm-up, not counted: imports and the first optimizer.
    designed_to_target(project, replace(case, budget=1_000), 99, preset=False)
    tuned, default = alternate(
        seeds,
        ("preset", lambda seed: designed_to_target(project, case, seed, preset=True)),
        ("default", lambda seed: designed_to_target(project, case, seed, preset=False)),
    )
    m = Medians.of(tuned, default)
    report(
        f"BENCH {title} time to eval mean reward {case.target:g} on {case.env} "
        f"({case.algo}, seeds {', '.join(map(str, seeds))}, budget "
        f"{case.budget:,} steps): preset {m.ours_wall:.1f} s, engine defaults "
        f"{m.theirs_wall:.1f} s (median, alternating)",
        m,
        {"preset": tuned, "default": default},
    )
    return m.wall, tuned, default
