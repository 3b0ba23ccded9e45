"""Runs compared with their configs: the settings that differ and the
outcomes side by side, declared once for the studio's Compare view and
``rl-studio-engine compare``.

Standard library only, like :mod:`engine.contract`: the studio imports it
(the import-linter contract in ``pyproject.toml`` names the modules it may
import). A run here is a record as the engine sends it
(:class:`engine.contract.RunRow`), or the studio's copy of one with live
fields merged in.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict

MISSING = "—"
"""Stands for a setting a run's config does not have (another algorithm's
hyperparameter, a field added later), so that it differs from ``None``."""

METRICS = (
    ("status", "Status"),
    ("best_eval_reward", "Best eval reward"),
    ("final_eval_reward", "Final eval reward"),
    ("total_steps", "Total steps"),
    ("duration_s", "Duration"),
    ("steps_per_s", "Steps/s"),
    ("warnings", "Health"),
)
"""The outcomes compared, in order: (key, label)."""


def run_warnings(run: Mapping[str, Any]) -> list[str] | None:
    """What a run's health watch said (its summary's ``warnings``, one
    sentence each); None for a run that keeps no such list (not watched, or
    not ended)."""
    summary = run.get("summary")
    warnings = summary.get("warnings") if isinstance(summary, Mapping) else None
    if not isinstance(warnings, list):
        return None
    return [str(w) for w in warnings]


class Comparison(TypedDict):
    """What :func:`compare_runs` returns; each list has one value per run,
    in the order of ``runs``."""

    runs: list[dict[str, str]]
    config_diff: dict[str, list[Any]]
    metrics: dict[str, list[Any]]


def flatten_config(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as dotted keys: ``{"hyperparameters": {"gamma": 0.9}}``
    gives ``{"hyperparameters.gamma": 0.9}``. Lists stay values; an empty
    mapping is a value too (it may differ from a filled one)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            flat.update(flatten_config(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def config_diff(configs: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """The flattened settings whose values are not the same in all
    ``configs``, sorted by key, with one value per config (:data:`MISSING`
    where a config lacks the key)."""
    flats = [flatten_config(c) for c in configs]
    keys = sorted({k for flat in flats for k in flat})
    diff: dict[str, list[Any]] = {}
    for key in keys:
        values = [flat.get(key, MISSING) for flat in flats]
        # 1 == 1.0 == True in Python; a setting typed 1 in one run and 1.0
        # in another is the same setting, but True and 1 are not.
        if any(_differs(values[0], v) for v in values[1:]):
            diff[key] = values
    return diff


def _differs(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is not type(b) or a != b
    return bool(a != b)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def run_metrics(run: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """A run's outcome as :data:`METRICS` keys; None where it is not known
    (no evaluation yet, never started).

    The best evaluation comes from the summary, else from the live best the
    studio tracks (``best_eval_live``); the steps from the summary, else the
    progress. Duration is the run's last stretch (``started`` to ``ended``,
    or to ``now`` while it runs) as in the run list, so steps/s counts only
    the steps of that stretch: those after ``resumed_from`` on a resumed run.
    """
    summary = run.get("summary")
    summary = summary if isinstance(summary, Mapping) else {}
    best = _number(summary.get("best_eval_reward"))
    if best is None:
        best = _number(run.get("best_eval_live"))
    steps = _number(summary.get("total_steps"))
    if steps is None:
        steps = _number(run.get("progress_done"))
    started, ended = _number(run.get("started")), _number(run.get("ended"))
    if ended is None and run.get("status") == "running":
        ended = time.time() if now is None else now
    duration = ended - started if started and ended is not None else None
    rate = None
    if steps is not None and duration:
        resumed = summary.get("resumed_from")
        first = _number(resumed.get("step")) if isinstance(resumed, Mapping) else None
        rate = (steps - (first or 0.0)) / duration
    return {
        "status": str(run.get("status") or ""),
        "best_eval_reward": best,
        "final_eval_reward": _number(summary.get("last_eval_reward")),
        "total_steps": int(steps) if steps is not None else None,
        "duration_s": duration,
        "steps_per_s": rate,
        "warnings": run_warnings(run),
    }


def compare_runs(
    runs: Sequence[Mapping[str, Any]], now: float | None = None
) -> Comparison:
    """Runs side by side: their ids and names, the config settings that
    differ (:func:`config_diff`) and their outcomes (:func:`run_metrics`)."""
    configs = [c if isinstance(c := r.get("config"), Mapping) else {} for r in runs]
    outcomes = [run_metrics(r, now) for r in runs]
    return {
        "runs": [
            {"id": str(r.get("id", "")), "name": str(r.get("name") or r.get("id"))}
            for r in runs
        ],
        "config_diff": config_diff(configs),
        "metrics": {key: [o[key] for o in outcomes] for key, _ in METRICS},
    }
