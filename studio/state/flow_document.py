"""The workflow editor's document: an ``engine.flow.FlowDocument`` that
says what changed.

Qt-free. Every edit goes through a method here (the undo commands of
``studio.workflows.commands`` call them), and each method notifies listeners with
``(what, key)``:

* ``reset`` — the whole document was replaced;
* ``node_added`` / ``node_removed`` / ``node_moved`` / ``params`` /
  ``title`` — key: the node id;
* ``link_added`` / ``link_removed`` — key: :func:`link_key` of the link;
* ``info`` — the flow's name or description changed;
* ``path`` — the file the document belongs to changed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from engine.flow import FlowDocument, Link, Node
from studio.state.observable import Observable

LINK_SEP = "\x1f"


def link_key(link: Link) -> str:
    """A string naming the link, for change notifications."""
    return LINK_SEP.join((link.from_node, link.from_port, link.to_node, link.to_port))


def link_from_key(key: str) -> Link:
    a, ap, b, bp = key.split(LINK_SEP)
    return Link(a, ap, b, bp)


class FlowDocumentModel(Observable):
    """Holds one flow document and the path it was read from (or None)."""

    def __init__(
        self, doc: FlowDocument | None = None, path: Path | None = None
    ) -> None:
        super().__init__()
        self.doc = doc if doc is not None else FlowDocument()
        self.path = path

    # ---------------------------------------------------------- whole
    def replace(self, doc: FlowDocument, path: Path | None) -> None:
        self.doc = doc
        self.path = path
        self.notify("reset")

    def set_path(self, path: Path | None) -> None:
        self.path = path
        self.notify("path")

    def set_info(self, name: str, description: str) -> None:
        """Set the flow's name and description (written to the file)."""
        if (self.doc.name, self.doc.description) == (name, description):
            return
        self.doc.name, self.doc.description = name, description
        self.notify("info")

    def snapshot(self) -> FlowDocument:
        return self.doc.copy()

    # ----------------------------------------------------------- nodes
    def node(self, node_id: str) -> Node:
        node = self.doc.node(node_id)
        if node is None:
            raise KeyError(f"The flow has no node {node_id!r}.")
        return node

    def has_node(self, node_id: str) -> bool:
        return self.doc.node(node_id) is not None

    def add_node(self, node: Node, index: int | None = None) -> None:
        if self.has_node(node.id):
            raise ValueError(f"The flow already has a node {node.id!r}.")
        node = copy.deepcopy(node)
        if index is None or index > len(self.doc.nodes):
            self.doc.nodes.append(node)
        else:
            self.doc.nodes.insert(index, node)
        self.notify("node_added", node.id)

    def remove_node(self, node_id: str) -> tuple[Node, int]:
        """Remove the node alone (its links must be gone already); returns
        it and where it was, for undo."""
        node = self.node(node_id)
        if self.links_of(node_id):
            raise ValueError(f"Remove the links of node {node_id!r} first.")
        index = self.doc.nodes.index(node)
        del self.doc.nodes[index]
        self.notify("node_removed", node_id)
        return node, index

    def move_node(self, node_id: str, x: float, y: float) -> None:
        node = self.node(node_id)
        if (node.x, node.y) == (x, y):
            return
        node.x, node.y = float(x), float(y)
        self.notify("node_moved", node_id)

    def set_params(self, node_id: str, params: dict[str, Any]) -> None:
        node = self.node(node_id)
        node.params = copy.deepcopy(params)
        self.notify("params", node_id)

    def set_title(self, node_id: str, title: str) -> None:
        self.node(node_id).title = title
        self.notify("title", node_id)

    # ----------------------------------------------------------- links
    def links_of(self, node_id: str) -> list[Link]:
        return [lk for lk in self.doc.links if node_id in (lk.from_node, lk.to_node)]

    def add_link(self, link: Link, index: int | None = None) -> None:
        if link in self.doc.links:
            raise ValueError("These two ports are already linked.")
        if index is None or index > len(self.doc.links):
            self.doc.links.append(link)
        else:
            self.doc.links.insert(index, link)
        self.notify("link_added", link_key(link))

    def remove_link(self, link: Link) -> int:
        index = self.doc.links.index(link)
        del self.doc.links[index]
        self.notify("link_removed", link_key(link))
        return index
