"""Compile specs to gymnasium envs and register them as ``rlstudio/<name>-v0``.

Registration uses a string entry point (``engine.envs.registry:make_from_spec``)
with the spec document in the kwargs, so gymnasium imports nothing until an
env is made, and a registered id keeps working if the file changes on disk
until it is registered again. ``gymnasium`` kind specs register the
underlying env's own entry point with the merged keyword arguments.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

from engine.envs.spec import (
    ENV_NAMESPACE,
    SPEC_SUFFIX,
    EnvSpec,
    SpecError,
    coerce_spec,
    load_spec,
    parse_spec,
)
from engine.errors import EngineError

log = logging.getLogger(__name__)

ENTRY_POINT = "engine.envs.registry:make_from_spec"
VECTOR_ENTRY_POINT = "engine.envs.workflow_env:make_vector_from_spec"

_registered: dict[str, str] = {}
"""env id -> fingerprint of the spec it was registered from."""
_project_ids: dict[str, set[str]] = {}
"""project folder -> ids registered from its envs/ folder."""


def make_from_spec(
    spec: dict[str, Any], source: str | None = None, **kwargs: Any
) -> Any:
    """Gymnasium entry point: build the env for a spec document."""
    built, problems = parse_spec(spec, source=source)
    errors = [p for p in problems if p.severity == "error"]
    if errors or built is None:
        raise SpecError(errors[0].path, errors[0].message)
    return build_env(built, **kwargs)


def build_env(spec: EnvSpec, **kwargs: Any) -> Any:
    """The raw env (no gymnasium wrappers) for a spec."""
    if spec.kind == "workflow":
        from engine.envs.workflow_env import WorkflowEnv

        return WorkflowEnv(spec, **kwargs)
    if spec.kind == "grid":
        from engine.envs.grid import GridEnv

        return GridEnv(spec, **kwargs)
    if spec.kind == "python":
        # The user's code runs in its own process, never in this one.
        from engine.envs.remote import RemoteEnv

        return RemoteEnv(
            spec.resolve(spec.body["file"]),
            spec.body["class"],
            **{**spec.body.get("kwargs", {}), **kwargs},
        )
    if spec.kind == "gymnasium":
        import gymnasium as gym

        module, _, base_id = spec.body["id"].rpartition(":")
        if module:
            import_installed_module(module, spec.source)
        return gym.make(base_id, **{**spec.body.get("kwargs", {}), **kwargs})
    raise SpecError("kind", f"Unknown kind {spec.kind!r}.")


# ---------------------------------------------------------------- registration

_MODULE_NAME = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def import_installed_module(module: str, spec_file: Path | None = None) -> None:
    """Import the module of a ``module:EnvId`` gymnasium id, the way
    ``gym.make`` would, but only when it is installed software.

    A spec is a shared document, and this import runs unconfined in the engine:
    a module from the project folder (or one shadowing an installed name from
    there) is refused. Custom env code belongs in a ``python`` kind env, which
    runs in a confined process of its own.
    """
    if not _MODULE_NAME.fullmatch(module):
        raise SpecError(
            "gymnasium.id", f"gymnasium.id: {module!r} is not a module name."
        )
    top = module.split(".", 1)[0]
    found = importlib.util.find_spec(top)
    if found is None:
        raise SpecError(
            "gymnasium.id", f"gymnasium.id: no installed module named {top!r}."
        )
    if top not in sys.stdlib_module_names and top not in _installed_top_levels():
        raise SpecError(
            "gymnasium.id",
            f"gymnasium.id: module {top!r} is not installed software; put custom "
            "env code in a python env, which runs confined.",
        )
    where = found.origin or next(iter(found.submodule_search_locations or []), "")
    if spec_file is not None and where:
        project = spec_file.resolve().parent.parent
        if Path(where).resolve().is_relative_to(project):
            raise SpecError(
                "gymnasium.id",
                f"gymnasium.id: module {top!r} would load from the project folder "
                f"({where}); put custom env code in a python env, which runs confined.",
            )
    importlib.import_module(module)


@cache
def _installed_top_levels() -> frozenset[str]:
    from importlib.metadata import packages_distributions

    return frozenset(packages_distributions())


def register_spec(spec: EnvSpec | dict[str, Any] | str | Path) -> str:
    """Register (or re-register, when it changed) one spec; returns its id."""
    import gymnasium as gym
    from gymnasium.envs.registration import registry

    spec = coerce_spec(spec)
    env_id = spec.env_id
    fingerprint = spec.fingerprint()
    if _registered.get(env_id) == fingerprint and env_id in registry:
        return env_id
    registry.pop(env_id, None)
    if spec.kind == "gymnasium":
        base_id = spec.body["id"]
        if ":" in base_id:
            module, base_id = base_id.split(":", 1)
            import_installed_module(module, spec.source)
        try:
            base = gym.spec(base_id)
        except gym.error.Error as exc:
            raise SpecError(
                "gymnasium.id", f"gymnasium.id {base_id!r}: {exc}"
            ) from None
        gym.register(
            id=env_id,
            entry_point=base.entry_point,
            kwargs={**base.kwargs, **spec.body.get("kwargs", {})},
            max_episode_steps=spec.body.get(
                "max_episode_steps", base.max_episode_steps
            ),
            reward_threshold=base.reward_threshold,
            nondeterministic=base.nondeterministic,
        )
    else:
        gym.register(
            id=env_id,
            entry_point=ENTRY_POINT,
            kwargs={
                "spec": spec.to_dict(),
                "source": None if spec.source is None else str(spec.source),
            },
            max_episode_steps=spec.body.get("max_episode_steps")
            if spec.kind == "python"
            else None,
            vector_entry_point=VECTOR_ENTRY_POINT if spec.kind == "workflow" else None,
        )
    _registered[env_id] = fingerprint
    return env_id


def register_project_envs(project_dir: str | Path) -> list[str]:
    """Register every ``<project>/envs/*.env.json``; returns the ids registered.

    Changed specs are registered again; ids registered earlier from this
    project whose file is gone are removed. A spec with errors is skipped
    (and logged): ``check_spec`` tells the user why.
    """
    from gymnasium.envs.registration import registry

    folder = Path(project_dir).expanduser().resolve()
    ids: list[str] = []
    for path in sorted((folder / "envs").glob(f"*{SPEC_SUFFIX}")):
        try:
            ids.append(register_spec(load_spec(path)))
        except EngineError as exc:
            log.warning("not registering %s: %s", path.name, exc)
    for gone in _project_ids.get(str(folder), set()) - set(ids):
        registry.pop(gone, None)
        _registered.pop(gone, None)
    _project_ids[str(folder)] = set(ids)
    return ids


def registered_id(spec_or_id: EnvSpec | dict[str, Any] | str | Path) -> str:
    """The gymnasium id of an id, a spec, a spec document or a spec file path
    (registering the spec)."""
    if isinstance(spec_or_id, str) and not spec_or_id.endswith(SPEC_SUFFIX):
        return spec_or_id
    return register_spec(spec_or_id)


def make(spec_or_id: EnvSpec | dict[str, Any] | str | Path, **kwargs: Any) -> Any:
    """``gym.make`` for an id, a spec, a spec document or a spec file path,
    with its family's preprocessing for playing (an Atari game's frames as
    RL Zoo trains on them: :func:`engine.envs.families.wrap`)."""
    import gymnasium as gym

    from engine.envs.families import check_loads, wrap

    env_id = registered_id(spec_or_id)
    check_loads(env_id)
    return wrap(gym.make(env_id, **kwargs), training=False)


def autoregister() -> list[str]:
    """Register the envs of ``$RL_STUDIO_PROJECT`` (or of the current folder if
    it has an ``envs/`` folder with specs), so ``import engine.envs`` is enough
    for ``gym.make("rlstudio/<name>-v0")`` in a user's script."""
    import os

    project = os.environ.get("RL_STUDIO_PROJECT")
    folder = Path(project) if project else Path.cwd()
    if not any((folder / "envs").glob(f"*{SPEC_SUFFIX}")):
        return []
    try:
        return register_project_envs(folder)
    except Exception as exc:  # never break an import
        log.warning("registering the envs of %s failed: %s", folder, exc)
        return []


# ---------------------------------------------------------------- catalog


def catalog(with_spaces: bool = False) -> list[dict[str, Any]]:
    """Installed gymnasium envs: id, entry point, kwargs, max episode steps,
    and (``with_spaces``) observation/action spaces.

    Listing is cheap (it reads the registry); spaces need one instance per
    env, made on demand and cached per process (:func:`describe_env`); envs
    that cannot be made (missing extras such as mujoco or box2d) get an
    ``error`` entry instead.
    """
    from gymnasium.envs.registration import registry

    from engine.envs.families import family, load_families

    load_families()
    out = []
    for env_id, es in sorted(registry.items()):
        entry: dict[str, Any] = {
            "id": env_id,
            "namespace": es.namespace,
            "entry_point": es.entry_point
            if isinstance(es.entry_point, str)
            else repr(es.entry_point),
            "kwargs": {k: v for k, v in es.kwargs.items() if _jsonable(v)},
            "max_episode_steps": es.max_episode_steps,
            "designed": es.namespace == ENV_NAMESPACE,
            "family": family(env_id),
        }
        if with_spaces:
            entry.update(describe_env(env_id))
        out.append(entry)
    return out


def _jsonable(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool, type(None), list, dict))


@cache
def _describe_cached(env_id: str, fingerprint: str) -> tuple[tuple[str, Any], ...]:
    import warnings

    from engine.envs.families import EnvFamilyError

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # as an agent sees it: an Atari game's 84x84 stack of frames
            env = make(env_id)
    except EnvFamilyError as exc:  # a simulator that failed to load, a ROM missing
        return (("error", str(exc)),)
    except Exception as exc:
        return (("error", f"{type(exc).__name__}: {exc}".splitlines()[0]),)
    try:
        return (
            ("observation_space", str(env.observation_space)),
            ("action_space", str(env.action_space)),
            ("render_modes", list(env.metadata.get("render_modes", []))),
            ("parameters", _parameters(env.unwrapped)),
        )
    finally:
        env.close()


def _parameters(env: Any) -> list[dict[str, Any]]:
    from engine.envs.remote import RemoteEnv

    if isinstance(env, RemoteEnv):  # read in the env's own process
        return env.parameters
    return constructor_parameters(type(env))


_PARAM_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}
_SKIPPED_PARAMS = {"self", "render_mode"}


def constructor_parameters(cls: type[Any]) -> list[dict[str, Any]]:
    """The keyword arguments an env class takes, for the designer's form:
    ``name``, ``type`` (``bool``/``int``/``float``/``str``, or ``json`` for
    anything else), ``default`` (when it is plain JSON) and ``annotation``.

    The registered kwargs (``gym.spec(id).kwargs``) name only what the
    registration overrides; the signature names everything a user may set.
    """
    import inspect

    try:
        sig = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return []
    out: list[dict[str, Any]] = []
    for p in sig.parameters.values():
        if p.name in _SKIPPED_PARAMS or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = (
            "" if p.annotation is p.empty else getattr(p.annotation, "__name__", None)
        )
        if annotation is None:
            annotation = str(p.annotation)
        entry: dict[str, Any] = {"name": p.name, "annotation": annotation}
        default = p.default
        if default is not p.empty and _jsonable(default):
            entry["default"] = default
        elif isinstance(default, tuple):
            entry["default"] = list(default)
        kind = _PARAM_TYPES.get(type(default)) if default is not p.empty else None
        if kind is None:
            # No usable default (None, a tuple): fall back on the annotation.
            kind = next(
                (
                    name
                    for t, name in _PARAM_TYPES.items()
                    if annotation.split("|")[0].strip() == t.__name__
                ),
                "json",
            )
        entry["type"] = kind
        out.append(entry)
    return out


def describe_env(env_id: str) -> dict[str, Any]:
    """Spaces and render modes of one registered env (made once, then cached)."""
    return dict(_describe_cached(env_id, _registered.get(env_id, "")))
