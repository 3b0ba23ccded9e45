"""The kinds of job the supervisor can start: each declared once, beside its
job's code, by :func:`job_kind`.

A kind is its job function, ``run(ctx, cfg) -> summary``, and the config
dataclass whose instance ``cfg`` is (:mod:`engine.settings`: each field one
setting). Validation turns the JSON a caller sends into that instance
(``check``, default :func:`engine.settings.build`: defaults filled in, every
field checked, a ConfigError naming the field for anything that cannot
work); the run records it as JSON (:func:`engine.settings.as_dict`) and the
job process reads it back typed (:func:`engine.settings.load`), so a job
reads attributes mypy checks, never ``cfg["key"]``.

The modules that declare kinds are imported by :mod:`engine.kinds`, the one
list of them, which :func:`kinds` imports on first use: the supervisor imports
every declaring module, so a job function keeps its heavy imports (torch,
stable-baselines3, TRL) inside its body, and ``tests/test_job_kinds.py``
checks that importing them all loads none.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from engine import settings
from engine.errors import ConfigError
from engine.jobs import names

if TYPE_CHECKING:
    from engine.jobs.context import JobContext

C = TypeVar("C")

GROUPS = ("training", "data", "evaluation", "export", "environments", "engine")
"""The groups a kind belongs to. The studio lists the runs of ``training``
kinds in its Training list, the others in Activity."""

KINDS_MODULE = "engine.kinds"
"""The module whose imports declare every kind (the top of the engine's
layers, so it may import every capability). Imported by name: this package
sits below the capabilities it lists."""

Summary = Mapping[str, Any]
JobFunction = Callable[["JobContext", C], Summary]
SummaryReader = Callable[[Path, C], "dict[str, Any] | None"]


@dataclass(frozen=True)
class JobKind(Generic[C]):
    """One kind of job, as :func:`job_kind` declares it."""

    name: str
    config: type[C]
    """The config dataclass: the one declaration of the kind's settings."""
    run: JobFunction[C]
    """The job function, run in the job process (heavy imports inside)."""
    label: str
    """What a run of this kind is called in lists (``"GGUF export"``)."""
    group: str
    """One of :data:`GROUPS`."""
    description: str = ""
    progress_unit: str = "steps"
    """What the run's progress counts (``steps``, ``bytes``, ``trials``,
    ``episodes``, ``nodes``, ``items``)."""
    resumable: bool = False
    stop_grace_s: float = 0.0
    """The least time a stop of this kind gets before the supervisor forces
    it, whatever the caller asked: a sweep stops its workers, whose trials
    save their checkpoints first."""
    default_name: str | None = None
    """A ``str.format`` template over the validated config naming a run the
    user did not name (``"{algo} {env}"``); its ``name`` setting wins."""
    project_field: str | None = None
    """A setting the supervisor fills with the open project's folder when the
    config leaves it out, so that validation sees the project's designed
    envs (``rlstudio/<name>-v0``) before the job starts."""
    model_name_field: str | None = None
    """The setting naming the model a run registers, given the run's name
    when the config leaves it empty (:func:`named_run`)."""
    check: Callable[[Mapping[str, Any]], C] | None = None
    """Validation with checks across fields (run in the supervisor before
    the process starts; quick, may import gymnasium); None:
    :func:`engine.settings.build`."""
    form: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None
    """The run form for the values typed so far, for a kind whose form
    depends on them (rl.train's on its algorithm); None: every setting of
    :attr:`config` a form can edit (:func:`engine.settings.form_of`)."""
    summary_on_disk: SummaryReader[C] | None = None
    """The summary of a run of this kind from what it saved in its folder
    (its last checkpoint): what the supervisor records for a run stopped by
    force, killed before it reported its own summary
    (``engine.jobs.lifecycle.finish_forced``). Returns None when the run
    saved nothing yet and raises ``engine.errors.EngineError`` in one
    sentence for a checkpoint it cannot read. It runs in the supervisor, so
    it must not import torch. Kinds without one keep the summary the run's
    row had."""

    def validate(self, config: Mapping[str, Any]) -> C:
        """The config instance for ``config``; ConfigError naming the field."""
        if self.check is not None:
            return self.check(config)
        return settings.build(self.config, config, self.name)

    def load(self, recorded: Mapping[str, Any]) -> C:
        """The config instance a run recorded (:meth:`record`)."""
        return settings.load(self.config, recorded)

    def record(self, cfg: C) -> dict[str, Any]:
        """The JSON object a run records of its config."""
        return settings.as_dict(cfg)

    def entry(self, ctx: JobContext) -> Summary:
        """Run the job on the context's recorded config."""
        return self.run(ctx, self.load(ctx.config))

    def run_form(self, values: Mapping[str, Any]) -> list[dict[str, Any]]:
        if self.form is not None:
            return self.form(dict(values))
        return settings.form_of(self.config)

    def catalog_entry(self) -> dict[str, Any]:
        """What the engine's catalog says of the kind (``hello``)."""
        return {
            "label": self.label,
            "group": self.group,
            "description": self.description,
            "progress_unit": self.progress_unit,
            "resumable": self.resumable,
        }


_KINDS: dict[str, JobKind[Any]] = {}


def job_kind(
    name: str,
    *,
    label: str,
    group: str,
    progress_unit: str = "steps",
    resumable: bool = False,
    stop_grace_s: float = 0.0,
    default_name: str | None = None,
    project_field: str | None = None,
    model_name_field: str | None = None,
    check: Callable[[Mapping[str, Any]], C] | None = None,
    form: Callable[[dict[str, Any]], list[dict[str, Any]]] | None = None,
    summary_on_disk: SummaryReader[C] | None = None,
) -> Callable[[JobFunction[C]], JobFunction[C]]:
    """Declare the decorated function the job of kind ``name`` (see
    :class:`JobKind` for the settings).

    Two facts the function already states are read from it rather than
    said again: the config class is its ``cfg`` parameter's annotation, and
    the description users see is its docstring's first paragraph."""
    assert group in GROUPS, group

    def declare(run: JobFunction[C]) -> JobFunction[C]:
        _register(
            JobKind(
                name=name,
                config=config_class(run),
                run=run,
                label=label,
                group=group,
                description=settings.first_paragraph(run.__doc__),
                progress_unit=progress_unit,
                resumable=resumable,
                stop_grace_s=stop_grace_s,
                default_name=default_name,
                project_field=project_field,
                model_name_field=model_name_field,
                check=check,
                form=form,
                summary_on_disk=summary_on_disk,
            )
        )
        return run

    return declare


def config_class(run: Callable[..., Any]) -> type[Any]:
    """The class a job function's config parameter (its second) is
    annotated with, looked up in the function's module: under ``from
    __future__ import annotations`` the annotation is the class's name."""
    parameters = list(inspect.signature(run).parameters.values())
    annotation = parameters[1].annotation if len(parameters) == 2 else None
    if isinstance(annotation, str):
        annotation = getattr(run, "__globals__", {}).get(annotation)
    assert isinstance(annotation, type) and annotation is not inspect.Parameter.empty, (
        f"{run.__qualname__}: a job function is run(ctx, cfg: ConfigClass), with "
        "ConfigClass a name of its module"
    )
    return annotation


def _register(kind: JobKind[Any]) -> None:
    """Add a kind; declaring one name twice is a bug (a module run as
    ``__main__`` declares its kinds a second time)."""
    assert kind.name not in _KINDS or _KINDS[kind.name].run is kind.run, kind.name
    _KINDS[kind.name] = kind


def kinds() -> dict[str, JobKind[Any]]:
    """Every kind by name (their modules imported on first use)."""
    importlib.import_module(KINDS_MODULE)
    return _KINDS


def run_name(
    kind_name: str,
    config: Mapping[str, Any],
    name: str = "",
    taken: Collection[str] = (),
) -> str:
    """The name a new run gets: ``name``, else the config's ``name`` setting,
    else the kind's default name with two words no run in ``taken`` (the
    project's run names) has (``PPO CartPole-v1 · brisk-otter``); empty when
    none applies."""
    kind = get_kind(kind_name)
    if name:
        return name
    if isinstance(config.get("name"), str) and config["name"].strip():
        return str(config["name"]).strip()
    if kind.default_name:
        try:
            base = kind.default_name.format_map(dict(config))
        except (KeyError, IndexError, ValueError):
            return ""
        return names.unique_name(base, taken)
    return ""


def named_run(
    kind_name: str,
    config: Mapping[str, Any],
    name: str = "",
    taken: Collection[str] = (),
) -> tuple[str, dict[str, Any]]:
    """A new run's name (:func:`run_name`) and its recorded config, whose
    model takes that name when the config names none (the kind's
    ``model_name_field``): a run and its model are called alike."""
    chosen = run_name(kind_name, config, name, taken)
    record = dict(config)
    field = get_kind(kind_name).model_name_field
    if chosen and field and not record.get(field):
        record[field] = chosen
    return chosen, record


def get_kind(name: str) -> JobKind[Any]:
    """The kind ``name``: one its module already declared, else from all
    of them (a command running one kind need not import the others')."""
    declared = _KINDS.get(name)
    if declared is not None:
        return declared
    known = kinds()
    try:
        return known[name]
    except KeyError:
        listed = ", ".join(sorted(known))
        raise ConfigError(
            "kind", f"Unknown job kind {name!r}; known kinds: {listed}."
        ) from None


def run_schema(kind_name: str, values: Mapping[str, Any]) -> list[dict[str, Any]]:
    return get_kind(kind_name).run_form(values)


def validate_config(kind_name: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` checked by its kind, as the JSON object the run records."""
    kind = get_kind(kind_name)
    return kind.record(kind.validate(config))
