"""What the studio knows of the open project: documents, runs, models.

Qt-free. Filled from the engine's project snapshot and kept current by run
events; views observe it. Run records are plain dicts as the engine sends
them (see ``engine.store.project.RunRecord``), with live fields (progress,
rate, ETA) merged in from events.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from engine import contract
from engine.contract import ModelRow, ProjectSnapshot
from studio.state.job_kinds import JOB_KINDS
from studio.state.observable import Observable

SNAPSHOT_RATE_WINDOW_S = 6.0
"""Shortest time over which a headless run's speed is measured."""
FINAL_STATUSES = contract.FINAL_STATUSES


def is_training(run: dict[str, Any]) -> bool:
    """Whether the run is listed under Training (else under Activity)."""
    return JOB_KINDS.is_training(str(run.get("kind", "")))


def activity_label(run: dict[str, Any]) -> str:
    return JOB_KINDS.label(str(run.get("kind", "")))


def counts_steps(run: dict[str, Any]) -> bool:
    """Whether the run's progress counts training steps."""
    return JOB_KINDS.counts_steps(str(run.get("kind", "")))


def _config(run: dict[str, Any]) -> dict[str, Any]:
    config = run.get("config")
    return config if isinstance(config, dict) else {}


def _summary(run: dict[str, Any]) -> dict[str, Any]:
    summary = run.get("summary")
    return summary if isinstance(summary, dict) else {}


def trained_policies(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The policies a flow run's Train nodes made (their ``policy`` outputs,
    ``engine.nodes.rl_nodes``: algo, env, total_steps), in the flow's
    order; none for other runs, and for a flow run until it ends (its
    summary lists its nodes)."""
    summary = _summary(run)
    nodes = summary.get("nodes")
    if not isinstance(nodes, dict):
        return []
    order = summary.get("order")
    found = []
    for node_id in order if isinstance(order, list) else list(nodes):
        node = nodes.get(node_id)
        outputs = node.get("outputs") if isinstance(node, dict) else None
        policy = outputs.get("policy") if isinstance(outputs, dict) else None
        if isinstance(policy, dict):
            found.append(policy)
    return found


def _joined(values: list[Any]) -> str:
    """Distinct values in order: one flow may train two algorithms."""
    return ", ".join(dict.fromkeys(str(v) for v in values if v))


def run_algo(run: dict[str, Any]) -> str:
    own = _summary(run).get("algo") or _config(run).get("algo")
    if own:
        return str(own)
    return _joined([p.get("algo") for p in trained_policies(run)])


def run_env(run: dict[str, Any]) -> str:
    own = _config(run).get("env")
    if own:
        return str(own)
    # A policy names its env by reference: {"id": ..., "kwargs": ...}.
    envs = [p.get("env") for p in trained_policies(run)]
    return _joined([e.get("id") if isinstance(e, dict) else e for e in envs])


def run_steps(run: dict[str, Any]) -> float:
    """Training steps: live while the run trains (a resumed run's summary is
    its previous attempt's), else from its summary (a flow run's: the sum of
    its Train nodes'). Progress that counts something else (nodes of a
    flow) is not steps."""
    summary = _summary(run)
    steps = summary.get("total_steps") or summary.get("steps")
    live = run.get("progress_done") if counts_steps(run) else None
    if run.get("status") == "running" and live is not None:
        return float(live)
    if steps is None:
        trained = [p.get("total_steps") for p in trained_policies(run)]
        numbers = [t for t in trained if isinstance(t, int | float)]
        steps = sum(numbers) if numbers else None
    return float(steps if steps is not None else live or 0)


def run_tags(run: dict[str, Any]) -> list[str]:
    tags = run.get("tags")
    return [t for t in tags if isinstance(t, str)] if isinstance(tags, list) else []


TAIL_BYTES = 1 << 14
"""How much of the end of a metrics file is read for its last row."""


def trained_seconds(run_dir: str) -> float | None:
    """The ``time`` of the last row of a run's metrics: the wall time it
    trained, attempts before a resume included (the engine continues a
    resumed run's clock from its last row). None without such a row."""
    if not run_dir:
        return None
    try:
        with open(Path(run_dir) / contract.METRICS_FILE, "rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - TAIL_BYTES))
            lines = fh.read().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue  # the first, cut line of the tail, or a torn last one
        value = row.get("time") if isinstance(row, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


class ProjectState(Observable):
    """Notifications: ``reset`` (everything), ``run`` (key = run id),
    ``models``, ``documents``."""

    def __init__(self) -> None:
        super().__init__()
        self.path = ""
        self.name = ""
        self.envs: list[dict[str, Any]] = []
        self.flows: list[dict[str, Any]] = []
        self.models: list[ModelRow] = []
        self.runs: dict[str, dict[str, Any]] = {}  # insertion order = creation order
        # Runs whose progress engine events report; the others' is read from
        # snapshots: (monotonic time, steps done) when it last changed.
        self._event_fed: set[str] = set()
        self._snapshot_progress: dict[str, tuple[float, float]] = {}
        self._trained: dict[tuple[str, Any], float | None] = {}
        """``trained_s`` of ended runs, by run id and end time (read once)."""

    @property
    def is_open(self) -> bool:
        return bool(self.path)

    def load_snapshot(self, snap: ProjectSnapshot) -> None:
        self.path = str(snap.get("path", ""))
        self.name = str(snap.get("name", ""))
        self.envs = list(snap.get("envs", []))
        self.flows = list(snap.get("flows", []))
        self.models = list(snap.get("models", []))
        previous = self.runs
        live = {rid: r for rid, r in previous.items() if r.get("status") == "running"}
        self.runs = {}
        for run in snap.get("runs", []):
            merged: dict[str, Any] = dict(run)
            before_run = previous.get(run["id"], {})
            for key in ("best_eval_live", "prior_duration_s"):
                if before_run.get(key) is not None:
                    merged[key] = before_run[key]
            if run.get("status") == "running":
                before = live.get(run["id"], {})
                if run["id"] in self._event_fed:
                    # Engine events are newer than the database: keep them.
                    for key in (
                        "progress_done",
                        "progress_total",
                        "rate",
                        "eta_s",
                        "progress_message",
                    ):
                        if key in before:
                            merged[key] = before[key]
                else:
                    self._rate_from_snapshots(merged, before)
            else:
                merged["trained_s"] = self._trained_of(merged)
            self.runs[run["id"]] = merged
        self.notify("reset")

    def _rate_from_snapshots(
        self, run: dict[str, Any], before: dict[str, Any], now: float | None = None
    ) -> None:
        """Steps/s and ETA of a run that no event feeds (a headless run on
        this project), from its progress in successive snapshots.

        Such a run writes its progress every couple of seconds and snapshots
        come at their own pace, so a speed is measured over at least
        ``SNAPSHOT_RATE_WINDOW_S`` (shorter windows mostly measure the
        jitter) and smoothed; until then none is shown.
        """
        now = time.monotonic() if now is None else now
        done = float(run.get("progress_done") or 0)
        total = float(run.get("progress_total") or 0)
        rate = before.get("rate") or 0.0
        ref = self._snapshot_progress.get(run["id"])
        if ref is None or done < ref[1]:
            self._snapshot_progress[run["id"]] = (now, done)
        elif now - ref[0] >= SNAPSHOT_RATE_WINDOW_S and done > ref[1]:
            inst = (done - ref[1]) / (now - ref[0])
            rate = inst if not rate else 0.6 * rate + 0.4 * inst
            self._snapshot_progress[run["id"]] = (now, done)
        if rate > 0:
            run["rate"] = rate
            run["eta_s"] = max(total - done, 0.0) / rate if total else None

    def _trained_of(self, run: dict[str, Any]) -> float | None:
        key = (str(run["id"]), run.get("ended"))
        if key not in self._trained:
            self._trained[key] = trained_seconds(str(run.get("run_dir") or ""))
        return self._trained[key]

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
        if run.get("started") and run.get("ended"):
            # A resumed run: its Duration goes on from the attempts before
            # (the last one's, or all of them as its metrics' clock says).
            attempt = max(float(run["ended"]) - float(run["started"]), 0.0)
            run["prior_duration_s"] = max(attempt, float(run.get("trained_s") or 0.0))
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
        self,
        run_id: str,
        done: float,
        total: float,
        rate: float,
        eta_s: float | None,
        message: str = "",
    ) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        self._event_fed.add(run_id)
        run.update(
            progress_done=done,
            progress_total=total,
            rate=rate,
            eta_s=eta_s,
            progress_message=message,
        )
        self.notify("run", run_id)

    def on_run_eval(self, run_id: str, best: float) -> None:
        """The best evaluation mean reward seen so far in a run's metrics
        (the summary has it only once the run ends)."""
        run = self.runs.get(run_id)
        if run is None or best <= run.get("best_eval_live", float("-inf")):
            return
        run["best_eval_live"] = best
        self.notify("run", run_id)

    def on_run_annotated(self, run_id: str, tags: list[str], note: str) -> None:
        """The run's tags and note as the engine stored them."""
        run = self.runs.get(run_id)
        if run is None:
            return
        run.update(tags=list(tags), note=note)
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
        run["trained_s"] = self._trained_of(run)
        if summary is not None:
            run["summary"] = summary
        self.notify("run", run_id)
