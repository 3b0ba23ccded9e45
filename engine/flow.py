"""Workflow graphs: the ``.flow.json`` document and the graph logic that the
editor (GUI) and the engine share.

Standard library only: the GUI imports this module. It holds the file format
(dataclasses, ``to_dict`` / ``from_dict``, format migrations, atomic save),
the description of node types as the engine publishes them
(:class:`NodeTypeSpec`, :class:`PortSpec`, :class:`ParamSpec`), and pure
functions over a document: :func:`can_link`, :func:`validate`,
:func:`topological_order`, :func:`stale_nodes`. Editing (undo, selection) is
the GUI's business; executing nodes is ``engine.nodes``'.

A document on disk (format 1)::

    {
      "format": 1,
      "kind": "flow",
      "name": "cartpole_ppo",
      "description": "Train PPO on CartPole, evaluate it, register it.",
      "nodes": [
        {"id": "env", "type": "env.environment", "title": "",
         "position": {"x": 0.0, "y": 0.0}, "params": {"env": "CartPole-v1"}}
      ],
      "links": [
        {"from": {"node": "env", "port": "env"},
         "to": {"node": "train", "port": "env"}}
      ]
    }

Keys this version does not know (top level or in a node) are kept in
``extra`` and written back, so a file from a newer minor version loses
nothing. A link may name a node or port that does not exist, and a node may
have a type this engine does not know: the document still loads, and
:func:`validate` reports the problem on the node concerned.
"""

from __future__ import annotations

import copy
import heapq
import json
import math
import os
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any, NamedTuple, Self

from engine import untrusted
from engine.contract import atomic_write_bytes

FORMAT_VERSION = 1
"""The format this module writes; older files are migrated on load."""

FLOW_SUFFIX = ".flow.json"

PORT_TYPES: tuple[str, ...] = (
    "env",
    "policy",
    "hf_model",
    "adapter",
    "dataset",
    "trajectories",
    "reward_fn",
    "gguf",
    "report",
)
"""Types a port can carry; an output feeds only inputs of the same type."""

PARAM_TYPES: tuple[str, ...] = ("int", "float", "str", "bool", "choice", "path")

NODE_STATES: tuple[str, ...] = (
    "queued",
    "running",
    "done",
    "cached",
    "failed",
    "skipped",
    "stopped",
)
"""States a node goes through in a run (``flow.node_state`` events):

* ``queued`` — waiting for its turn;
* ``running`` — executing, with ``progress`` in [0, 1];
* ``done`` — finished, outputs fresh;
* ``cached`` — skipped because its parameters and inputs are unchanged since
  its last success; its previous outputs are reused;
* ``failed`` — raised an error (``message`` says why);
* ``skipped`` — not run, because an upstream node failed or the run stopped;
* ``stopped`` — was running when the user stopped the run.
"""

DOCUMENT_KEY = ""
"""Key of :func:`validate`'s result for errors that belong to no node (a
link between two nodes that do not exist)."""

PATH_NAME = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_ .,()+=@-]{0,98}[A-Za-z0-9_)+=@-])?")
"""What a name or id that becomes part of a file path may be (node ids;
model, run, env, flow and data set names): one folder entry of at most 100
ASCII letters, digits, spaces and ``_ . , ( ) + = @ -``, starting with a
letter, digit or ``_`` and ending with neither a space nor a dot. So it can
never be absolute, ``..``, hidden, a temporary name, hold a separator or a
NUL, or look like another name (no Unicode lookalikes)."""

PATH_NAME_RULE = (
    "use at most 100 letters, digits, spaces and _ . , ( ) + = @ -, "
    "starting with a letter, digit or _"
)
""":data:`PATH_NAME` in words, for the sentences that refuse a name."""


def path_name_problem(what: str, value: object) -> str | None:
    """None when ``value`` may be used as one part of a path, else the one
    sentence saying why not; ``what`` names the field (``"The node id"``)."""
    if not isinstance(value, str):
        return f"{what} must be text, not {type(value).__name__}."
    if PATH_NAME.fullmatch(value):
        return None
    shown = value if len(value) <= 60 else value[:57] + "..."
    return f"{what} {shown!r} cannot be used in a file name; {PATH_NAME_RULE}."


def free_name(base: str, taken: Collection[str], sep: str) -> str:
    """``base`` when no name in ``taken`` is it, else the first of
    ``base{sep}2``, ``base{sep}3``, ... that is free."""
    if base not in taken:
        return base
    n = 2
    while f"{base}{sep}{n}" in taken:
        n += 1
    return f"{base}{sep}{n}"


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


class FlowError(ValueError):
    """Base of the errors of this module; the message is one sentence."""


class FlowFormatError(FlowError):
    """A file or dict that is not a readable flow document."""


class CycleError(FlowError):
    """The graph has a cycle; ``nodes`` are the ids on cycles."""

    def __init__(self, message: str, nodes: list[str]) -> None:
        super().__init__(message)
        self.nodes = nodes


# --------------------------------------------------------------------------
# Node type descriptions (published by the engine as the catalog)
# --------------------------------------------------------------------------


_AS_DECLARED: dict[str, Callable[[Any], Any]] = {
    "str": str,
    "bool": bool,
    "tuple[str, ...]": lambda items: tuple(str(c) for c in items or ()),
}
"""How :meth:`_FieldsAsJson.from_dict` reads a JSON value into a field
declared with this type (other types: as it is)."""


class _FieldsAsJson:
    """A frozen dataclass written as the JSON object of its fields, and read
    back from one (a catalog from the engine): each field the object holds,
    read as the field is declared (:data:`_AS_DECLARED`); the rest default."""

    def to_dict(self) -> dict[str, Any]:
        assert is_dataclass(self)
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        assert is_dataclass(cls)
        values = {
            f.name: _AS_DECLARED.get(str(f.type), lambda v: v)(data[f.name])
            for f in fields(cls)
            if f.name in data
        }
        return cls(**values)


@dataclass(frozen=True)
class PortSpec(_FieldsAsJson):
    """An input or output of a node type."""

    name: str
    type: str
    """One of :data:`PORT_TYPES`."""
    required: bool = True
    """Inputs only: the node cannot run unless this input is linked."""
    multiple: bool = False
    """Inputs only: accepts several links (the node gets a list)."""
    help: str = ""


@dataclass(frozen=True)
class ParamSpec(_FieldsAsJson):
    """A parameter of a node type, enough to build and check a form field."""

    name: str
    type: str
    """One of :data:`PARAM_TYPES`."""
    default: Any = None
    help: str = ""
    label: str = ""
    """Form label; empty: derived from ``name`` (``total_steps`` -> ``Total
    steps``)."""
    min: float | None = None
    """``int`` / ``float``: smallest allowed value (inclusive)."""
    max: float | None = None
    """``int`` / ``float``: largest allowed value (inclusive)."""
    choices: tuple[str, ...] = ()
    """``choice``: the allowed values."""
    exclusive_min: bool = False
    """``min`` itself is not allowed."""
    exclusive_max: bool = False
    """``max`` itself is not allowed."""
    optional: bool = False
    """``None`` (empty) is allowed: the job chooses the value."""
    group: str = ""
    """Form section the parameter is shown under."""
    picker: str = ""
    """``str``: what forms offer to pick from (``engine.settings.PICKER_KINDS``)."""
    offered: tuple[str, ...] = ()
    """``choice``: the choices this machine allows, which forms list (empty:
    all of ``choices``); a value of ``choices`` not offered still loads, and
    the node's job says why it cannot run here."""
    disabled: str = ""
    """Why the parameter cannot be used on this machine (one sentence);
    forms show it disabled with this reason. Empty: it can."""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.name.replace("_", " ").capitalize())

    def to_dict(self) -> dict[str, Any]:
        # JSON has no tuples: the lists a decoded description holds.
        out = super().to_dict()
        out["choices"], out["offered"] = list(self.choices), list(self.offered)
        return out


@dataclass(frozen=True)
class NodeTypeSpec:
    """What the editor knows of a node type: ports, parameters, looks."""

    type: str
    """Stable type name written in documents (``rl.train``)."""
    title: str
    """Name shown on the node and in the palette (``Train (SB3)``)."""
    category: str
    """Palette group (``Reinforcement learning``)."""
    description: str = ""
    inputs: tuple[PortSpec, ...] = ()
    outputs: tuple[PortSpec, ...] = ()
    params: tuple[ParamSpec, ...] = ()
    version: int = 1
    """Implementation version; a new one invalidates cached outputs."""

    def input(self, name: str) -> PortSpec | None:
        return next((p for p in self.inputs if p.name == name), None)

    def output(self, name: str) -> PortSpec | None:
        return next((p for p in self.outputs if p.name == name), None)

    def param(self, name: str) -> ParamSpec | None:
        return next((p for p in self.params if p.name == name), None)

    def defaults(self) -> dict[str, Any]:
        """Every parameter's default value (a fresh copy)."""
        return {p.name: json_copy(p.default) for p in self.params}

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "title": self.title,
            "category": self.category,
            "description": self.description,
            "version": self.version,
            "inputs": [p.to_dict() for p in self.inputs],
            "outputs": [p.to_dict() for p in self.outputs],
            "params": [p.to_dict() for p in self.params],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NodeTypeSpec:
        return cls(
            type=str(data["type"]),
            title=str(data.get("title") or data["type"]),
            category=str(data.get("category", "")),
            description=str(data.get("description", "")),
            inputs=tuple(PortSpec.from_dict(p) for p in data.get("inputs", ())),
            outputs=tuple(PortSpec.from_dict(p) for p in data.get("outputs", ())),
            params=tuple(ParamSpec.from_dict(p) for p in data.get("params", ())),
            version=int(data.get("version", 1)),
        )


Catalog = Mapping[str, NodeTypeSpec]
"""Node types by type name."""

CatalogLike = Catalog | Iterable[NodeTypeSpec | Mapping[str, Any]]
"""What the functions below accept as a catalog: a mapping of type name to
spec, or the ``flow.catalog`` reply's list of dicts (or of specs)."""


def catalog_from_dicts(items: Iterable[Mapping[str, Any]]) -> dict[str, NodeTypeSpec]:
    """The ``node_types`` list of a ``flow.catalog`` reply as a :data:`Catalog`."""
    specs = (NodeTypeSpec.from_dict(item) for item in items)
    return {s.type: s for s in specs}


def as_catalog(catalog: CatalogLike) -> Catalog:
    """Normalize any :data:`CatalogLike` to a mapping of type name to spec."""
    if isinstance(catalog, Mapping):
        if all(isinstance(v, NodeTypeSpec) for v in catalog.values()):
            return catalog
        return {
            k: v if isinstance(v, NodeTypeSpec) else NodeTypeSpec.from_dict(v)
            for k, v in catalog.items()
        }
    out: dict[str, NodeTypeSpec] = {}
    for item in catalog:
        spec = item if isinstance(item, NodeTypeSpec) else NodeTypeSpec.from_dict(item)
        out[spec.type] = spec
    return out


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON value (dicts, lists, scalars); much faster than
    ``copy.deepcopy`` for the small parameter dicts of many nodes."""
    if isinstance(value, dict):
        return {k: json_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_copy(v) for v in value]
    return value


# --------------------------------------------------------------------------
# Parameter checks
# --------------------------------------------------------------------------


def _number_text(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def check_param(spec: ParamSpec, value: Any) -> str | None:
    """One sentence saying why ``value`` does not fit ``spec``, or None.

    The inspector calls this as the user types; :func:`validate` calls it
    for every parameter of every node.
    """
    name = spec.name
    if value is None and spec.optional:
        return None
    if spec.type == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            return f"{name} must be a whole number, not {value!r}."
    elif spec.type == "float":
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{name} must be a number, not {value!r}."
        if not math.isfinite(value):
            return f"{name} must be a finite number, not {value!r}."
    elif spec.type in ("str", "path"):
        if not isinstance(value, str):
            kind = "a path" if spec.type == "path" else "text"
            return f"{name} must be {kind}, not {value!r}."
        return None
    elif spec.type == "bool":
        if not isinstance(value, bool):
            return f"{name} must be true or false, not {value!r}."
        return None
    elif spec.type == "choice":
        if value not in spec.choices:
            return f"{name} must be one of {', '.join(spec.choices)}, not {value!r}."
        return None
    else:
        return f"{name} has an unknown parameter type {spec.type!r}."
    return bounds_problem(
        name, value, spec.min, spec.max, spec.exclusive_min, spec.exclusive_max
    )


def bounds_problem(
    name: str,
    value: float,
    lo: float | None,
    hi: float | None,
    exclusive_min: bool = False,
    exclusive_max: bool = False,
) -> str | None:
    """The sentence saying how ``value`` breaks ``[lo, hi]`` (an end left
    out when exclusive), or None."""
    if lo is not None and exclusive_min and not value > lo:
        return f"{name} must be greater than {_number_text(lo)}, not {value!r}."
    if lo is not None and value < lo:
        return f"{name} must be at least {_number_text(lo)}, not {value!r}."
    if hi is not None and exclusive_max and not value < hi:
        return f"{name} must be less than {_number_text(hi)}, not {value!r}."
    if hi is not None and value > hi:
        return f"{name} must be at most {_number_text(hi)}, not {value!r}."
    return None


def resolved_params(params: Mapping[str, Any], spec: NodeTypeSpec) -> dict[str, Any]:
    """The node's parameters with every missing one set to its default."""
    out = spec.defaults()
    out.update(json_copy(dict(params)))
    return out


def param_errors(params: Mapping[str, Any], spec: NodeTypeSpec) -> list[str]:
    """Unknown parameters and values that do not fit their schema."""
    errors = []
    known = {p.name for p in spec.params}
    for name in params:
        if name not in known:
            errors.append(f"Unknown parameter {name!r} for {spec.title}.")
    for p in spec.params:
        if p.name in params:
            problem = check_param(p, params[p.name])
            if problem:
                errors.append(problem)
    return errors


# --------------------------------------------------------------------------
# The document
# --------------------------------------------------------------------------


class PortRef(NamedTuple):
    """One port of one node; a plain ``(node_id, port)`` tuple works too."""

    node: str
    port: str


@dataclass
class Node:
    """A node of the graph. ``params`` holds only what the file says;
    :func:`resolved_params` adds the defaults."""

    id: str
    type: str
    params: dict[str, Any] = field(default_factory=dict)
    x: float = 0.0
    """Position of the node's top-left corner in scene units."""
    y: float = 0.0
    title: str = ""
    """User's name for the node; empty: the node type's title."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of the node's JSON this version does not know, kept as they were."""

    def __post_init__(self) -> None:
        self.x = float(self.x)
        self.y = float(self.y)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "type": self.type}
        if self.title:
            out["title"] = self.title
        out["position"] = {"x": self.x, "y": self.y}
        out["params"] = json_copy(self.params)
        for key, value in self.extra.items():
            out.setdefault(key, json_copy(value))
        return out


@dataclass(frozen=True)
class Link:
    """A link from an output port to an input port."""

    from_node: str
    from_port: str
    to_node: str
    to_port: str

    @property
    def source(self) -> PortRef:
        return PortRef(self.from_node, self.from_port)

    @property
    def target(self) -> PortRef:
        return PortRef(self.to_node, self.to_port)

    def to_dict(self) -> dict[str, Any]:
        return {
            "from": {"node": self.from_node, "port": self.from_port},
            "to": {"node": self.to_node, "port": self.to_port},
        }


_ID_CLEAN = re.compile(r"[^a-z0-9_]+")


@dataclass
class FlowDocument:
    """A workflow graph: nodes and the links between their ports."""

    nodes: list[Node] = field(default_factory=list)
    links: list[Link] = field(default_factory=list)
    name: str = ""
    description: str = ""
    format: int = FORMAT_VERSION
    """The format the document was read from (written as FORMAT_VERSION)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Top-level keys this version does not know, kept as they were."""

    # ------------------------------------------------------------ lookup
    def node(self, node_id: str) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def node_ids(self) -> list[str]:
        return [n.id for n in self.nodes]

    def links_into(self, node_id: str, port: str | None = None) -> list[Link]:
        return [
            lk
            for lk in self.links
            if lk.to_node == node_id and (port is None or lk.to_port == port)
        ]

    def links_from(self, node_id: str, port: str | None = None) -> list[Link]:
        return [
            lk
            for lk in self.links
            if lk.from_node == node_id and (port is None or lk.from_port == port)
        ]

    def new_node_id(self, node_type: str) -> str:
        """A fresh id derived from the type (``rl.train`` -> ``train``,
        ``train_2``, ...)."""
        base = _ID_CLEAN.sub("_", node_type.rsplit(".", 1)[-1].lower()).strip("_")
        base = base or "node"
        return free_name(base, set(self.node_ids()), "_")

    # -------------------------------------------------------------- JSON
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "format": FORMAT_VERSION,
            "kind": "flow",
            "name": self.name,
            "description": self.description,
            "nodes": [n.to_dict() for n in self.nodes],
            "links": [lk.to_dict() for lk in self.links],
        }
        for key, value in self.extra.items():
            out.setdefault(key, json_copy(value))
        return out

    @classmethod
    def from_dict(cls, data: Any) -> FlowDocument:
        """Build a document from parsed JSON, migrating older formats.

        Raises :class:`FlowFormatError` (one sentence) when ``data`` is not a
        flow document or comes from a newer format.
        """
        try:
            untrusted.check(data, "The flow")
        except untrusted.UntrustedDataError as exc:
            raise FlowFormatError(str(exc)) from None
        data, original = migrate(data)
        nodes_raw = data.get("nodes", [])
        links_raw = data.get("links", [])
        if not isinstance(nodes_raw, list):
            raise FlowFormatError("The flow's 'nodes' must be a list.")
        if not isinstance(links_raw, list):
            raise FlowFormatError("The flow's 'links' must be a list.")
        nodes = [_node_from_dict(i, raw) for i, raw in enumerate(nodes_raw)]
        seen: set[str] = set()
        for n in nodes:
            if n.id in seen:
                raise FlowFormatError(f"Two nodes of the flow have the id {n.id!r}.")
            seen.add(n.id)
        links: list[Link] = []
        seen_links: set[Link] = set()
        for i, raw in enumerate(links_raw):
            link = _link_from_dict(i, raw)
            if link not in seen_links:  # an exact duplicate carries nothing
                seen_links.add(link)
                links.append(link)
        name = data.get("name", "")
        description = data.get("description", "")
        known = {"format", "kind", "name", "description", "nodes", "links"}
        return cls(
            nodes=nodes,
            links=links,
            name=name if isinstance(name, str) else str(name),
            description=description if isinstance(description, str) else "",
            format=original,
            extra={k: json_copy(v) for k, v in data.items() if k not in known},
        )

    def copy(self) -> FlowDocument:
        return copy.deepcopy(self)


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FlowFormatError(f"{what} must be a number, not {value!r}.")
    if not math.isfinite(value):
        raise FlowFormatError(f"{what} must be a finite number.")
    return float(value)


def _node_from_dict(index: int, raw: Any) -> Node:
    where = f"Node {index + 1} of the flow"
    if not isinstance(raw, dict):
        raise FlowFormatError(f"{where} is not a JSON object.")
    node_id = raw.get("id")
    if not isinstance(node_id, str) or not node_id.strip():
        raise FlowFormatError(f"{where} has no 'id'.")
    problem = path_name_problem(f"The id of node {index + 1}", node_id)
    if problem:
        raise FlowFormatError(problem)
    where = f"Node {node_id!r}"
    node_type = raw.get("type")
    if not isinstance(node_type, str) or not node_type.strip():
        raise FlowFormatError(f"{where} has no 'type'.")
    params = raw.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise FlowFormatError(f"The 'params' of node {node_id!r} must be an object.")
    pos = raw.get("position", {})
    if not isinstance(pos, dict):
        raise FlowFormatError(f"The 'position' of node {node_id!r} must be an object.")
    title = raw.get("title", "")
    known = {"id", "type", "title", "position", "params"}
    return Node(
        id=node_id,
        type=node_type,
        params=json_copy(params),
        x=_number(pos.get("x", 0.0), f"The x position of node {node_id!r}"),
        y=_number(pos.get("y", 0.0), f"The y position of node {node_id!r}"),
        title=title if isinstance(title, str) else str(title),
        extra={k: json_copy(v) for k, v in raw.items() if k not in known},
    )


def _link_end(index: int, raw: Any, key: str) -> tuple[str, str]:
    end = raw.get(key)
    node = end.get("node") if isinstance(end, dict) else None
    port = end.get("port") if isinstance(end, dict) else None
    if not isinstance(node, str) or not isinstance(port, str) or not node or not port:
        raise FlowFormatError(
            f"Link {index + 1} of the flow needs '{key}' with a 'node' and a 'port'."
        )
    return node, port


def _link_from_dict(index: int, raw: Any) -> Link:
    if not isinstance(raw, dict):
        raise FlowFormatError(f"Link {index + 1} of the flow is not a JSON object.")
    from_node, from_port = _link_end(index, raw, "from")
    to_node, to_port = _link_end(index, raw, "to")
    return Link(from_node, from_port, to_node, to_port)


def new_node(spec: NodeTypeSpec, node_id: str, x: float = 0.0, y: float = 0.0) -> Node:
    """A node of type ``spec`` with every parameter at its default."""
    return Node(id=node_id, type=spec.type, params=spec.defaults(), x=x, y=y)


# --------------------------------------------------------------------------
# Format versions
# --------------------------------------------------------------------------


def _migrate_0_to_1(data: dict[str, Any]) -> dict[str, Any]:
    """Format 0 (the pre-release draft): ``"version": 0``, nodes with
    ``"pos": [x, y]`` and ``"label"``, and ``"edges"`` as
    ``[from_node, from_port, to_node, to_port]`` lists."""
    out = {k: v for k, v in data.items() if k not in ("version", "edges")}
    nodes = []
    for raw in data.get("nodes", []) or []:
        if not isinstance(raw, dict):
            nodes.append(raw)
            continue
        node = {k: v for k, v in raw.items() if k not in ("pos", "label")}
        pos = raw.get("pos")
        if isinstance(pos, list | tuple) and len(pos) == 2:
            node["position"] = {"x": pos[0], "y": pos[1]}
        if "label" in raw and "title" not in raw:
            node["title"] = raw["label"]
        nodes.append(node)
    out["nodes"] = nodes
    links = []
    for edge in data.get("edges", []) or []:
        if isinstance(edge, list | tuple) and len(edge) == 4:
            a, ap, b, bp = edge
            links.append(
                {"from": {"node": a, "port": ap}, "to": {"node": b, "port": bp}}
            )
        else:
            links.append(edge)  # from_dict reports it
    out["links"] = links
    out["format"] = 1
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {
    0: _migrate_0_to_1,
}
"""``MIGRATIONS[n]`` turns a format-``n`` document into format ``n + 1``."""


def document_format(data: Mapping[str, Any]) -> int:
    """The format number of a parsed document (0 when it has none)."""
    value = data.get("format", data.get("version", 0))
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FlowFormatError(f"The flow's format {value!r} is not a version number.")
    return value


def migrate(data: Any) -> tuple[dict[str, Any], int]:
    """``(data in FORMAT_VERSION, the format it was in)``."""
    if not isinstance(data, dict):
        raise FlowFormatError("A flow document must be a JSON object.")
    kind = data.get("kind", "flow")
    if kind != "flow":
        raise FlowFormatError(f"The document is a {kind!r}, not a flow.")
    original = version = document_format(data)
    if version > FORMAT_VERSION:
        raise FlowFormatError(
            f"The flow is in format {version}, written by a newer RL Studio; "
            f"this one reads formats up to {FORMAT_VERSION}."
        )
    out = data  # migrations build new dicts; from_dict copies what it keeps
    while version < FORMAT_VERSION:
        out = MIGRATIONS[version](out)
        version += 1
    return _migrate_node_params(out), original


def _migrate_rl_train_params(params: dict[str, Any]) -> dict[str, Any]:
    """Train (SB3) before typed hyperparameters: a ``hyperparameters`` JSON
    text becomes one parameter per hyperparameter (a list of widths as
    ``"64, 64"``), and ``n_envs`` 0 ("choose") becomes empty."""
    out = dict(params)
    text = out.get("hyperparameters")
    if isinstance(text, str):
        try:
            hyper = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            hyper = None  # left as it was: the node says it is unknown
        if isinstance(hyper, dict):
            del out["hyperparameters"]
            for key, value in hyper.items():
                if isinstance(value, list):
                    value = ", ".join(str(v) for v in value)
                out.setdefault(str(key), value)
    if out.get("n_envs") == 0:
        out["n_envs"] = None
    return out


def _migrate_llm_train_params(params: dict[str, Any]) -> dict[str, Any]:
    """Fine-tune (TRL) before optional parameters: 0 ("from the hardware")
    becomes empty."""
    out = dict(params)
    for key in ("lora_rank", "batch_size", "num_generations"):
        if out.get(key) == 0:
            out[key] = None
    return out


def _migrate_llm_play_params(params: dict[str, Any]) -> dict[str, Any]:
    """Collect rollouts and Evaluate before optional parameters: max_steps 0
    ("the env's own limit") becomes empty."""
    out = dict(params)
    if out.get("max_steps") == 0:
        out["max_steps"] = None
    return out


_NODE_PARAM_MIGRATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "rl.train": _migrate_rl_train_params,
    "llm.train": _migrate_llm_train_params,
    "llm.collect": _migrate_llm_play_params,
    "llm.evaluate": _migrate_llm_play_params,
}
"""Parameter changes of a node type within one format (idempotent: applied
on every load)."""


def _migrate_node_params(data: dict[str, Any]) -> dict[str, Any]:
    nodes = data.get("nodes")
    if not isinstance(nodes, list):
        return data
    changed = []
    for raw in nodes:
        migrate_params = (
            _NODE_PARAM_MIGRATIONS.get(str(raw.get("type")))
            if isinstance(raw, dict)
            else None
        )
        if migrate_params is not None and isinstance(raw.get("params"), dict):
            raw = {**raw, "params": migrate_params(raw["params"])}
        changed.append(raw)
    return {**data, "nodes": changed}


# --------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------


def dumps(doc: FlowDocument) -> str:
    """The document as the text of a ``.flow.json`` file; FlowFormatError
    (naming the field) for a value :func:`load` would refuse, so that every
    file written can be opened again."""
    data = doc.to_dict()
    try:
        untrusted.check(data, "The flow")
    except untrusted.UntrustedDataError as exc:
        raise FlowFormatError(str(exc)) from None
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def loads(text: str | bytes, source: str = "The flow") -> FlowDocument:
    """Parse the text of a ``.flow.json`` file; :class:`FlowFormatError` if it
    is not one (``source`` names it in the message)."""
    try:
        data = untrusted.loads(text, source)
    except untrusted.UntrustedDataError as exc:
        raise FlowFormatError(str(exc)) from None
    return FlowDocument.from_dict(data)


def load(path: str | os.PathLike[str]) -> FlowDocument:
    """Read a ``.flow.json`` file; :class:`FlowFormatError` (one sentence) if
    it is missing, unreadable or not a flow."""
    p = Path(path)
    try:
        raw = untrusted.read_file(p, f"The flow file {p}")
    except untrusted.UntrustedDataError as exc:
        raise FlowFormatError(str(exc)) from None
    return loads(raw, source=f"The flow file {p.name}")


def save(doc: FlowDocument, path: str | os.PathLike[str]) -> None:
    """Write atomically (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, dumps(doc).encode("utf-8"))


def flow_name(doc: FlowDocument, path: str | os.PathLike[str] | None = None) -> str:
    """The flow's name: its ``name``, else the file name without the suffix."""
    if doc.name.strip():
        return doc.name.strip()
    if path is not None:
        name = Path(path).name
        return (
            name[: -len(FLOW_SUFFIX)] if name.endswith(FLOW_SUFFIX) else Path(name).stem
        )
    return "flow"


# --------------------------------------------------------------------------
# Graph logic
# --------------------------------------------------------------------------


def _edges(doc: FlowDocument) -> dict[str, list[str]]:
    """Successors of each node (links touching missing nodes are ignored)."""
    ids = set(doc.node_ids())
    succ: dict[str, list[str]] = {i: [] for i in doc.node_ids()}
    for lk in doc.links:
        if (
            lk.from_node in ids
            and lk.to_node in ids
            and lk.to_node not in succ[lk.from_node]
        ):
            succ[lk.from_node].append(lk.to_node)
    return succ


def _predecessors(doc: FlowDocument) -> dict[str, list[str]]:
    pred: dict[str, list[str]] = {i: [] for i in doc.node_ids()}
    for a, succ in _edges(doc).items():
        for b in succ:
            pred[b].append(a)
    return pred


def _reach(start: Iterable[str], graph: Mapping[str, list[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(start)
    while stack:
        n = stack.pop()
        for m in graph.get(n, ()):
            if m not in seen:
                seen.add(m)
                stack.append(m)
    return seen


def downstream(doc: FlowDocument, node_id: str) -> set[str]:
    """Every node reachable from ``node_id`` along links (itself excluded,
    unless it is on a cycle)."""
    return _reach([node_id], _edges(doc))


def upstream(doc: FlowDocument, node_id: str) -> set[str]:
    """Every node from which ``node_id`` is reachable (itself excluded,
    unless it is on a cycle)."""
    return _reach([node_id], _predecessors(doc))


def cycles(doc: FlowDocument) -> list[list[str]]:
    """One cycle (as a node path, first node repeated at the end) for each
    group of nodes that feed each other; ``[]`` for an acyclic graph."""
    succ = _edges(doc)
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    counter = 0
    for root in doc.node_ids():
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack.add(v)
            recurse = False
            for j in range(i, len(succ[v])):
                w = succ[v][j]
                if w not in index:
                    work.append((v, j + 1))
                    work.append((w, 0))
                    recurse = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if recurse:
                continue
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in succ[v]:
                    comps.append(comp)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    order = {n: i for i, n in enumerate(doc.node_ids())}
    out = []
    for comp in comps:
        members = set(comp)
        start = min(comp, key=order.__getitem__)
        out.append(_cycle_path(start, members, succ))
    out.sort(key=lambda c: order[c[0]])
    return out


def _cycle_path(
    start: str, members: set[str], succ: Mapping[str, list[str]]
) -> list[str]:
    """A shortest path start -> ... -> start inside one component (BFS)."""
    prev: dict[str, str] = {}
    queue = [start]
    seen = {start}
    while queue:
        nxt = []
        for n in queue:
            for m in succ[n]:
                if m not in members:
                    continue
                if m == start:
                    path = [n]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if m not in seen:
                    seen.add(m)
                    prev[m] = n
                    nxt.append(m)
        queue = nxt
    return [start, start]  # pragma: no cover - a component always has a cycle


def topological_order(doc: FlowDocument) -> list[str]:
    """Node ids so that every node comes after the nodes feeding it; ties
    keep document order. :class:`CycleError` if the graph has a cycle."""
    succ = _edges(doc)
    indeg = dict.fromkeys(succ, 0)
    for targets in succ.values():
        for b in targets:
            indeg[b] += 1
    order = {n: i for i, n in enumerate(doc.node_ids())}
    ready = [(order[n], n) for n, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    out: list[str] = []
    while ready:
        _, n = heapq.heappop(ready)
        out.append(n)
        for m in succ[n]:
            indeg[m] -= 1
            if indeg[m] == 0:
                heapq.heappush(ready, (order[m], m))
    if len(out) != len(succ):
        found = cycles(doc)
        on_cycles = sorted({n for c in found for n in c}, key=order.__getitem__)
        path = " -> ".join(found[0]) if found else ""
        raise CycleError(f"The flow has a cycle ({path}).", on_cycles)
    return out


def stale_nodes(doc: FlowDocument, changed_node_id: str) -> list[str]:
    """The nodes whose results an edit of ``changed_node_id`` invalidates:
    the node itself and everything downstream, in topological order (document
    order when the graph has a cycle)."""
    if doc.node(changed_node_id) is None:
        return []
    affected = downstream(doc, changed_node_id) | {changed_node_id}
    try:
        order = topological_order(doc)
    except CycleError:
        order = doc.node_ids()
    return [n for n in order if n in affected]


def display_name(node: Node, catalog: Catalog | None = None) -> str:
    """How messages name a node: its title, else its type's title, else its id."""
    if node.title:
        return node.title
    if catalog is not None and node.type in catalog:
        return catalog[node.type].title
    return node.id


def can_link(
    doc: FlowDocument,
    catalog: CatalogLike,
    source: PortRef | tuple[str, str],
    target: PortRef | tuple[str, str],
    *,
    replace: bool = False,
) -> tuple[bool, str]:
    """Whether a link from output ``source`` to input ``target`` may be added.

    Returns ``(True, "")`` or ``(False, reason)`` with one sentence for a
    tooltip. With ``replace``, an input that is already linked counts as free
    (the caller removes the old link when it adds the new one).
    """
    cat = as_catalog(catalog)
    src = PortRef(*source)
    dst = PortRef(*target)
    a, b = doc.node(src.node), doc.node(dst.node)
    if a is None:
        return False, f"There is no node {src.node!r}."
    if b is None:
        return False, f"There is no node {dst.node!r}."
    a_name, b_name = display_name(a, cat), display_name(b, cat)
    if a.id == b.id:
        return False, "A node cannot feed itself."
    a_spec, b_spec = cat.get(a.type), cat.get(b.type)
    if a_spec is None:
        return False, f"{a_name!r} has an unknown type {a.type!r}."
    if b_spec is None:
        return False, f"{b_name!r} has an unknown type {b.type!r}."
    out_port = a_spec.output(src.port)
    if out_port is None:
        return False, f"{a_name!r} has no output named {src.port!r}."
    in_port = b_spec.input(dst.port)
    if in_port is None:
        return False, f"{b_name!r} has no input named {dst.port!r}."
    if out_port.type != in_port.type:
        return False, (
            f"A {out_port.type} output cannot feed the {in_port.type} input "
            f"{dst.port!r} of {b_name!r}."
        )
    existing = doc.links_into(b.id, dst.port)
    if any(lk.source == src for lk in existing):
        return False, "These two ports are already linked."
    if existing and not in_port.multiple and not replace:
        return False, (
            f"The input {dst.port!r} of {b_name!r} is already linked; "
            "remove that link first."
        )
    # A cycle closes when the target already feeds the source.
    if a.id in downstream(doc, b.id):
        return False, (
            f"The link would close a cycle: {b_name!r} already feeds {a_name!r}."
        )
    return True, ""


def validate(doc: FlowDocument, catalog: CatalogLike) -> dict[str, list[str]]:
    """Every problem of the graph, by node id (nodes without problems are
    absent; :data:`DOCUMENT_KEY` holds problems that belong to no node).

    Checks: unknown node types, parameter errors (unknown name, wrong type,
    out of range, unknown choice), links naming missing nodes or ports, type
    mismatches, several links into a single input, required inputs that are
    not linked, and cycles.
    """
    cat = as_catalog(catalog)
    errors: dict[str, list[str]] = {}

    def add(key: str, message: str) -> None:
        bucket = errors.setdefault(key, [])
        if message not in bucket:
            bucket.append(message)

    nodes = {n.id: n for n in doc.nodes}
    for n in doc.nodes:
        spec = cat.get(n.type)
        if spec is None:
            add(n.id, f"Unknown node type {n.type!r}; this engine cannot run it.")
            continue
        for problem in param_errors(n.params, spec):
            add(n.id, problem)

    for lk in doc.links:
        a, b = nodes.get(lk.from_node), nodes.get(lk.to_node)
        if a is None and b is None:
            add(
                DOCUMENT_KEY,
                f"A link joins two nodes that do not exist ({lk.from_node!r} "
                f"and {lk.to_node!r}).",
            )
            continue
        if a is None:
            add(
                lk.to_node,
                f"Input {lk.to_port!r} is linked from a missing node {lk.from_node!r}.",
            )
            continue
        if b is None:
            add(
                lk.from_node,
                f"Output {lk.from_port!r} is linked to a missing node {lk.to_node!r}.",
            )
            continue
        a_spec, b_spec = cat.get(a.type), cat.get(b.type)
        out_port = a_spec.output(lk.from_port) if a_spec else None
        in_port = b_spec.input(lk.to_port) if b_spec else None
        if a_spec is not None and out_port is None:
            add(
                a.id,
                f"There is no output named {lk.from_port!r}, but a link starts there.",
            )
        if b_spec is not None and in_port is None:
            add(b.id, f"There is no input named {lk.to_port!r}, but a link ends there.")
        if (
            out_port is not None
            and in_port is not None
            and out_port.type != in_port.type
        ):
            add(
                b.id,
                f"Input {lk.to_port!r} takes {in_port.type}, but it is linked to the "
                f"{out_port.type} output {lk.from_port!r} of "
                f"{display_name(a, cat)!r}.",
            )

    incoming: dict[tuple[str, str], list[Link]] = {}
    for lk in doc.links:
        if lk.from_node in nodes:
            incoming.setdefault((lk.to_node, lk.to_port), []).append(lk)
    for n in doc.nodes:
        spec = cat.get(n.type)
        if spec is None:
            continue
        for port in spec.inputs:
            linked = incoming.get((n.id, port.name), [])
            if port.required and not linked:
                add(
                    n.id,
                    f"The required input {port.name!r} ({port.type}) is not linked.",
                )
            if len(linked) > 1 and not port.multiple:
                add(n.id, f"Input {port.name!r} has {len(linked)} links; it takes one.")

    for cycle in cycles(doc):
        path = " -> ".join(cycle)
        for node_id in cycle[:-1]:
            add(node_id, f"This node is part of a cycle ({path}).")
    return errors


def inputs_of(doc: FlowDocument, node_id: str) -> dict[str, list[PortRef]]:
    """For each linked input port of ``node_id``: the outputs feeding it."""
    out: dict[str, list[PortRef]] = {}
    for lk in doc.links_into(node_id):
        out.setdefault(lk.to_port, []).append(lk.source)
    return out
