"""The node registry: each node type's implementation, ports and parameters
declared once, with :func:`node_type`; the catalog is generated from it.

Node types live in modules that this registry discovers by name, so adding a
capability's nodes means writing one module:

* ``engine/nodes/<anything>_nodes.py``, or
* ``engine/<capability>/flow_nodes.py`` (next to the capability's code).

Those modules import heavy libraries (torch, SB3, TRL) inside the node
functions only: building the catalog imports every node module and must stay
cheap (the engine answers ``flow.catalog`` without importing torch).
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.flow import (
    PARAM_TYPES,
    PORT_TYPES,
    NodeTypeSpec,
    ParamSpec,
    PortSpec,
    check_param,
)
from engine.settings import first_paragraph

if TYPE_CHECKING:
    from engine.nodes.base import NodeResult, NodeRun

log = logging.getLogger("engine.nodes")

NodeFunction = Callable[["NodeRun"], "NodeResult | dict[str, Any]"]
ParamCheck = Callable[[dict[str, Any]], list[str]]
Sources = Callable[[dict[str, Any], dict[str, Any], Path], dict[str, dict[str, Any]]]
"""``sources(params, inputs, project_dir)``: a cheap fingerprint of each
store outside the graph that a node reads (labels, trace files), by name;
``rows`` in a fingerprint counts what it holds."""


@dataclass(frozen=True)
class NodeType:
    """A registered node type: what the editor sees, and how to run it."""

    spec: NodeTypeSpec
    run: NodeFunction
    """``run(node: NodeRun) -> NodeResult`` (or a dict of outputs by port)."""
    cacheable: bool = True
    """Reuse the last outputs when parameters and inputs are unchanged.
    False for cheap nodes whose result depends on files outside the graph
    (an environment spec), which then run every time."""
    check: ParamCheck | None = None
    """Quick extra checks of resolved parameters (no heavy imports): one
    sentence per problem; part of graph validation."""
    sources: Sources | None = None
    """What the node reads from outside the graph; part of its cache key, so
    that new labels or rewritten traces make it run again."""
    module: str = ""

    @property
    def type(self) -> str:
        return self.spec.type


_TYPES: dict[str, NodeType] = {}
_loaded = False
_load_lock = threading.Lock()


def node_type(
    type_name: str,
    *,
    title: str,
    category: str,
    inputs: Sequence[PortSpec] = (),
    outputs: Sequence[PortSpec] = (),
    params: Sequence[ParamSpec] = (),
    description: str = "",
    version: int = 1,
    cacheable: bool = True,
    check: ParamCheck | None = None,
    sources: Sources | None = None,
) -> Callable[[NodeFunction], NodeFunction]:
    """Register the decorated function as node type ``type_name``.

    ``description`` defaults to the function's docstring's first paragraph.
    Raises ``ValueError`` on a malformed declaration (unknown port or
    parameter type, a default that fails its own schema, a name used twice).
    """

    def wrap(fn: NodeFunction) -> NodeFunction:
        spec = NodeTypeSpec(
            type=type_name,
            title=title,
            category=category,
            description=description or first_paragraph(fn.__doc__),
            inputs=tuple(inputs),
            outputs=tuple(outputs),
            params=tuple(params),
            version=version,
        )
        _check_declaration(spec)
        if type_name in _TYPES and _TYPES[type_name].module != fn.__module__:
            raise ValueError(f"node type {type_name!r} is registered twice")
        _TYPES[type_name] = NodeType(
            spec=spec,
            run=fn,
            cacheable=cacheable,
            check=check,
            sources=sources,
            module=fn.__module__,
        )
        return fn

    return wrap


def _check_declaration(spec: NodeTypeSpec) -> None:
    where = f"node type {spec.type!r}"
    for group in (spec.inputs, spec.outputs, spec.params):
        names = [p.name for p in group]
        if len(names) != len(set(names)):
            raise ValueError(f"{where} declares a port or parameter name twice")
    for port in (*spec.inputs, *spec.outputs):
        if port.type not in PORT_TYPES:
            raise ValueError(
                f"{where}: port {port.name!r} has unknown type {port.type!r}"
            )
    for p in spec.params:
        if p.type not in PARAM_TYPES:
            raise ValueError(
                f"{where}: parameter {p.name!r} has unknown type {p.type!r}"
            )
        if p.type == "choice" and not p.choices:
            raise ValueError(f"{where}: choice parameter {p.name!r} has no choices")
        if not p.help:
            raise ValueError(f"{where}: parameter {p.name!r} has no help text")
        problem = check_param(p, p.default)
        if problem:
            raise ValueError(
                f"{where}: the default of {p.name!r} is invalid: {problem}"
            )


def _node_modules() -> Iterable[str]:
    import engine
    import engine.nodes

    for info in pkgutil.iter_modules(engine.nodes.__path__):
        if info.name.endswith("_nodes"):
            yield f"engine.nodes.{info.name}"
    # Look for the file rather than ask importlib: that would import each
    # capability's package just to find out.
    for root in engine.__path__:
        for candidate in sorted(Path(root).glob("*/flow_nodes.py")):
            if candidate.parent.name != "nodes":
                yield f"engine.{candidate.parent.name}.flow_nodes"


def load_all() -> None:
    """Import every node module once. A module that fails to import is
    logged and left out, so one broken capability never hides the others."""
    global _loaded
    with _load_lock:
        if _loaded:
            return
        for name in _node_modules():
            try:
                importlib.import_module(name)
            except Exception:
                log.exception("node module %s could not be loaded", name)
        _loaded = True


def node_types() -> dict[str, NodeType]:
    """Every registered node type by type name."""
    load_all()
    return dict(_TYPES)


def get(type_name: str) -> NodeType | None:
    load_all()
    return _TYPES.get(type_name)


def specs() -> dict[str, NodeTypeSpec]:
    """The catalog as :class:`engine.flow.NodeTypeSpec` by type name."""
    return {name: t.spec for name, t in node_types().items()}


def catalog() -> list[dict[str, Any]]:
    """The ``flow.catalog`` reply's ``node_types``: every node type as a
    JSON-ready dict (see ``NodeTypeSpec.to_dict``), sorted by category and
    title, each with ``cacheable``."""
    items = []
    for t in sorted(
        node_types().values(), key=lambda t: (t.spec.category, t.spec.title)
    ):
        d = t.spec.to_dict()
        d["cacheable"] = t.cacheable
        items.append(d)
    return items
