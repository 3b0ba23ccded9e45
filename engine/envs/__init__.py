"""Designed environments: specs, compiler, registration, checks.

Public API (importing this package is cheap: no torch; gymnasium is imported
only when there are project envs to register or an env is made)::

    load_spec(path) -> EnvSpec                  # read + migrate + check fields
    register_project_envs(project_dir) -> list[str]   # rlstudio/<name>-v0 ids
    make(spec_or_id, **kwargs) -> gymnasium.Env  # id, EnvSpec, dict or file
    check_spec(spec_or_path) -> Report           # every check, problems by field
    catalog(with_spaces=False) -> list[dict]     # installed gymnasium envs
    preview(spec_or_id, PreviewConfig(...)) -> dict  # episodes, trace, frames
    workflow_batch(spec, num_envs, seed) -> WorkflowBatch  # numpy, N at once
    gym.make_vec("rlstudio/<workflow>-v0", n, vectorization_mode="vector_entry_point")

Job functions for the supervisor live in :mod:`engine.envs.job`; the
``rl-studio-engine env check FILE`` command in :mod:`engine.envs.cli`.

``import engine.envs`` registers the envs of ``$RL_STUDIO_PROJECT`` (or of the
current folder when it holds ``envs/*.env.json``), so a user's script can
``gym.make("rlstudio/<name>-v0")`` right away.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from engine.envs.schema import FORMAT_VERSION, SCHEMA
from engine.envs.spec import EnvSpec, Problem, SpecError, load_spec

if TYPE_CHECKING:
    from engine.envs.check import Report
    from engine.envs.workflow_model import WorkflowBatch


def register_project_envs(project_dir: Any) -> list[str]:
    """Register every ``<project>/envs/*.env.json`` as ``rlstudio/<name>-v0``."""
    from engine.envs.registry import register_project_envs as _register

    return _register(project_dir)


def register_spec(spec: Any) -> str:
    from engine.envs.registry import register_spec as _register

    return _register(spec)


def make(spec_or_id: Any, **kwargs: Any) -> Any:
    """``gymnasium.make`` for an id, an EnvSpec, a spec document or a spec file."""
    from engine.envs.registry import make as _make

    return _make(spec_or_id, **kwargs)


def check_spec(spec: Any, **kwargs: Any) -> Report:
    from engine.envs.check import check_spec as _check

    return _check(spec, **kwargs)


def catalog(with_spaces: bool = False) -> list[dict[str, Any]]:
    from engine.envs.registry import catalog as _catalog

    return _catalog(with_spaces)


def preview(spec_or_id: Any, config: Any = None, **kwargs: Any) -> dict[str, Any]:
    """Run a few episodes and return returns, lengths, success and a trace."""
    from engine.envs.preview import preview as _preview

    return _preview(spec_or_id, config, **kwargs)


def workflow_batch(spec: Any, num_envs: int, seed: int | None = None) -> WorkflowBatch:
    """``num_envs`` copies of a workflow env stepped together with numpy."""
    from engine.envs.spec import coerce_spec
    from engine.envs.workflow_model import WorkflowBatch, WorkflowModel

    return WorkflowBatch(WorkflowModel(coerce_spec(spec)), num_envs, seed)


__all__ = [
    "FORMAT_VERSION",
    "SCHEMA",
    "EnvSpec",
    "Problem",
    "SpecError",
    "catalog",
    "check_spec",
    "load_spec",
    "make",
    "preview",
    "register_project_envs",
    "register_spec",
    "workflow_batch",
]


def _autoregister() -> None:
    from engine.envs.registry import autoregister

    autoregister()


_autoregister()
