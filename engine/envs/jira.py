"""Import the RL Hub Jira mock data format as a ``workflow`` spec.

The format (``data/jira_mock_data.json``)::

    {
      "issues": [{"id", "summary", "description", "status", "target_status",
                  "priority", "assignee", "comments": [...]}, ...],
      "valid_transitions": {"To Do": ["In Progress", "Won't Do"], ...},
      "reward_config": {"status_reward_weights": {"Done": 1.0, ...},
                        "per_step_base": -0.02,
                        "invalid_transition_penalty": -0.1,   # optional
                        "success_bonus": 1.0}                  # optional
    }

:func:`workflow_from_jira` makes one tool ``move_to_<status>`` per status,
one transition per valid transition, the reward rules from ``reward_config``
and tasks from ``issues`` (each episode starts in a sampled issue's status
and succeeds on its ``target_status``). Statuses without outgoing
transitions are terminal.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from engine.envs.schema import FORMAT_VERSION
from engine.envs.spec import SpecError
from engine.envs.workflow_model import read_mock_data


def tool_name_for(status: str) -> str:
    """``"Won't Do"`` -> ``move_to_wont_do``."""
    slug = re.sub(r"[^a-z0-9]+", "_", status.lower().replace("'", "")).strip("_")
    return f"move_to_{slug or 'status'}"


def workflow_from_jira(
    data: dict[str, Any],
    *,
    name: str,
    data_ref: str,
    description: str = "",
    max_steps: int = 20,
    status_mode: str = "potential",
) -> dict[str, Any]:
    """A format-1 workflow spec document built from RL Hub Jira mock data.

    ``data_ref``: how the spec refers to the data file (relative to the
    project, e.g. ``data/jira_mock_data.json``).
    """
    vt = data.get("valid_transitions")
    if not isinstance(vt, dict) or not vt:
        raise SpecError(
            "valid_transitions", "The mock data has no 'valid_transitions' mapping."
        )
    statuses: list[str] = list(data.get("statuses", []))
    for src, dsts in vt.items():
        if not isinstance(dsts, list):
            raise SpecError(
                f"valid_transitions.{src}",
                f"valid_transitions['{src}'] must be a list of statuses.",
            )
        for s in [src, *dsts]:
            if s not in statuses:
                statuses.append(s)
    tools = [
        {"name": tool_name_for(s), "description": f"Move the issue to '{s}'."}
        for s in statuses
    ]
    transitions = [
        {"from": src, "tool": tool_name_for(dst), "to": dst}
        for src, dsts in vt.items()
        for dst in dsts
    ]
    terminal = [s for s in statuses if not vt.get(s)]
    rc = data.get("reward_config", {})
    weights = rc.get("status_reward_weights", {})
    rewards: dict[str, Any] = {
        "per_step": float(rc.get("per_step_base", 0.0)),
        "status": {s: float(w) for s, w in weights.items() if s in statuses},
        "status_mode": status_mode,
        "invalid_tool": float(rc.get("invalid_transition_penalty", -0.1)),
        "success_bonus": float(rc.get("success_bonus", 1.0)),
    }
    issues = data.get("issues", [])
    start = next(
        (
            i["status"]
            for i in issues
            if isinstance(i, dict) and i.get("status") in statuses
        ),
        statuses[0],
    )
    return {
        "format": FORMAT_VERSION,
        "name": name,
        "kind": "workflow",
        "description": description,
        "workflow": {
            "statuses": statuses,
            "tools": tools,
            "transitions": transitions,
            "start": start,
            "terminal": terminal,
            "max_steps": max_steps,
            "rewards": rewards,
            "tasks": {
                "data": data_ref,
                "use_task_status": True,
                "use_task_target": True,
            },
        },
    }


def workflow_from_jira_file(
    path: str | Path, *, name: str, data_ref: str | None = None, **kwargs: Any
) -> dict[str, Any]:
    """:func:`workflow_from_jira` for a mock data file."""
    p = Path(path)
    return workflow_from_jira(
        read_mock_data(p), name=name, data_ref=data_ref or f"data/{p.name}", **kwargs
    )
