"""Every run to Weights & Biases too, when ``WANDB_PROJECT`` is set.

Beside MLflow (:mod:`engine.jobs.tracking`), with the same metric names
(:func:`engine.jobs.tracking.metric_key`) against the same ``step``, the
resolved config as the run's config (flattened the same way), and the run's
final status in its summary. W&B's own variables apply: ``WANDB_MODE=offline``
writes the run into the run folder's ``wandb/`` without a network (``wandb
sync`` uploads it later), ``WANDB_ENTITY``, ``WANDB_API_KEY``. The W&B run's
id is the studio's run id, so a resumed run continues it.

Without the ``wandb`` package (the ``rl-studio[wandb]`` extra) the run says
so in one sentence in its log and trains on. Everything W&B does happens on
the tracker's own thread, fed by a queue: the training thread never waits
for it; a W&B that fails stops the logging with one sentence in the log.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import re
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine import contract
from engine.jobs.tracking import end_queue, flatten

PROJECT_ENV = "WANDB_PROJECT"
"""W&B's variable naming its project: set, runs are logged to W&B."""
MISSING = (
    f"{PROJECT_ENV} is set but wandb is not installed; install "
    "rl-studio[wandb] to log runs to Weights & Biases."
)


def start(ctx: Any) -> WandbTracker | None:
    """A tracker logging ``ctx``'s run (a :class:`JobContext`) to W&B, or
    None when ``WANDB_PROJECT`` is not set or wandb is not installed (said
    in the run's log)."""
    project = os.environ.get(PROJECT_ENV, "").strip()
    if not project:
        return None
    if importlib.util.find_spec("wandb") is None:
        ctx.log(MISSING)
        return None
    return WandbTracker(ctx, project)


class WandbTracker:
    """One studio run's W&B run, fed from a queue by its own thread."""

    def __init__(self, ctx: Any, project: str) -> None:
        self.project = project
        self.run_dir = Path(ctx.run_dir)
        self.studio_run_id: str = ctx.run_id
        self.kind: str = ctx.kind
        self._log: Callable[[str], None] = ctx.log
        self._config = flatten(dict(ctx.config))
        self._queue: queue.SimpleQueue[tuple[str, Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="wandb", daemon=True)
        self._thread.start()

    def metrics(self, rows: list[dict[str, Any]]) -> None:
        """Queue flushed metric rows (``step`` and values)."""
        if rows:
            self._queue.put(("metrics", rows))

    def finish(self, status: str, summary: Mapping[str, Any] | None) -> None:
        """Queue the run's end and wait for it (:func:`~engine.jobs.tracking.
        end_queue`)."""
        self._queue.put(("finish", status))
        end_queue(
            self._queue,
            self._thread,
            self._log,
            "Weights & Biases",
            "the rest of this run is not logged there",
        )

    def _loop(self) -> None:
        run: Any = None
        failed = False
        while (item := self._queue.get()) is not None:
            if failed:
                continue  # drain: the training side never blocks on us
            op, value = item
            try:
                if run is None:
                    run = self._init()
                if op == "metrics":
                    for row in value:
                        run.log(_values(row))
                else:
                    run.summary["status"] = value
                    run.finish(exit_code=0 if value == "completed" else 1)
            except Exception as exc:  # a library's error, never the run's
                failed = True
                what = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
                self._log(f"Logging to Weights & Biases stopped: {what}")

    def _init(self) -> Any:
        import wandb

        started = contract.read_json_object(self.run_dir / contract.CONFIG_FILE)
        run = wandb.init(
            project=self.project,
            name=str((started or {}).get("name") or self.studio_run_id),
            id=re.sub(r"[^\w-]", "_", self.studio_run_id),
            resume="allow",  # a resumed run continues its W&B run
            dir=str(self.run_dir),
            config=self._config,
            tags=[self.kind],
            settings=wandb.Settings(console="off", silent=True),
        )
        # Every metric against the run's own step, as in MLflow: a resumed
        # run logs steps again from its last checkpoint.
        run.define_metric("*", step_metric="step")
        return run


def _values(row: Mapping[str, Any]) -> dict[str, Any]:
    """A metric row as W&B takes it: MLflow's names, numbers only."""
    from engine.jobs.tracking import metric_key

    out: dict[str, Any] = {
        metric_key(k): float(v)
        for k, v in row.items()
        if k not in ("step", "time") and isinstance(v, int | float)
    }
    out["step"] = int(row.get("step", 0))
    return out
