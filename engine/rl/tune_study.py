"""A sweep's study: made with its trials queued, its trials taken by one
worker each, failed and queued again when their worker is gone, watched
for finished trials and summed up (best trial, preset)."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError, EngineError
from engine.rl.sweep_workers import WorkerGroup
from engine.rl.tune_space import (
    SweepSettings,
    trial_values,
)
from engine.rl.tune_storage import (
    HEARTBEAT_S,
    default_storage,
    existing_storage,
)

if TYPE_CHECKING:
    import optuna


SETTINGS_ATTR = "rlstudio_sweep"
"""The study's user attribute holding what it searches (:func:`settings_of`)."""

POLL_S = 0.5
"""How often the command reads the study for finished trials."""

WORKER_ATTR = "rlstudio_worker"
"""A running trial's system attribute naming its worker (host, pid, start
time), so that a worker on the same machine sees at once that it died."""

RETRY_OF_ATTR = "rlstudio_retry_of"
"""A queued trial's system attribute: the number of the trial whose worker
died, which it trains again (once)."""


def settings_of(study: optuna.Study) -> SweepSettings:
    """What a study made by this command searches: env, algo, steps, trials,
    the search space, fixed settings, seed and pruner start."""
    data = study.user_attrs.get(SETTINGS_ATTR)
    if not isinstance(data, dict):
        raise EngineError(
            f"The study {study.study_name!r} was not made by rl-studio-engine tune."
        )
    return SweepSettings.from_json(data)


def study_exists(storage: optuna.storages.RDBStorage, name: str) -> bool:
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def _sampler(settings: SweepSettings, number: int) -> optuna.samplers.BaseSampler:
    """The sampler that draws trial ``number``'s settings, seeded with the
    sweep's seed plus the trial's number: a seeded sweep draws the same
    trials whether one worker takes them or many, on one machine or several
    (a seed per worker gave the first worker on each machine the same
    draws, and a two-worker sweep other trials than a one-worker one)."""
    import optuna

    seed = settings.seed
    # constant_liar: running trials count as bad, so parallel workers spread.
    return optuna.samplers.TPESampler(
        seed=None if seed is None else seed + number, constant_liar=True
    )


def _pruner(settings: SweepSettings) -> optuna.pruners.BasePruner:
    import optuna

    if settings.objective != "reward":
        # The median pruner compares the reported rewards in the study's
        # direction, which for a time is the wrong way round.
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=settings.prune_startup)


def load(
    storage: optuna.storages.RDBStorage, name: str
) -> tuple[optuna.Study, SweepSettings]:
    """(study, settings) of the sweep ``name``. Its sampler is set for each
    trial a worker takes (:func:`take_trial`)."""
    import optuna

    study = optuna.load_study(study_name=name, storage=storage)
    settings = settings_of(study)
    study = optuna.load_study(
        study_name=name, storage=storage, pruner=_pruner(settings)
    )
    return study, settings


def _finished_states() -> tuple[optuna.trial.TrialState, ...]:
    from optuna.trial import TrialState

    return (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


def finished(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The study's finished trials."""
    return list(study.get_trials(deepcopy=False, states=_finished_states()))


def finished_count(storage: optuna.storages.RDBStorage, study_id: int) -> int:
    """How many of the study's trials have finished, in one COUNT query.
    Reading the finished trials (:func:`finished`) loads every queued and
    running one too, with its parameters and reports: a watcher polling
    twice a second does that only when this count has grown."""
    import sqlalchemy
    from optuna.storages._rdb.models import TrialModel

    query = (
        sqlalchemy.select(sqlalchemy.func.count())
        .select_from(TrialModel)
        .where(TrialModel.study_id == study_id)
        .where(TrialModel.state.in_(_finished_states()))
    )
    with storage.engine.connect() as connection:
        return int(connection.execute(query).scalar_one())


def queue_trials(study: optuna.Study, settings: SweepSettings) -> None:
    """Queue the trials the study lacks, once, by whoever makes it: workers
    take queued trials only (:func:`take_trial`), so the study never gets
    more than its ``trials``."""
    missing = settings.trials - len(study.get_trials(deepcopy=False))
    for _ in range(missing):
        study.enqueue_trial({}, skip_if_exists=False)


def take_trial(
    study: optuna.Study, storage: optuna.storages.RDBStorage, settings: SweepSettings
) -> optuna.trial.Trial | None:
    """A queued trial, now running and this worker's, drawing its settings
    with its own sampler (:func:`_sampler`); None when none is left. Of two
    workers reaching for one trial, one gets it and the other tries the
    next."""
    import optuna
    from optuna.trial import TrialState

    study_id = storage.get_study_id_from_name(study.study_name)
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        if _claim(storage, trial_id):
            storage.record_heartbeat(trial_id)
            # Who runs it: a worker on this machine finds it at once if
            # this process dies (fail_stale_trials).
            storage.set_trial_system_attr(trial_id, WORKER_ATTR, _this_worker())
            study.sampler = _sampler(settings, t.number)  # before the Trial draws
            return optuna.trial.Trial(study, trial_id)
    return None


def _claim(storage: optuna.storages.RDBStorage, trial_id: int) -> bool:
    """Set a WAITING trial RUNNING in one conditional UPDATE; False when
    another worker was first. Optuna's own pop (``Study.ask``) reads the
    state, then writes it: on SQLite, which has no ``SELECT ... FOR
    UPDATE``, two workers both read WAITING and both run the trial."""
    from optuna.trial import TrialState

    return _move_trial(storage, trial_id, TrialState.WAITING, TrialState.RUNNING)


def _move_trial(
    storage: optuna.storages.RDBStorage,
    trial_id: int,
    current: optuna.trial.TrialState,
    new: optuna.trial.TrialState,
) -> bool:
    """Set the trial ``new``, stamped with its start (RUNNING) or completion
    time, in one conditional UPDATE that holds only while it is still
    ``current``; False when another worker changed it first."""
    from datetime import datetime

    import sqlalchemy
    from optuna.storages._rdb.models import TrialModel
    from optuna.trial import TrialState

    stamp = "datetime_start" if new == TrialState.RUNNING else "datetime_complete"
    update = (
        sqlalchemy.update(TrialModel)
        .where(TrialModel.trial_id == trial_id)
        .where(TrialModel.state == current)
        .values({"state": new, stamp: datetime.now()})
    )
    with storage.engine.begin() as connection:
        return bool(connection.execute(update).rowcount == 1)


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail the running trials whose worker is gone, and queue each again
    once, for the next worker that looks for a trial: at once when the
    worker ran on this machine and its process has ended (killed, crashed),
    else when its heartbeat is older than :data:`GRACE_S` (a worker on a
    lost machine). A retry whose worker is gone too is not retried again."""
    import optuna
    from optuna.storages._heartbeat import is_heartbeat_enabled

    storage = study._storage
    rdb = _rdb(study)
    gone = set(_orphaned_trial_ids(study))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if is_heartbeat_enabled(rdb):
            gone.update(rdb._get_stale_trial_ids(study._study_id))
    for trial_id in sorted(gone):
        # Of two workers that find the trial, one fails and retries it.
        if _fail_running(rdb, trial_id):
            _retry_once(study, storage.get_trial(trial_id))


def _rdb(study: optuna.Study) -> optuna.storages.RDBStorage:
    """The RDB storage under the study's (Optuna wraps it in a cache)."""
    import optuna

    storage = getattr(study._storage, "_backend", study._storage)
    assert isinstance(storage, optuna.storages.RDBStorage)
    return storage


def _this_worker() -> dict[str, Any]:
    """What identifies this process later: host, pid and start time (a
    pid may be reused by a later process)."""
    import psutil

    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": psutil.Process().create_time(),
    }


def _process_gone(worker: dict[str, Any]) -> bool:
    """Whether the worker process ``worker`` (:func:`_this_worker`, of this
    machine) has ended: no such process, a zombie nobody reaped yet (a
    killed fork), or another process under its reused pid."""
    import psutil

    try:
        process = psutil.Process(int(worker["pid"]))
        if process.status() == psutil.STATUS_ZOMBIE:
            return True
        started = float(process.create_time())
        return abs(started - float(worker["started"])) > 1.0
    except psutil.NoSuchProcess:
        return True
    except (psutil.Error, KeyError, TypeError, ValueError):
        return False  # not ours to judge: the heartbeat check decides


def _orphaned_trial_ids(study: optuna.Study) -> list[int]:
    """Running trials whose worker ran on this machine and has ended."""
    from optuna.trial import TrialState

    host = socket.gethostname()
    out = []
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.system_attrs.get(WORKER_ATTR)
        if not isinstance(worker, dict) or worker.get("host") != host:
            continue  # another machine's: its heartbeat tells
        if _process_gone(worker):
            out.append(t._trial_id)
    return out


def _fail_running(storage: optuna.storages.RDBStorage, trial_id: int) -> bool:
    """Set a RUNNING trial FAIL in one conditional UPDATE; False when it
    was no longer running (another worker failed it first)."""
    from optuna.trial import TrialState

    return _move_trial(storage, trial_id, TrialState.RUNNING, TrialState.FAIL)


def _retry_once(study: optuna.Study, failed: optuna.trial.FrozenTrial) -> None:
    """Queue ``failed`` again with its parameters, unless it was itself a
    retry (:data:`RETRY_OF_ATTR`)."""
    import optuna
    from optuna.trial import TrialState

    if failed.system_attrs.get(RETRY_OF_ATTR) is not None:
        return
    study.add_trial(
        optuna.trial.create_trial(
            state=TrialState.WAITING,
            params=failed.params,
            distributions=failed.distributions,
            system_attrs={RETRY_OF_ATTR: failed.number},
        )
    )


class Heartbeat:
    """Records ``trial_id``'s heartbeat every :data:`HEARTBEAT_S` seconds
    from a thread while the trial runs (``with Heartbeat(...):``)."""

    def __init__(self, storage: optuna.storages.RDBStorage, trial_id: int) -> None:
        self._storage = storage
        self._trial_id = trial_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)

    def _beat(self) -> None:
        interval = self._storage.get_heartbeat_interval() or HEARTBEAT_S
        while not self._stop.wait(interval):
            # A locked or lost storage misses one beat; the grace period
            # covers several.
            with contextlib.suppress(Exception):
                self._storage.record_heartbeat(self._trial_id)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _clash(existing: SweepSettings, wanted: SweepSettings) -> list[str]:
    """The settings (by their recorded names) in which two sweeps differ,
    their seed and pruner start aside."""
    keys = ("env", "algo", "steps", "trials", "search", "settings", "hyperparameters")
    ours, theirs = existing.to_json(), wanted.to_json()
    return [k for k in (*keys, "objective") if ours[k] != theirs[k]]


TrialSeen = Callable[
    ["optuna.trial.FrozenTrial", int, "tuple[float, int] | None"], None
]
"""Told each newly finished trial, how many have finished and the best
(value, trial number) so far."""


def watch(
    study: optuna.Study,
    storage: optuna.storages.RDBStorage,
    workers: WorkerGroup,
    on_trial: TrialSeen,
    should_stop: Callable[[], bool] = lambda: False,
) -> bool:
    """Read the study (in ``storage``) for finished trials until the workers
    are done; when ``should_stop`` turns true, ask the workers to stop
    (their trials save a checkpoint) and wait for them. True when it was
    stopped so."""
    from optuna.study import StudyDirection
    from optuna.trial import TrialState

    sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
    study_id = storage.get_study_id_from_name(study.study_name)
    seen: set[int] = set()
    best: tuple[float, int] | None = None
    stopped = False
    reaped = time.monotonic()
    while True:
        running = workers.running()
        if time.monotonic() - reaped > HEARTBEAT_S:
            # A worker on another machine may have died with its trial.
            fail_stale_trials(study)
            reaped = time.monotonic()
        # The trials are read only when more have finished than were seen.
        new = finished(study) if finished_count(storage, study_id) > len(seen) else []
        for t in sorted(new, key=lambda t: t.number):
            if t.number in seen:
                continue
            seen.add(t.number)
            value = t.value if t.state == TrialState.COMPLETE else None
            if value is not None and (best is None or sign * value > sign * best[0]):
                best = (value, t.number)
            on_trial(t, len(seen), best)
        if not running:
            return stopped
        if not stopped and should_stop():
            stopped = True
            workers.stop()
        workers.wait(POLL_S)


def trial_line(
    t: optuna.trial.FrozenTrial, done: int, total: int, best: tuple[float, int] | None
) -> str:
    """``trial 3/16 (#2) completed value 187.2  best 201.5 (trial 1)  run ID``"""
    from optuna.trial import TrialState

    state = {TrialState.COMPLETE: "completed", TrialState.PRUNED: "pruned"}
    what = state.get(t.state, "failed")
    value = f" value {t.value:.4g}" if t.state == TrialState.COMPLETE else ""
    best_text = f"  best {best[0]:.4g} (trial {best[1]})" if best else "  best -"
    run = t.user_attrs.get("run_id", "")
    retry_of = t.system_attrs.get(RETRY_OF_ATTR)
    number = f"#{t.number}" + ("" if retry_of is None else f", retry of #{retry_of}")
    # A retried trial is one more than the study was made with.
    total = max(total, done)
    return f"trial {done}/{total} ({number}) {what}{value}{best_text}" + (
        f"  run {run}" if run else ""
    )


def _summary(
    study: optuna.Study, settings: SweepSettings, storage_url: str
) -> dict[str, Any]:
    from optuna.trial import TrialState

    done = finished(study)
    complete = [t for t in done if t.state == TrialState.COMPLETE]
    sign = 1.0 if settings.direction == "maximize" else -1.0
    best = max(complete, key=lambda t: sign * (t.value or 0.0)) if complete else None
    return {
        "study": study.study_name,
        "storage": storage_url,
        "env": settings.env,
        "algo": settings.algo,
        "trials": settings.trials,
        "objective": settings.objective,
        "finished": len(done),
        "completed": len(complete),
        "pruned": sum(t.state == TrialState.PRUNED for t in done),
        "failed": sum(t.state == TrialState.FAIL for t in done),
        "best_value": None if best is None else best.value,
        "best_params": None if best is None else trial_values(settings, best.params),
        "best_trial": None if best is None else best.number,
        "best_run_id": None if best is None else best.user_attrs.get("run_id"),
    }


def preset_settings(settings: SweepSettings, params: dict[str, Any]) -> dict[str, Any]:
    """A trial's settings shaped as a preset: the built-in preset the trial
    started from, the sweep's fixed settings and the trial's values, with
    the budget it was tuned for."""
    from engine.rl.config import preset_for

    return {
        **preset_for(settings.env, settings.algo),
        **settings.fixed,
        **settings.hyperparameters,
        **params,
        "total_steps": settings.steps,
    }


def study_name(wanted: SweepSettings) -> str:
    """A new study's name when none is given: ``PPO-CartPole-v1-<time>``."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{wanted.algo}-{wanted.env}-{stamp}".replace("/", "-")


def find_study(
    name: str | None,
    wanted: SweepSettings | None,
    storage_arg: str,
    project_dir: Path,
) -> tuple[optuna.storages.RDBStorage | None, SweepSettings | None]:
    """(storage, the existing study's settings) for a study ``name`` —
    refusing one made with other settings than ``wanted``; writes nothing.
    The storage is opened when given (so a bad URL is refused at once) or
    when the project's default one exists."""
    storage_url = storage_arg or default_storage(project_dir)
    storage = None
    if storage_arg or name is not None:
        storage = existing_storage(storage_arg, project_dir)
    existing: SweepSettings | None = None
    if name is not None and storage is not None and study_exists(storage, name):
        _, existing = load(storage, name)
    if existing is not None and wanted is not None:
        differ = _clash(existing, wanted)
        if differ:
            raise ConfigError(
                "study",
                f"The study {name!r} in {storage_url} searches other settings "
                f"(its {', '.join(differ)} differ); give another study name, or "
                "only the study and its storage to join it.",
            )
    if existing is None and wanted is None:
        raise EngineError(
            f"There is no study {name!r} in {storage_url} to join; give "
            "--env, --trials and --steps to start one."
            if name
            else "Give --env, --trials and --steps to start a sweep, or --study "
            "and --storage to join one."
        )
    return storage, existing


def open_study(
    storage: optuna.storages.RDBStorage,
    name: str,
    wanted: SweepSettings | None,
) -> tuple[optuna.Study, SweepSettings]:
    """The study ``name``, made with ``wanted`` settings when it is new."""
    import optuna

    if not study_exists(storage, name):
        assert wanted is not None
        try:
            study = optuna.create_study(
                study_name=name, storage=storage, direction=wanted.direction
            )
            queue_trials(study, wanted)
            # Last: a study is joinable once it says what it searches.
            study.set_user_attr(SETTINGS_ATTR, wanted.to_json())
        except optuna.exceptions.DuplicatedStudyError:
            raise EngineError(
                f"The study {name!r} was made by someone else a moment ago; "
                "start again to join it."
            ) from None
    study, settings = load(storage, name)
    return study, settings


def conclude(
    study: optuna.Study,
    settings: SweepSettings,
    storage_url: str,
    project_dir: Path,
    save_as: str | None,
) -> dict[str, Any]:
    """The sweep's summary; with ``save_as``, the best trial saved as that
    project preset (its file in the summary's ``preset``)."""
    from engine.rl.config import save_preset

    summary = _summary(study, settings, storage_url)
    summary["project"] = str(project_dir)
    if save_as and summary["best_params"] is not None:
        path = save_preset(
            project_dir,
            save_as,
            env=settings.env,
            algo=settings.algo,
            settings=preset_settings(settings, summary["best_params"]),
            provenance={
                "study": study.study_name,
                "storage": storage_url,
                "trial": summary["best_trial"],
                "run_id": summary["best_run_id"],
                "value": summary["best_value"],
                "objective": (
                    "eval/mean_reward (last evaluation), maximized"
                    if settings.objective == "reward"
                    else "CPU seconds to target_eval_reward "
                    f"{settings.fixed.get('target_eval_reward')}, minimized"
                ),
                "date": time.strftime("%Y-%m-%d"),
                "trials": summary["finished"],
                "steps_per_trial": settings.steps,
            },
        )
        summary["preset"] = str(path)
    return summary
