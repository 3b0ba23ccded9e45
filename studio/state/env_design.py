"""The environment designer's document: one env spec being edited.

Qt-free. The spec is the plain JSON dict of ``<name>.env.json`` (see
``engine/envs/schema.py``; the studio may not import it, so the few facts it
needs are repeated here); the designer's layout (status positions on the
canvas) is kept beside it, because the spec's schema has no room for it.

Every edit goes through a method of :class:`EnvDesign`, which changes the
dict and notifies observers (``what``, ``key``):

* ``reset`` — everything may have changed (open, undo, JSON replace);
* ``status`` / ``tool`` / ``transition`` — a workflow element (key: name or
  index);
* ``workflow`` — start, terminal or success sets, status rewards;
* ``positions`` — status positions on the canvas;
* ``grid`` — grid cells or size;
* ``field`` — a plain field (key: dotted path such as ``grid.slip``).

Undo is built on :meth:`EnvDesign.snapshot` / :meth:`EnvDesign.restore`
(see ``studio/environments/commands.py``). Edits that would break the document
(an empty or duplicate name) raise :class:`DesignError` with one sentence;
callers check with the ``*_problem`` methods first.
"""

from __future__ import annotations

import copy
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import contract, untrusted
from engine.contract import SPEC_SUFFIX
from studio.state.observable import Observable

FORMAT_VERSION = contract.SPEC_FORMAT
KINDS = contract.ENV_KINDS
NAME_PATTERN = re.compile(contract.ENV_NAME_PATTERN)
TOOL_PATTERN = re.compile(contract.TOOL_NAME_PATTERN)
WILDCARD = contract.WILDCARD
CELL_KINDS = ("empty", "wall", "start", "goal", "trap")

Position = tuple[float, float]
Cell = tuple[str, float | None, bool]
"""A grid cell ``(kind, reward, once)``: its kind (one of :data:`CELL_KINDS`),
its reward or None, and whether the reward is paid only the first time the
cell is entered in an episode (``"once": true`` in the spec). The grid painter
(``widgets.grid_painter.Cell``) uses the same shape."""
EMPTY_CELL: Cell = ("empty", None, False)


class DesignError(ValueError):
    """An edit that cannot be made; the message is one sentence."""


CONTAINERS: dict[str, dict[str, type]] = {
    "workflow": {
        "statuses": list,
        "tools": list,
        "transitions": list,
        "terminal": list,
        "success": list,
        "rewards": dict,
        "tasks": dict,
    },
    "grid": {
        "size": list,
        "walls": list,
        "start": list,
        "goals": list,
        "traps": list,
        "cell_rewards": list,
        "rewards": dict,
    },
    "gymnasium": {"kwargs": dict},
    "python": {"kwargs": dict},
}
"""The lists and objects of each kind's body that the editors walk. The
engine's check says everything else wrong with a spec; a string where a
list belongs would be walked a character at a time (one status per
letter), so a document of the wrong shape is refused before any view is
built from it."""


def shape_problem(spec: dict[str, Any]) -> str | None:
    """One sentence naming the first field of ``spec`` whose JSON type is
    not the list or object the editors expect (None: the shape is fine)."""
    kind = spec.get("kind", spec.get("type"))
    if kind not in CONTAINERS:
        return None
    body = spec.get(kind)
    if body is None:
        return None
    if not isinstance(body, dict):
        return f"{kind} must be a JSON object, not a {_kind(body)}."
    for key, expected in CONTAINERS[kind].items():
        value = body.get(key)
        if value is not None and not isinstance(value, expected):
            want = "a list" if expected is list else "an object"
            return f"{kind}.{key} must be {want}, not a {_kind(value)}."
    return None


# ---------------------------------------------------------------- templates


def new_spec(kind: str, name: str) -> dict[str, Any]:
    """A small, valid starting spec of ``kind``."""
    if kind not in KINDS:
        raise DesignError(f"Unknown kind {kind!r}; choose one of {', '.join(KINDS)}.")
    body: dict[str, Any]
    if kind == "workflow":
        body = {
            "statuses": ["Open", "Done"],
            "tools": [{"name": "finish", "description": "Complete the task."}],
            "transitions": [{"from": "Open", "tool": "finish", "to": "Done"}],
            "start": "Open",
            "terminal": ["Done"],
            "max_steps": 20,
            "rewards": {"per_step": -0.01, "status": {"Done": 1.0}},
        }
    elif kind == "grid":
        body = {
            "size": [5, 5],
            "walls": [],
            "start": [0, 0],
            "goals": [[4, 4]],
            "traps": [],
            "rewards": {"per_step": -0.01, "goal": 1.0, "trap": -1.0},
            "slip": 0.0,
            "max_steps": 50,
        }
    elif kind == "gymnasium":
        body = {"id": "CartPole-v1", "kwargs": {}}
    else:
        body = {"file": f"envs/{name}.py", "class": "MyEnv", "kwargs": {}}
    return {
        "format": FORMAT_VERSION,
        "name": name,
        "kind": kind,
        "description": "",
        kind: body,
    }


PYTHON_TEMPLATE = '''"""A custom environment for RL Studio."""

import gymnasium as gym
import numpy as np


class MyEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self._steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)  # seeds self.np_random: draw from it only
        self._steps = 0
        return self.np_random.uniform(-1, 1, 2).astype(np.float32), {}

    def step(self, action):
        self._steps += 1
        obs = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        reward = float(action == int(obs[0] > 0))
        return obs, reward, False, self._steps >= 50, {}
'''


# ---------------------------------------------------------------- files


def spec_text(spec: dict[str, Any]) -> str:
    """The spec as the file holds it (indented JSON, trailing newline)."""
    return json.dumps(spec, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def read_spec_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a spec file; raises DesignError with one sentence when the file
    is missing, not JSON, or not an environment spec."""
    p = Path(path)
    try:
        data = untrusted.load_file(p, p.name)
    except untrusted.UntrustedDataError as exc:
        raise DesignError(
            f"{str(exc).rstrip('.')}; fix it in a text editor, the file was left "
            "as it is."
        ) from None
    if not isinstance(data, dict):
        raise DesignError(f"{p.name} must hold a JSON object, not a {_kind(data)}.")
    kind = data.get("kind", data.get("type"))
    if kind not in KINDS:
        raise DesignError(
            f"{p.name} is not an environment spec: its kind is {kind!r}, "
            f"not one of {', '.join(KINDS)}."
        )
    problem = shape_problem(data)
    if problem is not None:
        raise DesignError(
            f"{p.name} cannot be opened: {problem.rstrip('.')}; fix it in a text "
            "editor, the file was left as it is."
        )
    return data


def _kind(value: Any) -> str:
    return {
        list: "list",
        dict: "object",
        str: "string",
        int: "number",
        float: "number",
        bool: "boolean",
    }.get(type(value), type(value).__name__)


def autosave_path(spec_path: str | os.PathLike[str]) -> Path:
    """The autosave copy of a spec: ``<project>/envs/.autosave/<name>.env.json``."""
    p = Path(spec_path)
    return p.parent / ".autosave" / p.name


def layout_path(spec_path: str | os.PathLike[str]) -> Path:
    """Where the canvas positions of a spec are kept (beside the spec)."""
    p = Path(spec_path)
    return p.parent / ".layout" / (p.name.removesuffix(SPEC_SUFFIX) + ".layout.json")


# ---------------------------------------------------------------- problems


@dataclass(frozen=True)
class Target:
    """What in the designer a problem path points at.

    ``kind``: ``status`` (key: name), ``transition`` (key: index), ``tool``
    (key: index), ``cell`` (key: (row, col)), ``field`` (key: dotted path of
    a form field), or ``spec`` (the whole spec). ``field`` is the part of the
    element at fault (``to``, ``probability``, ``name``), if any.
    """

    kind: str
    key: Any = None
    field: str = ""


_INDEX = re.compile(r"^(?P<head>[\w.]+?)\[(?P<i>\d+)\](?:\.(?P<rest>.+))?$")


def problem_target(spec: dict[str, Any], path: str) -> Target:
    """Map a problem's JSON path (``workflow.transitions[3].to``) to the
    designer element that shows it."""
    if not path:
        return Target("spec")
    kind = spec.get("kind")
    body = spec.get(kind) if isinstance(kind, str) else None
    body = body if isinstance(body, dict) else {}
    m = _INDEX.match(path)
    if m:
        head, i, rest = m["head"], int(m["i"]), m["rest"] or ""
        items = (
            body.get(head.split(".", 1)[-1]) if head.startswith(kind or "?") else None
        )
        if head == "workflow.transitions":
            return Target("transition", i, rest)
        if head == "workflow.tools":
            return Target("tool", i, rest)
        if head in ("workflow.statuses", "workflow.terminal", "workflow.success"):
            names = items if isinstance(items, list) else []
            name = names[i] if i < len(names) else None
            statuses = body.get("statuses", [])
            if isinstance(name, str) and name in statuses:
                return Target("status", name, head.rsplit(".", 1)[-1])
            return Target("field", head)
        if head.startswith("grid.") and head.split(".", 1)[1] in (
            "walls",
            "goals",
            "traps",
            "cell_rewards",
        ):
            cells = items if isinstance(items, list) else []
            cell = cells[i] if i < len(cells) else None
            if isinstance(cell, dict):
                cell = cell.get("cell")
            if isinstance(cell, list) and _is_cell(cell):
                return Target("cell", (cell[0], cell[1]), head.rsplit(".", 1)[-1])
            return Target("field", head)
        return Target("field", head)
    if path == "workflow.start":
        start = body.get("start")
        if isinstance(start, str) and start in body.get("statuses", []):
            return Target("status", start, "start")
    if path == "workflow.terminal":
        start = body.get("start")
        if isinstance(start, str) and start in body.get("statuses", []):
            return Target("status", start, "terminal")
    if path.startswith("workflow.rewards.status."):
        name = path.removeprefix("workflow.rewards.status.")
        if name in body.get("statuses", []):
            return Target("status", name, "reward")
    if path == "grid.start" and _is_cell(body.get("start")):
        cell = body["start"]
        return Target("cell", (cell[0], cell[1]), "start")
    if path in ("name", "description", "kind", "format"):
        return Target("field", path)
    return Target("field", path)


def _is_cell(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )


# ---------------------------------------------------------------- the document


class EnvDesign(Observable):
    """An editable env spec with kind-specific helpers and change events."""

    def __init__(
        self,
        spec: dict[str, Any] | None = None,
        positions: dict[str, Position] | None = None,
    ) -> None:
        super().__init__()
        self.spec: dict[str, Any] = (
            copy.deepcopy(spec) if spec else new_spec("workflow", "untitled")
        )
        self.positions: dict[str, Position] = dict(positions or {})

    # ------------------------------------------------------------ basics
    @property
    def kind(self) -> str:
        return str(self.spec.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.spec.get("name", ""))

    @property
    def body(self) -> dict[str, Any]:
        """The kind-specific part (created empty if missing)."""
        body = self.spec.get(self.kind)
        if not isinstance(body, dict):
            body = {}
            self.spec[self.kind] = body
        return body

    def snapshot(self) -> tuple[dict[str, Any], dict[str, Position]]:
        """A deep copy of the whole document, for undo."""
        return copy.deepcopy(self.spec), dict(self.positions)

    def restore(self, snap: tuple[dict[str, Any], dict[str, Position]]) -> None:
        self.spec = copy.deepcopy(snap[0])
        self.positions = dict(snap[1])
        self.notify("reset")

    def replace_spec(self, spec: dict[str, Any]) -> None:
        """Replace the whole spec (the JSON view); positions of statuses that
        still exist are kept."""
        if not isinstance(spec, dict):
            raise DesignError("The document must be a JSON object.")
        self.spec = copy.deepcopy(spec)
        names = set(self.statuses()) if self.kind == "workflow" else set()
        self.positions = {k: v for k, v in self.positions.items() if k in names}
        self.notify("reset")

    def get_field(self, path: str, default: Any = None) -> Any:
        """The value at a dotted path (``grid.rewards.goal``), or ``default``."""
        node: Any = self.spec
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def set_field(self, path: str, value: Any) -> None:
        """Set a dotted path; ``None`` removes the key (and empty parents)."""
        parts = path.split(".")
        if parts == ["name"] and not (
            isinstance(value, str) and NAME_PATTERN.match(value)
        ):
            raise DesignError(
                "The name must start with a letter and hold only letters, digits, "
                "'_', '-' and '.'."
            )
        node = self.spec
        chain = []
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                if value is None:
                    return
                child = {}
                node[part] = child
            chain.append((node, part))
            node = child
        if value is None:
            node.pop(parts[-1], None)
            for parent, key in reversed(chain[1:]):
                if not parent[key]:
                    parent.pop(key)
        else:
            node[parts[-1]] = copy.deepcopy(value)
        self.notify("field", path)

    # ---------------------------------------------------------- workflow
    def statuses(self) -> list[str]:
        return [s for s in self.body.get("statuses", []) if isinstance(s, str)]

    def tools(self) -> list[dict[str, Any]]:
        return [t for t in self.body.get("tools", []) if isinstance(t, dict)]

    def tool_names(self) -> list[str]:
        return [str(t.get("name", "")) for t in self.tools()]

    def transitions(self) -> list[dict[str, Any]]:
        return [t for t in self.body.get("transitions", []) if isinstance(t, dict)]

    def start(self) -> str:
        return str(self.body.get("start", ""))

    def terminal(self) -> list[str]:
        return list(self.body.get("terminal", []))

    def success(self) -> list[str] | None:
        """The explicit success statuses, or None when the spec has none
        (the engine then uses terminal statuses with a positive reward)."""
        s = self.body.get("success")
        return list(s) if isinstance(s, list) else None

    def effective_success(self) -> list[str]:
        explicit = self.success()
        if explicit is not None:
            return explicit
        weights = self.status_rewards()
        return [s for s in self.terminal() if weights.get(s, 0) > 0]

    def status_rewards(self) -> dict[str, float]:
        r = self.body.get("rewards", {})
        status = r.get("status", {}) if isinstance(r, dict) else {}
        return dict(status) if isinstance(status, dict) else {}

    def status_name_problem(self, name: str, old: str | None = None) -> str:
        """'' when ``name`` may name a (renamed) status, else one sentence."""
        if not name.strip():
            return "A status needs a name."
        if name != name.strip():
            return "A status name cannot start or end with spaces."
        if name == WILDCARD:
            return "'*' is reserved for 'every status'."
        if name != old and name in self.statuses():
            return f"There is already a status '{name}'."
        return ""

    def tool_name_problem(self, name: str, old: str | None = None) -> str:
        if not TOOL_PATTERN.match(name):
            return (
                f"'{name}' is not a valid tool name (letters, digits, '_' and '-', "
                "not starting with a digit)."
            )
        if name != old and name in self.tool_names():
            return f"There is already a tool '{name}'."
        return ""

    def unique_status_name(self, base: str = "New status") -> str:
        names = set(self.statuses())
        if base not in names:
            return base
        i = 2
        while f"{base} {i}" in names:
            i += 1
        return f"{base} {i}"

    def unique_tool_name(self, base: str = "new_tool") -> str:
        names = set(self.tool_names())
        if base not in names:
            return base
        i = 2
        while f"{base}_{i}" in names:
            i += 1
        return f"{base}_{i}"

    def _check(self, problem: str) -> None:
        if problem:
            raise DesignError(problem)

    def add_status(self, name: str, position: Position | None = None) -> None:
        self._check(self.status_name_problem(name))
        self.body.setdefault("statuses", []).append(name)
        if not self.body.get("start"):
            self.body["start"] = name
        if position is not None:
            self.positions[name] = (float(position[0]), float(position[1]))
        self.notify("status", name)

    def remove_status(self, name: str) -> None:
        """Remove a status and everything that names it (transitions,
        terminal/success entries, its reward); the start moves to the first
        remaining status."""
        if name not in self.statuses():
            raise DesignError(f"There is no status '{name}'.")
        body = self.body
        body["statuses"] = [s for s in body["statuses"] if s != name]
        body["transitions"] = [
            t
            for t in self.transitions()
            if t.get("from") != name and t.get("to") != name
        ]
        for key in ("terminal", "success"):
            if isinstance(body.get(key), list):
                body[key] = [s for s in body[key] if s != name]
        weights = body.get("rewards", {}).get("status")
        if isinstance(weights, dict):
            weights.pop(name, None)
        if body.get("start") == name:
            body["start"] = body["statuses"][0] if body["statuses"] else ""
        self.positions.pop(name, None)
        self.notify("reset")

    def rename_status(self, old: str, new: str) -> None:
        if old not in self.statuses():
            raise DesignError(f"There is no status '{old}'.")
        self._check(self.status_name_problem(new, old))
        if new == old:
            return
        body = self.body
        body["statuses"] = [new if s == old else s for s in body["statuses"]]
        for t in self.transitions():
            for key in ("from", "to"):
                if t.get(key) == old:
                    t[key] = new
        for key in ("terminal", "success"):
            if isinstance(body.get(key), list):
                body[key] = [new if s == old else s for s in body[key]]
        if body.get("start") == old:
            body["start"] = new
        weights = self.body.get("rewards", {}).get("status")
        if isinstance(weights, dict) and old in weights:
            self.body["rewards"]["status"] = {
                (new if k == old else k): v for k, v in weights.items()
            }
        if old in self.positions:
            self.positions[new] = self.positions.pop(old)
        self.notify("reset")

    def set_start(self, name: str) -> None:
        if name not in self.statuses():
            raise DesignError(f"There is no status '{name}'.")
        self.body["start"] = name
        self.notify("workflow", name)

    def set_terminal(self, name: str, terminal: bool) -> None:
        self._set_membership("terminal", name, terminal)

    def set_success(self, name: str, success: bool) -> None:
        """Mark a status as success; the first explicit choice turns the
        engine's default (terminal with a positive reward) into a list."""
        if "success" not in self.body:
            self.body["success"] = self.effective_success()
        self._set_membership("success", name, success)
        if success and name not in self.terminal():
            self._set_membership("terminal", name, True)

    def _set_membership(self, key: str, name: str, member: bool) -> None:
        if name not in self.statuses():
            raise DesignError(f"There is no status '{name}'.")
        items = [s for s in self.body.get(key, []) if s != name]
        if member:
            items.append(name)
        self.body[key] = items
        self.notify("workflow", name)

    def set_status_reward(self, name: str, value: float | None) -> None:
        if name not in self.statuses():
            raise DesignError(f"There is no status '{name}'.")
        rewards = self.body.setdefault("rewards", {})
        weights = rewards.setdefault("status", {})
        if value is None:
            weights.pop(name, None)
            if not weights:
                rewards.pop("status")
        else:
            weights[name] = float(value)
        self.notify("workflow", name)

    def add_tool(self, name: str, description: str = "") -> None:
        self._check(self.tool_name_problem(name))
        tool: dict[str, Any] = {"name": name}
        if description:
            tool["description"] = description
        self.body.setdefault("tools", []).append(tool)
        self.notify("tool", name)

    def remove_tool(self, name: str) -> None:
        if name not in self.tool_names():
            raise DesignError(f"There is no tool '{name}'.")
        self.body["tools"] = [t for t in self.tools() if t.get("name") != name]
        self.body["transitions"] = [
            t for t in self.transitions() if t.get("tool") != name
        ]
        self.notify("reset")

    def rename_tool(self, old: str, new: str) -> None:
        if old not in self.tool_names():
            raise DesignError(f"There is no tool '{old}'.")
        self._check(self.tool_name_problem(new, old))
        for t in self.tools():
            if t.get("name") == old:
                t["name"] = new
        for t in self.transitions():
            if t.get("tool") == old:
                t["tool"] = new
        self.notify("reset")

    def set_tool_description(self, name: str, description: str) -> None:
        for t in self.tools():
            if t.get("name") == name:
                if description:
                    t["description"] = description
                else:
                    t.pop("description", None)
                self.notify("tool", name)
                return
        raise DesignError(f"There is no tool '{name}'.")

    def add_transition(
        self,
        source: str,
        tool: str,
        target: str,
        probability: float | None = None,
        reward: float | None = None,
    ) -> int:
        """Append a transition; returns its index."""
        t: dict[str, Any] = {"from": source, "tool": tool, "to": target}
        if probability is not None:
            t["probability"] = float(probability)
        if reward is not None:
            t["reward"] = float(reward)
        transitions = self.body.setdefault("transitions", [])
        transitions.append(t)
        index = len(transitions) - 1
        self.notify("transition", str(index))
        return index

    def remove_transition(self, index: int) -> None:
        transitions = self.body.get("transitions", [])
        if not 0 <= index < len(transitions):
            raise DesignError(f"There is no transition {index}.")
        del transitions[index]
        self.notify("reset")

    def edit_transition(self, index: int, **fields: Any) -> None:
        """Set ``from``/``source``, ``tool``, ``to``/``target``, ``probability``,
        ``reward``; a None probability or reward removes it."""
        transitions = self.body.get("transitions", [])
        if not 0 <= index < len(transitions):
            raise DesignError(f"There is no transition {index}.")
        t = transitions[index]
        aliases = {"source": "from", "target": "to"}
        for key, value in fields.items():
            key = aliases.get(key, key)
            if key not in ("from", "tool", "to", "probability", "reward"):
                raise DesignError(f"A transition has no field {key!r}.")
            if value is None:
                if key in ("from", "tool", "to"):
                    raise DesignError(f"A transition needs a '{key}'.")
                t.pop(key, None)
            else:
                t[key] = float(value) if key in ("probability", "reward") else value
        self.notify("transition", str(index))

    def move_statuses(self, positions: dict[str, Position]) -> None:
        for name, (x, y) in positions.items():
            self.positions[name] = (float(x), float(y))
        self.notify("positions")

    # -------------------------------------------------------------- grid
    def grid_size(self) -> tuple[int, int]:
        size = self.body.get("size", [5, 5])
        try:
            return int(size[0]), int(size[1])
        except (TypeError, ValueError, IndexError):
            return 5, 5

    def grid_cells(self) -> dict[tuple[int, int], Cell]:
        """Every non-empty cell with its kind, reward and once mark (a spec
        without the mark pays each entry)."""
        body = self.body
        out: dict[tuple[int, int], list[Any]] = {}

        def put(cell: Any, kind: str) -> None:
            if _is_cell(cell):
                out.setdefault((cell[0], cell[1]), list(EMPTY_CELL))[0] = kind

        for key, kind in (("walls", "wall"), ("traps", "trap"), ("goals", "goal")):
            for cell in body.get(key, []):
                put(cell, kind)
        put(body.get("start"), "start")
        for item in body.get("cell_rewards", []):
            if isinstance(item, dict) and _is_cell(item.get("cell")):
                c = item["cell"]
                entry = out.setdefault((c[0], c[1]), list(EMPTY_CELL))
                entry[1] = item.get("reward")
                entry[2] = bool(item.get("once", False))
        return {k: (v[0], v[1], v[2]) for k, v in out.items()}

    def set_grid_cells(self, changes: list[tuple[int, int, Cell]]) -> None:
        """Apply ``(row, col, (kind, reward, once))`` changes. There is one
        start: painting one elsewhere moves it."""
        cells = self.grid_cells()
        for row, col, cell in changes:
            kind, reward, once = cell
            if kind not in CELL_KINDS:
                raise DesignError(f"Unknown cell kind {kind!r}.")
            if kind == "start":
                for key, (k, r, o) in list(cells.items()):
                    if k == "start":
                        cells[key] = ("empty", r, o)
            cells[(row, col)] = (kind, reward, bool(once))
        self._write_cells(cells)
        self.notify("grid")

    def _write_cells(self, cells: dict[tuple[int, int], Cell]) -> None:
        """Write ``cells`` into the spec; ``"once": true`` goes with a reward
        marked once, and nothing with one paid each entry."""
        body = self.body
        lists: dict[str, list[list[int]]] = {"wall": [], "goal": [], "trap": []}
        rewards: list[dict[str, Any]] = []
        start = None
        for (row, col), (kind, reward, once) in sorted(cells.items()):
            if kind in lists:
                lists[kind].append([row, col])
            elif kind == "start":
                start = [row, col]
            if reward is not None and kind != "wall":
                rewards.append({"cell": [row, col], "reward": float(reward)})
                if once:
                    rewards[-1]["once"] = True
        body["walls"] = lists["wall"]
        body["goals"] = lists["goal"]
        body["traps"] = lists["trap"]
        if rewards:
            body["cell_rewards"] = rewards
        else:
            body.pop("cell_rewards", None)
        if start is not None:
            body["start"] = start

    def resize_grid(self, rows: int, cols: int) -> None:
        """Change the size; cells outside are dropped (a start outside moves
        to the nearest corner cell inside)."""
        if not (1 <= rows <= 256 and 1 <= cols <= 256):
            raise DesignError("A grid has 1 to 256 rows and columns.")
        cells = {
            k: v for k, v in self.grid_cells().items() if k[0] < rows and k[1] < cols
        }
        if not any(cell[0] == "start" for cell in cells.values()):
            old = self.body.get("start", [0, 0])
            r = min(old[0], rows - 1) if _is_cell(old) else 0
            c = min(old[1], cols - 1) if _is_cell(old) else 0
            _, reward, once = cells.get((r, c), EMPTY_CELL)
            cells[(r, c)] = ("start", reward, once)
        self.body["size"] = [rows, cols]
        self._write_cells(cells)
        self.notify("grid")


__all__ = [
    "CELL_KINDS",
    "EMPTY_CELL",
    "KINDS",
    "PYTHON_TEMPLATE",
    "SPEC_SUFFIX",
    "Cell",
    "DesignError",
    "EnvDesign",
    "Target",
    "autosave_path",
    "layout_path",
    "new_spec",
    "problem_target",
    "read_spec_file",
    "spec_text",
]
