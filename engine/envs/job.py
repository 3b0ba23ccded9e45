"""Job kinds for designed envs, run in their own process by the supervisor.

To wire them in, engine/jobs/registry.py needs::

    register(JobKind(name="env_check", entry="engine.envs.job:run_check",
                     validator="engine.envs.job:validate_check",
                     description="Check a designed environment."))
    register(JobKind(name="env_preview", entry="engine.envs.job:run_preview",
                     validator="engine.envs.job:validate_preview",
                     description="Run a few episodes of a designed environment."))

``env_check`` writes ``report.json`` (``Report.to_dict()``) in the run dir;
``env_preview`` writes ``preview.json`` and, with ``frames`` > 0,
``frames.npz``. Both return a short summary. ``spec`` is a path relative to
the project (``envs/maze.env.json``) or absolute, or a registered id;
``env_preview`` also takes the spec document itself (a dict), with
``source`` naming the file it belongs to so that relative paths (mock data,
a python file) resolve: the designer previews the spec as being edited,
unsaved, and the run's config.json keeps exactly what was played.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import ConfigError
from engine.settings import checked_config, setting
from engine.store.atomic import atomic_write_json


@dataclass
class EnvCheckConfig:
    """Settings of an ``env_check`` job."""

    spec: str | None = None
    """The ``.env.json`` file (relative to the project or absolute) or env id."""
    steps: int = setting(200, min=1, unit="steps")
    """Random steps the check plays."""
    seed: int = setting(0, min=0)
    """Seed of the random steps."""


@dataclass
class EnvPreviewConfig:
    """Settings of an ``env_preview`` job."""

    spec: Any = None
    """The ``.env.json`` file, env id, or the spec document itself."""
    episodes: int = setting(20, min=1, unit="episodes")
    """Episodes played."""
    seed: int | None = setting(None, min=0)
    """Seed of the first episode (None: drawn and recorded)."""
    trace_episodes: int = setting(1, min=0, unit="episodes")
    """Episodes whose steps are kept in the preview."""
    frames: int = setting(0, min=0)
    """Rendered frames saved to ``frames.npz`` (0: none)."""
    model: str | None = None
    """A stable-baselines3 policy zip to play instead of random actions; its
    policy class and a ``vecnormalize.pkl`` beside it are read from the files
    (:func:`engine.rl.policy.load_policy`)."""
    source: str | None = None
    """The file a spec document belongs to (resolves its relative paths)."""


def _common(
    config: dict[str, Any],
    cls: type,
    what: str,
    allow_document: bool = False,
) -> dict[str, Any]:
    out = checked_config(cls, config, f"the {what} job")
    if allow_document and isinstance(out["spec"], dict):
        return out
    if not isinstance(out["spec"], str) or not out["spec"]:
        raise ConfigError("spec", "spec must name a .env.json file or an env id.")
    return out


def validate_check(config: dict[str, Any]) -> dict[str, Any]:
    return _common(config, EnvCheckConfig, "env check")


def validate_preview(config: dict[str, Any]) -> dict[str, Any]:
    out = _common(config, EnvPreviewConfig, "env preview", allow_document=True)
    if out["seed"] is None:
        out["seed"] = random.randrange(2**31)
    if isinstance(out["spec"], dict):
        _check_document(out["spec"], out["source"])
    return out


def _check_document(spec: dict[str, Any], source: str | None) -> None:
    """Refuse a spec document with errors before a process starts for it;
    the message is the first error's, which names its field."""
    from engine.envs.spec import parse_spec

    built, problems = parse_spec(spec, source=source)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        message = errors[0].message.rstrip(".")
        raise ConfigError("spec", f"The environment has errors: {message}{more}.")
    if built is None:
        raise ConfigError("spec", "The environment spec cannot be read.")


def _resolve(spec: str | dict[str, Any], project_dir: Path, source: Any = None) -> Any:
    if isinstance(spec, dict):
        from engine.envs.spec import coerce_spec, parse_spec

        # The file's place resolves relative paths; without one, the project.
        where = source or project_dir / "envs" / "unsaved.env.json"
        built, _ = parse_spec(spec, source=where)
        return built if built is not None else coerce_spec(spec)
    if spec.endswith(".env.json"):
        p = Path(spec)
        return str(p if p.is_absolute() else project_dir / p)
    return spec


def run_check(ctx: Any) -> dict[str, Any]:
    from engine.envs.check import check_spec

    cfg = ctx.config
    ctx.progress(0, 1, "checking")
    report = check_spec(
        _resolve(cfg["spec"], ctx.project_dir), steps=cfg["steps"], seed=cfg["seed"]
    )
    atomic_write_json(ctx.run_dir / contract.REPORT_FILE, report.to_dict())
    for p in report.problems:
        ctx.log(f"{p.severity}: {p.path or '(spec)'}: {p.message}")
    ctx.progress(1, 1, "done")
    return {
        "ok": report.ok,
        "errors": len(report.errors),
        "warnings": len(report.warnings),
    }


def run_preview(ctx: Any) -> dict[str, Any]:
    from engine.envs.preview import Policy, PreviewConfig, preview
    from engine.envs.registry import register_project_envs

    cfg = ctx.config
    register_project_envs(ctx.project_dir)
    policy: Policy | None = None
    if cfg["model"]:
        from engine.rl.policy import load_policy

        path = Path(cfg["model"])
        loaded = load_policy(
            path if path.is_absolute() else ctx.project_dir / path,
            project_dir=ctx.project_dir,
        )
        if loaded.notice:
            ctx.log(loaded.notice)
        policy = loaded.act
    episodes = cfg["episodes"]
    ctx.progress(0, episodes, "playing")

    def on_episode(index: int, episode: dict[str, Any]) -> None:
        ctx.metrics(
            index + 1,
            {"preview/return": episode["return"], "preview/length": episode["length"]},
        )
        ctx.progress(index + 1, episodes, f"episode {index + 1} of {episodes}")

    result = preview(
        _resolve(cfg["spec"], ctx.project_dir, cfg.get("source")),
        PreviewConfig(
            episodes=cfg["episodes"],
            seed=cfg["seed"],
            trace_episodes=cfg["trace_episodes"],
            frames=cfg["frames"],
        ),
        policy=policy,
        frames_path=ctx.run_dir / contract.FRAMES_FILE if cfg["frames"] else None,
        should_stop=lambda: ctx.should_stop,
        on_episode=on_episode,
    )
    if result["frames_note"]:
        ctx.log(result["frames_note"])
    atomic_write_json(ctx.run_dir / contract.PREVIEW_FILE, result)
    return {
        "episodes": len(result["episodes"]),
        "return_mean": result["return_mean"],
        "success_rate": result["success_rate"],
    }
