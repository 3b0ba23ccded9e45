"""Running a flow: the ``flow.run`` job kind, and the executor it shares with
``rl-studio-engine run``.

Nodes run one after another in topological order, in the job's process.
Each reports its state (``engine.flow.NODE_STATES``) as a ``flow.node_state``
event and in ``runs/<run-id>/flow_state.json`` (so a restarted GUI can show
the last states). A node's outputs are cached in
``<project>/data/flow-cache/<flow-name>/<node-id>.json`` under a key hashed
from its type, implementation version, parameters, input values and the
fingerprints of what it reads outside the graph (its type's ``sources``: the
labels of its traces, the trace files); a later run whose key matches (and
whose output files still exist) reuses them and reports the node ``cached``,
and one that runs it again says why in the log and the node's message
("labels changed (64 new)"). A failing node marks everything downstream
``skipped``; independent branches still run; the run then fails naming the
node. Stop is cooperative: the running node sees ``should_stop``, the nodes
after it are ``skipped``.

The models nodes return are listed in the summary's ``models``; the run's
lifecycle (``engine.jobs.lifecycle.finish``) registers them however the run
ended, so a flow failing at its last node keeps what the nodes before it
made. A cache entry keeps its node's models as ``pending_models`` until the
run ends; an entry left so by an older version (which registered nothing
for a failed run) lists its models again when reused.

Job config (``flow.run``)::

    {"flow_path": "<project>/flows/x.flow.json",   # or "document": {...}
     "only_stale": true,        # false: run every node, ignoring the cache
     "targets": [],             # node ids: run only these and their upstream
     "overrides": {"train.total_steps": 256}}      # node_id.param -> value

The validator loads the file, applies the overrides, validates the graph and
stores the resulting document in the config, so the run uses exactly what
was validated (and ``config.json`` reproduces it).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

from engine import contract, flow, protocol
from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.lifecycle import RunFailed
from engine.jobs.registry import job_kind
from engine.nodes.base import NodeResult, NodeRun, ProgressSink, progress_text
from engine.nodes.registry import node_types, specs
from engine.settings import build, setting
from engine.store.atomic import atomic_write_json
from engine.store.paths import checked_name

KIND = "flow.run"
STATE_FILE = contract.FLOW_STATE_FILE
PROGRESS_INTERVAL_S = 0.25
"""Running-state events per node are at most this often."""

StateSink = Callable[[protocol.FlowNodeState], None]
"""``on_state(event)``: where a node's state goes (by default the job's
events, as ``flow.node_state``)."""


@dataclass(frozen=True)
class FlowRunConfig:
    """A ``flow.run`` job: the graph to run and how."""

    flow_path: str | None = setting(None, form=False)
    """The ``.flow.json`` file to run (None: ``document`` is the flow)."""
    document: dict[str, Any] | None = setting(None, form=False)
    """The graph as its file holds it; the validator stores here the graph
    it checked, overrides applied, which is what the run executes."""
    only_stale: bool = setting(True, form=False)
    """Reuse the outputs of unchanged nodes (false: run every node)."""
    targets: list[str] = setting(factory=list, form=False)
    """Node ids: run only these and their upstream (empty: every node)."""
    overrides: dict[str, Any] = setting(factory=dict, form=False)
    """``node_id.param`` -> value, set on the graph before it is checked."""
    flow_name: str = setting("", form=False)
    """The flow's name, which names its cache ('': the document's or the
    file's)."""
    agent: str = setting("", form=False)
    """The service agent whose retraining this run is ('': none)."""


class FlowInvalid(EngineError):
    """The graph cannot run; ``errors`` holds the problems by node id."""

    def __init__(self, message: str, errors: dict[str, list[str]]) -> None:
        super().__init__(message)
        self.errors = errors


class FlowFailed(RunFailed):
    """A node failed; the message names it, the summary lists the models the
    nodes before it made (they are registered all the same)."""


# --------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------


def validate_document(doc: flow.FlowDocument) -> dict[str, list[str]]:
    """:func:`engine.flow.validate` against the registry, plus each node
    type's own quick parameter checks (JSON text parameters, ...)."""
    errors = flow.validate(doc, specs())
    types = node_types()
    for node in doc.nodes:
        t = types.get(node.type)
        if t is None or t.check is None or errors.get(node.id):
            continue
        for problem in t.check(flow.resolved_params(node.params, t.spec)):
            errors.setdefault(node.id, []).append(problem)
    return errors


def describe_errors(doc: flow.FlowDocument, errors: dict[str, list[str]]) -> str:
    """One sentence for a log or a ConfigError: the first problem, and how
    many more there are."""
    items = [(k, m) for k, msgs in errors.items() for m in msgs]
    if not items:
        return "The flow has no problems."
    key, message = items[0]
    cat = specs()
    node = doc.node(key)
    where = (
        f"node {key!r} ({flow.display_name(node, cat)})"
        if node is not None
        else "the flow"
    )
    body = message.strip()
    if len(items) > 1:
        plural = "s" if len(items) > 2 else ""
        body = f"{body.rstrip('.')} ({len(items) - 1} more problem{plural})"
    return end_sentence(f"The flow cannot run: {where}: {body}")


def apply_overrides(doc: flow.FlowDocument, overrides: dict[str, Any]) -> None:
    """Set ``node_id.param`` values in place; ConfigError for a missing node."""
    for key, value in overrides.items():
        node_id, sep, param = str(key).partition(".")
        if not sep or not param:
            raise ConfigError(
                "overrides", f"An override is written node_id.param, not {key!r}."
            )
        node = doc.node(node_id)
        if node is None:
            raise ConfigError("overrides", f"There is no node {node_id!r} in the flow.")
        node.params[param] = value


def validate(config: Mapping[str, Any]) -> FlowRunConfig:
    """The ``flow.run`` validator: the config with the checked graph in
    ``document`` and its name in ``flow_name``, or ConfigError."""
    if not isinstance(config, Mapping):
        raise ConfigError("config", "The flow run's config must be a JSON object.")
    cfg = build(FlowRunConfig, config, "a flow run")
    path = cfg.flow_path
    if cfg.document is not None:
        try:
            doc = flow.FlowDocument.from_dict(cfg.document)
        except flow.FlowFormatError as exc:
            raise ConfigError("document", str(exc)) from None
    elif path:
        try:
            doc = flow.load(path)
        except flow.FlowFormatError as exc:
            raise ConfigError("flow_path", str(exc)) from None
    else:
        raise ConfigError("flow_path", "Give the flow to run (flow_path or document).")
    targets = cfg.targets or []
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise ConfigError("targets", "targets must be a list of node ids.")
    for t in targets:
        if doc.node(t) is None:
            raise ConfigError("targets", f"There is no node {t!r} in the flow.")
    overrides = cfg.overrides or {}
    if not isinstance(overrides, dict):
        raise ConfigError("overrides", "overrides must map node_id.param to values.")
    apply_overrides(doc, overrides)
    errors = validate_document(doc)
    if errors:
        raise ConfigError("document", describe_errors(doc, errors))
    if cfg.agent:
        checked_name("agent", cfg.agent)
    return replace(
        cfg,
        flow_path=str(Path(path).expanduser().resolve()) if path else None,
        document=doc.to_dict(),
        flow_name=cfg.flow_name or flow.flow_name(doc, path),
        targets=list(targets),
        overrides=dict(overrides),
    )


# --------------------------------------------------------------------------
# Cache
# --------------------------------------------------------------------------

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def cache_dir(project_dir: Path, flow_name: str) -> Path:
    safe = _SAFE.sub("_", flow_name).strip("._") or "flow"
    return project_dir / "data" / "flow-cache" / safe


def cache_record(
    node_type: str,
    version: int,
    params: dict[str, Any],
    inputs: Any,
    sources: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """What a node's cache key is made of: its type and implementation
    version, parameters, input values and the fingerprints of what it reads
    outside the graph (left out when it reads nothing, so the keys of such
    nodes are those they always were)."""
    record = {"type": node_type, "version": version, "params": params, "inputs": inputs}
    if sources:
        record["sources"] = sources
    return record


def cache_key(record: dict[str, Any]) -> str:
    """The hash a :func:`cache_record` is filed under."""
    text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _source_change(name: str, old: Any, new: dict[str, Any]) -> str:
    before = old.get("rows") if isinstance(old, dict) else None
    after = new.get("rows")
    if isinstance(before, int) and isinstance(after, int) and before != after:
        if after > before:
            return f"{name} changed ({after - before} new)"
        return f"{name} changed ({before - after} removed)"
    return f"{name} changed"


def rerun_reason(folder: Path, node_id: str, record: dict[str, Any]) -> str | None:
    """Why a node whose cache entry is stale runs again, as the flow says it
    ("labels changed (64 new)", "parameters changed (seed)"); None when it
    has no entry or one too old to tell."""
    try:
        entry = json.loads((folder / f"{node_id}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    old = entry.get("record") if isinstance(entry, dict) else None
    if not isinstance(old, dict):
        return None
    # Compared as they were stored: through JSON.
    now = json.loads(json.dumps(record, default=str))
    reasons: list[str] = []
    old_sources = old.get("sources") or {}
    for name, fp in (now.get("sources") or {}).items():
        if old_sources.get(name) != fp:
            reasons.append(_source_change(name, old_sources.get(name), fp))
    if old.get("version") != now["version"]:
        reasons.append("its implementation changed")
    changed = sorted(
        k
        for k in {*now["params"], *(old.get("params") or {})}
        if (old.get("params") or {}).get(k) != now["params"].get(k)
    )
    if changed:
        reasons.append(f"parameters changed ({', '.join(changed)})")
    if old.get("inputs") != now["inputs"]:
        reasons.append("its inputs changed")
    return "; ".join(reasons) or None


def read_cache(folder: Path, node_id: str, key: str) -> dict[str, Any] | None:
    """The cached entry for ``node_id`` if its key matches and its files exist."""
    path = folder / f"{node_id}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("key") != key:
        return None
    if not all(Path(f).exists() for f in entry.get("files", [])):
        return None
    if not isinstance(entry.get("outputs"), dict):
        return None
    return entry


# --------------------------------------------------------------------------
# Execution
# --------------------------------------------------------------------------


def end_sentence(text: str) -> str:
    """``text`` ending with exactly one full stop (or its own ? or !)."""
    text = text.rstrip()
    return text if text.endswith((".", "?", "!")) else text + "."


def _message_of(exc: BaseException) -> str:
    if isinstance(exc, EngineError):
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class FlowExecution:
    """One run of a flow document inside a job context."""

    def __init__(
        self,
        ctx: JobContext,
        doc: flow.FlowDocument,
        *,
        flow_name: str,
        only_stale: bool = True,
        targets: list[str] | None = None,
        on_state: StateSink | None = None,
    ) -> None:
        self.ctx = ctx
        self.doc = doc
        self.flow_name = flow_name
        self.only_stale = only_stale
        self.targets = list(targets or [])
        self.on_state: StateSink = on_state or ctx.emit
        self.cache = cache_dir(ctx.project_dir, flow_name)
        self.types = node_types()
        self.catalog = specs()
        self.states: dict[str, dict[str, Any]] = {}
        self.outputs: dict[str, dict[str, Any]] = {}
        self.models: list[dict[str, Any]] = []
        self._last_emit: dict[str, float] = {}
        self._done_count = 0
        self._pending: list[str] = []
        """Nodes whose cache entry holds models not yet registered."""

    # ----------------------------------------------------------- reports
    def _report(
        self,
        node_id: str,
        state: str,
        progress: float,
        message: str,
        outputs: dict[str, Any],
    ) -> None:
        self.on_state(
            protocol.FlowNodeState(
                run_id=self.ctx.run_id,
                node_id=node_id,
                state=state,
                progress=progress,
                message=message,
                outputs=outputs,
                summary=self.states.get(node_id, {}).get("summary", {})
                if state in ("done", "cached")
                else {},
            )
        )

    def _set(
        self,
        node_id: str,
        state: str,
        *,
        progress: float = 0.0,
        message: str = "",
        outputs: dict[str, Any] | None = None,
        summary: dict[str, Any] | None = None,
    ) -> None:
        record = self.states.setdefault(node_id, {})
        record.update(state=state, progress=progress, message=message)
        if outputs is not None:
            record["outputs"] = outputs
        if summary is not None:
            record["summary"] = summary
        self._report(node_id, state, progress, message, outputs or {})
        self._write_state_file()

    def _write_state_file(self) -> None:
        with contextlib.suppress(OSError, ValueError, TypeError):
            atomic_write_json(
                self.ctx.run_dir / STATE_FILE,
                {"flow": self.flow_name, "nodes": self.states},
            )

    def _node_progress(self, node_id: str, label: str) -> ProgressSink:
        total_nodes = max(len(self.states), 1)

        def report(done: float, total: float, message: str, unit: str) -> None:
            frac = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
            # The node's own counts travel in its message: the flow's bar
            # counts nodes, and says what the running one has done of what.
            message = progress_text(done, total, message, unit)
            self.ctx.progress(
                self._done_count + frac,
                total_nodes,
                f"{label}: {message}" if message else label,
            )
            now = time.monotonic()
            if (
                now - self._last_emit.get(node_id, 0.0) < PROGRESS_INTERVAL_S
                and frac < 1
            ):
                return
            self._last_emit[node_id] = now
            record = self.states[node_id]
            record.update(progress=frac, message=message)
            self._report(node_id, "running", frac, message, {})

        return report

    # --------------------------------------------------------------- run
    def plan(self) -> list[str]:
        order = flow.topological_order(self.doc)
        if not self.targets:
            return order
        wanted = set(self.targets)
        for t in self.targets:
            wanted |= flow.upstream(self.doc, t)
        return [n for n in order if n in wanted]

    def run_as_job(self) -> dict[str, Any]:
        """:meth:`run` as a job function: a failed node raises
        :class:`FlowFailed` carrying the summary (the run's lifecycle still
        registers the models of the nodes that finished)."""
        summary = self.run()
        if summary["status"] == "failed":
            raise FlowFailed(summary["reason"], summary)
        return summary

    def run(self) -> dict[str, Any]:
        errors = validate_document(self.doc)
        if errors:
            raise FlowInvalid(describe_errors(self.doc, errors), errors)
        order = self.plan()
        for node_id in order:
            self.states[node_id] = {"state": "queued", "progress": 0.0, "message": ""}
        for node_id in order:
            self._report(node_id, "queued", 0.0, "", {})
        self._write_state_file()
        self.ctx.progress(0, len(order), "starting")
        culprit: dict[str, str] = {}
        stopped = False
        for node_id in order:
            node = self.doc.node(node_id)
            assert node is not None
            label = flow.display_name(node, self.catalog)
            sources = {lk.from_node for lk in self.doc.links_into(node_id)}
            bad = [
                s
                for s in sources
                if s in culprit or self.states[s]["state"] not in ("done", "cached")
            ]
            if stopped or self.ctx.should_stop:
                stopped = True
                culprit[node_id] = node_id
                self._set(node_id, "skipped", message="The run was stopped.")
                continue
            if bad:
                root = culprit.get(bad[0], bad[0])
                culprit[node_id] = root
                root_node = self.doc.node(root)
                root_label = (
                    flow.display_name(root_node, self.catalog) if root_node else root
                )
                why = {"failed": "failed", "stopped": "was stopped"}.get(
                    self.states[root]["state"], "did not run"
                )
                self._set(
                    node_id,
                    "skipped",
                    message=f"Not run: {root_label!r} ({root}) {why}.",
                )
                continue
            state = self._run_node(node, label)
            self._done_count += 1
            if state in ("failed", "stopped"):
                culprit[node_id] = node_id
            if state == "stopped":
                stopped = True
        self.ctx.progress(len(order), len(order), "finished")
        summary = self.summary(order)
        self._mark_registered()
        return summary

    def _mark_registered(self) -> None:
        """The caller registers the models of the run however it ended; clear
        them from the cache entries so a later run does not list them again."""
        for node_id in self._pending:
            path = self.cache / f"{node_id}.json"
            with contextlib.suppress(OSError, ValueError, TypeError):
                entry = json.loads(path.read_text(encoding="utf-8"))
                entry["pending_models"] = []
                atomic_write_json(path, entry)

    def _inputs(self, node: flow.Node, spec: flow.NodeTypeSpec) -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        for port in spec.inputs:
            values = [
                self.outputs[lk.from_node].get(lk.from_port)
                for lk in self.doc.links_into(node.id, port.name)
            ]
            if not values:
                continue
            inputs[port.name] = values if port.multiple else values[0]
        return inputs

    def _reuse(self, node_id: str, entry: dict[str, Any]) -> None:
        """The node is unchanged: its cached outputs stand for a run."""
        self.outputs[node_id] = entry["outputs"]
        # Models made by a run that then failed were never registered;
        # this run lists them (a node downstream of Train failing must
        # not lose the trained model once Train is cached).
        pending = list(entry.get("pending_models") or [])
        if pending:
            self.models.extend(pending)
            self._pending.append(node_id)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(entry.get("finished", 0)))
        self._set(
            node_id,
            "cached",
            progress=1.0,
            message=f"Unchanged since run {entry.get('run_id', '?')} ({when}).",
            outputs=entry["outputs"],
            summary=entry.get("summary", {}),
        )

    def _run_node(self, node: flow.Node, label: str) -> str:
        t = self.types[node.type]
        params = flow.resolved_params(node.params, t.spec)
        inputs = self._inputs(node, t.spec)
        sources = (
            t.sources(params, inputs, self.ctx.project_dir)
            if t.cacheable and t.sources
            else None
        )
        record = cache_record(node.type, t.spec.version, params, inputs, sources)
        key = cache_key(record)
        reason = None
        if t.cacheable and self.only_stale:
            entry = read_cache(self.cache, node.id, key)
            if entry is not None:
                self._reuse(node.id, entry)
                return "cached"
            reason = rerun_reason(self.cache, node.id, record)
            if reason:
                self.ctx.log(f"{label}: {reason}; running it again")
        self._set(node.id, "running", message=reason or "starting")
        started = time.monotonic()
        run = NodeRun(
            node_id=node.id,
            node_type=node.type,
            params=params,
            inputs=inputs,
            parent=self.ctx,
            work_dir=self.ctx.run_dir / "nodes" / node.id,
            on_progress=self._node_progress(node.id, label),
            title=label,
        )
        try:
            result = t.run(run)
            if isinstance(result, dict):
                result = NodeResult(outputs=result)
            if not result.stopped:
                missing = [
                    p.name for p in t.spec.outputs if p.name not in result.outputs
                ]
                if missing:
                    raise EngineError(f"The node produced no {missing[0]!r} output.")
            json.dumps([result.outputs, result.summary, result.models], allow_nan=False)
        except Exception as exc:
            message = _message_of(exc)
            self.ctx.log(f"node {node.id} ({label}) failed: {message}")
            if not isinstance(exc, EngineError):
                self.ctx.log(traceback.format_exc().rstrip())
            self._set(node.id, "failed", message=message)
            return "failed"
        seconds = round(time.monotonic() - started, 3)
        if result.stopped:
            self._set(node.id, "stopped", message="Stopped before the end.")
            return "stopped"
        self.outputs[node.id] = result.outputs
        self.models.extend(result.models)
        if result.models:
            self._pending.append(node.id)
        summary = {**result.summary, "seconds": seconds}
        if t.cacheable:
            with contextlib.suppress(OSError, ValueError, TypeError):
                atomic_write_json(
                    self.cache / f"{node.id}.json",
                    {
                        "key": key,
                        "record": record,
                        "type": node.type,
                        "version": t.spec.version,
                        "outputs": result.outputs,
                        "summary": summary,
                        "files": list(result.files),
                        "run_id": self.ctx.run_id,
                        "finished": time.time(),
                        "pending_models": list(result.models),
                    },
                )
        self._set(
            node.id,
            "done",
            progress=1.0,
            message=f"Done in {seconds:.1f} s"
            + (f" (ran again: {reason})." if reason else "."),
            outputs=result.outputs,
            summary=summary,
        )
        return "done"

    def summary(self, order: list[str]) -> dict[str, Any]:
        failed = [n for n in order if self.states[n]["state"] == "failed"]
        stopped = any(self.states[n]["state"] == "stopped" for n in order) or (
            self.ctx.should_stop
            and any(self.states[n]["state"] == "skipped" for n in order)
        )
        status = "failed" if failed else "stopped" if stopped else "completed"
        out: dict[str, Any] = {
            "flow": self.flow_name,
            "status": status,
            "order": order,
            "nodes": {n: dict(self.states[n]) for n in order},
            "ran": [n for n in order if self.states[n]["state"] == "done"],
            "cached": [n for n in order if self.states[n]["state"] == "cached"],
            "failed": failed,
            "models": self.models,
        }
        if failed:
            first = failed[0]
            node = self.doc.node(first)
            label = flow.display_name(node, self.catalog) if node else first
            reason = self.states[first]["message"].strip()
            if len(failed) > 1:
                reason = f"{reason.rstrip('.')} ({len(failed) - 1} more node(s) failed)"
            out["reason"] = end_sentence(
                f"The node {first!r} ({label}) failed: {reason}"
            )
        return out


class RunOptions(TypedDict, total=False):
    """:func:`run_flow`'s choices beside the flow's name (their defaults are
    :class:`FlowExecution`'s)."""

    only_stale: bool
    targets: list[str] | None
    on_state: StateSink | None


def run_flow(
    ctx: JobContext,
    doc: flow.FlowDocument,
    *,
    flow_name: str,
    **options: Unpack[RunOptions],
) -> dict[str, Any]:
    """Execute ``doc`` in ``ctx``; the summary (``status`` is ``completed``,
    ``stopped`` or ``failed``, with ``reason`` naming the failed node).
    Raises :class:`FlowInvalid` when the graph does not validate."""
    return FlowExecution(ctx, doc, flow_name=flow_name, **options).run()


@job_kind(
    KIND, check=validate, label="Workflow", group="training", progress_unit="nodes"
)
def run(ctx: JobContext, cfg: FlowRunConfig) -> dict[str, Any]:
    """Runs a workflow graph (.flow.json): its nodes in order, reusing the outputs
    of unchanged nodes."""
    assert cfg.document is not None  # the validator stores the graph there
    return FlowExecution(
        ctx,
        flow.FlowDocument.from_dict(cfg.document),
        flow_name=cfg.flow_name,
        only_stale=cfg.only_stale,
        targets=cfg.targets,
    ).run_as_job()
