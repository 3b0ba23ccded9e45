"""The ``rl.train`` job kind's declaration.

Its settings and validation are :mod:`engine.rl.config`'s, its form
:mod:`engine.rl.schema`'s, the summary of a run stopped by force
:mod:`engine.rl.checkpoints`'; the job (:mod:`engine.rl.train`) imports
torch and SB3, so it is imported when a run starts, never by the supervisor.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.rl.config import TrainConfig, check
from engine.rl.schema import schema

KIND = "rl.train"
"""The kind's name (importing this module declares the kind)."""


def summary_on_disk(run_dir: Path, cfg: TrainConfig) -> dict[str, Any] | None:
    """:func:`engine.rl.checkpoints.summary_on_disk` (numpy imported on first
    use: the supervisor asks only for a run stopped by force)."""
    from engine.rl.checkpoints import summary_on_disk as read

    return read(run_dir, cfg)


@job_kind(
    KIND,
    check=check,
    label="RL training",
    group="training",
    resumable=True,
    default_name="{algo} {env}",
    project_field="project_dir",
    model_name_field="name",
    form=schema,
    summary_on_disk=summary_on_disk,
)
def run(ctx: JobContext, cfg: TrainConfig) -> dict[str, Any]:
    """Trains a stable-baselines3 or sb3-contrib agent on a Gymnasium or designed
    environment.

    The training itself is :func:`engine.rl.train.train`."""
    from engine.rl.train import train

    return train(ctx, cfg)
