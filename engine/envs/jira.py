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

:func:`import_jira` makes a project's workflow env of mock data (``rl-studio-engine
env import-jira``, the service's ``POST /jira-mock-data/import``, the
Environments workspace's Import Jira mock data… through ``env.import_jira``):
the data is checked whole (:func:`check_mock_data`: malformed JSON, no
issues, a status the transitions do not know each refused in one sentence,
nothing written), kept as ``data/jira/<name>.json`` and the spec written to
``envs/<name>.env.json``, each built aside and linked in, never over a file.
A name asked for that an env (or its data) has is refused; the name made
from the file's is suffixed (``_2``, ``_3``, ...) until it is free.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import contract, untrusted
from engine.envs.schema import FORMAT_VERSION
from engine.envs.spec import SpecError, load_spec, parse_spec
from engine.errors import EngineError

MOCK_DATA_FOLDER = "data/jira"
"""Where :func:`import_jira` keeps the mock data an imported env reads,
relative to the project."""
DEFAULT_NAME = "jira"
"""The imported env's name when nothing else gives one."""
MAX_SUFFIX = 999
RL_HUB_FILE = "data/jira_mock_data.json"
"""The RL Hub's own mock data file, in every project made with the
examples: what ``GET /jira-mock-data`` answers without ``env``."""


class NoMockData(EngineError):
    """The project holds no such mock data (HTTP 404)."""


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
    from engine.envs.workflow_model import read_mock_data

    p = Path(path)
    return workflow_from_jira(
        read_mock_data(p), name=name, data_ref=data_ref or f"data/{p.name}", **kwargs
    )


# ------------------------------------------------------------------ import
@dataclass(frozen=True)
class Imported:
    """An env :func:`import_jira` wrote."""

    name: str
    env_id: str
    spec_file: Path
    data_file: Path
    issues: int
    statuses: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "env_id": self.env_id,
            "spec_file": str(self.spec_file),
            "data_file": str(self.data_file),
            "issues": self.issues,
            "statuses": self.statuses,
        }


def parse_mock_data(text: str | bytes, what: str = "The mock data") -> dict[str, Any]:
    """Mock data given as JSON text, checked (:func:`check_mock_data`)."""
    try:
        data = untrusted.loads(text, what)
    except untrusted.UntrustedDataError as exc:
        raise SpecError(exc.field, str(exc)) from None
    return check_mock_data(data, what)


def read_mock_data_file(path: str | Path) -> dict[str, Any]:
    """A mock data file, checked (:func:`check_mock_data`)."""
    p = Path(path)
    what = f"The mock data file {p.name}"
    if not p.is_file():
        raise SpecError("file", f"{what} does not exist.")
    # numpy comes with the workflow model: not at import (serve-http starts
    # without it).
    from engine.envs.workflow_model import MOCK_DATA_BYTES

    try:
        data = untrusted.load_file(p, what, MOCK_DATA_BYTES)
    except untrusted.UntrustedDataError as exc:
        raise SpecError(exc.field, str(exc)) from None
    return check_mock_data(data, what)


def check_mock_data(data: Any, what: str = "The mock data") -> dict[str, Any]:
    """``data`` when it is RL Hub Jira mock data an env can be made of;
    otherwise one sentence (SpecError naming the field): not an object, no
    issues, transitions that are not lists of status names, rewards that
    are not numbers, or a status (an issue's, its target, a reward
    weight's) that the transitions and ``statuses`` do not name."""
    if not isinstance(data, dict):
        raise SpecError("", f"{what} must be a JSON object with 'issues'.")
    issues = data.get("issues")
    if not isinstance(issues, list) or not issues:
        raise SpecError("issues", f"{what} has no issues (its 'issues' list is empty).")
    transitions = data.get("valid_transitions")
    if not isinstance(transitions, dict) or not transitions:
        raise SpecError(
            "valid_transitions", f"{what} has no 'valid_transitions' mapping."
        )
    for src, dsts in transitions.items():
        if not isinstance(dsts, list) or not all(isinstance(d, str) for d in dsts):
            raise SpecError(
                f"valid_transitions.{src}",
                f"{what}'s valid_transitions[{untrusted_text(src)}] must be a list "
                "of status names.",
            )
    statuses = data.get("statuses", [])
    if not isinstance(statuses, list) or not all(isinstance(x, str) for x in statuses):
        raise SpecError("statuses", f"{what}'s statuses must be a list of names.")
    rewards = data.get("reward_config", {})
    weights = (
        rewards.get("status_reward_weights", {}) if isinstance(rewards, dict) else None
    )
    if not isinstance(weights, dict):
        raise SpecError(
            "reward_config",
            f"{what}'s reward_config must be an object whose status_reward_weights "
            "map statuses to numbers.",
        )
    assert isinstance(rewards, dict)
    numbers = {
        **{f"status_reward_weights.{k}": v for k, v in weights.items()},
        **{k: v for k, v in rewards.items() if k != "status_reward_weights"},
    }
    for key, value in numbers.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SpecError(
                f"reward_config.{key}",
                f"{what}'s reward_config.{key} must be a number, not "
                f"{untrusted_text(value)}.",
            )
    known = workflow_from_jira(data, name=DEFAULT_NAME, data_ref="")["workflow"][
        "statuses"
    ]
    shown = ", ".join(repr(s) for s in known[:8]) + (", ..." if len(known) > 8 else "")
    for i, issue in enumerate(issues):
        if not isinstance(issue, dict):
            raise SpecError(f"issues[{i}]", f"{what}'s issue {i + 1} is not an object.")
        for key in ("status", "target_status"):
            status = issue.get(key)
            if key == "target_status" and status is None:
                continue  # an issue without a target keeps the env's
            if not isinstance(status, str) or status not in known:
                label = untrusted_text(issue["id"]) if "id" in issue else i + 1
                raise SpecError(
                    f"issues[{i}].{key}",
                    f"{what}'s issue {label} has the {key.replace('_', ' ')} "
                    f"{untrusted_text(status)}, which its valid_transitions "
                    f"do not know (statuses: {shown}).",
                )
    for status in weights:
        if status not in known:
            raise SpecError(
                f"reward_config.status_reward_weights.{status}",
                f"{what}'s status_reward_weights names the status "
                f"{untrusted_text(status)}, which its valid_transitions do not know "
                f"(statuses: {shown}).",
            )
    return data


def untrusted_text(value: Any, limit: int = 60) -> str:
    """A value from the data, quoted and cut for a sentence."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def project_mock_data(project_dir: str | Path, env: str = "") -> dict[str, Any]:
    """The mock data the project holds: the workflow env ``env``'s (its
    ``tasks.data``), else the RL Hub's file (:data:`RL_HUB_FILE`)."""
    project = Path(project_dir)
    if not env:
        file = project / RL_HUB_FILE
        if not file.is_file():
            raise NoMockData(f"The project has no {RL_HUB_FILE}; name an env=.")
        return read_mock_data_file(file)
    _checked_env_name(env)
    path = contract.spec_file(project, env)
    if not path.is_file():
        raise NoMockData(f"There is no environment {env} in this project.")
    spec = load_spec(path)
    ref = spec.body.get("tasks", {}).get("data") if spec.kind == "workflow" else None
    if not isinstance(ref, str) or not ref:
        raise NoMockData(f"The environment {env} reads no mock data.")
    return read_mock_data_file(spec.resolve(ref))


def import_jira(
    project_dir: str | Path,
    data: dict[str, Any],
    *,
    name: str = "",
    default_name: str = DEFAULT_NAME,
    source: str = "",
) -> Imported:
    """Write a workflow env of the checked mock ``data`` into the project:
    ``name`` (refused when taken), else ``default_name`` made a valid env
    name and suffixed until free. ``source`` names where the data came from
    in the env's description."""
    project = Path(project_dir)
    check_mock_data(data)
    if name:
        chosen = _checked_env_name(name)
        if _taken(project, chosen):
            raise SpecError(
                "name",
                f"There is already an environment (or its mock data) named {chosen}; "
                "choose another name.",
            )
    else:
        chosen = _free_name(project, _env_name_from(default_name))
    data_ref = f"{MOCK_DATA_FOLDER}/{chosen}.json"
    spec = workflow_from_jira(
        data,
        name=chosen,
        data_ref=data_ref,
        description="Imported from RL Hub Jira mock data"
        + (f" ({source})." if source else "."),
    )
    # Checked with the issues inline: the data file is not written yet.
    inline = json.loads(json.dumps(spec))
    inline["workflow"]["tasks"] = {
        **{k: v for k, v in spec["workflow"]["tasks"].items() if k != "data"},
        "items": data["issues"],
    }
    _, problems = parse_spec(inline)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        first = errors[0]
        raise SpecError(first.path, f"The imported env is not valid: {first.message}")
    data_file = project / data_ref
    spec_file = contract.spec_file(project, chosen)
    _link_in(data_file, json.dumps(data, indent=1) + "\n", chosen)
    try:
        _link_in(spec_file, json.dumps(spec, indent=2) + "\n", chosen)
    except BaseException:
        data_file.unlink(missing_ok=True)  # ours: written a moment ago
        raise
    return Imported(
        name=chosen,
        env_id=contract.env_id(chosen),
        spec_file=spec_file,
        data_file=data_file,
        issues=len(data["issues"]),
        statuses=len(spec["workflow"]["statuses"]),
    )


def _checked_env_name(name: str) -> str:
    name = name.strip()
    if not re.fullmatch(contract.ENV_NAME_PATTERN, name):
        raise SpecError(
            "name",
            f"The env name {untrusted_text(name)} must start with a letter and hold "
            "only letters, digits, '_', '.' and '-' (at most 64).",
        )
    return name


def _env_name_from(text: str) -> str:
    """A valid env name made of a file's name (``Jira Mock-Data`` ->
    ``jira_mock-data``)."""
    slug = re.sub(r"[^a-z0-9_.\-]+", "_", text.lower()).strip("_.-")
    if not slug or not slug[0].isalpha():
        slug = f"{DEFAULT_NAME}_{slug}".strip("_")
    return slug[:56]


def _taken(project: Path, name: str) -> bool:
    return (
        contract.spec_file(project, name).exists()
        or (project / MOCK_DATA_FOLDER / f"{name}.json").exists()
    )


def _free_name(project: Path, base: str) -> str:
    if not _taken(project, base):
        return base
    for n in range(2, MAX_SUFFIX + 1):
        if not _taken(project, f"{base}_{n}"):
            return f"{base}_{n}"
    raise SpecError("name", f"The names {base}_2 to {base}_{MAX_SUFFIX} are taken.")


def _link_in(path: Path, text: str, name: str) -> None:
    """Write ``text`` beside ``path`` and link it in: a reader sees no file
    or the whole one, and a file that took the name meanwhile is kept."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = contract.temp_path(path, "import")
    try:
        with open(tmp, "x", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise SpecError(
                "name", f"An environment named {name} appeared meanwhile; import again."
            ) from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
