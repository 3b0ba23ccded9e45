"""``rl-studio-engine run FLOW.json``: run a workflow headless, in this
process, with per-node progress on stderr and the run summary as JSON on
stdout.

Example::

    rl-studio-engine run project/flows/cartpole_ppo.flow.json \\
        --set train.total_steps=2048 --set evaluate.episodes=5

The run is recorded in the project like a run started from the studio
(``runs/<run-id>/``, a row in the project's run list), and the models its
nodes produce (Register, Fine-tune, Merge, Export GGUF) are registered with
their lineage when it ends, however it ended (a flow failing at its last
node keeps the models its earlier nodes made). Stdout carries the run's
summary as JSON and nothing else. The project is
``--project DIR``, else the project whose ``flows/`` folder holds the file,
else a temporary folder.

Exit status: 0 when every node is done or cached; 1 when the flow does not
validate (problems printed per node) or a node fails; 2 when the file is
missing or not a flow (one sentence); 130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from engine import flow, protocol
from engine.errors import EngineError
from engine.jobs.context import JobContext, private_event_stream
from engine.jobs.lifecycle import HeadlessContext, Outcome

KIND = "flow.run"
LINE_INTERVAL_S = 2.0
"""Without a terminal, a running node prints a progress line at most this often."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("flow", type=Path, help="the .flow.json file to run")
    parser.add_argument(
        "--project",
        type=Path,
        default=None,
        help="project folder for runs, cache and models (default: the project "
        "holding the file, else a temporary one)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NODE.PARAM=VALUE",
        dest="settings",
        help="override a node's parameter, e.g. train.total_steps=2048 "
        "(repeatable; VALUE is read as JSON when it parses)",
    )
    parser.add_argument(
        "--all",
        action="store_true",
        help="run every node, even those whose cached outputs are still valid",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NODE",
        help="run only this node and what it needs (repeatable)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def parse_overrides(
    items: list[str], doc: flow.FlowDocument | None = None
) -> dict[str, Any]:
    """``node.param=value`` items as an overrides dict. Values are read as
    JSON when they parse, except for text and path parameters of ``doc``'s
    nodes, which take the text as it is (``train.hyperparameters={...}``)."""
    from engine.nodes.registry import specs

    catalog = specs()
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        node_id, dot, param = key.partition(".")
        if not sep or not dot or not node_id or not param:
            raise EngineError(f"--set takes node.param=value, not {item!r}.")
        node = doc.node(node_id) if doc is not None else None
        spec = catalog.get(node.type) if node is not None else None
        pspec = spec.param(param) if spec is not None else None
        if pspec is not None and pspec.type in ("str", "path"):
            out[key] = raw
            continue
        try:
            value: Any = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        out[key] = value
    return out


def find_project(flow_path: Path) -> Path | None:
    """The project whose ``flows/`` folder holds ``flow_path``, if any."""
    parent = flow_path.resolve().parent
    if parent.name == "flows" and (parent.parent / "studio.sqlite").exists():
        return parent.parent
    return None


def _bar(frac: float, width: int = 24) -> str:
    filled = round(min(max(frac, 0.0), 1.0) * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


class ConsoleReport:
    """Per-node lines and progress bars on a stream."""

    def __init__(self, stream: TextIO, labels: dict[str, str], bars: bool) -> None:
        self.stream = stream
        self.labels = labels
        self.bars = bars
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self._bar_open = False
        self._last_line: dict[str, float] = {}
        self._width = max([len(k) for k in labels] + [4])

    def _close_bar(self) -> None:
        if self._bar_open:
            self.stream.write("\n")
            self._bar_open = False

    def line(self, text: str) -> None:
        self._close_bar()
        self.stream.write(text + "\n")
        self.stream.flush()

    def on_state(self, event: protocol.FlowNodeState) -> None:
        """A node's state as a line, its progress as a bar (a line now and
        then where the stream is no terminal)."""
        label = self.labels.get(event.node_id, event.node_id)
        head = f"{event.node_id:<{self._width}}  {label}"
        if event.state == "running" and event.progress > 0:
            if not self.bars:
                return
            text = (
                f"{head}  {_bar(event.progress)} {event.progress * 100:5.1f}%  "
                f"{event.message}"
            )
            if self.tty:
                self.stream.write("\r" + text[:160].ljust(100))
                self.stream.flush()
                self._bar_open = True
                return
            now = time.monotonic()
            if (
                now - self._last_line.get(event.node_id, 0.0) >= LINE_INTERVAL_S
                or event.progress >= 1
            ):
                self._last_line[event.node_id] = now
                self.line(text)
            return
        if event.state == "queued":
            return
        self.line(
            f"{head}  {event.state}{': ' + event.message if event.message else ''}"
        )

    def final(self, summary: dict[str, Any]) -> None:
        self._close_bar()
        self.line(f"flow {summary['flow']!r}: {summary['status']}")
        for node_id in summary["order"]:
            st = summary["nodes"][node_id]
            label = self.labels.get(node_id, node_id)
            self.line(
                f"  {node_id:<{self._width}}  {st['state']:<8} {label}  {st['message']}"
            )
        for model_id in summary.get("registered_models", []):
            self.line(f"  registered model {model_id}")
        if summary.get("reason"):
            self.line(summary["reason"])


class ConsoleFlowContext(HeadlessContext):
    """A headless flow run's context whose terminal lines go through the
    console report (the editor shows each node's lines from the run's
    ``log.txt``)."""

    report: ConsoleReport | None = None

    def say(self, text: str) -> None:
        if self.report is None:
            super().say(text)
        else:
            self.report.line(text)


def _nodes_done(outcome: Outcome) -> tuple[float, float] | None:
    """A finished flow's progress: every node of its plan accounted for."""
    order = (outcome.summary or {}).get("order")
    return None if order is None else (len(order), len(order))


def run(args: argparse.Namespace) -> int:
    from engine.jobs.lifecycle import run_in_process
    from engine.nodes.executor import (
        FlowExecution,
        FlowFailed,
        apply_overrides,
        validate_document,
    )
    from engine.nodes.executor import validate as validate_config
    from engine.nodes.registry import specs
    from engine.settings import as_dict
    from engine.store.project import Project

    path: Path = args.flow.expanduser()
    try:
        doc = flow.load(path)
    except flow.FlowFormatError as exc:
        raise EngineError(str(exc)) from None
    overrides = parse_overrides(args.settings, doc)
    apply_overrides(doc, overrides)
    for target in args.only:
        if doc.node(target) is None:
            raise EngineError(f"--only {target!r}: there is no such node in the flow.")
    catalog = specs()
    errors = validate_document(doc)
    if errors:
        print(f"{path.name}: the flow cannot run:", file=sys.stderr)
        for key, messages in errors.items():
            node = doc.node(key)
            where = f"{key} ({flow.display_name(node, catalog)})" if node else "(flow)"
            for m in messages:
                print(f"  {where}: {m}", file=sys.stderr)
        return 1
    cfg = validate_config(
        {
            "flow_path": str(path),
            "document": doc.to_dict(),
            "only_stale": not args.all,
            "targets": list(args.only),
        }
    )
    config = as_dict(cfg)
    name = cfg.flow_name

    if args.project is not None:
        project_dir = args.project.expanduser().resolve()
    else:
        project_dir = find_project(path) or Path(
            tempfile.mkdtemp(prefix="rlstudio-flow-")
        )
    from resources import resource_path

    # A fresh project gets the bundled examples (envs, data), as in the studio.
    project = Project.open(project_dir, create=True, examples=resource_path("examples"))
    try:
        record = project.create_run(KIND, config, name=f"flow {name}")
        run_dir = Path(record.run_dir)
        print(f"run folder: {run_dir}", file=sys.stderr, flush=True)
        labels = {n.id: flow.display_name(n, catalog) for n in doc.nodes}
        report = ConsoleReport(sys.stderr, labels, bars=not args.quiet)
        ctx = ConsoleFlowContext.of_run(project, record)
        ctx.report = report

        def entry(ctx: JobContext) -> dict[str, Any]:
            return FlowExecution(
                ctx,
                doc,
                flow_name=name,
                only_stale=cfg.only_stale,
                targets=cfg.targets,
                on_state=report.on_state,
            ).run_as_job()

        # Libraries print to stdout (transformers' PrinterCallback prints
        # every training log row); stdout carries the summary alone.
        summary_out = private_event_stream()
        outcome = run_in_process(
            project,
            record.id,
            ctx,
            entry,
            progress=_nodes_done,
        )
    finally:
        project.close()
    if outcome.error is not None and not isinstance(outcome.error, FlowFailed):
        raise outcome.error
    summary = outcome.summary or {}
    status = outcome.status
    report.final(summary)
    print(json.dumps(summary, indent=2), file=summary_out, flush=True)
    return {"completed": 0, "failed": 1}.get(status, 130)
