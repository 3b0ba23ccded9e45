"""What a node function sees while it runs: :class:`NodeRun`, and what it
returns: :class:`NodeResult`.

A node function is ``run(node: NodeRun) -> NodeResult`` (or a plain dict of
outputs by port name). It reads ``node.params`` (every parameter, defaults
filled) and ``node.inputs`` (the upstream outputs by input port; a list for
a ``multiple`` input; absent for an optional input that is not linked),
reports through ``node.progress`` / ``node.log`` / ``node.metrics``, checks
``node.should_stop``, and writes its files under ``node.work_dir``
(``runs/<flow-run>/nodes/<node-id>/``). A bad parameter or input is an
``engine.errors.EngineError`` with one sentence; the run shows it on the node.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.jobs.context import JobContext


class NodeError(EngineError):
    """A node cannot do its work; the message is one sentence for the user."""


@dataclass
class NodeResult:
    """What a node produced."""

    outputs: dict[str, Any]
    """JSON-ready value of each output port (files travel as paths)."""
    summary: dict[str, Any] = field(default_factory=dict)
    """Facts worth showing on the node (metrics, step counts); JSON-ready."""
    models: list[dict[str, Any]] = field(default_factory=list)
    """Models for the supervisor to register (``name``, ``kind``, ``file``,
    ``extra_files``, ``env``, ``algo``, ``metrics``, ...)."""
    files: list[str] = field(default_factory=list)
    """Files the outputs point at; a cached result whose files are gone is
    not reused."""
    stopped: bool = False
    """The node ended early because the run was asked to stop; its outputs
    are not cached and downstream nodes do not run."""


ProgressSink = Callable[[float, float, str, str], None]
"""``sink(done, total, message, unit)``: a node's progress as it reports it."""


def progress_text(done: float, total: float, message: str, unit: str) -> str:
    """What a running node says: its message and, when it counts something
    (``total`` above 1 or a ``unit`` named), the counts, e.g. ``evaluating
    before · 12 / 40 episodes``."""
    if total <= 0 or (total <= 1 and not unit):
        return message
    counts = f"{done:,.0f} / {total:,.0f}" + (f" {unit}" if unit else "")
    return f"{message} · {counts}" if message else counts


class NodeRun:
    """One execution of one node inside a flow run."""

    def __init__(
        self,
        *,
        node_id: str,
        node_type: str,
        params: dict[str, Any],
        inputs: dict[str, Any],
        parent: JobContext,
        work_dir: Path,
        on_progress: ProgressSink,
        title: str = "",
    ) -> None:
        self.node_id = node_id
        self.node_type = node_type
        self.title = title or node_id
        self.params = params
        self.inputs = inputs
        self.parent = parent
        self.work_dir = Path(work_dir)
        self._on_progress = on_progress

    @property
    def project_dir(self) -> Path:
        return self.parent.project_dir

    @property
    def flow_run_id(self) -> str:
        return self.parent.run_id

    @property
    def should_stop(self) -> bool:
        return self.parent.should_stop

    def wait_for_stop(self, timeout: float) -> bool:
        return self.parent.wait_for_stop(timeout)

    def progress(
        self, done: float, total: float, message: str = "", unit: str = ""
    ) -> None:
        """``done`` of ``total`` ``unit`` (episodes, bytes; empty: a fraction
        of the node's work), ``message`` saying what it is doing."""
        self._on_progress(float(done), float(total), message, unit)

    def log(self, text: str) -> None:
        self.parent.log(f"[{self.node_id}] {text}")

    def metrics(self, step: int, values: Mapping[str, Any]) -> None:
        """Metrics go to the flow run's ``metrics.jsonl`` under
        ``<node-id>/<key>`` so that two training nodes never mix curves."""
        self.parent.metrics(step, {f"{self.node_id}/{k}": v for k, v in values.items()})

    def job_context(self, kind: str, config: dict[str, Any]) -> NodeJobContext:
        """A JobContext for running a job function (``engine.rl.train:run``)
        in this process, in ``work_dir``; close it when done."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        from engine.store.atomic import atomic_write_json

        run_id = f"{self.flow_run_id}.{self.node_id}"
        atomic_write_json(
            self.work_dir / "config.json",
            {"run_id": run_id, "kind": kind, "config": config},
        )
        return NodeJobContext(self, run_id, kind, config)

    def input(self, port: str) -> Any:
        """The value of a linked input; NodeError naming it when absent."""
        if port not in self.inputs:
            raise NodeError(f"The input {port!r} is not linked.")
        return self.inputs[port]

    def model_or_adapter(self, to: str) -> tuple[dict[str, Any], bool]:
        """The value linked to the ``model`` or the ``adapter`` input (one of
        the two, a NodeError saying what it is needed ``to`` do otherwise)
        and whether it is the adapter."""
        model, adapter = self.inputs.get("model"), self.inputs.get("adapter")
        if model is None and adapter is None:
            raise NodeError(f"Link a model or an adapter to {to}.")
        if model is not None and adapter is not None:
            raise NodeError(f"Link a model or an adapter to {to}, not both.")
        if adapter is not None:
            return adapter, True
        assert model is not None  # one of the two, checked above
        return model, False


class NodeJobContext(JobContext):
    """A job's context inside a node: own folder and metrics file, while
    progress, logs, metrics and the stop flag go through the flow run."""

    def __init__(
        self, node: NodeRun, run_id: str, kind: str, config: dict[str, Any]
    ) -> None:
        self._own_stop_reason = ""
        super().__init__(run_id, node.work_dir, kind, config, events=None)
        self.project_dir = node.project_dir
        self._node = node
        from engine.jobs.registry import get_kind

        self._unit = get_kind(kind).progress_unit
        """What the job's progress counts (its kind declares it)."""

    @property
    def should_stop(self) -> bool:
        return self._node.should_stop or self._stop.is_set()

    @property
    def stop_reason(self) -> str:
        """This job's own reason, else the flow run's (its Cancel)."""
        return self._own_stop_reason or (
            self._node.parent.stop_reason if self._node.should_stop else ""
        )

    @stop_reason.setter
    def stop_reason(self, value: str) -> None:
        self._own_stop_reason = value

    def wait_for_stop(self, timeout: float) -> bool:
        return self._node.wait_for_stop(timeout)

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        self._node.progress(done, total, message, self._unit)

    def metrics(self, step: int, values: Mapping[str, Any]) -> None:
        super().metrics(step, values)
        self._node.metrics(step, values)

    def log(self, text: str) -> None:
        self._node.log(text)


def parse_json_object(text: str, name: str) -> dict[str, Any]:
    """A parameter holding a JSON object as text (``"{}"`` for none)."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NodeError(f"{name} is not valid JSON ({exc.msg}).") from None
    if not isinstance(value, dict):
        raise NodeError(f'{name} must be a JSON object like {{"key": 1}}.')
    return value


def json_object_check(*names: str) -> Callable[[dict[str, Any]], list[str]]:
    """A ``check`` for :func:`engine.nodes.registry.node_type`: the named
    text parameters must hold JSON objects."""

    def check(params: dict[str, Any]) -> list[str]:
        problems = []
        for name in names:
            value = params.get(name, "")
            if isinstance(value, str):
                try:
                    parse_json_object(value, name)
                except NodeError as exc:
                    problems.append(str(exc))
        return problems

    return check
