"""Job kinds for designed envs, run in their own process by the supervisor.

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

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.settings import build, drawn_seed, setting
from engine.store.atomic import atomic_write_json


@dataclass(frozen=True)
class EnvCheckConfig:
    """Settings of an ``env_check`` job."""

    spec: str | None = None
    """The ``.env.json`` file (relative to the project or absolute) or env id."""
    steps: int = setting(200, min=1, unit="steps")
    """Random steps the check plays."""
    seed: int = setting(0, min=0)
    """Seed of the random steps."""


@dataclass(frozen=True)
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


def _named_spec(spec: Any) -> None:
    if not isinstance(spec, str) or not spec:
        raise ConfigError("spec", "spec must name a .env.json file or an env id.")


def validate_check(config: Mapping[str, Any]) -> EnvCheckConfig:
    cfg = build(EnvCheckConfig, config, "the env check job")
    _named_spec(cfg.spec)
    return cfg


def validate_preview(config: Mapping[str, Any]) -> EnvPreviewConfig:
    cfg = build(EnvPreviewConfig, config, "the env preview job")
    if isinstance(cfg.spec, dict):
        _check_document(cfg.spec, cfg.source)
    else:
        _named_spec(cfg.spec)
    return replace(cfg, seed=drawn_seed(cfg.seed))


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


@job_kind(
    "env_check",
    check=validate_check,
    label="Env check",
    group="environments",
    progress_unit="checks",
)
def run_check(ctx: JobContext, cfg: EnvCheckConfig) -> dict[str, Any]:
    """Checks a designed environment and writes report.json."""
    from engine.envs.check import check_spec

    assert cfg.spec is not None  # validate_check requires it
    ctx.progress(0, 1, "checking")
    report = check_spec(
        _resolve(cfg.spec, ctx.project_dir), steps=cfg.steps, seed=cfg.seed
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


@job_kind(
    "env_preview",
    check=validate_preview,
    label="Preview",
    group="environments",
    progress_unit="episodes",
)
def run_preview(ctx: JobContext, cfg: EnvPreviewConfig) -> dict[str, Any]:
    """Plays a few episodes of a designed environment (preview.json)."""
    from engine.envs.preview import Policy, PreviewConfig, preview
    from engine.envs.registry import register_project_envs

    register_project_envs(ctx.project_dir)
    policy: Policy | None = None
    if cfg.model:
        from engine.rl.policy import load_policy

        path = Path(cfg.model)
        loaded = load_policy(
            path if path.is_absolute() else ctx.project_dir / path,
            project_dir=ctx.project_dir,
        )
        if loaded.notice:
            ctx.log(loaded.notice)
        policy = loaded  # called as loaded.act, and told each episode's start
    episodes = cfg.episodes
    assert cfg.seed is not None  # validate_preview draws one
    ctx.progress(0, episodes, "playing")

    def on_episode(index: int, episode: dict[str, Any]) -> None:
        ctx.metrics(
            index + 1,
            {"preview/return": episode["return"], "preview/length": episode["length"]},
        )
        ctx.progress(index + 1, episodes, f"episode {index + 1} of {episodes}")

    result = preview(
        _resolve(cfg.spec, ctx.project_dir, cfg.source),
        PreviewConfig(
            episodes=cfg.episodes,
            seed=cfg.seed,
            trace_episodes=cfg.trace_episodes,
            frames=cfg.frames,
        ),
        policy=policy,
        frames_path=ctx.run_dir / contract.FRAMES_FILE if cfg.frames else None,
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
