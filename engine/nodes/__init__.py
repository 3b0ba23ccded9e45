"""Workflow nodes: the registry of node types, the catalog generated from it,
and the execution of flows (the ``flow.run`` job kind).

Public API (importing this package and building the catalog never imports
torch, SB3 or TRL)::

    catalog() -> list[dict]            # the flow.catalog reply's node_types
    specs() -> dict[str, NodeTypeSpec] # the same as engine.flow specs
    node_types() -> dict[str, NodeType]
    validate_flow(path=..., document=...) -> dict[node_id, list[str]]
    node_type(...)                     # decorator declaring a node type
    NodeRun, NodeResult, NodeError     # what a node function gets and returns

Node types are declared in ``engine/nodes/*_nodes.py`` or in
``engine/<capability>/flow_nodes.py``; see ``engine.nodes.registry``.
"""

from __future__ import annotations

from typing import Any

from engine.errors import EngineError
from engine.nodes.base import NodeError, NodeResult, NodeRun
from engine.nodes.registry import NodeType, catalog, get, node_type, node_types, specs


def validate_flow(
    *, path: str | None = None, document: dict[str, Any] | None = None
) -> dict[str, list[str]]:
    """Problems of a flow file or document by node id (``{}``: it can run).

    A file or document that is not a flow raises ``EngineError`` (one
    sentence).
    """
    from engine import flow
    from engine.nodes.executor import validate_document

    try:
        if document is not None:
            doc = flow.FlowDocument.from_dict(document)
        elif path:
            doc = flow.load(path)
        else:
            raise EngineError("Give a flow to validate: a path or a document.")
    except flow.FlowFormatError as exc:
        raise EngineError(str(exc)) from None
    return validate_document(doc)


__all__ = [
    "NodeError",
    "NodeResult",
    "NodeRun",
    "NodeType",
    "catalog",
    "get",
    "node_type",
    "node_types",
    "specs",
    "validate_flow",
]
