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
as the list wherever a trial's values are used (:meth:`Dimension.value`).

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
the trial, and a heartbeat in the storage every :data:`HEARTBEAT_S` seconds;
a trial whose worker on this machine has ended (killed, crashed) is failed
by the next worker that looks, at once, and one whose heartbeat is older
than :data:`GRACE_S` (its machine lost) by the next worker or watcher,
instead of staying running for ever; either way it is queued again with its
settings, once (:func:`fail_stale_trials`).
A trial whose sampled values do not go together (a batch larger than the
rollout) fails with the sentence and no run.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import ConfigError, EngineError, quoted
from engine.jobs.context import JobContext
from engine.jobs.lifecycle import HeadlessContext
from engine.jobs.registry import job_kind
from engine.rl.config import ALGO_NAMES
from engine.rl.sweep_workers import WorkerGroup
from engine.settings import STEPS_MAX, setting

if TYPE_CHECKING:
    import optuna

    from engine.settings import FieldInfo
    from engine.store.project import Project

KIND = "rl.train"
SETTINGS_ATTR = "rlstudio_sweep"
"""The study's user attribute holding what it searches (:func:`settings_of`)."""
SETTINGS_FORMAT = 1
EVALS_PER_TRIAL = 5
"""Evaluations a trial makes (each one a point the pruner compares) when
``eval_every_steps`` is not given."""
DEFAULT_PRUNE_STARTUP = 5
POLL_S = 0.5
"""How often the command reads the study for finished trials."""
NOT_SEARCHED = (
    "env",
    "algo",
    "total_steps",
    "seed",
    "name",
    "device",
    "preset",
    "policy",
    "torch_threads",
)
"""Run settings a sweep never varies: what and how long it trains, and where."""
HEARTBEAT_S = 20
"""Seconds between a running trial's heartbeats."""
GRACE_S = 120
"""A running trial whose last heartbeat is older than this is failed (its
worker is gone); well above HEARTBEAT_S, as a loaded machine or a locked
SQLite file may delay a heartbeat."""
WORKER_ATTR = "rlstudio_worker"
"""A running trial's system attribute naming its worker (host, pid, start
time), so that a worker on the same machine sees at once that it died."""
RETRY_OF_ATTR = "rlstudio_retry_of"
"""A queued trial's system attribute: the number of the trial whose worker
died, which it trains again (once)."""
CREATION_TRIES = 5
"""Attempts at opening a storage whose tables another command is making at
the same moment (where no lock file serializes them)."""
OBJECTIVES = ("reward", "time_to_target")
"""``reward``: the last evaluation's mean reward, maximized.
``time_to_target``: CPU seconds of the trial's run until it reached
``target_eval_reward``, minimized (a trial that does not reach it is pruned,
at the first evaluation past the best trial's CPU seconds)."""


# --------------------------------------------------------------------------
# The search space
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Dimension:
    """One searched setting, as Optuna is asked for it."""

    name: str
    kind: str
    """``float``, ``int`` or ``choice``."""
    low: float | None = None
    high: float | None = None
    log: bool = False
    choices: tuple[Any, ...] = ()
    """The values of a ``choice``: scalars, or lists (kept in Optuna as
    :func:`choice_key` texts)."""
    top: bool = False
    """A run setting (``n_envs``) rather than a hyperparameter."""

    def suggest(self, trial: optuna.trial.Trial) -> Any:
        if self.kind == "choice":
            keys = [choice_key(c) for c in self.choices]
            return self.value(trial.suggest_categorical(self.name, keys))
        assert self.low is not None and self.high is not None
        if self.kind == "int":
            return trial.suggest_int(
                self.name, int(self.low), int(self.high), log=self.log
            )
        return trial.suggest_float(self.name, self.low, self.high, log=self.log)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["choices"] = list(self.choices)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Dimension:
        return cls(**{**data, "choices": tuple(data.get("choices", ()))})

    def value(self, param: Any) -> Any:
        """The setting's value for ``param`` as Optuna stored it (a list
        choice's text read back as the list)."""
        if self.kind == "choice" and isinstance(param, str):
            for choice in self.choices:
                if isinstance(choice, list) and choice_key(choice) == param:
                    return list(choice)
        return param


def choice_key(choice: Any) -> Any:
    """A choice as Optuna keeps it: a list as its compact JSON text
    (``[64,64]``), a scalar as it is."""
    if isinstance(choice, list | tuple):
        return json.dumps(list(choice), separators=(",", ":"))
    return choice


@dataclass(frozen=True)
class SweepSettings:
    """What a sweep searches, fixed when its study is made and recorded on
    it (:data:`SETTINGS_ATTR`, as :meth:`to_json`): every worker, on this
    machine or another, trains its trials from these."""

    env: str
    algo: str
    """The algorithm every trial trains (``auto`` resolved)."""
    steps: int
    """Training length of each trial, in environment steps."""
    trials: int
    """Trials in the study, over all its workers."""
    search: tuple[Dimension, ...]
    fixed: dict[str, Any]
    """Run settings fixed for every trial, as given (``--set``): the raw
    input of each trial's ``rl.train`` config (its JSON key: ``settings``)."""
    hyperparameters: dict[str, Any]
    """Hyperparameters fixed for every trial, as given."""
    seed: int | None = None
    """Seeds the sampler and each trial (trial n gets seed + n)."""
    prune_startup: int = DEFAULT_PRUNE_STARTUP
    """Trials finished before pruning starts."""
    objective: str = "reward"
    """One of :data:`OBJECTIVES`."""

    @property
    def direction(self) -> Literal["maximize", "minimize"]:
        return "maximize" if self.objective == "reward" else "minimize"

    def to_json(self) -> dict[str, Any]:
        """The study's record (the format studies made before kept)."""
        return {
            "format": SETTINGS_FORMAT,
            "env": self.env,
            "algo": self.algo,
            "steps": self.steps,
            "trials": self.trials,
            "search": [d.to_json() for d in self.search],
            "settings": dict(self.fixed),
            "hyperparameters": dict(self.hyperparameters),
            "seed": self.seed,
            "prune_startup": self.prune_startup,
            "objective": self.objective,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SweepSettings:
        """The settings a study recorded (:meth:`to_json`); a study made
        before objectives existed maximizes the reward."""
        return cls(
            env=str(data["env"]),
            algo=str(data["algo"]),
            steps=int(data["steps"]),
            trials=int(data["trials"]),
            search=tuple(Dimension.from_json(d) for d in data["search"]),
            fixed=dict(data.get("settings") or {}),
            hyperparameters=dict(data.get("hyperparameters") or {}),
            seed=data.get("seed"),
            prune_startup=int(data.get("prune_startup", DEFAULT_PRUNE_STARTUP)),
            objective=str(data.get("objective", "reward")),
        )


def trial_values(settings: SweepSettings, params: dict[str, Any]) -> dict[str, Any]:
    """A trial's Optuna ``params`` as the settings' values (list choices
    read back as lists)."""
    dims = {d.name: d for d in settings.search}
    return {
        name: dims[name].value(v) if name in dims else v for name, v in params.items()
    }


def searchable(algo: str) -> dict[str, tuple[FieldInfo, bool]]:
    """The settings a sweep of ``algo`` may vary: name -> (field, is a run
    setting)."""
    from engine.rl.config import ALGO_CONFIGS, TrainConfig
    from engine.settings import SCALAR_KINDS, fields_of

    out = {
        name: (info, True)
        for name, info in fields_of(TrainConfig).items()
        if name not in NOT_SEARCHED and info.kind in SCALAR_KINDS
    }
    for name, info in fields_of(ALGO_CONFIGS[algo]).items():
        if info.kind == "list[int]" or (
            info.kind in SCALAR_KINDS and not (info.kind == "str" and not info.choices)
        ):
            out[name] = (info, False)
    return out


def _hinted(info: FieldInfo, top: bool) -> Dimension:
    """The setting's default range, from its declaration."""
    hint = info.search
    if hint is None and info.kind == "list[int]":
        raise ConfigError(
            info.name,
            f"{info.name} has no default choices; give --search "
            f"{info.name}=[64,64],[256,256].",
        )
    if hint is None:
        raise ConfigError(
            info.name,
            f"{info.name} has no default range; give --search "
            f"{info.name}=low:high or {info.name}=a,b,c.",
        )
    if hint.low is None or hint.high is None:
        choices = info.choices or ((False, True) if info.kind == "bool" else ())
        return Dimension(info.name, "choice", choices=tuple(choices), top=top)
    kind = "int" if info.kind == "int" else "float"
    return Dimension(info.name, kind, hint.low, hint.high, hint.log, top=top)


def default_space(algo: str) -> list[Dimension]:
    """Every setting of ``algo``'s sweep that declares a default range."""
    return [
        _hinted(info, top)
        for info, top in searchable(algo).values()
        if info.search is not None
    ]


def _value(info: FieldInfo, raw: str) -> Any:
    """``raw`` read as the setting is (text as it is, else JSON when it
    parses) and checked against its bounds and choices."""
    from engine.settings import check_value

    value: Any = raw.strip()
    if info.kind != "str":
        with contextlib.suppress(json.JSONDecodeError):
            value = json.loads(value)
    return check_value(info, value, info.name)


def parse_search(items: list[str], algo: str) -> list[Dimension]:
    """``--search`` items as dimensions: ``KEY`` (its declared range),
    ``KEY=low:high[:log]``, ``KEY=a,b,c``, or for a list setting
    ``KEY=[a,b],[c,d]``; a ConfigError naming the setting on anything that
    cannot be searched."""
    fields = searchable(algo)
    out: dict[str, Dimension] = {}
    for item in items:
        key, sep, raw = (part.strip() for part in item.partition("="))
        if not key or (sep and not raw):
            raise EngineError(
                f"--search takes KEY, KEY=low:high[:log] or KEY=a,b,c, not {item!r}."
            )
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise ConfigError(
                key, f"{key!r} is no setting a sweep of {algo} can search{hint}"
            )
        info, top = fields[key]
        if not sep:
            out[key] = _hinted(info, top)
            continue
        numeric = info.kind in ("int", "float") and not info.choices
        if info.kind == "list[int]":
            choices = _list_choices(info, raw)
            out[key] = Dimension(key, "choice", choices=choices, top=top)
        elif ":" in raw and numeric:
            parts = raw.split(":")
            log = len(parts) == 3 and parts[2].strip() == "log"
            if len(parts) not in (2, 3) or (len(parts) == 3 and not log):
                raise ConfigError(
                    key, f"--search {key} takes low:high or low:high:log, not {raw!r}."
                )
            low, high = (_value(info, p) for p in parts[:2])
            if low > high:
                raise ConfigError(
                    key,
                    f"--search {key}: the low end {low:g} is above the high end "
                    f"{high:g}.",
                )
            if log and low <= 0:
                raise ConfigError(
                    key,
                    f"--search {key}: a log scale needs a low end above 0, "
                    f"not {low:g}.",
                )
            kind = "int" if info.kind == "int" else "float"
            out[key] = Dimension(key, kind, low, high, log, top=top)
        elif ":" in raw and not numeric:
            raise ConfigError(
                key, f"{key} takes choices (--search {key}=a,b,c), not a range."
            )
        else:
            choices = tuple(dict.fromkeys(_value(info, p) for p in raw.split(",")))
            out[key] = Dimension(key, "choice", choices=choices, top=top)
    return list(out.values())


def _list_choices(info: FieldInfo, raw: str) -> tuple[list[int], ...]:
    """``[64,64],[256,256]`` as the list setting's choices (each checked
    against its bounds, repeats dropped); a ConfigError otherwise."""
    from engine.settings import check_value

    key = info.name
    try:
        items = json.loads(f"[{raw}]")
    except json.JSONDecodeError:
        items = None
    if not items or not all(isinstance(item, list) and item for item in items):
        raise ConfigError(
            key,
            f"--search {key} takes lists of whole numbers, like "
            f"{key}=[64,64],[256,256], not {raw!r}.",
        )
    checked = [check_value(info, item, key) for item in items]
    return tuple({choice_key(c): c for c in checked}.values())


# --------------------------------------------------------------------------
# The study
# --------------------------------------------------------------------------


def quiet_optuna() -> None:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    logging.getLogger("sqlalchemy").setLevel(logging.ERROR)


def open_storage(
    url: str,
    *,
    checked: bool = False,
    heartbeat_s: int = HEARTBEAT_S,
    grace_s: int = GRACE_S,
) -> optuna.storages.RDBStorage:
    """The RDB storage at ``url``, with heartbeats every ``heartbeat_s``
    seconds and trials failed after ``grace_s`` without one; ``checked``:
    the command that started this worker made and checked its tables, so
    the worker skips that (a second of start-up each). An EngineError in one
    sentence when it cannot be opened (a bad URL, a missing driver, a folder
    that is not there, a server that does not answer, an SQLite database in
    memory, a file that is not one). Two commands opening a new storage at
    once make its tables one after the other (:func:`_creating`)."""
    import optuna

    quiet_optuna()
    database = _sqlite_database(url)
    if database is not None and _in_memory(url, database):
        raise EngineError(
            f"The storage {quoted(url)} is an SQLite database in memory, which the "
            "sweep's worker processes cannot share; give a file, such as "
            "sqlite:///path/sweeps.db."
        )
    # Workers share a SQLite file: wait for its lock instead of failing.
    kwargs = {"connect_args": {"timeout": 60}} if database is not None else {}

    def make() -> optuna.storages.RDBStorage:
        with warnings.catch_warnings(), _creating(database, skip=checked):
            # Heartbeats are marked experimental since Optuna 2.9.
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs=kwargs,
                skip_compatibility_check=checked,
                skip_table_creation=checked,
                heartbeat_interval=heartbeat_s,
                grace_period=grace_s,
            )
            if database is not None:
                _write_ahead(storage)
        return storage

    existed = database is not None and Path(database).is_file()
    try:
        for _ in range(CREATION_TRIES - 1):
            try:
                storage = make()
                break
            except Exception as exc:
                if not _lost_creation_race(exc):
                    raise
                # Another command made tables between our look and our write
                # (a server database, or no lock file); look again.
        else:
            storage = make()
        if existed and not checked:
            _check_intact(storage)
        return storage
    except Exception as exc:  # SQLAlchemy and drivers raise many kinds
        if database is not None and _damaged(exc):
            raise EngineError(_damaged_sentence(database)) from None
        text = _first_line(exc)
        why = f" ({quoted(text)})" if text else ""
        raise EngineError(
            f"The storage {quoted(url)} cannot be opened{why}; give an RDB URL "
            "such as sqlite:///path/sweeps.db or postgresql://host/db."
        ) from None


DAMAGED = ("file is not a database", "database disk image is malformed")
"""What SQLite says of a file that is not a whole database."""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised from (Optuna wraps SQLAlchemy's,
    which wraps the driver's)."""
    out = [exc]
    while (cause := out[-1].__cause__ or out[-1].__context__) and len(out) < 10:
        out.append(cause)
    return out


def _damaged(exc: BaseException) -> bool:
    return any(words in str(e) for e in _chain(exc) for words in DAMAGED)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def _damaged_sentence(database: str) -> str:
    return (
        f"The storage file {quoted(database)} is not an SQLite database (damaged, "
        "or another kind of file); it is left as it is: move it away or give "
        "another --storage."
    )


def _check_intact(storage: optuna.storages.RDBStorage) -> None:
    """Refuse an SQLite file SQLite finds damaged (``PRAGMA quick_check``,
    milliseconds for a sweep's file): a damaged page deep in the file broke
    the sweep later, in the middle of its trials."""
    import sqlalchemy

    with storage.engine.connect() as connection:
        verdict = connection.execute(sqlalchemy.text("PRAGMA quick_check")).scalar()
    if verdict != "ok":
        raise sqlalchemy.exc.DatabaseError(
            "PRAGMA quick_check", None, Exception(DAMAGED[1])
        )


@contextlib.contextmanager
def storage_failures(url: str) -> Iterator[None]:
    """A failure of the study's storage while it is used (a damaged SQLite
    page read, a server gone) as an EngineError with one sentence, instead of
    Optuna's ``StorageInternalError``."""
    import optuna
    import sqlalchemy

    try:
        yield
    except (
        optuna.exceptions.StorageInternalError,
        sqlalchemy.exc.SQLAlchemyError,
    ) as exc:
        database = _sqlite_database(url)
        if database and _damaged(exc):
            raise EngineError(_damaged_sentence(database)) from None
        why = _first_line(_chain(exc)[-1]) or type(exc).__name__
        raise EngineError(
            f"The storage {quoted(url)} failed ({quoted(why)})."
        ) from None


def _lost_creation_race(exc: Exception) -> bool:
    """Whether ``exc`` says another process made the storage's tables or
    stamped their version first."""
    import sqlalchemy

    text = str(exc)
    return isinstance(exc, sqlalchemy.exc.IntegrityError) or (
        isinstance(exc, sqlalchemy.exc.OperationalError) and "already exists" in text
    )


def _sqlite_database(url: str) -> str | None:
    """The database of an SQLite URL (``''`` for ``sqlite://``), None for
    another kind of URL or one that does not parse."""
    import sqlalchemy

    try:
        parsed = sqlalchemy.engine.make_url(url)
    except Exception:  # left to the storage, which says why
        return None
    if parsed.get_backend_name() != "sqlite":
        return None
    return parsed.database or ""


def _in_memory(url: str, database: str) -> bool:
    """Whether an SQLite URL names a database in memory: ``sqlite://``,
    ``sqlite:///:memory:``, ``file::memory:`` or ``mode=memory``."""
    return (
        database in ("", ":memory:") or ":memory:" in database or ("mode=memory" in url)
    )


@contextlib.contextmanager
def _creating(database: str | None, *, skip: bool) -> Iterator[None]:
    """Hold a lock file next to an SQLite database while its tables are
    made (and their version stamped): two commands starting at once on a
    new file both created the tables and one died with ``IntegrityError``
    on ``alembic_version``. Without ``fcntl`` (Windows), or for server
    databases, a creation that lost the race is retried once instead."""
    if skip or database is None:
        yield
        return
    lock = Path(database + ".lock")
    try:
        import fcntl
    except ImportError:
        yield
        return
    try:
        handle = open(lock, "a")  # noqa: SIM115 (held across the yield)
    except OSError:
        yield  # no folder for it: the storage says why it cannot open
        return
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _write_ahead(storage: optuna.storages.RDBStorage) -> None:
    """Every connection to the SQLite file in write-ahead-log mode with
    normal syncing: the watcher's reads no longer block the workers'
    writes, and a commit (a report, a heartbeat) syncs the disk at
    checkpoints only; a trial's storage calls take half the time. A commit
    survives a crash of its process; a power cut may lose the last few."""
    import sqlalchemy

    def on_connect(connection: Any, _record: Any) -> None:
        cursor = connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    sqlalchemy.event.listen(storage.engine, "connect", on_connect)
    # Connections made before (the table check) reconnect in that mode.
    storage.engine.dispose()


def _default_storage_file(project_dir: Path) -> Path:
    return project_dir / "data" / "sweeps.db"


def default_storage(project_dir: Path) -> str:
    return f"sqlite:///{_default_storage_file(project_dir)}"


def existing_storage(
    storage_arg: str, project_dir: Path
) -> optuna.storages.RDBStorage | None:
    """The storage given (``storage_arg``, opened: a bad URL is refused at
    once), else the project's default one when it exists; None when neither
    (opening the default would make it)."""
    if storage_arg:
        return open_storage(storage_arg)
    if _default_storage_file(project_dir).exists():
        return open_storage(default_storage(project_dir))
    return None


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
    from datetime import datetime

    import sqlalchemy
    from optuna.storages._rdb.models import TrialModel
    from optuna.trial import TrialState

    claim = (
        sqlalchemy.update(TrialModel)
        .where(TrialModel.trial_id == trial_id)
        .where(TrialModel.state == TrialState.WAITING)
        .values(state=TrialState.RUNNING, datetime_start=datetime.now())
    )
    with storage.engine.begin() as connection:
        return connection.execute(claim).rowcount == 1


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
    from datetime import datetime

    import sqlalchemy
    from optuna.storages._rdb.models import TrialModel
    from optuna.trial import TrialState

    fail = (
        sqlalchemy.update(TrialModel)
        .where(TrialModel.trial_id == trial_id)
        .where(TrialModel.state == TrialState.RUNNING)
        .values(state=TrialState.FAIL, datetime_complete=datetime.now())
    )
    with storage.engine.begin() as connection:
        return connection.execute(fail).rowcount == 1


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


# --------------------------------------------------------------------------
# A worker: trials one after another, each a run of the project
# --------------------------------------------------------------------------


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

    from engine.jobs.registry import validate_config
    from engine.rl.config import TrainConfig
    from engine.rl.train import run as train
    from engine.settings import load as load_config

    n = trial.number
    objective = settings.objective
    # list choices as lists
    params = {d.name: d.suggest(trial) for d in settings.search}
    try:
        config = validate_config(KIND, trial_config(settings, params, project.path, n))
    except ConfigError as exc:
        # These values do not go together (a batch larger than the rollout).
        trial.set_user_attr("error", str(exc))
        study.tell(trial, state=TrialState.FAIL)
        print(f"trial {n}: not run: {exc}", file=sys.stderr, flush=True)
        return True
    name = f"{study.study_name} #{n}"
    record = project.create_run(KIND, config, name=name)
    trial.set_user_attr("run_id", record.id)
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("project", str(project.path))

    trained = load_config(TrainConfig, config)
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

    ctx = TrialContext(
        record.id, Path(record.run_dir), KIND, config, events=None, project=project
    )
    total = float(trained.total_steps or settings.steps)
    outcome = run_in_process(
        project,
        record.id,
        ctx,
        partial(train, on_eval=on_eval),
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
    from engine.rl.config import register_designed_envs
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


# --------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", default=None, help="Gymnasium id or rlstudio/<name>-v0"
    )
    parser.add_argument(
        "--algo", default=None, help="PPO, A2C, DQN, SAC, TD3, MaskablePPO or auto"
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
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="settings",
        help="a fixed setting or hyperparameter for every trial (repeatable)",
    )
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
    from engine.jobs.registry import validate_config
    from engine.rl.cli import parse_settings
    from engine.rl.config import TrainConfig
    from engine.settings import load as load_config

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
    checked = load_config(TrainConfig, validate_config(KIND, base))
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


def _clash(existing: SweepSettings, wanted: SweepSettings) -> list[str]:
    """The settings (by their recorded names) in which two sweeps differ,
    their seed and pruner start aside."""
    keys = ("env", "algo", "steps", "trials", "search", "settings", "hyperparameters")
    ours, theirs = existing.to_json(), wanted.to_json()
    return [k for k in (*keys, "objective") if ours[k] != theirs[k]]


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
    config=TuneConfig,
    check=validate_job,
    form=schema,
    label="Sweep",
    group="training",
    description="An Optuna sweep over an rl.train run's settings: its "
    "trials are rl.train runs of the project, trained by worker processes.",
    progress_unit="trials",
    project_field="project_dir",
    default_name="sweep {study}",
    # Its workers get 60 s to stop (engine.rl.sweep_workers.WorkerGroup.stop).
    stop_grace_s=90.0,
)
def job(ctx: JobContext, cfg: TuneConfig) -> dict[str, Any]:
    """The ``rl.tune`` job: the sweep's workers started and watched; each
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
    config=SweepPresetConfig,
    check=validate_preset_job,
    label="Sweep preset",
    group="export",
    description="Saves a sweep's best trial's settings as a project preset.",
    progress_unit="items",
    project_field="project_dir",
    default_name="preset {name}",
)
def preset_job(ctx: JobContext, cfg: SweepPresetConfig) -> dict[str, Any]:
    """The ``rl.tune.preset`` job: the sweep's summary (:func:`conclude`),
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
