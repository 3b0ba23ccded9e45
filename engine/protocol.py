"""The JSON Lines protocol between the studio (GUI) and the engine.

Standard library only: the GUI imports this module, and so do job processes.

Every message is one JSON object on one line::

    {"v": 1, "type": "run.start", "id": "c12", ...fields}

* Requests (commands, verbs: ``run.start``) carry an ``id``.
* Replies carry ``reply_to`` with the request's id; a failed request is
  answered with an ``error`` message instead (type, message, traceback) —
  errors are data, never an exception that crosses the boundary.
* Events (past tense or nouns: ``run.started``, ``run.metrics``) carry
  neither and may arrive at any time.

Each message is a frozen dataclass registered under its ``type``; ``encode``
and ``decode`` convert between dataclasses and lines. Unknown fields are
ignored on decode so that either side may be newer; an unknown ``type``
raises :class:`ProtocolError`, which the engine answers with an ``error``
and the GUI logs and ignores.

Decoding trusts nothing: a line longer than :data:`MAX_LINE_BYTES`, nesting
deeper than ``engine.untrusted.MAX_DEPTH``, integers beyond 64 bits, NaN or
Infinity, invalid UTF-8, a field of the wrong type, or a value outside the
bounds its field declares (:func:`limits`: ``min``, ``max``, ``max_len``,
``max_items``) is a :class:`ProtocolError` naming the field.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from engine import untrusted

PROTOCOL_VERSION = 1
"""Bumped on any incompatible change; ``hello`` refuses a mismatch."""

MAX_LINE_BYTES = 16 * 1024 * 1024
"""Longest line either side reads; big things travel as file paths."""
MAX_ID_CHARS = 200
"""Longest request id."""
MAX_PATH_CHARS = 4096
"""Longest file path or URL in a request."""
MAX_NAME_CHARS = 500
"""Longest name, id or kind in a request."""
MAX_TAGS = 20
"""Most tags a run carries (``run.annotate``)."""
MAX_TAG_CHARS = 40
"""Longest tag."""
MAX_NOTE_CHARS = 5000
"""Longest note on a run."""


class ProtocolError(ValueError):
    """A line that is not a valid message of this protocol; ``field`` names
    the field at fault, if one is."""

    def __init__(self, message: str, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class UnknownMessageType(ProtocolError):
    """A well-formed message whose ``type`` this side does not know (it may be
    newer): the engine answers it with an error, the GUI ignores it."""


def limits(
    *,
    min: float | None = None,
    max: float | None = None,
    max_len: int | None = None,
    max_items: int | None = None,
    max_item_len: int | None = None,
) -> dict[str, float]:
    """Field metadata with the bounds :func:`from_dict` enforces: numbers
    within ``min``..``max``, text of at most ``max_len`` characters, lists
    and objects of at most ``max_items`` entries, the text entries of a list
    of at most ``max_item_len`` characters."""
    bounds = {
        "min": min,
        "max": max,
        "max_len": max_len,
        "max_items": max_items,
        "max_item_len": max_item_len,
    }
    return {k: v for k, v in bounds.items() if v is not None}


@dataclass(frozen=True)
class Message:
    """Base of every message; subclasses set ``TYPE``."""

    TYPE: ClassVar[str] = ""


@dataclass(frozen=True)
class Request(Message):
    """A command that expects exactly one ``Reply`` or ``Error``."""

    id: str = field(default="", metadata=limits(max_len=MAX_ID_CHARS))


@dataclass(frozen=True)
class Event(Message):
    """A notification; nobody answers it."""


_REGISTRY: dict[str, type[Message]] = {}
M = TypeVar("M", bound=type[Message])


def message(type_name: str) -> typing.Callable[[M], M]:
    """Class decorator: register a frozen dataclass under ``type_name``."""

    def wrap(cls: M) -> M:
        if type_name in _REGISTRY:
            raise RuntimeError(f"message type {type_name!r} registered twice")
        cls.TYPE = type_name
        _REGISTRY[type_name] = cls
        return cls

    return wrap


def message_types() -> dict[str, type[Message]]:
    """All registered message classes by type name (a copy)."""
    return dict(_REGISTRY)


# --------------------------------------------------------------------------
# Session and generic replies
# --------------------------------------------------------------------------


@message("hello")
@dataclass(frozen=True)
class Hello(Request):
    """Opens a session. Reply result: ``HelloResult`` fields."""

    protocol_version: int = field(
        default=PROTOCOL_VERSION, metadata=limits(min=0, max=1_000_000)
    )
    client: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("reply")
@dataclass(frozen=True)
class Reply(Message):
    """Successful answer to the request whose id is ``reply_to``."""

    reply_to: str = ""
    result: dict[str, Any] = field(default_factory=dict)


@message("error")
@dataclass(frozen=True)
class Error(Message):
    """A failed request (``reply_to`` set) or a failure no request caused.

    ``message`` is one sentence a user can read; ``traceback`` is for the log.
    """

    reply_to: str | None = None
    error_type: str = "Error"
    message: str = ""
    traceback: str = ""
    field: str = ""
    """The configuration field at fault (``hyperparameters.batch_size``), if any."""


@message("ping")
@dataclass(frozen=True)
class Ping(Request):
    """Liveness and latency probe. Reply result: ``{"payload": payload}``."""

    payload: str = field(default="", metadata=limits(max_len=65_536))


@message("shutdown")
@dataclass(frozen=True)
class Shutdown(Request):
    """Stop every run cooperatively, reply, and exit. ``restart``: the studio
    starts a new engine right after (runs record ``engine_restart`` as the
    reason they stopped, instead of ``user``). ``keep_runs``: the runs go on
    headless instead (``run.detach``), as when the studio dies; a studio
    opened later shows them."""

    restart: bool = False
    keep_runs: bool = False


# --------------------------------------------------------------------------
# Project
# --------------------------------------------------------------------------


@message("project.open")
@dataclass(frozen=True)
class OpenProject(Request):
    """Open (or with ``create`` make) the project folder at ``path``.

    Reply result: a project snapshot (see ``engine.store.project``):
    ``path``, ``name``, ``envs``, ``flows``, ``runs``, ``models``.
    """

    path: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    create: bool = False
    with_examples: bool = True


@message("project.snapshot")
@dataclass(frozen=True)
class GetProjectSnapshot(Request):
    """Re-read the open project. Reply result: as ``project.open``."""


@message("project.changed")
@dataclass(frozen=True)
class ProjectChanged(Event):
    """Something in the open project changed on disk (a run, a model)."""

    what: str = ""


# --------------------------------------------------------------------------
# Runs
# --------------------------------------------------------------------------


@message("run.start")
@dataclass(frozen=True)
class StartRun(Request):
    """Start a job of ``kind`` with ``config`` in its own process.

    Reply result: ``{"run_id": ...}``. The config is validated before the
    process starts; a bad config is an ``error`` reply naming the field.
    """

    kind: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    config: dict[str, Any] = field(
        default_factory=dict, metadata=limits(max_items=1000)
    )
    name: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("run.stop")
@dataclass(frozen=True)
class StopRun(Request):
    """Ask a run to stop (cooperatively, then by force after ``timeout_s``).

    The supervisor sends the same message to the job's stdin with ``reason``
    set (``engine.jobs.context.STOP_REASONS``): who asked, recorded as the
    run's ``stopped_by``."""

    run_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    timeout_s: float = field(default=10.0, metadata=limits(min=0.0, max=3600.0))
    reason: str = field(default="user", metadata=limits(max_len=MAX_NAME_CHARS))


@message("run.detach")
@dataclass(frozen=True)
class DetachRun(Request):
    """Sent by the supervisor to a job's stdin when the studio died: the run
    keeps training headless (its log to ``log.txt``, its end recorded in the
    project by itself) and a studio opened later shows it live as it shows
    any headless run. The job answers with ``run.detached``."""

    run_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("run.detached")
@dataclass(frozen=True)
class RunDetached(Event):
    """A job took over its own bookkeeping after ``run.detach``."""

    run_id: str = ""


@message("run.resume")
@dataclass(frozen=True)
class ResumeRun(Request):
    """Continue a stopped, failed or interrupted run from its last checkpoint."""

    run_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("run.annotate")
@dataclass(frozen=True)
class AnnotateRun(Request):
    """Set a run's ``tags`` and ``note``, replacing both (an empty list and
    text clear them). The engine stores :func:`clean_tags` of the tags; tags
    or a note out of bounds (:func:`annotation_problem`) or an unknown run
    are an ``error`` reply of one sentence, and nothing is changed. Reply
    result: ``{"run_id", "tags", "note"}`` as stored."""

    run_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    tags: list[str] = field(
        default_factory=list,
        metadata=limits(max_items=MAX_TAGS, max_item_len=MAX_TAG_CHARS),
    )
    note: str = field(default="", metadata=limits(max_len=MAX_NOTE_CHARS))


def clean_tags(tags: typing.Iterable[str]) -> list[str]:
    """Tags as stored: each entry split at commas (the studio edits them as
    one comma-separated line), stripped, empty ones and repeats (ignoring
    case) dropped, in the order given."""
    out: list[str] = []
    seen: set[str] = set()
    for entry in tags:
        for part in entry.split(","):
            tag = " ".join(part.split())
            if tag and tag.casefold() not in seen:
                seen.add(tag.casefold())
                out.append(tag)
    return out


def annotation_problem(tags: list[str], note: str) -> tuple[str, str] | None:
    """None when ``tags`` (cleaned) and ``note`` are within the bounds of
    :class:`AnnotateRun`, else ``(field, one sentence saying why not)``."""
    if len(tags) > MAX_TAGS:
        return "tags", f"A run can have at most {MAX_TAGS} tags, not {len(tags)}."
    for tag in tags:
        if len(tag) > MAX_TAG_CHARS:
            shown = _clip(tag, MAX_TAG_CHARS)
            return (
                "tags",
                f"The tag {shown!r} is longer than {MAX_TAG_CHARS} characters.",
            )
    if len(note) > MAX_NOTE_CHARS:
        return (
            "note",
            f"The note is longer than {MAX_NOTE_CHARS:,} characters "
            f"({len(note):,}); shorten it.",
        )
    return None


@message("run.schema")
@dataclass(frozen=True)
class GetRunSchema(Request):
    """The parameter form of a job kind, for ``values`` entered so far (the
    fields may depend on them: the algorithm decides the hyperparameters).

    Reply result: ``{"fields": [schema, ...]}``, each schema as
    ``widgets.param_form`` reads it (name, type, default, min, max, choices,
    optional, help, title, group).
    """

    kind: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    values: dict[str, Any] = field(
        default_factory=dict, metadata=limits(max_items=1000)
    )


@message("data.preview")
@dataclass(frozen=True)
class PreviewData(Request):
    """The first ``rows`` rows of a dataset import (``llm.import`` config
    ``values`` as typed so far), mapped as the import would write them.

    Reply result: ``{"format", "method", "columns": [source column, ...],
    "rows": [row, ...], "problems": [sentence, ...]}`` (bad rows among the
    first ones are left out of ``rows`` and said in ``problems``). A config
    the import refuses is an ``error`` reply naming its field.
    """

    values: dict[str, Any] = field(
        default_factory=dict, metadata=limits(max_items=1000)
    )
    rows: int = field(default=20, metadata=limits(min=1, max=200))


@message("run.list")
@dataclass(frozen=True)
class ListRuns(Request):
    """Reply result: ``{"runs": [run record, ...]}``."""


@message("run.started")
@dataclass(frozen=True)
class RunStarted(Event):
    run_id: str = ""
    kind: str = ""
    name: str = ""
    pid: int = 0
    run_dir: str = ""


@message("run.progress")
@dataclass(frozen=True)
class RunProgress(Event):
    """``done`` of ``total`` units (steps); ``rate`` in units per second."""

    run_id: str = ""
    done: float = 0.0
    total: float = 0.0
    rate: float = 0.0
    eta_s: float | None = None
    message: str = ""


@message("run.metrics")
@dataclass(frozen=True)
class RunMetrics(Event):
    """A batch of metric rows, each ``{"step": int, "time": float, key: value}``.

    Keys are slash-namespaced (``rollout/ep_rew_mean``); ``time`` is seconds
    since the run started.
    """

    run_id: str = ""
    rows: list[dict[str, Any]] = field(default_factory=list)


@message("run.log")
@dataclass(frozen=True)
class RunLog(Event):
    """Lines the job printed (stderr, warnings, its own log calls)."""

    run_id: str = ""
    lines: list[str] = field(default_factory=list)


@message("run.finished")
@dataclass(frozen=True)
class RunFinished(Event):
    """The run ended on its own (``completed``) or because it was ``stopped``."""

    run_id: str = ""
    status: str = "completed"
    summary: dict[str, Any] = field(default_factory=dict)


@message("run.failed")
@dataclass(frozen=True)
class RunFailed(Event):
    """The run's process ended badly.

    ``exit_code`` is the process's exit status, ``signal`` the signal number
    that killed it (``None`` if none); ``reason`` is one readable sentence.
    """

    run_id: str = ""
    reason: str = ""
    exit_code: int | None = None
    signal: int | None = None
    last_log_lines: list[str] = field(default_factory=list)


# --------------------------------------------------------------------------
# Machine
# --------------------------------------------------------------------------


@message("hardware.detect")
@dataclass(frozen=True)
class DetectHardware(Request):
    """Reply result: ``engine.hardware.HardwareInfo`` as a dict."""


@message("hardware.usage")
@dataclass(frozen=True)
class GetHardwareUsage(Request):
    """Live GPU load. Reply result: ``{"gpus": [{"index", "name",
    "util_percent", "memory_used_bytes", "memory_total_bytes"}, ...]}``
    (``engine.hardware.GpuUsage``; unknown values are null); empty without an
    NVIDIA GPU. CPU and RAM the studio reads itself."""


@message("engine.log")
@dataclass(frozen=True)
class EngineLog(Event):
    """A line from the supervisor itself (not from a run)."""

    level: str = "info"
    text: str = ""


# --------------------------------------------------------------------------
# Flows
# --------------------------------------------------------------------------


@message("flow.catalog")
@dataclass(frozen=True)
class GetFlowCatalog(Request):
    """Reply result: ``{"node_types": [...], "port_types": [...],
    "format_version": int}``; each node type as ``NodeTypeSpec.to_dict()``
    of ``engine.flow`` (build specs with ``engine.flow.catalog_from_dicts``)."""


@message("flow.validate")
@dataclass(frozen=True)
class ValidateFlow(Request):
    """Validate a flow given as a file ``path`` or as a ``document`` dict.

    Reply result: ``{"errors": {node_id: [sentence, ...]}}`` (empty when the
    flow can run; key ``""`` for problems that belong to no node). A file
    that is not a flow is an ``error`` reply.
    """

    path: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    document: dict[str, Any] | None = None


@message("flow.node_state")
@dataclass(frozen=True)
class FlowNodeState(Event):
    """A node of a ``flow.run`` run changed state or progressed.

    ``state`` is one of ``engine.flow.NODE_STATES`` (queued, running, done,
    cached, failed, skipped, stopped); ``progress`` is in [0, 1];
    ``message`` is one sentence (the error for ``failed``); ``outputs``
    (for ``done`` and ``cached``) holds the node's outputs by port, and
    ``summary`` facts worth showing on the node (``seconds``,
    ``mean_reward``, ``total_steps``, ...).
    """

    run_id: str = ""
    node_id: str = ""
    state: str = ""
    progress: float = 0.0
    message: str = ""
    outputs: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------
# Environments
# --------------------------------------------------------------------------


MAX_CHECK_STEPS = 10_000
"""Longest determinism test ``env.check`` runs (env steps)."""


@message("env.check")
@dataclass(frozen=True)
class CheckEnv(Request):
    """Check a designed env given as a ``spec`` document or a file ``path``.

    With both, the document is checked and ``path`` only says where it lives
    (relative files such as mock data resolve against its project).
    ``steps`` is the length of the determinism test in env steps;
    ``env_checks`` False runs the static checks only (fast, no env made).

    Reply result: ``{"ok": bool, "name", "kind", "env_id", "problems":
    [{"path": "workflow.transitions[3].to", "severity": "error" | "warning",
    "message": sentence, "check": name}, ...], "stats": {...}}``. A missing
    or malformed file is an ``error`` reply.
    """

    spec: dict[str, Any] | None = None
    path: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    steps: int = field(default=200, metadata=limits(min=1, max=MAX_CHECK_STEPS))
    env_checks: bool = True


@message("env.import_jira")
@dataclass(frozen=True)
class ImportJira(Request):
    """Make a workflow env of the RL Hub Jira mock data file at ``path`` in
    the open project (``engine.envs.jira.import_jira``): ``name``, refused
    when taken, or (when '') the file's name, suffixed until free.

    Reply result: ``{"name", "env_id", "spec_file", "data_file", "issues",
    "statuses"}``; a ``project.changed`` event follows. Bad mock data is an
    ``error`` reply of one sentence, and nothing is written.
    """

    path: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    name: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


MAX_DESCRIBED_ENVS = 32  # envs one env.catalog may make to describe their spaces


@message("env.catalog")
@dataclass(frozen=True)
class GetEnvCatalog(Request):
    """Installed gymnasium envs. ``ids`` limits the list to those ids;
    ``with_spaces`` adds observation/action spaces and render modes. That
    makes one instance of each listed env (an Atari game loads its ROM; all
    415 installed envs take about a minute), so it needs ``ids``, at most
    :data:`MAX_DESCRIBED_ENVS` of them.

    Reply result: ``{"envs": [{"id", "namespace", "entry_point", "kwargs",
    "max_episode_steps", "designed", ["observation_space", "action_space",
    "render_modes" | "error"]}, ...]}``.
    """

    ids: list[str] = field(default_factory=list, metadata=limits(max_items=200))
    with_spaces: bool = False


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------


@message("training.status")
@dataclass(frozen=True)
class GetTrainingStatus(Request):
    """The open project's readiness to retrain and training status.

    Reply result: what ``GET /training/status`` of ``serve-http`` answers
    (``engine.retrain_status.training_status``): ``readiness`` (``ready``,
    ``reason``, ``stats``), ``currentJob``, ``lastCompleted``,
    ``latestModelVersion``, ``deployedModelVersion``, ``dataRates``,
    ``schedule`` (a running ``serve-http --retrain-every``'s, or all None)
    and ``settings``.
    """


@message("model.lineage")
@dataclass(frozen=True)
class GetModelLineage(Request):
    """Where a registered model came from.

    Reply result: ``{"links": [[parent, child, relation], ...]}``: every link
    of the model's ancestry; a parent is a model id, a run id or (for base
    models outside the project) a path or hub id.
    """

    model_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("model.delete")
@dataclass(frozen=True)
class DeleteModel(Request):
    """Remove a registered model: its folder and its row. An unknown id is
    an ``error`` reply. Reply result: ``{"model_id": model_id}``; a
    ``project.changed`` event follows."""

    model_id: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("ollama.list")
@dataclass(frozen=True)
class ListOllamaModels(Request):
    """The models of the Ollama server at ``host`` (empty: the default).

    Reply result: ``{"host": url, "version": str, "models": [{"name",
    "size", "modified_at", "digest", "details": {...}}, ...]}`` as
    ``/api/tags`` gives them. No server answering is an ``error`` reply of
    one sentence.
    """

    host: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))


@message("hub.search")
@dataclass(frozen=True)
class SearchHub(Request):
    """Text-generation models on the Hugging Face Hub (``$HF_ENDPOINT``)
    whose id contains ``query``, most downloaded first.

    Reply result: ``{"endpoint": url, "models": [{"id", "downloads",
    "likes", "gated"}, ...]}``. An unreachable Hub, or offline mode, is an
    ``error`` reply of one sentence.
    """

    query: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    limit: int = field(default=20, metadata=limits(min=1, max=100))


@message("ollama.delete")
@dataclass(frozen=True)
class DeleteOllamaModel(Request):
    """Delete model ``name`` from the Ollama server at ``host``.
    Reply result: ``{"name": name}``."""

    host: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    name: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("chat")
@dataclass(frozen=True)
class Chat(Request):
    """One chat turn with ``model``: an Ollama model name (at ``host``) or a
    local Hugging Face model folder (generated in the engine).

    ``messages`` are ``{"role": "system" | "user" | "assistant", "content":
    text}``, the last one the user's. Reply result: ``{"reply": text,
    "model": model, "tokens": n, "seconds": s, "load_seconds": s}`` (the
    answer's tokens, the seconds generating them and loading the model).
    """

    model: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    host: str = field(default="", metadata=limits(max_len=MAX_PATH_CHARS))
    messages: list[dict[str, Any]] = field(
        default_factory=list, metadata=limits(max_items=1000)
    )
    max_new_tokens: int = field(default=128, metadata=limits(min=1, max=4096))


@message("agent.list")
@dataclass(frozen=True)
class GetAgents(Request):
    """The open project's agents as the promotion gate sees them (it decides
    the versions it has not yet seen first, as the service does).

    Reply result: ``{"rl_enabled": the project's switch, "agents": [...]}``,
    each agent as ``engine.store.promotion.Promotion.overview`` gives it:
    ``name``, ``current``, ``previous``, ``candidate``, ``pin``,
    ``rl_enabled``, ``gate_metric``, ``tolerance``, ``versions`` (each
    ``version``, ``role``, ``status``, ``reason``, ``evaluation``,
    ``warnings``, ...) and ``log`` (its last promotion log entries). The
    requests below answer the same after their change.
    """


@message("agent.promote")
@dataclass(frozen=True)
class PromoteAgent(Request):
    """Make ``version`` of ``agent`` current by hand, kept in the promotion
    log with ``by`` ('' = the engine's user) and ``why``."""

    agent: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    version: int = field(default=1, metadata=limits(min=1, max=2**31 - 1))
    why: str = field(default="", metadata=limits(max_len=MAX_NOTE_CHARS))
    by: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("agent.rollback")
@dataclass(frozen=True)
class RollbackAgent(Request):
    """Roll ``agent``'s current version back to the one promoted before it,
    kept in the promotion log with ``by`` and ``why``."""

    agent: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    why: str = field(default="", metadata=limits(max_len=MAX_NOTE_CHARS))
    by: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))


@message("agent.switch")
@dataclass(frozen=True)
class SwitchAgent(Request):
    """Turn ``agent``'s RL switch (``rl_enabled``; '' = the project's) on or
    off: off, ``act`` answers from the base model or the rule policy."""

    agent: str = field(default="", metadata=limits(max_len=MAX_NAME_CHARS))
    rl_enabled: bool = True


# --------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------

_ids = itertools.count(1)


def next_id(prefix: str = "r") -> str:
    """A request id unique within this process."""
    return f"{prefix}{next(_ids)}"


def to_dict(msg: Message) -> dict[str, Any]:
    """The message as a JSON-ready dict, envelope included."""
    body: dict[str, Any] = {"v": PROTOCOL_VERSION, "type": msg.TYPE}
    for f in dataclasses.fields(msg):
        body[f.name] = getattr(msg, f.name)
    return body


def encode(msg: Message) -> str:
    """One line of JSON (no trailing newline). Raises ``TypeError`` on values
    that JSON cannot carry: the protocol never pickles."""
    return json.dumps(to_dict(msg), separators=(",", ":"), allow_nan=False)


def from_dict(data: Any) -> Message:
    """Build the registered message for ``data``; ``ProtocolError`` if invalid."""
    if not isinstance(data, dict):
        raise ProtocolError("a message must be a JSON object")
    type_name = data.get("type")
    if not isinstance(type_name, str) or not type_name:
        raise ProtocolError("the message has no 'type'")
    cls = _REGISTRY.get(type_name)
    if cls is None:
        raise UnknownMessageType(f"unknown message type {_clip(type_name)!r}")
    kwargs: dict[str, Any] = {}
    hints = _hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data:
            value = data[f.name]
            _check_type(type_name, f.name, value, hints[f.name])
            _check_bounds(type_name, f, value)
            kwargs[f.name] = value
    return cls(**kwargs)


def parse(line: str | bytes) -> dict[str, Any]:
    """The JSON object of one line, within the limits (see the module
    docstring); ``ProtocolError`` if it is not one."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"the line is longer than {MAX_LINE_BYTES:,} bytes")
    try:
        data = untrusted.loads(line, "the line")
    except untrusted.UntrustedDataError as exc:
        raise ProtocolError(str(exc).rstrip("."), exc.field) from None
    if not isinstance(data, dict):
        raise ProtocolError("a message must be a JSON object")
    return data


def decode(line: str | bytes) -> Message:
    """Parse one line into its message; ``ProtocolError`` if it is not one."""
    return from_dict(parse(line))


def request_id_of(line: str | bytes) -> str | None:
    """Best effort: the ``id`` of a line that failed to decode, to reply to.

    The line is parsed again without the limits that refused it (NaN, huge
    numbers and lone surrogates elsewhere in the line are let through, too
    deep a nesting is not): a refusal then answers the id it could read,
    so the sender can match it. None when there is no readable string id.
    """
    try:
        data = parse(line)
    except ProtocolError:
        try:
            text = line.decode("utf-8") if isinstance(line, bytes) else line
            # Numbers stay text: a 5,000-digit one costs no conversion.
            data = json.loads(text, parse_int=str, parse_float=str, parse_constant=str)
        except (ValueError, RecursionError):
            return None
    if not isinstance(data, dict):
        return None
    value = data.get("id")
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: nothing to answer to
            return None
        return value
    return None


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


_hint_cache: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _hint_cache:
        _hint_cache[cls] = typing.get_type_hints(cls)
    return _hint_cache[cls]


def _check_type(type_name: str, name: str, value: Any, hint: Any) -> None:
    if not _matches(value, hint):
        raise ProtocolError(
            f"field {name!r} of {type_name!r} has the wrong type "
            f"({type(value).__name__})",
            name,
        )


def _check_bounds(type_name: str, f: dataclasses.Field[Any], value: Any) -> None:
    limits = f.metadata
    if not limits or value is None:
        return
    where = f"field {f.name!r} of {type_name!r}"
    low, high = limits.get("min"), limits.get("max")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if low is not None and value < low:
            raise ProtocolError(
                f"{where} must be at least {low:,} (got {value:,})", f.name
            )
        if high is not None and value > high:
            raise ProtocolError(
                f"{where} must be at most {high:,} (got {value:,})", f.name
            )
    if isinstance(value, str) and len(value) > limits.get("max_len", len(value)):
        raise ProtocolError(
            f"{where} is longer than {limits['max_len']:,} characters", f.name
        )
    if isinstance(value, list | dict) and len(value) > limits.get(
        "max_items", len(value)
    ):
        raise ProtocolError(
            f"{where} has more than {limits['max_items']:,} entries", f.name
        )
    longest = limits.get("max_item_len")
    if isinstance(value, list) and longest is not None:
        for item in value:
            if isinstance(item, str) and len(item) > longest:
                raise ProtocolError(
                    f"{where} has an entry longer than {longest:,} characters",
                    f.name,
                )


def _matches(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_matches(v, item) for v in value)
    if origin is dict:
        _, item = typing.get_args(hint) or (str, Any)
        return isinstance(value, dict) and all(
            _matches(v, item) for v in value.values()
        )
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True
