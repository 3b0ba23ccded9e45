"""The JSON schema of a designed environment (``<name>.env.json``), format 1.

The schema is a plain dict so it can be exported for editors
(``python -m engine.envs.schema`` writes ``resources/schemas/env.schema.json``)
and checked here without a third-party validator: :func:`schema_problems`
implements the subset of JSON Schema this schema uses (``type``, ``const``,
``enum``, ``required``, ``properties``, ``additionalProperties``, ``items``,
``minItems``, ``maxItems``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``minLength``, ``pattern``, ``anyOf``, ``allOf`` with ``if``/``then``,
``$ref`` into ``$defs``) and names the JSON path of each problem, e.g.
``workflow.transitions[3].probability``.

A spec is ``{"format": 1, "name", "kind", "description", <kind>: {...}}``:
the kind-specific body sits under a key named after the kind.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from engine.contract import (
    ENV_KINDS,
    ENV_NAME_PATTERN,
    SPEC_FORMAT,
    TOOL_NAME_PATTERN,
)

FORMAT_VERSION = SPEC_FORMAT
"""The spec format this engine writes; older files are migrated on load."""

KINDS = ENV_KINDS

NAME_PATTERN = ENV_NAME_PATTERN

_CELL = {
    "type": "array",
    "items": {"type": "integer", "minimum": 0},
    "minItems": 2,
    "maxItems": 2,
    "description": "A cell as [row, column], counted from the top left.",
}

_TASK = {
    "type": "object",
    "description": "One task (an issue in the RL Hub Jira format).",
    "properties": {
        "id": {"type": "string"},
        "summary": {"type": "string"},
        "description": {"type": "string"},
        "status": {"type": "string", "description": "Status the episode starts in."},
        "target_status": {
            "type": "string",
            "description": "Status that counts as success for this task.",
        },
    },
    "additionalProperties": True,
}

WORKFLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A state machine: statuses, tools (actions) and transitions.",
    "required": ["statuses", "tools", "transitions", "start", "terminal"],
    "additionalProperties": False,
    "properties": {
        "statuses": {
            "type": "array",
            "minItems": 1,
            "items": {"type": "string", "minLength": 1},
            "description": "Every status the process can be in.",
        },
        "tools": {
            "type": "array",
            "minItems": 1,
            "description": "The actions the agent may choose, in action order.",
            "items": {
                "type": "object",
                "required": ["name"],
                "additionalProperties": False,
                "properties": {
                    "name": {"type": "string", "pattern": TOOL_NAME_PATTERN},
                    "description": {"type": "string"},
                },
            },
        },
        "transitions": {
            "type": "array",
            "description": (
                "status x tool -> next status. Several entries with the same "
                "'from' and 'tool' are alternative outcomes whose 'probability' "
                "values must sum to 1; a missing probability takes what is left."
            ),
            "items": {
                "type": "object",
                "required": ["from", "tool", "to"],
                "additionalProperties": False,
                "properties": {
                    "from": {
                        "type": "string",
                        "description": "Status, or '*' for every non-terminal status.",
                    },
                    "tool": {"type": "string"},
                    "to": {
                        "type": "string",
                        "description": "Next status, or '*' to stay in 'from'.",
                    },
                    "probability": {"type": "number", "minimum": 0, "maximum": 1},
                    "reward": {
                        "type": "number",
                        "description": "Reward for taking this transition.",
                    },
                },
            },
        },
        "start": {
            "type": "string",
            "description": "Start status (a task's own status wins when "
            "tasks.use_task_status is true and the status is known).",
        },
        "terminal": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Statuses that end the episode.",
        },
        "success": {
            "type": "array",
            "items": {"type": "string"},
            "description": "Statuses that count as success (and end the episode); "
            "default: the terminal statuses with a positive status reward.",
        },
        "max_steps": {
            "type": "integer",
            "minimum": 1,
            "description": "Steps before the episode is truncated.",
        },
        "rewards": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "per_step": {"type": "number", "description": "Added every step."},
                "status": {
                    "type": "object",
                    "additionalProperties": {"type": "number"},
                    "description": "Weight added when a status is entered.",
                },
                "invalid_tool": {
                    "type": "number",
                    "description": "Added when the tool is not valid in the status "
                    "(the status does not change).",
                },
                "success_bonus": {
                    "type": "number",
                    "description": "Added when a success status is reached.",
                },
                "status_mode": {
                    "enum": ["enter", "potential"],
                    "description": "'enter': the weight of each status entered; "
                    "'potential': the change in weight, with weight 0 where an "
                    "episode ends, so the weights guide without changing the "
                    "best path (the shortest successful one).",
                },
            },
        },
        "tasks": {
            "type": "object",
            "additionalProperties": False,
            "description": "Tasks sampled at each reset.",
            "properties": {
                "data": {
                    "type": "string",
                    "description": "Mock data file in the RL Hub Jira format, "
                    "relative to the project (e.g. data/jira_mock_data.json).",
                },
                "items": {"type": "array", "items": {"$ref": "#/$defs/task"}},
                "use_task_status": {
                    "type": "boolean",
                    "description": "Start in the task's status instead of 'start'.",
                },
                "use_task_target": {
                    "type": "boolean",
                    "description": "Succeed on the task's target_status; the "
                    "target is one-hot encoded in the observation.",
                },
            },
        },
    },
}

GRID_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A painted grid world; actions are up, right, down, left.",
    "required": ["size", "start", "goals"],
    "additionalProperties": False,
    "properties": {
        "size": {
            "type": "array",
            "items": {"type": "integer", "minimum": 1, "maximum": 256},
            "minItems": 2,
            "maxItems": 2,
            "description": "[rows, columns].",
        },
        "walls": {"type": "array", "items": {"$ref": "#/$defs/cell"}},
        "start": {"$ref": "#/$defs/cell"},
        "goals": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/cell"}},
        "traps": {"type": "array", "items": {"$ref": "#/$defs/cell"}},
        "cell_rewards": {
            "type": "array",
            "description": "Reward added each time a cell is entered (once per "
            "episode where 'once' is true).",
            "items": {
                "type": "object",
                "required": ["cell", "reward"],
                "additionalProperties": False,
                "properties": {
                    "cell": {"$ref": "#/$defs/cell"},
                    "reward": {"type": "number"},
                    "once": {
                        "type": "boolean",
                        "default": False,
                        "description": "Pay the reward only the first time the "
                        "cell is entered in an episode, like a coin (false: "
                        "each time, so stepping off and on again pays again).",
                    },
                },
            },
        },
        "rewards": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "per_step": {"type": "number"},
                "goal": {"type": "number"},
                "trap": {"type": "number"},
                "wall_bump": {"type": "number"},
            },
        },
        "slip": {
            "type": "number",
            "minimum": 0,
            "maximum": 1,
            "description": "Probability that a move goes to a perpendicular side.",
        },
        "max_steps": {"type": "integer", "minimum": 1},
    },
}

GYMNASIUM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id"],
    "additionalProperties": False,
    "properties": {
        "id": {"type": "string", "minLength": 1, "description": "A registered id."},
        "kwargs": {"type": "object", "description": "Keyword arguments for make."},
        "max_episode_steps": {"type": "integer", "minimum": 1},
    },
}

PYTHON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["file", "class"],
    "additionalProperties": False,
    "properties": {
        "file": {
            "type": "string",
            "minLength": 1,
            "description": "A .py file, relative to the project or the spec.",
        },
        "class": {
            "type": "string",
            "pattern": r"^[A-Za-z_]\w*$",
            "description": "Name of the gymnasium.Env subclass in the file.",
        },
        "kwargs": {"type": "object"},
        "max_episode_steps": {"type": "integer", "minimum": 1},
    },
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://rl-studio.local/schemas/env.schema.json",
    "title": "RL Studio designed environment",
    "type": "object",
    "required": ["format", "name", "kind"],
    "additionalProperties": False,
    "properties": {
        "format": {"const": FORMAT_VERSION},
        "name": {
            "type": "string",
            "pattern": NAME_PATTERN,
            "description": "Registered as rlstudio/<name>-v0.",
        },
        "kind": {"enum": list(KINDS)},
        "description": {"type": "string"},
        "workflow": {"$ref": "#/$defs/workflow"},
        "grid": {"$ref": "#/$defs/grid"},
        "gymnasium": {"$ref": "#/$defs/gymnasium"},
        "python": {"$ref": "#/$defs/python"},
    },
    "allOf": [
        {
            "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
            "then": {"required": [kind]},
        }
        for kind in KINDS
    ],
    "$defs": {
        "cell": _CELL,
        "task": _TASK,
        "workflow": WORKFLOW_SCHEMA,
        "grid": GRID_SCHEMA,
        "gymnasium": GYMNASIUM_SCHEMA,
        "python": PYTHON_SCHEMA,
    },
}


# ---------------------------------------------------------------- validation

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "number": (int, float),
    "integer": (int,),
    "boolean": (bool,),
    "null": (type(None),),
}


def join_path(base: str, key: str | int) -> str:
    """``join_path("workflow", "tools")`` -> ``workflow.tools``; ints index."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else key


def _type_ok(value: Any, name: str) -> bool:
    if isinstance(value, bool) and name in ("number", "integer"):
        return False
    if name == "integer" and isinstance(value, float):
        return value.is_integer()
    return isinstance(value, _TYPES[name])


def _describe(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value!r}"
    if value is None:
        return "null"
    return "an object" if isinstance(value, dict) else "a list"


def schema_problems(
    data: Any, schema: dict[str, Any] | None = None, path: str = ""
) -> list[tuple[str, str]]:
    """Check ``data`` against ``schema`` (default: :data:`SCHEMA`).

    Returns ``(json_path, sentence)`` pairs; an empty list means valid.
    """
    root = SCHEMA if schema is None else schema
    out: list[tuple[str, str]] = []
    _check(data, root, path, root, out)
    return out


def _sub_problems(
    value: Any, schema: dict[str, Any], path: str, root: dict[str, Any]
) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    _check(value, schema, path, root, out)
    return out


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref}")
        schema = root["$defs"][ref.removeprefix("#/$defs/")]
    return schema


def _check(
    value: Any,
    schema: dict[str, Any],
    path: str,
    root: dict[str, Any],
    out: list[tuple[str, str]],
) -> None:
    schema = _resolve(schema, root)
    where = path or "the spec"
    if "const" in schema and value != schema["const"]:
        out.append((path, f"{where} must be {schema['const']!r}, not {value!r}."))
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(repr(v) for v in schema["enum"])
        out.append((path, f"{where} is {value!r}; it must be one of {allowed}."))
        return
    if "type" in schema:
        names = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_type_ok(value, n) for n in names):
            wanted = " or ".join(
                "an integer"
                if n == "integer"
                else f"a{'n' if n[0] in 'aeiou' else ''} {n}"
                for n in names
            )
            out.append((path, f"{where} must be {wanted}, not {_describe(value)}."))
            return
    if "anyOf" in schema and all(
        _sub_problems(value, s, path, root) for s in schema["anyOf"]
    ):
        out.append((path, f"{where} does not match any allowed form."))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            out.append(
                (path, f"{where} is {value}; it must be >= {schema['minimum']}.")
            )
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            out.append(
                (
                    path,
                    f"{where} is {value}; it must be > {schema['exclusiveMinimum']}.",
                )
            )
        if "maximum" in schema and value > schema["maximum"]:
            out.append(
                (path, f"{where} is {value}; it must be <= {schema['maximum']}.")
            )
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            out.append((path, f"{where} must not be empty."))
        elif "pattern" in schema and not re.search(schema["pattern"], value):
            out.append(
                (
                    path,
                    f"{where} is {value!r}, which is not an allowed name "
                    "(letters, digits, '_', '-'; starting with a letter).",
                )
            )
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            n = schema["minItems"]
            out.append((path, f"{where} needs at least {n} item{'s' * (n != 1)}."))
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            out.append((path, f"{where} has more than {schema['maxItems']} items."))
        if "items" in schema:
            for i, item in enumerate(value):
                _check(item, schema["items"], join_path(path, i), root, out)
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            if key not in value:
                out.append((join_path(path, key), f"{where} is missing {key!r}."))
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            sub = join_path(path, key)
            if key in props:
                _check(item, props[key], sub, root, out)
            elif extra is False:
                known = ", ".join(props)
                out.append((sub, f"{sub} is not a known field (known: {known})."))
            elif isinstance(extra, dict):
                _check(item, extra, sub, root, out)
    for clause in schema.get("allOf", []):
        if "if" in clause:
            if not _sub_problems(value, clause["if"], path, root):
                _check(value, clause.get("then", {}), path, root, out)
        else:
            _check(value, clause, path, root, out)


def export_schema(path: str | Path | None = None) -> Path:
    """Write :data:`SCHEMA` as JSON (default ``resources/schemas/env.schema.json``)."""
    target = (
        Path(path)
        if path is not None
        else Path(__file__).resolve().parents[2] / "resources/schemas/env.schema.json"
    )
    from engine.store.atomic import atomic_write_json

    atomic_write_json(target, SCHEMA)
    return target


if __name__ == "__main__":
    print(export_schema(sys.argv[1] if len(sys.argv) > 1 else None))
