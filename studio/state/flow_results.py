"""The last run of a flow as the project remembers it.

Qt-free. A studio that restarts (or a flow opened again) shows each node's
state, outputs and log from the flow's last ``flow.run`` run, read from the
project: the run records of the project snapshot (``ProjectState.runs``) and
the run's folder, where the engine keeps ``flow_state.json`` (every node's
state, outputs and summary), ``config.json`` (the document that ran) and
``log.txt`` (node lines start with ``[<node-id>]``).

Only results still true of the document open now are kept: a node whose
type, parameters or incoming links changed since that run, or that sits
downstream of such a node, is stale and shows no result.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import contract
from engine.flow import CycleError, FlowDocument, FlowFormatError, topological_order

FLOW_RUN_KIND = "flow.run"
STATE_FILE = contract.FLOW_STATE_FILE
CONFIG_FILE = contract.CONFIG_FILE
LOG_FILE = contract.LOG_FILE
MAX_LOG_LINES = 5000
FINAL_NODE_STATES = ("done", "cached", "failed", "skipped", "stopped")
_NODE_LINE = re.compile(r"^(?:\[(?P<tag>[^\]]+)\] |node (?P<failed>\S+) \()")


@dataclass
class FlowRunResults:
    """What one flow run left behind, as the editor shows it."""

    run_id: str
    status: str
    """The run's status (``completed``, ``failed``, ``stopped``,
    ``interrupted``, or ``running`` while it goes on)."""
    reason: str = ""
    ended: float | None = None
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{node_id: {state, progress, message, outputs, summary}}``."""
    node_logs: dict[str, list[str]] = field(default_factory=dict)
    run_log: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    """Nodes of that run whose results no longer match the open document."""


def _same_path(a: str | Path | None, b: Path) -> bool:
    if not a:
        return False
    try:
        return Path(a).expanduser().resolve() == b
    except OSError:
        return False


def run_config(run: Mapping[str, Any]) -> dict[str, Any]:
    """A run's config: from its record, else from ``config.json`` on disk
    (a run started in this session has no config in its record yet)."""
    config = run.get("config")
    if isinstance(config, dict) and config:
        return config
    run_dir = run.get("run_dir")
    data = contract.read_json(Path(run_dir) / CONFIG_FILE) if run_dir else None
    if isinstance(data, dict) and isinstance(data.get("config"), dict):
        return dict(data["config"])
    return {}


def last_flow_run(
    runs: Iterable[Mapping[str, Any]], flow_path: str | Path
) -> Mapping[str, Any] | None:
    """The newest ``flow.run`` run of the file at ``flow_path`` (runs come
    oldest first, as ``ProjectState.runs`` keeps them)."""
    target = Path(flow_path).expanduser().resolve()
    found = None
    for run in runs:
        if run.get("kind") != FLOW_RUN_KIND:
            continue
        if _same_path(run_config(run).get("flow_path"), target):
            found = run
    return found


def node_of_log_line(line: str, node_ids: Iterable[str]) -> str | None:
    """The node a log line belongs to: ``[train] ...`` lines of a node, and
    the executor's ``node train (Train) failed: ...``."""
    match = _NODE_LINE.match(line)
    if match is None:
        return None
    node_id = match.group("tag") or match.group("failed")
    return node_id if node_id in set(node_ids) else None


def split_log(lines: Iterable[str], node_ids: Iterable[str]) -> dict[str, list[str]]:
    """Each node's lines of a run log. A line with no node tag (a traceback
    after a failure, say) goes with the node of the tagged line before it."""
    ids = set(node_ids)
    out: dict[str, list[str]] = {}
    current: str | None = None
    for line in lines:
        node = node_of_log_line(line, ids)
        if node is not None:
            current = node
        if current is not None:
            out.setdefault(current, []).append(line)
    return out


def read_log_tail(path: Path, max_lines: int = MAX_LOG_LINES) -> list[str]:
    """The last lines of a run's log, without their time stamps (node lines
    start with their tag, as the run sent them)."""
    return [text for _when, text in contract.read_log(path, max_lines)]


def changed_nodes(ran: FlowDocument, now: FlowDocument) -> set[str]:
    """Nodes of ``now`` whose last results ``ran`` does not vouch for: new
    nodes, nodes whose type, parameters or incoming links differ, and
    everything downstream of them."""
    changed: set[str] = set()
    for node in now.nodes:
        old = ran.node(node.id)
        if (
            old is None
            or old.type != node.type
            or old.params != node.params
            or set(ran.links_into(node.id)) != set(now.links_into(node.id))
        ):
            changed.add(node.id)
    try:
        order = topological_order(now)
    except CycleError:  # nothing downstream of a cycle can be trusted
        return set(now.node_ids())
    for node_id in order:
        if node_id in changed:
            continue
        if any(lk.from_node in changed for lk in now.links_into(node_id)):
            changed.add(node_id)
    return changed


def read_flow_run(
    run: Mapping[str, Any], doc: FlowDocument | None = None
) -> FlowRunResults:
    """Read what ``run`` (a run record) left in its folder; with ``doc``,
    drop the results of nodes that changed since (see :func:`changed_nodes`)
    and of nodes ``doc`` no longer has."""
    run_dir = Path(str(run.get("run_dir") or ""))
    status = str(run.get("status") or "")
    results = FlowRunResults(
        run_id=str(run.get("id", "")),
        status=status,
        reason=str(run.get("reason") or ""),
        ended=run.get("ended"),
    )
    state = contract.read_json(run_dir / STATE_FILE) if run.get("run_dir") else None
    nodes = state.get("nodes") if isinstance(state, dict) else None
    if not isinstance(nodes, dict):
        summary = run.get("summary")
        nodes = summary.get("nodes") if isinstance(summary, dict) else None
    for node_id, record in (nodes or {}).items():
        if not isinstance(record, dict) or not isinstance(record.get("state"), str):
            continue
        node_state = record["state"]
        if node_state in ("queued", "running") and status != "running":
            # The run ended without the node finishing: the process was
            # killed, or the run was stopped before it reached the node.
            node_state = "stopped" if node_state == "running" else "skipped"
        results.nodes[str(node_id)] = {
            "state": node_state,
            "progress": float(record.get("progress") or 0.0),
            "message": str(record.get("message") or ""),
            "outputs": record.get("outputs") or {},
            "summary": record.get("summary") or {},
        }
    if run.get("run_dir"):
        results.run_log = read_log_tail(run_dir / LOG_FILE)
        results.node_logs = split_log(results.run_log, results.nodes)
    if doc is not None:
        config = run_config(run)
        try:
            ran = FlowDocument.from_dict(config["document"])
        except (KeyError, FlowFormatError):
            ran = None
        keep = set(doc.node_ids())
        if ran is not None:
            keep -= changed_nodes(ran, doc)
        results.stale = [n for n in results.nodes if n not in keep]
        for node_id in results.stale:
            del results.nodes[node_id]
            results.node_logs.pop(node_id, None)
    return results
