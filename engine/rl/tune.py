"""``rl-studio-engine tune``: an Optuna sweep over an ``rl.train`` run's settings.

A sweep is an Optuna study (TPE sampler, median pruner) kept in an RDB
storage: by default ``sqlite:///PROJECT/data/sweeps.db``; PostgreSQL or MySQL
URLs let machines share one. Every trial is an ordinary run of the project
(listed, with its config, metrics, log, model and lineage); the pruner reads
the run's periodic evaluations (``eval/mean_reward``) through the trainer's
evaluation hook, and a pruned trial's run ends ``stopped`` by ``pruned`` with
the reason. A trial's value is its last evaluation's mean reward, or with
``--objective time_to_target`` the CPU seconds its run took to reach
``target_eval_reward`` (minimized; a trial that never reaches it counts as
pruned, below every one that did, and one that has spent more CPU than the
best trial needed is stopped at its next evaluation: it can no longer win).

Where each setting may be searched is declared once, on its config field
(:class:`engine.settings.Search`); ``--search`` picks the settings and may
give other ranges or choices::

    rl-studio-engine tune --env CartPole-v1 --algo PPO --trials 16 --steps 20000 \\
        --project P --workers 2 --search learning_rate=1e-4:1e-2:log \\
        --search gamma --search n_epochs=5,10,20 --save-preset cartpole-fast

A list setting (``net_arch``) is searched among lists written as JSON,
``--search net_arch=[64,64],[256,256]``; Optuna stores each choice as its
compact JSON text (a categorical parameter takes only scalars), read back
as the list wherever a trial's values are used
(:meth:`engine.rl.tune_space.Dimension.value`).

``--workers K`` starts K worker processes here; ``rl-studio-engine tune
--study NAME --storage URL --project DIR`` on another machine joins the same
study with workers of its own. The command prints a line per finished trial
and, at the end, a JSON summary (best value, params, run id) on stdout;
``--save-preset NAME`` saves the best trial's settings as a project preset
(``train --preset NAME``). The studio's Sweep panel starts the same sweep as
an ``rl.tune`` job (:func:`job`).

The study is made with its ``--trials`` trials queued (Optuna's WAITING
state); a worker takes a queued trial or stops, so racing workers never
make a trial more. A running trial's worker records its host and pid on
the trial, and a heartbeat in the storage every
:data:`engine.rl.tune_storage.HEARTBEAT_S` seconds; a trial whose worker on
this machine has ended (killed, crashed) is failed by the next worker that
looks, at once, and one whose heartbeat is older than
:data:`engine.rl.tune_storage.GRACE_S` (its machine lost) by the next worker
or watcher, instead of staying running for ever; either way it is queued
again with its settings, once (:func:`engine.rl.tune_study.fail_stale_trials`).
A trial whose sampled values do not go together (a batch larger than the
rollout) fails with the sentence and no run.

This module is the command and the two job kinds; the sweep's parts live
beside it: what it searches and what its study records
(:mod:`engine.rl.tune_space`), its storage (:mod:`engine.rl.tune_storage`),
its study and the bookkeeping of its trials (:mod:`engine.rl.tune_study`), a
worker's trials (:mod:`engine.rl.tune_trials`) and the worker process
(:mod:`engine.rl.tune_worker`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.rl.config import ALGO_NAMES
from engine.rl.sweep_workers import WorkerGroup
from engine.rl.tune_space import (
    DEFAULT_PRUNE_STARTUP,
    OBJECTIVES,
    SweepSettings,
    default_space,
    parse_search,
)
from engine.rl.tune_storage import (
    default_storage,
    existing_storage,
    open_storage,
    storage_failures,
)
from engine.rl.tune_study import (
    conclude,
    find_study,
    finished,
    load,
    open_study,
    study_exists,
    study_name,
    trial_line,
    watch,
)
from engine.rl.tune_trials import KIND
from engine.settings import STEPS_MAX, setting
from engine.settings_cli import add_set_option

if TYPE_CHECKING:
    import optuna


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", default=None, help="Gymnasium id or rlstudio/<name>-v0"
    )
    parser.add_argument(
        "--algo", default=None, help=f"{', '.join(ALGO_NAMES[1:])} or auto"
    )
    parser.add_argument("--trials", type=int, default=None, help="trials in the study")
    parser.add_argument(
        "--steps", type=int, default=None, help="environment steps per trial"
    )
    parser.add_argument(
        "--search",
        action="append",
        default=None,
        metavar="KEY[=low:high[:log]|=a,b,c]",
        help="a setting to search (repeatable); KEY alone takes its declared "
        "range (default: every setting that declares one); a list setting "
        "takes lists, e.g. net_arch=[64,64],[256,256]",
    )
    add_set_option(parser, "a fixed setting or hyperparameter for every trial")
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="seeds the sampler and each trial (trial n gets seed + n)",
    )
    parser.add_argument(
        "--objective",
        choices=OBJECTIVES,
        default=None,
        help="reward: the last evaluation's mean reward, maximized (default); "
        "time_to_target: CPU seconds of a trial's run to reach "
        "target_eval_reward (give it with --set), minimized",
    )
    parser.add_argument(
        "--prune-startup",
        type=int,
        default=None,
        metavar="N",
        help=f"trials finished before pruning starts (default {DEFAULT_PRUNE_STARTUP})",
    )
    parser.add_argument(
        "--project", type=Path, default=None, help="project folder the runs go to"
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="Optuna RDB storage URL (default: sqlite:///PROJECT/data/sweeps.db)",
    )
    parser.add_argument(
        "--study", default=None, help="study name; an existing one is joined"
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes on this machine"
    )
    parser.add_argument(
        "--save-preset",
        default=None,
        metavar="NAME",
        help="save the best trial's settings as the project preset NAME",
    )


def _new_settings(args: Options, project_dir: Path) -> SweepSettings:
    """The sweep's settings from the command line or the job's config,
    checked (nothing written)."""
    from engine.jobs.registry import get_kind
    from engine.rl.cli import parse_settings
    from engine.rl.config import TrainConfig

    if args.env is None:
        raise EngineError("Give the environment with --env, e.g. --env CartPole-v1.")
    for option, value in (("--trials", args.trials), ("--steps", args.steps)):
        if value is None:
            raise EngineError(f"A new sweep needs {option}.")
    trials = checked_option(args, "trials")
    steps = checked_option(args, "steps")
    top, hyper = parse_settings(args.settings)
    prune_startup = (
        DEFAULT_PRUNE_STARTUP
        if args.prune_startup is None
        else checked_option(args, "prune_startup")
    )
    objective = args.objective or "reward"
    if objective not in OBJECTIVES:
        raise ConfigError(
            "objective",
            f"The objective is one of {', '.join(OBJECTIVES)}, not {objective!r}.",
        )
    if objective == "time_to_target" and top.get("target_eval_reward") is None:
        raise ConfigError(
            "target_eval_reward",
            "The objective time_to_target needs a target: --set target_eval_reward=R.",
        )
    if top.get("eval_every_steps") == 0:
        raise ConfigError(
            "eval_every_steps",
            "A sweep needs evaluations; set eval_every_steps above 0.",
        )
    base = {
        "env": args.env,
        "algo": args.algo or "auto",
        "total_steps": steps,
        **top,
        "project_dir": str(project_dir),
    }
    if hyper:
        base["hyperparameters"] = hyper
    checked: TrainConfig = get_kind(KIND).validate(base)
    algo = checked.algo
    dims = (
        default_space(algo) if args.search is None else parse_search(args.search, algo)
    )
    if not dims:
        raise EngineError(f"There is nothing to search for {algo}; give --search.")
    return SweepSettings(
        env=checked.env,
        algo=algo,
        steps=steps,
        trials=trials,
        search=tuple(dims),
        fixed=top,
        hyperparameters=hyper,
        seed=args.seed,
        prune_startup=prune_startup,
        objective=objective,
    )


def checked_option(args: Options, name: str) -> int:
    """The command's option ``--name`` (a :class:`TuneConfig` setting)
    checked against its declaration (bounds included), as the job's form
    checks it; a ConfigError naming the option otherwise."""
    from engine.settings import check_value, fields_of

    option = "--" + name.replace("_", "-")
    info = dataclasses.replace(fields_of(TuneConfig)[name], name=option)
    return int(check_value(info, getattr(args, name), name))


def _gave_settings(args: argparse.Namespace) -> bool:
    return any(
        value is not None
        for value in (args.env, args.algo, args.trials, args.steps, args.search)
    ) or bool(
        args.settings
        or args.seed is not None
        or args.prune_startup is not None
        or args.objective
    )


def run(args: argparse.Namespace) -> int:
    """The ``tune`` command; a failure of its storage in one sentence."""
    project = getattr(args, "project", None)
    url = args.storage or (default_storage(project) if project else "")
    with storage_failures(url):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    checked_option(args, "workers")
    workers = WorkerGroup(args.workers)
    try:
        name, study, storage, settings, storage_url, project_dir = _prepare(args)
    except BaseException:
        workers.drop()
        raise
    workers.release(storage_url, name, project_dir)
    total = settings.trials
    print(
        f"sweep {name!r}: {settings.algo} on {settings.env}, "
        f"{total} trials of {settings.steps} steps, "
        f"{args.workers} worker(s); storage {storage_url}; runs in {project_dir}",
        file=sys.stderr,
        flush=True,
    )

    def say(t: optuna.trial.FrozenTrial, done: int, best: Any) -> None:
        print(trial_line(t, done, total, best), file=sys.stderr, flush=True)

    def terminate(_signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    # SIGTERM stops the sweep as Ctrl-C does: the workers live in their own
    # sessions and would go on without us.
    previous = signal.signal(signal.SIGTERM, terminate)
    interrupted = False
    try:
        watch(study, storage, workers, say)
    except KeyboardInterrupt:
        interrupted = True
        print("stopping the workers' trials (saving checkpoints)", file=sys.stderr)
        workers.stop()
    except BaseException:
        workers.stop()  # they live in their own sessions: never leave them
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    summary = conclude(study, settings, storage_url, project_dir, args.save_preset)
    print(json.dumps(summary, indent=2))
    bad = [code for code in workers.exit_codes() if code != 0]
    if interrupted:
        return 130
    if summary["best_value"] is None:
        print("No trial completed.", file=sys.stderr)
        return 1
    if bad:
        print(f"A worker ended with exit code {bad[0]}.", file=sys.stderr)
        return 1
    return 0


def _prepare(
    args: argparse.Namespace,
) -> tuple[str, optuna.Study, optuna.storages.RDBStorage, SweepSettings, str, Path]:
    """The command's study, made or found: (name, study, its storage,
    settings, storage URL, project folder)."""
    from engine.rl.cli import project_folder, removed_on_error
    from engine.store.paths import checked_name
    from engine.store.project import Project
    from resources import resource_path

    if args.save_preset is not None:
        checked_name("preset", args.save_preset)
    if args.study is not None:
        checked_name("study", args.study)
    project_dir = project_folder(args.project, "rlstudio-tune-")
    examples = resource_path("examples")
    with removed_on_error(project_dir, temporary=args.project is None):
        wanted = _new_settings(args, project_dir) if _gave_settings(args) else None
        storage_url = args.storage or default_storage(project_dir)
        storage, _ = find_study(args.study, wanted, args.storage or "", project_dir)
        # Everything is checked; from here on the project and the study are written.
        Project.open(project_dir, create=True, examples=examples).close()
        if storage is None:
            storage = open_storage(storage_url)
        if args.study is not None:
            name = args.study
        else:
            assert wanted is not None  # find_study refuses neither a study nor settings
            name = study_name(wanted)
        study, settings = open_study(storage, name, wanted)
    return name, study, storage, settings, storage_url, project_dir


# --------------------------------------------------------------------------
# The rl.tune job: the same sweep started from the studio
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class TuneConfig:
    """An ``rl.tune`` job (the Sweep panel): the command's options."""

    env: str = setting("", group="Sweep", picker="env")
    """Gymnasium id or designed env every trial trains on."""
    algo: str = setting("auto", choices=ALGO_NAMES, group="Sweep", label="Algorithm")
    """``PPO``, ``A2C``, ``DQN``, ``SAC``, ``TD3``, ``MaskablePPO`` or ``auto``."""
    trials: int = setting(16, min=1, max=10_000, group="Sweep")
    """Trials in the study (over all its workers)."""
    steps: int = setting(20_000, min=1, max=STEPS_MAX, unit="steps", group="Sweep")
    """Training length of each trial."""
    workers: int = setting(1, min=1, max=64, group="Sweep")
    """Worker processes on this machine."""
    search: list[str] | None = setting(None, form=False)
    """``KEY``, ``KEY=low:high[:log]`` or ``KEY=a,b,c`` items, a list
    setting's ``KEY=[a,b],[c,d]`` (None: every setting that declares a
    default range)."""
    settings: list[str] = setting(factory=list, form=False)
    """``key=value`` items fixed for every trial."""
    seed: int | None = setting(None, min=0, max=2**31 - 1, group="Sweep")
    """Seeds the sampler and each trial (trial n gets seed + n)."""
    objective: str = setting("reward", choices=OBJECTIVES, group="Sweep")
    """``reward`` (last evaluation, maximized) or ``time_to_target`` (CPU
    seconds to ``target_eval_reward``, which ``settings`` must set; minimized)."""
    prune_startup: int = setting(
        DEFAULT_PRUNE_STARTUP, min=0, max=10_000, group="Sweep"
    )
    """Trials finished before pruning starts."""
    study: str = setting("", group="Sweep")
    """Study name ('' = generated); an existing one is joined."""
    storage: str = setting("", group="Sweep")
    """Optuna RDB storage URL ('' = the project's ``data/sweeps.db``)."""
    save_preset: str = setting("", group="Sweep")
    """Save the best trial's settings as this project preset ('' = no)."""
    project_dir: str | None = setting(None, form=False)
    """The project the trials are runs of."""


Options = argparse.Namespace | TuneConfig
"""The sweep's options: the command's arguments or the job's config (the
same names)."""


def schema(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The Sweep panel's form, from :class:`TuneConfig`."""
    from engine.rl.schema import COMMON_ENVS
    from engine.settings import fields_of, form_field, form_type

    fields = []
    for info in fields_of(TuneConfig).values():
        if not info.form or form_type(info) is None:
            continue
        default = "CartPole-v1" if info.name == "env" else info.default
        item = form_field(info, default=values.get(info.name, default))
        if info.name == "env":
            item["suggestions"] = list(COMMON_ENVS)
        fields.append(item)
    return fields


def _text_list(value: object, key: str) -> None:
    if value is not None and (
        not isinstance(value, list) or not all(isinstance(v, str) for v in value)
    ):
        raise ConfigError(key, f"{key} must be a list of texts, not {value!r}.")


def _project_dir(cfg: TuneConfig) -> Path:
    if cfg.project_dir is None:
        raise ConfigError("project_dir", "A sweep needs a project for its runs.")
    return Path(cfg.project_dir)


def _wanted(cfg: TuneConfig) -> SweepSettings:
    """The sweep ``cfg`` asks for; a ConfigError when its study exists with
    other settings (:func:`find_study`). Writes nothing."""
    project_dir = _project_dir(cfg)
    wanted = _new_settings(cfg, project_dir)
    find_study(cfg.study or None, wanted, cfg.storage, project_dir)
    return wanted


def validate_job(config: Mapping[str, Any]) -> TuneConfig:
    """The ``rl.tune`` validator: the checked config with its algorithm
    resolved and its study named, or a ConfigError naming the field; writes
    nothing."""
    from engine.settings import build
    from engine.store.paths import checked_name

    cfg = build(TuneConfig, config, "rl.tune")
    _text_list(cfg.search, "search")
    _text_list(cfg.settings, "settings")
    if cfg.study:
        checked_name("study", cfg.study)
    if cfg.save_preset:
        checked_name("preset", cfg.save_preset)
    wanted = _wanted(cfg)
    return dataclasses.replace(
        cfg, algo=wanted.algo, study=cfg.study or study_name(wanted)
    )


@job_kind(
    "rl.tune",
    check=validate_job,
    form=schema,
    label="Sweep",
    group="training",
    progress_unit="trials",
    project_field="project_dir",
    default_name="sweep {study}",
    # Its workers get 60 s to stop (engine.rl.sweep_workers.WorkerGroup.stop).
    stop_grace_s=90.0,
)
def job(ctx: JobContext, cfg: TuneConfig) -> dict[str, Any]:
    """An Optuna sweep over an rl.train run's settings: its trials are rl.train runs
    of the project, trained by worker processes.

    The ``rl.tune`` job: the sweep's workers started and watched; each
    finished trial is a metrics row at its number (``sweep/value`` when it
    completed, ``sweep/best``), progress counts finished trials, Stop stops
    the workers' trials."""
    project_dir = _project_dir(cfg)
    storage_url = cfg.storage or default_storage(project_dir)
    with storage_failures(storage_url):
        return _job(ctx, cfg, project_dir, storage_url)


def _job(
    ctx: JobContext, cfg: TuneConfig, project_dir: Path, storage_url: str
) -> dict[str, Any]:
    # Started first: they import torch while the study is made.
    workers = WorkerGroup(cfg.workers)
    try:
        # Checked again: the study may have been made since the validation.
        wanted = _wanted(cfg)
        storage = open_storage(storage_url)
        study, settings = open_study(storage, cfg.study, wanted)
    except BaseException:
        workers.drop()
        raise
    workers.release(storage_url, study.study_name, project_dir)
    total = settings.trials
    ctx.log(
        f"sweep {study.study_name!r}: {total} trials of {settings.steps} steps, "
        f"{cfg.workers} worker(s); storage {storage_url}"
    )
    ctx.progress(0, total)

    def seen(t: optuna.trial.FrozenTrial, done: int, best: Any) -> None:
        row = {"sweep/trial": float(t.number)}
        if t.value is not None:
            row["sweep/value"] = float(t.value)
        if best is not None:
            row["sweep/best"] = float(best[0])
        ctx.metrics(done, row)
        ctx.progress(done, total)
        ctx.log(trial_line(t, done, total, best))

    try:
        watch(study, storage, workers, seen, lambda: ctx.should_stop)
    finally:
        workers.stop()
    summary = conclude(study, settings, storage_url, project_dir, cfg.save_preset)
    summary["stopped_by"] = ctx.stop_reason if ctx.should_stop else "trials"
    return summary


# --------------------------------------------------------------------------
# The rl.tune.preset job: a finished sweep's best trial saved as a preset
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepPresetConfig:
    """An ``rl.tune.preset`` job (the Sweep panel's "Save best as preset"):
    the best trial of a sweep, saved as a project preset after the fact, as
    ``--save-preset`` does at the sweep's end."""

    study: str = setting("")
    """The sweep's study."""
    storage: str = setting("")
    """Its Optuna RDB storage URL ('' = the project's ``data/sweeps.db``)."""
    name: str = setting("")
    """The new preset's name."""
    project_dir: str | None = setting(None, form=False)
    """The project the sweep's trials ran in; the preset is saved there."""


def validate_preset_job(config: Mapping[str, Any]) -> SweepPresetConfig:
    """The ``rl.tune.preset`` validator: a ConfigError naming the field
    when the name is taken or not a name, or the sweep is not there or has
    no completed trial; writes nothing."""
    from engine.settings import build

    cfg = build(SweepPresetConfig, config, "rl.tune.preset")
    _checked_preset(cfg)
    return cfg


def _checked_preset(
    cfg: SweepPresetConfig,
) -> tuple[Path, optuna.Study, SweepSettings, str]:
    """(project folder, the sweep's study, its settings, storage URL) of an
    ``rl.tune.preset`` job; see :func:`validate_preset_job`."""
    from optuna.trial import TrialState

    from engine.rl.config import preset_names
    from engine.store.paths import checked_name

    checked_name("preset", cfg.name)
    checked_name("study", cfg.study)
    if cfg.project_dir is None:
        raise ConfigError("project_dir", "A preset is saved in a project.")
    project_dir = Path(cfg.project_dir)
    if cfg.name in preset_names(project_dir):
        raise ConfigError(
            "name",
            f"The project already has a preset {cfg.name!r}; give another name.",
        )
    url = cfg.storage or default_storage(project_dir)
    storage = existing_storage(cfg.storage, project_dir)
    if storage is None or not study_exists(storage, cfg.study):
        raise ConfigError("study", f"There is no sweep {cfg.study!r} in {url}.")
    study, settings = load(storage, cfg.study)
    if not any(t.state == TrialState.COMPLETE for t in finished(study)):
        raise ConfigError(
            "study", f"The sweep {cfg.study!r} has no completed trial to save yet."
        )
    return project_dir, study, settings, url


@job_kind(
    "rl.tune.preset",
    check=validate_preset_job,
    label="Sweep preset",
    group="export",
    progress_unit="items",
    project_field="project_dir",
    default_name="preset {name}",
)
def preset_job(ctx: JobContext, cfg: SweepPresetConfig) -> dict[str, Any]:
    """Saves a sweep's best trial's settings as a project preset.

    The ``rl.tune.preset`` job: the sweep's summary (:func:`conclude`),
    with the saved preset's file in ``preset``. Checked again here: a
    preset of that name may have been saved since the validator ran."""
    project_dir, study, settings, url = _checked_preset(cfg)
    summary = conclude(study, settings, url, project_dir, cfg.name)
    ctx.log(
        f"saved trial #{summary['best_trial']} of the sweep {study.study_name!r} "
        f"(value {summary['best_value']:.4g}) as the preset {cfg.name!r}: "
        f"{summary['preset']}"
    )
    return summary
