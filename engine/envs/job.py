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
the project (``envs/maze.env.json``) or absolute, or a registered id.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.store.atomic import atomic_write_json

CHECK_DEFAULTS: dict[str, Any] = {"spec": None, "steps": 200, "seed": 0}
PREVIEW_DEFAULTS: dict[str, Any] = {
    "spec": None,
    "episodes": 20,
    "seed": None,
    "trace_episodes": 1,
    "frames": 0,
    "model": None,
    "algo": None,
}


def _common(
    config: dict[str, Any], defaults: dict[str, Any], what: str
) -> dict[str, Any]:
    unknown = set(config) - set(defaults)
    if unknown:
        name = sorted(unknown)[0]
        raise ConfigError(name, f"Unknown setting {name!r} for the {what} job.")
    out = {**defaults, **config}
    if not isinstance(out["spec"], str) or not out["spec"]:
        raise ConfigError("spec", "spec must name a .env.json file or an env id.")
    return out


def _positive(out: dict[str, Any], key: str, allow_zero: bool = False) -> None:
    v = out[key]
    if not isinstance(v, int) or isinstance(v, bool) or v < (0 if allow_zero else 1):
        kind = "non-negative" if allow_zero else "positive"
        raise ConfigError(key, f"{key} must be a {kind} whole number.")


def validate_check(config: dict[str, Any]) -> dict[str, Any]:
    out = _common(config, CHECK_DEFAULTS, "env check")
    _positive(out, "steps")
    _positive(out, "seed", allow_zero=True)
    return out


def validate_preview(config: dict[str, Any]) -> dict[str, Any]:
    out = _common(config, PREVIEW_DEFAULTS, "env preview")
    for key in ("episodes",):
        _positive(out, key)
    for key in ("trace_episodes", "frames"):
        _positive(out, key, allow_zero=True)
    if out["seed"] is None:
        out["seed"] = random.randrange(2**31)
    if (out["model"] is None) != (out["algo"] is None):
        raise ConfigError("algo", "model and algo must be given together.")
    return out


def _resolve(spec: str, project_dir: Path) -> str:
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
    atomic_write_json(ctx.run_dir / "report.json", report.to_dict())
    for p in report.problems:
        ctx.log(f"{p.severity}: {p.path or '(spec)'}: {p.message}")
    ctx.progress(1, 1, "done")
    return {
        "ok": report.ok,
        "errors": len(report.errors),
        "warnings": len(report.warnings),
    }


def run_preview(ctx: Any) -> dict[str, Any]:
    from engine.envs.preview import PreviewConfig, preview, sb3_policy
    from engine.envs.registry import register_project_envs

    cfg = ctx.config
    register_project_envs(ctx.project_dir)
    policy = None
    if cfg["model"]:
        model = Path(cfg["model"])
        policy = sb3_policy(
            model if model.is_absolute() else ctx.project_dir / model, cfg["algo"]
        )
    result = preview(
        _resolve(cfg["spec"], ctx.project_dir),
        PreviewConfig(
            episodes=cfg["episodes"],
            seed=cfg["seed"],
            trace_episodes=cfg["trace_episodes"],
            frames=cfg["frames"],
        ),
        policy=policy,
        frames_path=ctx.run_dir / "frames.npz" if cfg["frames"] else None,
        should_stop=lambda: ctx.should_stop,
    )
    atomic_write_json(ctx.run_dir / "preview.json", result)
    for i, ep in enumerate(result["episodes"]):
        ctx.metrics(
            i + 1, {"preview/return": ep["return"], "preview/length": ep["length"]}
        )
    return {
        "episodes": len(result["episodes"]),
        "return_mean": result["return_mean"],
        "success_rate": result["success_rate"],
    }
