"""What an ``rl.train`` run keeps on disk, read without torch or SB3.

The trainer (:mod:`engine.rl.train`) saves under ``checkpoints/``::

    step-0000001024/   model.zip, vecnormalize.pkl, state.json,
                       replay_buffer.pkl (newest checkpoint only)
    best/              the best model by evaluation, with its state.json

A checkpoint is complete once its ``state.json`` is there (it is written
last, then the folder is renamed into place). The state holds the trainer's
evaluation and stop-condition state at that step.

:func:`summary_of` builds a run's summary from such a state: the trainer's
at the end of a run, and :func:`summary_on_disk`'s for a run stopped by force
(killed before it reported its end), which the supervisor records instead of
the summary of the run's previous attempt.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import EngineError
from engine.jobs.context import CHECKPOINTS_FOLDER
from engine.jobs.lifecycle import read_checkpoint_state
from engine.rl.policy import STATE_FILE, VECNORMALIZE_FILE

if TYPE_CHECKING:
    from engine.rl.config import TrainConfig

CHECKPOINT_PREFIX = "step-"
BEST_FOLDER = "best"
MODEL_FILE = "model.zip"


def checkpoints(ckpt_dir: Path) -> list[Path]:
    """Complete periodic checkpoints, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = [
        p
        for p in ckpt_dir.iterdir()
        if p.is_dir()
        and p.name.startswith(CHECKPOINT_PREFIX)
        and (p / STATE_FILE).exists()
    ]
    return sorted(found, key=lambda p: p.name)


def latest_checkpoint(ckpt_dir: Path) -> Path | None:
    found = checkpoints(ckpt_dir)
    return found[-1] if found else None


def summary_of(
    cfg: TrainConfig,
    state: dict[str, Any],
    model_dir: Path,
    model_metrics: dict[str, Any],
    stopped_by: str | None,
) -> dict[str, Any]:
    """The summary of a run whose trainer ``state`` (a checkpoint's
    ``state.json``) is as given and whose model is ``model_dir/model.zip``
    (evaluated as ``model_metrics``). Without ``stopped_by`` the summary
    says nothing of how the run ended."""
    algo = str(state.get("algo") or cfg.algo)
    env = str(state.get("env") or cfg.env)
    metrics = dict(model_metrics)
    last_logged = state.get("last_logged") or {}
    for key in ("rollout/ep_rew_mean", "rollout/ep_len_mean"):
        if key in last_logged:
            metrics[key] = last_logged[key]
    extra = (
        [str((model_dir / VECNORMALIZE_FILE).resolve())] if cfg.vec_normalize else []
    )
    out: dict[str, Any] = {
        "total_steps": int(state["step"]),
        "best_eval_reward": state.get("best_eval_reward"),
        "last_eval_reward": state.get("last_eval_reward"),
    }
    if stopped_by is not None:
        out["stopped_by"] = stopped_by
    out.update(
        algo=algo,
        env=env,
        seed=cfg.seed,
        models=[
            {
                "name": cfg.name or f"{algo} {env}",
                "kind": "sb3-policy",
                "file": str((model_dir / MODEL_FILE).resolve()),
                "extra_files": extra,
                "env": env,
                "algo": algo,
                "metrics": metrics,
                # The model a run started from (start_from) is its parent.
                "parents": [cfg.start_from] if cfg.start_from else [],
            }
        ],
    )
    if cfg.start_from:
        out["started_from"] = cfg.start_from
    if state.get("resumed_from"):
        out["resumed_from"] = state["resumed_from"]
    curriculum = state.get("curriculum")
    if curriculum and cfg.curriculum is not None:
        out["curriculum"] = {
            "stage": curriculum["stage"],
            "last_stage": len(cfg.curriculum.stages) - 1,
            "highest": curriculum["highest"],
        }
    return out


def summary_on_disk(run_dir: Path, cfg: TrainConfig) -> dict[str, Any] | None:
    """The summary an ``rl.train`` run's checkpoints support (the kind's
    ``summary_on_disk``): the newest checkpoint's step count and state, the
    best evaluation so far and its model (``best/``, else the newest
    checkpoint's), as :meth:`Trainer.summary` would have said at that
    checkpoint. None when no checkpoint is complete; raises
    :class:`EngineError` when the newest one's state cannot be read."""
    ckpt_dir = run_dir / CHECKPOINTS_FOLDER
    latest = latest_checkpoint(ckpt_dir)
    if latest is None:
        return None
    state = read_checkpoint_state(latest / STATE_FILE)
    best_dir = ckpt_dir / BEST_FOLDER
    model_dir, metrics = latest, {}
    if (best_dir / MODEL_FILE).is_file():
        model_dir = best_dir
        try:
            # Saved at each new best, so never older than the best the
            # periodic checkpoint knew of.
            best = read_checkpoint_state(best_dir / STATE_FILE)
        except EngineError:
            best = state
        state = {
            **state,
            "best_eval_reward": best.get("best_eval_reward"),
            "best_eval_metrics": best.get("best_eval_metrics") or {},
        }
        metrics = {k: v for k, v in state["best_eval_metrics"].items() if k != "step"}
    return summary_of(cfg, state, model_dir, metrics, None)
