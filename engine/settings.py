"""Settings declared once: a job's config dataclass, read through this module.

Each field of a job's config dataclass is the single declaration of one
setting. Its annotation gives the type (``int | None`` makes it optional),
its default the default, its attribute docstring the help, and
:func:`setting` puts the rest in the field's metadata: unit, bounds
(``exclusive_min`` / ``exclusive_max`` make them strict), choices, form group
and label, the default range a sweep searches (:class:`Search`) and any
further rule of its values (``check``: a name that becomes a folder's).
Everything else is derived from that:

- validation: :func:`check_value` / :func:`check_fields`, one generic checker
  (type, bounds, choices, optional, the declared rule) raising
  :class:`~engine.errors.ConfigError` with one sentence naming the field;
- the run dialog's form fields: :func:`form_field`;
- flow node parameters: :func:`param_spec` (an :class:`engine.flow.ParamSpec`).

A setting whose use depends on the machine (a package, a GPU) declares an
``offer``: a function asked when a form or node parameter is built, whose
:class:`Offer` narrows the choices shown or disables the field with a reason.
The job still checks the value itself: an old config may ask for more.

Stdlib only, so the supervisor and the GUI can import it for free.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import math
import random
import textwrap
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

from engine.errors import ConfigError, quoted, with_defaults
from engine.flow import ParamSpec, bounds_problem

C = TypeVar("C")
"""A config dataclass."""

SCALAR_KINDS = ("int", "float", "bool", "str")
PICKER_KINDS = ("env", "base_model")
COUNT_MAX = 10**9
"""The upper bound of a whole-number setting that declares none: a count
(steps, episodes, sizes) past it is a typo or an attack, never a run this app
could finish (10^20 steps trained until killed). A setting that means more
declares its own ``max``."""
STEPS_MAX = 10**10
"""The most environment steps any step setting may ask for (ten billion: about
four months at a thousand steps a second)."""
LIST_MAX_ITEMS = 256
"""The most items a list setting (``net_arch``, a grid's ``size``) may hold."""
"""What a text setting's ``picker`` offers to pick from: ``env`` (the env
catalog and the project's envs), ``base_model`` (local model folders, the
HF cache and a Hub search)."""


@dataclass(frozen=True)
class Offer:
    """What this machine allows of a setting, as forms show it."""

    choices: tuple[str, ...] | None = None
    """The choices offered here (None: all the setting declares)."""
    disabled: str = ""
    """Why the setting cannot be used here (one sentence); empty: it can."""


@dataclass(frozen=True)
class Search:
    """Where a sweep (``rl-studio-engine tune``) looks for a setting by
    default: ``low`` to ``high`` (on a log scale with ``log``), or the
    setting's own choices (``True`` and ``False`` for a flag) when neither is
    given. A setting without one is searched only when asked for."""

    low: float | None = None
    high: float | None = None
    log: bool = False


def setting(
    default: Any = dataclasses.MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    unit: str = "",
    min: float | None = None,
    max: float | None = None,
    exclusive_min: bool = False,
    exclusive_max: bool = False,
    choices: tuple[str, ...] = (),
    group: str = "",
    label: str = "",
    form: bool = True,
    numeric_text: bool = False,
    search: Search | None = None,
    picker: str = "",
    offer: Callable[[], Offer] | None = None,
    structure: type | None = None,
    check: Callable[[str, Any], Any] | None = None,
) -> Any:
    """A dataclass field carrying a setting's metadata.

    ``form=False`` keeps the field out of generated forms and node
    parameters; ``numeric_text`` lets a text field take a number (stored as
    its text, e.g. SAC's ``ent_coef``). For a ``list[int]`` field the bounds
    apply to each item. ``picker`` (one of :data:`PICKER_KINDS`) makes forms
    offer a searchable list of known values for a text field. ``offer``
    tells forms what this machine allows (see :class:`Offer`); it must import
    nothing heavy, as the supervisor asks it. ``structure`` names the config
    dataclass whose settings an object-valued setting holds; a form that
    knows where it applies edits it as one nested field
    (:func:`structure_form_field`), flat forms and node parameters leave it
    out. ``check`` is a further rule of a value that passed the others:
    called with the setting's path and the value (never None), it returns
    the value or raises ConfigError (``engine.store.paths.checked_name``: a
    name that becomes one part of a path).
    """
    assert not picker or picker in PICKER_KINDS, picker
    metadata = {
        "unit": unit,
        "min": min,
        "max": max,
        "exclusive_min": exclusive_min,
        "exclusive_max": exclusive_max,
        "choices": tuple(choices),
        "group": group,
        "label": label,
        "form": form,
        "numeric_text": numeric_text,
        "search": search,
        "picker": picker,
        "offer": offer,
        "structure": structure,
        "check": check,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def same_setting(cls: type, name: str, *, default: Any = dataclasses.MISSING) -> Any:
    """A field standing for the setting ``name`` that ``cls`` declares, in
    another config: a job's that passes it on to another job's work, or
    another algorithm's with the very same setting (``gamma``). The same
    default, metadata and help, declared once in ``cls``; ``default`` gives
    another default where only that differs (an algorithm's own step size
    in stable-baselines3)."""
    declared = {f.name: f for f in dataclasses.fields(cls)}[name]
    metadata = {**declared.metadata, "same_as": (cls, name)}
    if default is not dataclasses.MISSING:
        return dataclasses.field(default=default, metadata=metadata)
    if declared.default_factory is not dataclasses.MISSING:
        return dataclasses.field(
            default_factory=declared.default_factory, metadata=metadata
        )
    return dataclasses.field(default=declared.default, metadata=metadata)


@dataclass(frozen=True)
class FieldInfo:
    """One setting as the dataclass declares it."""

    name: str
    kind: str
    """``int``, ``float``, ``bool``, ``str``, ``list[int]``, or ``any`` (a
    structure the job checks itself)."""
    optional: bool
    default: Any
    help: str = ""
    unit: str = ""
    min: float | None = None
    max: float | None = None
    exclusive_min: bool = False
    exclusive_max: bool = False
    choices: tuple[str, ...] = ()
    group: str = ""
    label: str = ""
    form: bool = True
    numeric_text: bool = False
    search: Search | None = None
    picker: str = ""
    offer: Callable[[], Offer] | None = None
    structure: type | None = None
    check: Callable[[str, Any], Any] | None = None

    def offered(self) -> Offer:
        """What this machine allows of the setting now (everything when it
        declares no ``offer``)."""
        return self.offer() if self.offer is not None else Offer()


def _kind(annotation: object) -> tuple[str, bool]:
    parts = [p.strip() for p in str(annotation).split("|")]
    optional = "None" in parts
    base = " | ".join(p for p in parts if p != "None")
    if base in SCALAR_KINDS or base == "list[int]":
        return base, optional
    return "any", optional


def first_paragraph(docstring: str | None) -> str:
    """A docstring's first paragraph as one line: the description a job kind
    or a node type shows, read from its function."""
    return " ".join(inspect.cleandoc(docstring or "").split("\n\n", 1)[0].split())


def field_docs(cls: type) -> dict[str, str]:
    """Attribute docstrings of a dataclass (including its bases), by field,
    on one line each."""
    return dict(_field_docs(cls))


_PARSING = threading.Lock()
"""CPython 3.11's parser is not safe from two threads at once ("AST
constructor recursion depth mismatch"): a sweep worker validates the configs
of the trials it trains together on threads of their own."""


@cache
def _classes_in(filename: str) -> dict[str, ast.ClassDef]:
    """The classes of a source file by qualified name, the file parsed once
    (``inspect.getsource`` parses the whole module again for each class: a
    run's validation spent 0.6 s in it)."""
    with _PARSING:
        tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
    found: dict[str, ast.ClassDef] = {}

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.ClassDef):
                found.setdefault(prefix + node.name, node)
                visit(node.body, f"{prefix}{node.name}.")

    visit(tree.body, "")
    return found


def _class_node(klass: type) -> ast.ClassDef | None:
    """The class statement of ``klass`` (None where there is no source)."""
    try:
        filename = inspect.getsourcefile(klass)
        node = _classes_in(filename).get(klass.__qualname__) if filename else None
        if node is not None:
            return node
        with _PARSING:  # a class made in a function: its own source
            body = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
    except (OSError, TypeError):
        return None
    return body if isinstance(body, ast.ClassDef) else None


@cache
def _field_docs(cls: type) -> tuple[tuple[str, str], ...]:
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        body = _class_node(klass)
        if body is None:
            continue
        for stmt, following in itertools.pairwise(body.body):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                docs[stmt.target.id] = " ".join(following.value.value.split())
    return tuple(docs.items())


@cache
def _fields_of(cls: type) -> tuple[FieldInfo, ...]:
    docs = field_docs(cls)
    out = []
    for f in dataclasses.fields(cls):
        kind, optional = _kind(f.type)
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = None if f.default is dataclasses.MISSING else f.default
        meta = dict(f.metadata)
        upper = meta.get("max")
        if upper is None and kind in ("int", "list[int]"):
            upper = COUNT_MAX  # every count has a bound (see COUNT_MAX)
        help_text = docs.get(f.name, "")
        if not help_text and "same_as" in meta:
            source, name = meta["same_as"]
            help_text = field_docs(source).get(name, "")
        out.append(
            FieldInfo(
                name=f.name,
                kind=kind,
                optional=optional,
                default=default,
                help=help_text,
                unit=meta.get("unit", ""),
                min=meta.get("min"),
                max=upper,
                exclusive_min=meta.get("exclusive_min", False),
                exclusive_max=meta.get("exclusive_max", False),
                choices=tuple(meta.get("choices", ())),
                group=meta.get("group", ""),
                label=meta.get("label", ""),
                form=meta.get("form", True),
                numeric_text=meta.get("numeric_text", False),
                search=meta.get("search"),
                picker=meta.get("picker", ""),
                offer=meta.get("offer"),
                structure=meta.get("structure"),
                check=meta.get("check"),
            )
        )
    return tuple(out)


def fields_of(cls: type) -> dict[str, FieldInfo]:
    """The settings ``cls`` declares, by name, in declaration order."""
    return {info.name: info for info in _fields_of(cls)}


def defaults_of(cls: type) -> dict[str, Any]:
    """Every setting's default (a fresh copy of mutable ones)."""
    return dataclasses.asdict(cls())


# --------------------------------------------------------------------------
# The checker
# --------------------------------------------------------------------------


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_text(value: str) -> bool:
    """Whether ``value`` is valid Unicode text (no lone surrogate, which no
    file or JSON reader downstream can hold)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _bounds(info: FieldInfo, value: float, title: str) -> str | None:
    if not isinstance(value, int) or abs(value) < 10**15:
        return bounds_problem(
            title, value, info.min, info.max, info.exclusive_min, info.exclusive_max
        )
    # A value too long to quote whole (bounds_problem quotes it all).
    sign = math.inf if value > 0 else -math.inf
    problem = bounds_problem(
        title, sign, info.min, info.max, info.exclusive_min, info.exclusive_max
    )
    if problem is None:
        return None
    return problem.rsplit(", not ", 1)[0] + f", not {quoted(value)}."


def check_value(info: FieldInfo, value: Any, path: str = "") -> Any:
    """``value`` checked against the setting (type, bounds, choices, None),
    lightly coerced (a whole float for an int, an int for a float); a
    ConfigError naming ``path`` (default: the field's name) otherwise."""
    path = path or info.name
    name = info.name
    if info.kind == "any":
        return value  # a structure its job checks itself
    if value is None:
        if info.optional:
            return None
        raise ConfigError(path, f"{name} needs a value.")
    kind = info.kind
    if kind == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not _is_int(value):
            raise ConfigError(
                path, f"{name} must be a whole number, not {quoted(value)}."
            )
    elif kind == "float":
        if _is_int(value):
            try:
                float(value)  # kept an int: the message quotes it as given
            except OverflowError:  # an int past the largest float
                raise ConfigError(
                    path, f"{name} must be a finite number, not {quoted(value)}."
                ) from None
        if not _is_number(value) or not math.isfinite(value):
            raise ConfigError(path, f"{name} must be a number, not {quoted(value)}.")
    elif kind == "bool":
        if not isinstance(value, bool):
            raise ConfigError(
                path, f"{name} must be true or false, not {quoted(value)}."
            )
    elif kind == "str":
        if info.numeric_text and _is_number(value):
            try:
                value = str(float(value))
            except OverflowError:  # an int past the largest float
                raise ConfigError(
                    path, f"{name} must be a finite number, not {quoted(value)}."
                ) from None
        if not isinstance(value, str):
            raise ConfigError(path, f"{name} must be text, not {quoted(value)}.")
        if not _is_text(value):
            raise ConfigError(
                path,
                f"{name} must be text, not {quoted(value)}, which holds a lone "
                "surrogate (no character at all).",
            )
    elif kind == "list[int]":
        if not isinstance(value, list | tuple) or not all(_is_int(v) for v in value):
            raise ConfigError(
                path, f"{name} must be a list of whole numbers, not {quoted(value)}."
            )
        if len(value) > LIST_MAX_ITEMS:
            raise ConfigError(
                path,
                f"{name} may hold at most {LIST_MAX_ITEMS} items, not {len(value)}.",
            )
        for item in value:
            problem = _bounds(info, item, f"Each item of {name}")
            if problem:
                raise ConfigError(path, problem)
        return [int(v) for v in value]
    if info.choices and value not in info.choices:
        raise ConfigError(
            path,
            f"{name} must be one of {', '.join(info.choices)}, not {quoted(value)}.",
        )
    if kind in ("int", "float"):
        problem = _bounds(info, value, name)
        if problem:
            raise ConfigError(path, problem)
    if kind == "float":
        value = float(value)
    return value if info.check is None else info.check(path, value)


def check_fields(
    cls: type,
    values: dict[str, Any],
    *,
    prefix: str = "",
    skip: Iterable[str] = (),
) -> dict[str, Any]:
    """``values`` with each setting of ``cls`` it holds checked and coerced
    (errors name ``prefix + name``); keys ``cls`` does not declare, and
    those in ``skip``, pass through unchecked."""
    out = dict(values)
    skipped = set(skip)
    for name, info in fields_of(cls).items():
        if name in out and name not in skipped:
            out[name] = check_value(info, out[name], prefix + name)
    return out


def checked_config(cls: type, config: Mapping[str, Any], job: str) -> dict[str, Any]:
    """A job's config: ``cls``'s defaults overridden by ``config`` (a key
    ``cls`` does not declare is a ConfigError naming it), every setting
    checked by :func:`check_value`."""
    return check_fields(cls, with_defaults(config, defaults_of(cls), job))


def build(cls: type[C], config: Mapping[str, Any], job: str) -> C:
    """The config instance :func:`checked_config` describes: what a job
    kind's validation returns when its settings need no check across
    fields."""
    return load(cls, checked_config(cls, config, job))


def drawn_seed(seed: int | None) -> int:
    """``seed``, or a random one when it is None: a validated config holds
    the seed its run uses, so that the recorded config repeats the run."""
    return random.randrange(2**31) if seed is None else seed


def as_dict(cfg: object) -> dict[str, Any]:
    """A config instance as the JSON object a run records (``config.json``,
    the project's run list); :func:`load` reads it back."""
    assert dataclasses.is_dataclass(cfg) and not isinstance(cfg, type), cfg
    return dataclasses.asdict(cfg)


def same_named(cfg: object, names: str | Iterable[str]) -> dict[str, Any]:
    """``{name: cfg.name}`` for each of ``names`` (an iterable, or one string
    of space-separated names): the settings a library or a compiled program
    takes as arguments of the same name. A name ``cfg`` lacks raises
    AttributeError, a bug caught by the first run."""
    if isinstance(names, str):
        names = names.split()
    return {name: getattr(cfg, name) for name in names}


def load(cls: type[C], values: Mapping[str, Any]) -> C:
    """The instance of ``cls`` a recorded config describes (the output of
    :func:`as_dict`, or a checked config): values are taken as they are, not
    checked again, and a field holding a config dataclass is built from its
    object. A key ``cls`` does not declare is left out: a run recorded by an
    older version keeps loading after a setting is dropped."""
    hints = _type_hints(cls)  # type: ignore[arg-type]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in values:
            continue
        value = values[f.name]
        nested = hints.get(f.name)
        nested_config = isinstance(nested, type) and dataclasses.is_dataclass(nested)
        if nested_config and isinstance(value, Mapping):
            assert isinstance(nested, type)
            value = load(nested, value)
        kwargs[f.name] = value
    return cls(**kwargs)


@cache
def _type_hints(cls: type) -> dict[str, Any]:
    try:
        return get_type_hints(cls)
    except (NameError, TypeError):
        return {}


def form_of(cls: type) -> list[dict[str, Any]]:
    """Every setting of ``cls`` that a form can edit, as form fields (a
    job kind's run form when it declares no form of its own)."""
    return [
        form_field(info)
        for info in fields_of(cls).values()
        if info.form and form_type(info) is not None
    ]


# --------------------------------------------------------------------------
# Forms and node parameters
# --------------------------------------------------------------------------


def title_of(info: FieldInfo) -> str:
    return info.label or info.name.replace("_", " ").capitalize()


def form_type(info: FieldInfo, *, lists: bool = False) -> str | None:
    """The form type of a setting, None for one a form cannot edit; with
    ``lists``, a ``list[int]`` setting is ``int_list`` (typed as ``3, 4``)."""
    if info.choices:
        return "choice"
    if info.kind in SCALAR_KINDS:
        return info.kind
    if lists and info.kind == "list[int]":
        return "int_list"
    return None


def form_field(
    info: FieldInfo,
    *,
    name: str | None = None,
    default: Any = dataclasses.MISSING,
    group: str | None = None,
    lists: bool = False,
) -> dict[str, Any]:
    """The setting as a ``widgets.param_form`` schema (``lists``: see
    :func:`form_type`)."""
    kind = form_type(info, lists=lists)
    assert kind is not None, f"{info.name} cannot be edited in a form"
    out = _form_header(info, kind, name=name, default=default, group=group)
    if info.unit:
        out["unit"] = info.unit
    offer = info.offered()
    if kind == "choice":
        out["choices"] = [c for c in info.choices if _offered(c, offer)]
        unoffered = [c for c in info.choices if not _offered(c, offer)]
        if unoffered:
            out["unoffered"] = unoffered
    if offer.disabled:
        out["disabled"] = offer.disabled
    if info.picker:
        out["picker"] = info.picker
    for key in ("min", "max"):
        if getattr(info, key) is not None:
            out[key] = getattr(info, key)
    for key in ("exclusive_min", "exclusive_max"):
        if getattr(info, key):
            out[key] = True
    return out


def structure_form_field(
    info: FieldInfo,
    *,
    rows: Mapping[str, type],
    default: Any = dataclasses.MISSING,
    group: str | None = None,
) -> dict[str, Any]:
    """An object-valued setting (``info.structure`` names its dataclass) as
    one ``object`` form field: each form setting of that dataclass a
    sub-field, and each list setting named in ``rows`` a ``rows`` sub-field
    (a table, one row per item) whose columns are the settings of the
    dataclass ``rows`` gives for it. A row leaves out the columns at their
    default, so ``{}`` is a row of defaults."""
    assert info.structure is not None, f"{info.name} declares no structure"
    fields: list[dict[str, Any]] = []
    for sub in fields_of(info.structure).values():
        if sub.name in rows:
            columns = [
                form_field(col, lists=True)
                for col in fields_of(rows[sub.name]).values()
                if col.form and form_type(col, lists=True) is not None
            ]
            table = _form_header(sub, "rows", group="")
            fields.append({**table, "columns": columns, "min_rows": 1})
        elif sub.form and form_type(sub) is not None:
            fields.append(form_field(sub, group=""))
    out = _form_header(info, "object", default=default, group=group)
    out["fields"] = fields
    return out


def _form_header(
    info: FieldInfo,
    kind: str,
    *,
    name: str | None = None,
    default: Any = dataclasses.MISSING,
    group: str | None = None,
) -> dict[str, Any]:
    """What every form field says of its setting: name, type, default, help,
    title, group and whether it may be left unset."""
    out: dict[str, Any] = {
        "name": name or info.name,
        "type": kind,
        "default": info.default if default is dataclasses.MISSING else default,
        "help": info.help,
        "title": title_of(info),
        "group": info.group if group is None else group,
    }
    if info.optional:
        out["optional"] = True
    return out


def _offered(choice: str, offer: Offer) -> bool:
    return offer.choices is None or choice in offer.choices


def param_spec(
    info: FieldInfo,
    *,
    name: str | None = None,
    default: Any = dataclasses.MISSING,
    optional: bool | None = None,
    help: str | None = None,
    group: str | None = None,
) -> ParamSpec:
    """The setting as a flow node parameter (same default, bounds, help)."""
    kind = form_type(info) or "str"
    if info.kind == "list[int]":
        kind = "str"  # typed as "64, 64"; see parse_list_text
    offer = info.offered()
    return ParamSpec(
        name=name or info.name,
        type=kind,
        default=info.default if default is dataclasses.MISSING else default,
        help=info.help if help is None else help,
        label=info.label,
        min=info.min if kind in ("int", "float") else None,
        max=info.max if kind in ("int", "float") else None,
        exclusive_min=info.exclusive_min and kind in ("int", "float"),
        exclusive_max=info.exclusive_max and kind in ("int", "float"),
        choices=info.choices,
        optional=info.optional if optional is None else optional,
        group=info.group if group is None else group,
        picker=info.picker,
        offered=()
        if offer.choices is None
        else tuple(c for c in info.choices if _offered(c, offer)),
        disabled=offer.disabled,
    )


def param_specs(
    cls: type, names: Iterable[str], *, group: str | None = None
) -> tuple[ParamSpec, ...]:
    """Flow node parameters for the named settings of ``cls``, in order."""
    infos = fields_of(cls)
    return tuple(param_spec(infos[n], group=group) for n in names)


def parse_list_text(text: str, path: str) -> list[int]:
    """``"64, 64"`` (or ``"[64, 64]"``) as ``[64, 64]``; ConfigError otherwise."""
    inner = text.strip().removeprefix("[").removesuffix("]")
    try:
        return [int(part) for part in inner.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            path,
            f"{path.rsplit('.', 1)[-1]} must be whole numbers separated by commas, "
            f"not {text!r}.",
        ) from None
