"""What the studio knows of the open project: documents, runs, models.

Qt-free. Filled from the engine's project snapshot and kept current by run
events; views observe it. Run records are plain dicts as the engine sends
them (see ``engine.store.project.RunRecord``), with live fields (progress,
rate, ETA) merged in from events.
"""

from __future__ import annotations

import time
from typing import Any

from studio.models.observable import Observable

FINAL_STATUSES = ("completed", "stopped", "failed", "interrupted")


class ProjectState(Observable):
    """Notifications: ``reset`` (everything), ``run`` (key = run id),
    ``models``, ``documents``."""

    def __init__(self) -> None:
        super().__init__()
        self.path = ""
        self.name = ""
        self.envs: list[dict[str, Any]] = []
        self.flows: list[dict[str, Any]] = []
        self.models: list[dict[str, Any]] = []
        self.runs: dict[str, dict[str, Any]] = {}  # insertion order = creation order

    @property
    def is_open(self) -> bool:
        return bool(self.path)

    def load_snapshot(self, snap: dict[str, Any]) -> None:
        self.path = str(snap.get("path", ""))
        self.name = str(snap.get("name", ""))
        self.envs = list(snap.get("envs", []))
        self.flows = list(snap.get("flows", []))
        self.models = list(snap.get("models", []))
        live = {rid: r for rid, r in self.runs.items() if r.get("status") == "running"}
        self.runs = {}
        for run in snap.get("runs", []):
            merged = dict(run)
            # Keep live fields that engine events set (they are newer than
            # the database's); a run no event feeds (a headless run) takes
            # the database's progress.
            if (
                run["id"] in live
                and run.get("status") == "running"
                and "rate" in live[run["id"]]
            ):
                for key in ("progress_done", "progress_total", "rate", "eta_s"):
                    if key in live[run["id"]]:
                        merged[key] = live[run["id"]][key]
            self.runs[run["id"]] = merged
        self.notify("reset")

    def clear(self) -> None:
        self.path = self.name = ""
        self.envs, self.flows, self.models, self.runs = [], [], [], {}
        self.notify("reset")

    # ----------------------------------------------------------- runs
    def run(self, run_id: str) -> dict[str, Any] | None:
        return self.runs.get(run_id)

    def run_ids(self) -> list[str]:
        return list(self.runs)

    def on_run_started(self, run_id: str, kind: str, name: str, run_dir: str) -> None:
        run = self.runs.setdefault(
            run_id,
            {
                "id": run_id,
                "kind": kind,
                "name": name,
                "created": time.time(),
                "config": {},
            },
        )
        run.update(
            status="running",
            run_dir=run_dir,
            started=time.time(),
            ended=None,
            reason="",
            kind=kind,
            name=name,
        )
        self.notify("run", run_id)

    def on_run_progress(
        self, run_id: str, done: float, total: float, rate: float, eta_s: float | None
    ) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        run.update(progress_done=done, progress_total=total, rate=rate, eta_s=eta_s)
        self.notify("run", run_id)

    def on_run_ended(
        self,
        run_id: str,
        status: str,
        reason: str = "",
        summary: dict[str, Any] | None = None,
    ) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        run.update(
            status=status, reason=reason, ended=time.time(), rate=0.0, eta_s=None
        )
        if summary is not None:
            run["summary"] = summary
        self.notify("run", run_id)
