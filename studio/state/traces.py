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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

COMPARED_METRICS = (
    ("success_rate", "Success rate"),
    ("mean_return", "Mean return"),
    ("invalid_action_rate", "Invalid-action rate"),
)


_STEPS = re.compile(rb'"steps"\s*:\s*\[')
_INVALID = (b'"valid": false', b'"valid":false')


class LazyEpisodes(Sequence[dict[str, Any]]):
    """The episodes of a trace file, each read and parsed in full when first
    asked for: a trace of 100,000 steps opens without parsing every prompt.
    A file rewritten since reads as what it holds now (labels notice that
    by their content key)."""

    def __init__(self, path: Path, spans: list[tuple[int, int]]) -> None:
        self._path = path
        self._spans = spans
        self._parsed: dict[int, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._spans)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        ep = self._parsed.get(index)
        if ep is None:
            start, end = self._spans[index]
            try:
                with open(self._path, "rb") as fh:
                    fh.seek(start)
                    raw = fh.read(end - start)
            except OSError:
                raw = b""
            ep = _episode(raw) or {"steps": []}
            ep.setdefault("steps", [])
            self._parsed[index] = ep
        return ep


def _episode(line: bytes | bytearray) -> dict[str, Any] | None:
    try:
        ep = json.loads(line)
    except ValueError:
        return None
    return ep if isinstance(ep, dict) else None


def quick_summary(
    data: bytes | bytearray, start: int, end: int
) -> dict[str, Any] | None:
    """The episode of the trace line ``data[start:end]`` with ``steps`` left
    out (``None`` when the line is not an episode), and ``invalid_steps``
    counted in the text: the steps array is cut out rather than parsed (and
    never copied), which is what makes a large trace open fast. Lines where
    the cut does not give valid JSON (or lack ``length``/``return``) are
    parsed in full."""
    m = _STEPS.search(data, start, end)
    close = data.rfind(b"}]", start, end)
    if m is not None and close > m.end():
        try:
            ep = json.loads(
                data[start : m.start()] + b'"steps": []' + data[close + 2 : end]
            )
        except ValueError:
            ep = None
        if (
            isinstance(ep, dict)
            and isinstance(ep.get("length"), int)
            and isinstance(ep.get("return"), int | float)
        ):
            # one pass: the separators of the steps key tell the writer's
            invalid = _INVALID[0] if b" " in m.group() else _INVALID[1]
            ep["invalid_steps"] = data.count(invalid, m.end(), close)
            return ep
    full = _episode(data[start:end])
    if full is None:
        return None
    steps = full.get("steps") or []
    summary = {k: v for k, v in full.items() if k != "steps"}
    summary["length"] = full.get("length") or len(steps)
    ret = full.get("return")
    if not isinstance(ret, int | float):
        ret = sum(float(s.get("reward") or 0.0) for s in steps if isinstance(s, dict))
    summary["return"] = ret
    summary["invalid_steps"] = sum(
        1 for s in steps if isinstance(s, dict) and not s.get("valid", True)
    )
    return summary


@dataclass
class TraceFile:
    path: Path
    episodes: Sequence[dict[str, Any]] = field(default_factory=list)
    """Episodes in full (parsed when first indexed)."""
    summaries: list[dict[str, Any]] = field(default_factory=list)
    """Per episode, everything but its steps (see :func:`quick_summary`)."""
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


CHUNK = 1 << 22
"""Bytes read at a time when a trace file is scanned; a buffer reused
rather than the whole file read at once, whose fresh memory costs more than
the reading."""


def load_trace_file(path: str | Path, max_episodes: int = 1_000_000) -> TraceFile:
    """Read a trace file; unreadable lines are counted, not fatal. Episodes
    are summarised now and read in full when indexed."""
    spans: list[tuple[int, int]] = []
    summaries: list[dict[str, Any]] = []
    bad = 0
    buf = bytearray(CHUNK)
    filled = 0
    base = 0  # the file offset of buf[0]
    with open(path, "rb") as fh:
        while len(spans) < max_episodes:
            with memoryview(buf) as view:
                n = fh.readinto(view[filled:])
            filled += n or 0
            eof = not n
            start = 0
            while len(spans) < max_episodes:
                end = buf.find(b"\n", start, filled)
                if end < 0:
                    if not eof or start >= filled:
                        break
                    end = filled
                if end - start > 1 or buf[start:end].strip():
                    summary = quick_summary(buf, start, end)
                    if summary is None:
                        bad += 1
                    else:
                        spans.append((base + start, base + end))
                        summaries.append(summary)
                start = end + 1
            if eof:
                break
            rest = filled - start
            buf[:rest] = buf[start:filled]
            base += start
            filled = rest
            if filled == len(buf):  # a line longer than the buffer
                buf.extend(bytes(len(buf)))
    return TraceFile(Path(path), LazyEpisodes(Path(path), spans), summaries, bad)


def episode_row(ep: dict[str, Any], index: int) -> dict[str, Any]:
    """An episode (or its :func:`quick_summary`) as a table record."""
    steps = ep.get("steps") or []
    invalid = ep.get("invalid_steps")
    if not isinstance(invalid, int):
        invalid = sum(1 for s in steps if not s.get("valid", True))
    ret = ep.get("return")
    if not isinstance(ret, int | float):
        ret = sum(float(s.get("reward") or 0.0) for s in steps)
    return {
        "id": str(index),
        "episode": ep.get("episode", index),
        "task": str(ep.get("task_id") or ""),
        "policy": str(ep.get("policy") or ""),
        "env": str(ep.get("env") or ""),
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


# ------------------------------------------------------------- filters
ANY = ""
"""The filter value that lets everything through."""
LABEL_FILTERS = ("", "labelled", "unlabelled")


@dataclass
class EpisodeFilter:
    """Which episodes the traces view lists; empty fields let all through."""

    env: str = ANY
    policy: str = ANY
    outcome: str = ANY
    min_return: float | None = None
    max_return: float | None = None
    labelled: str = ANY
    """``labelled``: episodes with a label on it or on a step of it;
    ``unlabelled``: the others."""

    def keeps(self, row: dict[str, Any], labelled: bool) -> bool:
        if self.env and row["env"] != self.env:
            return False
        if self.policy and row["policy"] != self.policy:
            return False
        if self.outcome and row["outcome"] != self.outcome:
            return False
        if self.min_return is not None and row["return"] < self.min_return:
            return False
        if self.max_return is not None and row["return"] > self.max_return:
            return False
        if self.labelled == "labelled" and not labelled:
            return False
        return not (self.labelled == "unlabelled" and labelled)


def choices(rows: list[dict[str, Any]], field_name: str) -> list[str]:
    """The distinct values of a field, for a filter's menu."""
    return sorted({str(r[field_name]) for r in rows if r[field_name]})


def label_text(kto: str | None, ideal: bool, better_than: str | None) -> str:
    """How a step's labels read in the table: ``good``/``bad``, ``ideal``
    when it has an edited answer, ``> 2:3`` when it was picked over step 3
    of episode 2."""
    parts = []
    if kto:
        parts.append(kto)
    if ideal:
        parts.append("ideal")
    if better_than is not None:
        parts.append(f"> {better_than}")
    return " · ".join(parts)


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
    scenarios: dict[str, dict[str, tuple[float | None, int | None]]] = field(
        default_factory=dict
    )
    """scenario -> label -> (success rate, trace episode of a failure)."""


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
        scenarios=_scenarios(data.get("scenarios"), labels),
    )


def _scenarios(
    data: Any, labels: list[str]
) -> dict[str, dict[str, tuple[float | None, int | None]]]:
    """``report.json``'s per-scenario results, scenario first (a report
    from before they existed has none)."""
    out: dict[str, dict[str, tuple[float | None, int | None]]] = {}
    if not isinstance(data, dict):
        return out
    for label in labels:
        rows = data.get(label)
        for name, row in (rows if isinstance(rows, dict) else {}).items():
            if not isinstance(row, dict):
                continue
            rate = row.get("success_rate")
            failed = row.get("failed_example")
            out.setdefault(str(name), {})[label] = (
                float(rate) if isinstance(rate, int | float) else None,
                failed if isinstance(failed, int) and failed >= 0 else None,
            )
    return out
