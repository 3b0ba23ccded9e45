"""Undo commands for every edit of a flow document.

``redo`` and ``undo`` call :class:`studio.state.flow_document.FlowDocumentModel`
methods only; the views follow the model's notifications.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from PySide6.QtGui import QUndoCommand

from engine.flow import Link, Node
from studio.state.flow_document import FlowDocumentModel

Position = tuple[float, float]

PARAMS_COMMAND_ID = 7401
"""``QUndoCommand.id()`` of parameter edits, so typing merges into one step."""


class AddNodeCommand(QUndoCommand):
    def __init__(self, model: FlowDocumentModel, node: Node, text: str = "") -> None:
        super().__init__(text or f"Add {node.id}")
        self.model = model
        self.node = copy.deepcopy(node)

    def redo(self) -> None:
        self.model.add_node(self.node)

    def undo(self) -> None:
        self.model.remove_node(self.node.id)


class RemoveNodesCommand(QUndoCommand):
    """Remove nodes together with every link touching them."""

    def __init__(self, model: FlowDocumentModel, node_ids: Iterable[str]) -> None:
        ids = [i for i in node_ids if model.has_node(i)]
        super().__init__(
            f"Delete {ids[0]}" if len(ids) == 1 else f"Delete {len(ids)} nodes"
        )
        self.model = model
        self.node_ids = ids
        self._nodes: list[tuple[Node, int]] = []
        self._links: list[tuple[Link, int]] = []

    def redo(self) -> None:
        doc = self.model.doc
        wanted = set(self.node_ids)
        touching = [lk for lk in doc.links if wanted & {lk.from_node, lk.to_node}]
        self._links = []
        for link in reversed(touching):
            self._links.append((link, self.model.remove_link(link)))
        self._nodes = []
        for node in reversed([n for n in doc.nodes if n.id in wanted]):
            self._nodes.append(self.model.remove_node(node.id))

    def undo(self) -> None:
        for node, index in reversed(self._nodes):
            self.model.add_node(node, index)
        for link, index in reversed(self._links):
            self.model.add_link(link, index)


class MoveNodesCommand(QUndoCommand):
    """Moves of one drag: ``{node_id: ((old_x, old_y), (new_x, new_y))}``."""

    def __init__(
        self,
        model: FlowDocumentModel,
        moves: Mapping[str, tuple[Position, Position]],
    ) -> None:
        n = len(moves)
        super().__init__(f"Move {next(iter(moves))}" if n == 1 else f"Move {n} nodes")
        self.model = model
        self.moves = {k: (tuple(a), tuple(b)) for k, (a, b) in moves.items()}

    def redo(self) -> None:
        for node_id, (_, new) in self.moves.items():
            self.model.move_node(node_id, *new)

    def undo(self) -> None:
        for node_id, (old, _) in self.moves.items():
            self.model.move_node(node_id, *old)


class AddLinkCommand(QUndoCommand):
    """Add a link; ``replaces`` is the link it takes the place of (the old
    link into a single input), removed in the same step."""

    def __init__(
        self, model: FlowDocumentModel, link: Link, replaces: Sequence[Link] = ()
    ) -> None:
        super().__init__(f"Link {link.from_node} → {link.to_node}")
        self.model = model
        self.link = link
        self.replaces = list(replaces)
        self._removed: list[tuple[Link, int]] = []

    def redo(self) -> None:
        self._removed = [(lk, self.model.remove_link(lk)) for lk in self.replaces]
        self.model.add_link(self.link)

    def undo(self) -> None:
        self.model.remove_link(self.link)
        for link, index in reversed(self._removed):
            self.model.add_link(link, index)


class RemoveLinksCommand(QUndoCommand):
    def __init__(self, model: FlowDocumentModel, links: Iterable[Link]) -> None:
        self.links = [lk for lk in links if lk in model.doc.links]
        super().__init__(
            "Remove link" if len(self.links) == 1 else f"Remove {len(self.links)} links"
        )
        self.model = model
        self._removed: list[tuple[Link, int]] = []

    def redo(self) -> None:
        self._removed = [(lk, self.model.remove_link(lk)) for lk in self.links]

    def undo(self) -> None:
        for link, index in reversed(self._removed):
            self.model.add_link(link, index)


class SetParamsCommand(QUndoCommand):
    """Set a node's parameters. Consecutive edits of the same parameters of
    the same node (typing) merge into one undo step."""

    def __init__(
        self,
        model: FlowDocumentModel,
        node_id: str,
        old: Mapping[str, Any],
        new: Mapping[str, Any],
    ) -> None:
        changed = sorted(k for k in {*old, *new} if old.get(k) != new.get(k))
        super().__init__(f"Edit {node_id}: {', '.join(changed) or 'parameters'}")
        self.model = model
        self.node_id = node_id
        self.old = copy.deepcopy(dict(old))
        self.new = copy.deepcopy(dict(new))
        self.changed = changed

    def id(self) -> int:
        return PARAMS_COMMAND_ID

    def mergeWith(self, other: QUndoCommand) -> bool:
        if not isinstance(other, SetParamsCommand):
            return False
        if other.node_id != self.node_id or other.changed != self.changed:
            return False
        self.new = copy.deepcopy(other.new)
        return True

    def redo(self) -> None:
        self.model.set_params(self.node_id, self.new)

    def undo(self) -> None:
        self.model.set_params(self.node_id, self.old)


class SetTitleCommand(QUndoCommand):
    def __init__(self, model: FlowDocumentModel, node_id: str, title: str) -> None:
        super().__init__(f"Rename {node_id}")
        self.model = model
        self.node_id = node_id
        self.old = model.node(node_id).title
        self.new = title

    def redo(self) -> None:
        self.model.set_title(self.node_id, self.new)

    def undo(self) -> None:
        self.model.set_title(self.node_id, self.old)


class SetFlowInfoCommand(QUndoCommand):
    """Set the flow's name and description in one step."""

    def __init__(self, model: FlowDocumentModel, name: str, description: str) -> None:
        super().__init__("Edit flow name and description")
        self.model = model
        self.old = (model.doc.name, model.doc.description)
        self.new = (name, description)

    def redo(self) -> None:
        self.model.set_info(*self.new)

    def undo(self) -> None:
        self.model.set_info(*self.old)


class PasteCommand(QUndoCommand):
    """Add nodes (with fresh ids) and the links among them: paste and
    duplicate."""

    def __init__(
        self,
        model: FlowDocumentModel,
        nodes: Sequence[Node],
        links: Sequence[Link],
        text: str = "Paste",
    ) -> None:
        n = len(nodes)
        super().__init__(f"{text} {n} node{'s' if n != 1 else ''}")
        self.model = model
        self.nodes = [copy.deepcopy(n) for n in nodes]
        self.links = list(links)

    def redo(self) -> None:
        for node in self.nodes:
            self.model.add_node(node)
        for link in self.links:
            self.model.add_link(link)

    def undo(self) -> None:
        for link in reversed(self.links):
            self.model.remove_link(link)
        for node in reversed(self.nodes):
            self.model.remove_node(node.id)


def clipboard_payload(
    model: FlowDocumentModel, node_ids: Iterable[str]
) -> dict[str, Any]:
    """The selected nodes and the links among them, as JSON-ready data."""
    ids = set(node_ids)
    nodes = [n.to_dict() for n in model.doc.nodes if n.id in ids]
    links = [
        lk.to_dict()
        for lk in model.doc.links
        if lk.from_node in ids and lk.to_node in ids
    ]
    return {"kind": "flow-fragment", "nodes": nodes, "links": links}


def pasted_items(
    model: FlowDocumentModel, payload: Mapping[str, Any], offset: Position
) -> tuple[list[Node], list[Link]]:
    """Nodes of a clipboard payload with fresh ids, moved by ``offset``, and
    their links renamed to match. Raises ``ValueError`` on a bad payload."""
    from engine.flow import FlowDocument

    fragment = FlowDocument.from_dict(
        {
            "format": 1,
            "nodes": payload.get("nodes", []),
            "links": payload.get("links", []),
        }
    )
    scratch = model.doc.copy()
    renames: dict[str, str] = {}
    nodes = []
    for node in fragment.nodes:
        new_id = scratch.new_node_id(node.type)
        renames[node.id] = new_id
        node = copy.deepcopy(node)
        node.id = new_id
        node.x += offset[0]
        node.y += offset[1]
        scratch.nodes.append(node)
        nodes.append(node)
    links = [
        Link(renames[lk.from_node], lk.from_port, renames[lk.to_node], lk.to_port)
        for lk in fragment.links
        if lk.from_node in renames and lk.to_node in renames
    ]
    return nodes, links
