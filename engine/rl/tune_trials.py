"""A sweep's worker: the study's queued trials one after another, each an
``rl.train`` run of the project (several at once as one compiled program
with the ``jax`` backend, :func:`compiled_slots`)."""

from __future__ import annotations

import dataclasses
import socket
import sys
import threading
import time
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError
from engine.jobs.lifecycle import HeadlessContext
from engine.rl.tune_space import SweepSettings
from engine.rl.tune_storage import open_storage
from engine.rl.tune_study import (
    POLL_S,
    Heartbeat,
    fail_stale_trials,
    load,
    take_trial,
)

if TYPE_CHECKING:
    import optuna

    from engine.store.project import Project


KIND = "rl.train"
"""The kind of a trial's run."""

EVALS_PER_TRIAL = 5
"""Evaluations a trial makes (each one a point the pruner compares) when
``eval_every_steps`` is not given."""


class TrialContext(HeadlessContext):
    """A trial's run context: the log goes to the run's ``log.txt`` only
    (the sweep's own lines are the terminal's)."""

    def say(self, text: str) -> None:
        pass


def trial_config(
    settings: SweepSettings, params: dict[str, Any], project_dir: Path, number: int
) -> dict[str, Any]:
    """The raw ``rl.train`` config of trial ``number`` with ``params``: the
    input its validation checks, as a user's would be."""
    tops = {d.name for d in settings.search if d.top}
    seed = {} if settings.seed is None else {"seed": settings.seed + number}
    return {
        "env": settings.env,
        "algo": settings.algo,
        "total_steps": settings.steps,
        "eval_every_steps": max(1, settings.steps // EVALS_PER_TRIAL),
        **settings.fixed,
        **{k: v for k, v in params.items() if k in tops},
        **seed,
        "project_dir": str(project_dir),
        "hyperparameters": {
            **settings.hyperparameters,
            **{k: v for k, v in params.items() if k not in tops},
        },
    }


def run_trial(
    study: optuna.Study,
    settings: SweepSettings,
    project: Project,
    storage: optuna.storages.RDBStorage,
    storage_url: str,
) -> bool:
    """Take a queued trial of the study, train it as a run of ``project``
    and tell the study how it went. False when no trial is left or the
    worker was asked to stop."""
    fail_stale_trials(study)
    trial = take_trial(study, storage, settings)
    if trial is None:
        return False
    with Heartbeat(storage, trial._trial_id):
        return _run_taken(study, trial, settings, project, storage_url)


def _run_taken(
    study: optuna.Study,
    trial: optuna.trial.Trial,
    settings: SweepSettings,
    project: Project,
    storage_url: str,
) -> bool:
    from optuna.trial import TrialState

    from engine.jobs.registry import get_kind
    from engine.rl.config import TrainConfig
    from engine.rl.train import train

    n = trial.number
    objective = settings.objective
    # list choices as lists
    params = {d.name: d.suggest(trial) for d in settings.search}
    try:
        raw = trial_config(settings, params, project.path, n)
        trained: TrainConfig = get_kind(KIND).validate(raw)
    except ConfigError as exc:
        # These values do not go together (a batch larger than the rollout).
        trial.set_user_attr("error", str(exc))
        study.tell(trial, state=TrialState.FAIL)
        print(f"trial {n}: not run: {exc}", file=sys.stderr, flush=True)
        return True
    name = f"{study.study_name} #{n}"
    config = get_kind(KIND).record(trained)
    record = project.create_run(KIND, config, name=name)
    trial.set_user_attr("run_id", record.id)
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("project", str(project.path))

    target = trained.target_eval_reward
    cpu_start = time.process_time()

    def on_eval(step: int, mean: float) -> str | None:
        if objective == "time_to_target":
            assert target is not None  # the sweep's check (_new_settings)
            return _slower_than_best(
                study, time.process_time() - cpu_start, mean, target
            )
        trial.report(mean, step)
        if trial.should_prune():
            return (
                f"Pruned by the sweep {study.study_name!r}: eval mean reward "
                f"{mean:.4g} at step {step} was below the median of earlier "
                "trials at that step."
            )
        return None

    from engine.jobs.lifecycle import run_in_process

    ctx = TrialContext.of_run(project, record)
    total = float(trained.total_steps or settings.steps)
    outcome = run_in_process(
        project,
        record.id,
        ctx,
        partial(train, cfg=trained, on_eval=on_eval),
        trace=ctx.log_to_file,
        progress=lambda o: (
            None
            if o.error is not None
            else (min(float((o.summary or {}).get("total_steps", 0)), total), total)
        ),
    )
    cpu_seconds = time.process_time() - cpu_start
    summary = dict(outcome.summary or {})
    summary["sweep"] = {"study": study.study_name, "trial": n, "storage": storage_url}
    project.update_run(record.id, summary=summary)
    value = summary.get("last_eval_reward")
    if objective == "time_to_target" and (
        outcome.status == "completed" or summary.get("stopped_by") == "pruned"
    ):
        trial.set_user_attr("cpu_seconds", cpu_seconds)
        if summary.get("stopped_by") == "target":
            study.tell(trial, cpu_seconds)
        else:
            why = outcome.reason or "did not reach target_eval_reward"
            trial.set_user_attr("error", why)
            study.tell(trial, state=TrialState.PRUNED)
        return True
    if outcome.status == "completed" and isinstance(value, int | float):
        study.tell(trial, float(value))
        return True
    if summary.get("stopped_by") == "pruned":
        study.tell(trial, state=TrialState.PRUNED)
        return True
    trial.set_user_attr("error", outcome.reason or outcome.status)
    study.tell(trial, state=TrialState.FAIL)
    # A stopped (Ctrl-C) or aborted trial stops its worker; a failed one not.
    return outcome.status == "failed"


def _slower_than_best(
    study: optuna.Study, cpu_seconds: float, mean: float, target: float
) -> str | None:
    """Why a time-to-target trial that has not reached ``target`` after
    ``cpu_seconds`` stops: the best trial reached it in less (it can only
    end with a larger value). None while it may still win. Without this, a
    trial that never gets there trains its whole budget: a DQN trial that
    misses on MountainCar-v0 costs about 450 CPU seconds."""
    if mean >= target:
        return None  # reached now: its time is worth telling the sampler
    try:
        best = float(study.best_value)
    except ValueError:  # no trial has reached the target yet
        return None
    if cpu_seconds <= best:
        return None
    return (
        f"Pruned by the sweep {study.study_name!r}: {cpu_seconds:.1f} CPU seconds "
        f"without reaching eval mean reward {target:g}, more than the best "
        f"trial's {best:.1f} to reach it."
    )


def shared_threads(settings: SweepSettings, sharing: int) -> SweepSettings:
    """``settings`` with the torch threads a run would get by default split
    between ``sharing`` workers (at least one each); as they are when the
    sweep sets ``torch_threads`` or one worker runs."""
    from engine.rl.config import default_torch_threads

    fixed = settings.fixed
    if sharing <= 1 or fixed.get("torch_threads") is not None:
        return settings
    threads = max(1, default_torch_threads() // sharing)
    return dataclasses.replace(settings, fixed={**fixed, "torch_threads": threads})


def work(
    storage_url: str,
    study_name: str,
    project_dir: Path,
    *,
    checked: bool = False,
    sharing: int = 1,
) -> int:
    """A worker process: queued trials until none is left. ``sharing``: the
    workers this machine runs for the sweep, which split its torch threads
    (unless the sweep sets ``torch_threads``)."""
    from engine.rl.env_info import register_designed_envs
    from engine.store.project import Project

    storage = open_storage(storage_url, checked=checked)
    study, settings = load(storage, study_name)
    settings = shared_threads(settings, sharing)
    project = Project.open(project_dir)
    register_designed_envs(project_dir)
    try:
        slots = compiled_slots(settings)
        if slots > 1:
            _work_together(storage, study_name, settings, project, storage_url, slots)
        else:
            while run_trial(study, settings, project, storage, storage_url):
                pass
    finally:
        project.close()
    return 0


COMPILED_SLOTS_MAX = 16
"""The most trials a worker trains together as one compiled program."""

COMPILED_TOGETHER = frozenset(
    {"learning_rate", "clip_range", "ent_coef", "vf_coef", "gamma", "gae_lambda",
     "max_grad_norm"}
)  # fmt: skip
"""The settings that are values of the compiled program
(``engine.rl.compiled.ppo.Hyper``): trials differing only in them (and in
their seeds) share its shapes, so they train as one."""


def compiled_slots(settings: SweepSettings) -> int:
    """How many trials a worker trains together: up to
    :data:`COMPILED_SLOTS_MAX` when the sweep asks for the ``jax`` backend
    and searches only :data:`COMPILED_TOGETHER`; 1 otherwise, and for the
    ``time_to_target`` objective, whose CPU seconds are a trial's own."""
    searched = {d.name for d in settings.search}
    together = (
        settings.fixed.get("backend") == "jax"
        and searched <= COMPILED_TOGETHER
        and settings.objective != "time_to_target"
    )
    return min(settings.trials, COMPILED_SLOTS_MAX) if together else 1


def _work_together(
    storage: optuna.storages.RDBStorage,
    study_name: str,
    settings: SweepSettings,
    project: Project,
    storage_url: str,
    slots: int,
) -> None:
    """``slots`` threads taking trials as :func:`work` does, whose compiled
    chunks run as one ``vmap``-ed program (``engine.rl.compiled.batch``);
    each trial is still a run of the project. Each thread reads the study
    for itself: a trial's sampler is set on the study it is drawn from."""
    from engine.jobs.context import stop_threads_on_signals
    from engine.rl.compiled import batch

    failures: list[BaseException] = []

    def trials() -> None:
        try:
            study, _ = load(storage, study_name)
            while run_trial(study, settings, project, storage, storage_url):
                pass
        except BaseException as exc:  # re-raised in the worker's main thread
            failures.append(exc)

    batch.ACTIVE = batch.TrialBatch(slots)
    threads = [
        threading.Thread(target=trials, name=f"trials-{i}", daemon=True)
        for i in range(slots)
    ]
    restore = stop_threads_on_signals(lambda text: print(text, file=sys.stderr))
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(POLL_S)
    finally:
        restore()
        batch.ACTIVE = None
    if failures:
        raise failures[0]
