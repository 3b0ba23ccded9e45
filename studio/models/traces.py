"""Language-model rollout traces and evaluation reports, read with plain json.

A trace file (``<project>/data/traces/<name>.jsonl``, written by the
engine's ``TraceRecorder``) holds one episode per line: ``episode``, ``env``,
``task_id``, ``policy``, ``steps`` (each with ``messages``, ``completion``,
``tool``, ``action``, ``parsed``, ``valid``, ``reward``,
``reward_breakdown``), ``return``, ``length``, ``success``, ``truncated``.
An evaluation report (``report.json`` of an ``llm.evaluate`` run) holds
``results`` per model label (``before``/``after``) and a ``comparison``.
Qt-free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

COMPARED_METRICS = (
    ("success_rate", "Success rate"),
    ("mean_return", "Mean return"),
    ("invalid_action_rate", "Invalid-action rate"),
)


@dataclass
class TraceFile:
    path: Path
    episodes: list[dict[str, Any]] = field(default_factory=list)
    bad_lines: int = 0
    """Lines that were not a JSON episode (a crash mid-write, say)."""

    @property
    def name(self) -> str:
        return self.path.stem


def list_trace_files(project_dir: str | Path) -> list[Path]:
    folder = Path(project_dir) / "data" / "traces"
    if not folder.is_dir():
        return []
    return sorted(folder.glob("*.jsonl"), key=lambda p: p.name)


def load_trace_file(path: str | Path, max_episodes: int = 10_000) -> TraceFile:
    """Read a trace file; unreadable lines are counted, not fatal."""
    trace = TraceFile(Path(path))
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                ep = json.loads(line)
            except ValueError:
                trace.bad_lines += 1
                continue
            if not isinstance(ep, dict):
                trace.bad_lines += 1
                continue
            ep.setdefault("steps", [])
            trace.episodes.append(ep)
            if len(trace.episodes) >= max_episodes:
                break
    return trace


def episode_row(ep: dict[str, Any], index: int) -> dict[str, Any]:
    """An episode as a table record."""
    steps = ep.get("steps") or []
    invalid = sum(1 for s in steps if not s.get("valid", True))
    ret = ep.get("return")
    if not isinstance(ret, int | float):
        ret = sum(float(s.get("reward") or 0.0) for s in steps)
    return {
        "id": str(index),
        "episode": ep.get("episode", index),
        "task": str(ep.get("task_id") or ""),
        "policy": str(ep.get("policy") or ""),
        "return": float(ret),
        "length": int(ep.get("length") or len(steps)),
        "invalid": invalid,
        "outcome": outcome(ep),
    }


def outcome(ep: dict[str, Any]) -> str:
    if ep.get("success"):
        return "success"
    if ep.get("truncated"):
        return "truncated"
    return "failed"


def prompt_text(step: dict[str, Any]) -> str:
    """The step's prompt as readable text (its chat messages)."""
    messages = step.get("messages")
    if isinstance(messages, list) and messages:
        return "\n\n".join(
            f"[{m.get('role', '?')}]\n{m.get('content', '')}"
            for m in messages
            if isinstance(m, dict)
        )
    return str(step.get("prompt") or "")


def breakdown_text(breakdown: Any) -> str:
    if not isinstance(breakdown, dict) or not breakdown:
        return ""
    return ", ".join(
        f"{k} {v:+.3g}" if isinstance(v, int | float) else f"{k} {v}"
        for k, v in breakdown.items()
    )


def step_row(step: dict[str, Any], index: int) -> dict[str, Any]:
    """A step as a table record."""
    action = step.get("tool")
    if action is None:
        action = "(none)" if step.get("parsed") is False else step.get("action", "")
    return {
        "id": str(index),
        "t": int(step.get("t", index)),
        "completion": str(step.get("completion") or "").strip(),
        "action": str(action),
        "valid": bool(step.get("valid", True)),
        "parsed": bool(step.get("parsed", True)),
        "reward": float(step.get("reward") or 0.0),
        "breakdown": breakdown_text(step.get("reward_breakdown")),
    }


# ------------------------------------------------------------- reports
class ReportError(ValueError):
    """Not an evaluation report; the message is one sentence."""


@dataclass
class Comparison:
    """Before/after values per compared metric (``None`` when missing)."""

    labels: list[str]
    """Model labels in order: ``before`` then ``after`` (or just one)."""
    metrics: list[tuple[str, str]]
    """(key, title) of each metric shown."""
    values: dict[str, list[float | None]]
    """label -> one value per metric."""
    env: str = ""
    episodes: int = 0
    models: dict[str, str] = field(default_factory=dict)


def load_report(path: str | Path) -> Comparison:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReportError(f"Cannot read {path}: {exc.strerror}.") from None
    except ValueError:
        raise ReportError(f"{Path(path).name} is not valid JSON.") from None
    return comparison_from_report(data, Path(path).name)


def comparison_from_report(data: Any, what: str = "the report") -> Comparison:
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise ReportError(f"{what} is not an evaluation report (no results).")
    results: dict[str, Any] = data["results"]
    labels: list[str] = [k for k in ("before", "after") if k in results]
    labels += [k for k in results if k not in labels]
    if not labels:
        raise ReportError(f"{what} has no evaluated model.")
    values: dict[str, list[float | None]] = {}
    for label in labels:
        row = results[label] if isinstance(results[label], dict) else {}
        values[label] = [
            float(row[k]) if isinstance(row.get(k), int | float) else None
            for k, _ in COMPARED_METRICS
        ]
    return Comparison(
        labels=labels,
        metrics=list(COMPARED_METRICS),
        values=values,
        env=str(data.get("env", "")),
        episodes=int(data.get("episodes") or 0),
        models={str(k): str(v) for k, v in (data.get("models") or {}).items()},
    )
