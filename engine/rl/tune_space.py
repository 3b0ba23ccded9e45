"""What a sweep searches: the settings it may vary, each one's range
(:class:`Dimension`, from the field's :class:`engine.settings.Search` or
``--search``), and the sweep's settings its study records
(:class:`SweepSettings`)."""

from __future__ import annotations

import contextlib
import difflib
import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Literal

from engine.errors import ConfigError, EngineError

if TYPE_CHECKING:
    import optuna

    from engine.settings import FieldInfo


SETTINGS_FORMAT = 1
"""The version of the record :meth:`SweepSettings.to_json` writes."""

DEFAULT_PRUNE_STARTUP = 5
"""Trials finished before pruning starts, unless the sweep says."""

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

OBJECTIVES = ("reward", "time_to_target")
"""``reward``: the last evaluation's mean reward, maximized.
``time_to_target``: CPU seconds of the trial's run until it reached
``target_eval_reward``, minimized (a trial that does not reach it is pruned,
at the first evaluation past the best trial's CPU seconds)."""


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
