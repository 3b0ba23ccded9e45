"""The HTTP API of ``rl-studio-engine serve-http`` (FastAPI).

Routes are thin: each checks its request, calls :class:`Service` and returns
JSON. Every failure is one HTTP status with ``{"error": "<one sentence>"}``
(and ``"field"`` when one field is to blame): FastAPI's own validation body
is replaced by a sentence naming the field. With a token, every route
(``/docs`` and ``/openapi.json`` included) wants ``Authorization: Bearer
<token>``, compared in constant time.

What a client sends is checked where it comes in: the body is counted as
it arrives, whatever its framing (``Content-Length`` or chunked), and
refused past :data:`MAX_BODY_BYTES`; JSON is parsed by
:func:`engine.untrusted.loads` (no NaN or Infinity, no integer beyond 64
bits, no lone surrogate, bounded nesting); path parameters are at most
:data:`MAX_PATH_PARAM_CHARS` characters with no control character. A
sentence quotes at most 200 characters of anything the client sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar

from fastapi import Body, FastAPI, Query, Request
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
)
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from engine import alerts, contract, untrusted
from engine.envs.jira import (
    NoMockData,
    check_mock_data,
    import_jira,
    project_mock_data,
)
from engine.errors import (
    ConfigError,
    EngineError,
    UnknownRunError,
    bounded,
    quoted,
)
from engine.service.agents import ActFailed, UnknownAgent
from engine.service.state import MAX_METRIC_ROWS, MetricsTail, NotFound, Service
from engine.settings import as_dict
from engine.store.database import DatabaseUnavailable
from engine.store.promotion import configure_serving, serving_settings
from engine.store.trajectories import MAX_BATCH_STEPS, UnknownTrajectoryError

API_VERSION = "1"
TRAINING_PREFIXES = ("/training", "/api/admin/training")
"""The training routes answer under both: the agent-training service's
clients call ``/api/admin/training/...``."""
HEAVY_MODULES = ("torch", "transformers", "trl", "stable_baselines3", "peft")
MAX_BODY_BYTES = 1 << 20
"""The largest request body taken (a step with a long prompt fits)."""
MAX_PATH_PARAM_CHARS = 200
"""The longest value of a path parameter (an env id, a run id, a name):
longer ones name nothing the project can hold (file names stop at 255
bytes), and are refused before they reach the file system."""
PATH_PARAM_PATTERN = r"^[^\x00-\x1f\x7f]+$"
"""No control character (NUL included) in a path parameter."""
SSE_POLL_S = 0.2
"""How often an event stream looks for new metric rows and status."""
SSE_KEEPALIVE_S = 10.0
"""A comment line this often keeps proxies from closing a quiet stream."""
_Model = TypeVar("_Model", bound="BaseModel")

PathText = Annotated[
    str,
    PathParam(
        min_length=1, max_length=MAX_PATH_PARAM_CHARS, pattern=PATH_PARAM_PATTERN
    ),
]
"""A path parameter, bounded and free of control characters."""


# ------------------------------------------------------------------ bodies
class TrainRequest(BaseModel):
    """``POST /train/{env}``: what the run dialog asks for."""

    model_config = ConfigDict(extra="forbid")
    algo: str = "auto"
    """``PPO``, ``A2C``, ``DQN``, ``SAC``, ``TD3``, ``MaskablePPO`` or ``auto``."""
    steps: StrictInt | None = None
    """Training length in environment steps; None: the preset's length."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Run settings and hyperparameters by name, as the run dialog's form
    (``n_envs``, ``seed``, ``learning_rate``, ...)."""
    name: str = ""
    """The run's name; empty: ``"<algo> <env>"``."""


class FlowRunRequest(BaseModel):
    """``POST /flows/{name}/run``."""

    model_config = ConfigDict(extra="forbid")
    overrides: dict[str, Any] = Field(default_factory=dict)
    """``node_id.param`` -> value, applied to this run only."""
    only_stale: StrictBool = True
    """Reuse the outputs of nodes unchanged since their last successful run."""
    targets: list[str] = Field(default_factory=list)
    """Run only these nodes (and what they need); empty: all."""
    agent: str = ""
    """The agent whose next version the flow's model becomes ('' = none)."""


RECORDER_FIELDS = {
    "agentId": "agent",
    "scenarioId": "scenario",
    "windowId": "window",
    "stepNumber": "step_number",
    "environmentState": "state",
    "finalStatus": "status",
    "totalReward": "total_reward",
}
"""The trajectory recorder's camelCase field -> this API's name: the
intake routes take either spelling (an ``action`` of ``{type, params}`` is
kept as given)."""


def recorder_names(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` with the recorder's field names as this API's; a field given
    in both spellings is refused."""
    out = dict(raw)
    for theirs, ours in RECORDER_FIELDS.items():
        if theirs in out:
            if ours in out:
                raise ConfigError(theirs, f"Give {ours} or {theirs}, not both.")
            out[ours] = out.pop(theirs)
    return out


class TrajectoryStart(BaseModel):
    """``POST /trajectories``: an agent starts recording."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    """The agent's name (its trace file is ``data/traces/agent-<agent>.jsonl``)."""
    scenario: str = ""
    """The scenario (task) it works on; trajectories are grouped by it."""
    window: str = ""
    """The time window or batch it belongs to."""
    env: str = ""
    """The environment it acts in, when it has one (a designed env, an id)."""
    meta: dict[str, Any] = Field(default_factory=dict)
    """Anything else to keep with it."""


class TrajectoryStep(BaseModel):
    """``POST /trajectories/{id}/steps``: one step, acknowledged once stored."""

    model_config = ConfigDict(extra="forbid")
    state: Any = None
    """What the agent saw (a JSON object is kept as is)."""
    action: Any
    """What it did (a tool name, an index, an object)."""
    reward: float = Field(strict=True, allow_inf_nan=False)
    prompt: Any = None
    """A language-model agent's prompt: text or chat messages
    (``[{"role": ..., "content": ...}]``; checked by the store)."""
    completion: str | None = None
    """A language-model agent's reply."""
    valid: StrictBool = True
    """False for an action the environment refused."""
    info: dict[str, Any] | None = None
    step_number: StrictInt | None = Field(default=None, ge=0)
    """The recorder's own count of the step (kept in ``info``; the store
    numbers steps as they are committed)."""

    def fields(self) -> dict[str, Any]:
        """The store's keywords (:meth:`TrajectoryStore.add_step`)."""
        out = self.model_dump(exclude={"step_number"})
        if self.step_number is not None:
            out["info"] = {**(self.info or {}), "step_number": self.step_number}
        return out


class TrajectorySteps(BaseModel):
    """``POST /trajectories/{id}/steps`` with several steps: stored in one
    transaction, all or none (a recorder buffering a few steps per request
    ingests several times faster than one step a request)."""

    model_config = ConfigDict(extra="forbid")
    steps: list[TrajectoryStep] = Field(min_length=1, max_length=MAX_BATCH_STEPS)


class TrajectoryEnd(BaseModel):
    """``POST /trajectories/{id}/end``."""

    model_config = ConfigDict(extra="forbid")
    status: str
    """``completed``, ``failed``, ``error``, ``timeout`` or ``abandoned``."""
    total_reward: float | None = Field(default=None, strict=True, allow_inf_nan=False)
    """The episode's return; None: the sum of the steps' rewards."""


class TriggerRequest(BaseModel):
    """``POST /training/trigger`` (Babylon's names)."""

    model_config = ConfigDict(extra="forbid")
    force: StrictBool = False
    """Train even when the data is not ready."""
    batchSize: StrictInt | None = Field(default=None, ge=1)
    """Passed to the flow parameter the settings' ``batch_param`` names."""


class ActRequest(BaseModel):
    """``POST /agents/{name}/act``."""

    model_config = ConfigDict(extra="forbid")
    observation: Any = None
    """For a policy: one observation (numbers, shaped as its space)."""
    messages: list[dict[str, str]] | None = None
    """For a language model: chat messages (``role``, ``content``)."""
    state: dict[str, Any] | None = None
    """A workflow's state (``status``, ``target``) for the rule policy,
    when the observation does not say it."""
    key: str = ""
    """Routes the request: the same key always reaches the same version
    (a user or session id); empty: a random draw."""
    deterministic: StrictBool = True
    """A policy's greedy action (False: sampled)."""
    max_new_tokens: StrictInt = Field(default=128, ge=1, le=4096)


class AgentUpdate(BaseModel):
    """``PUT /agents/{name}``: fields left out keep their value."""

    model_config = ConfigDict(extra="forbid")
    pin: StrictInt | str | None = None
    """The version served (``"v2"`` or 2); null: follow the latest."""
    candidate: StrictInt | str | None = None
    """A version to roll out; null: none."""
    rollout: Any = None
    """Percent (0-100) of requests the candidate gets."""


class VersionRequest(BaseModel):
    """``POST /agents/{name}/versions``."""

    model_config = ConfigDict(extra="forbid")
    model_id: str | None = None
    """A registered model (``GET /models``) to become the next version."""
    ollama_model: str | None = None
    """Or a model deployed to an Ollama server (``name[:tag]``)."""
    host: str = ""
    """That server ('' = the default Ollama address)."""


class PromoteRequest(BaseModel):
    """``POST /agents/{name}/promote``."""

    model_config = ConfigDict(extra="forbid")
    version: StrictInt | str
    """The version to make current (``"v2"`` or 2)."""
    by: str = Field(default="api", min_length=1, max_length=100)
    """Who promotes it (kept in the promotion log)."""
    why: str = Field(min_length=1, max_length=500)
    """Why (kept in the promotion log)."""


class RollbackRequest(BaseModel):
    """``POST /agents/{name}/rollback``."""

    model_config = ConfigDict(extra="forbid")
    by: str = Field(default="api", min_length=1, max_length=100)
    why: str = Field(min_length=1, max_length=500)


# ------------------------------------------------------------------ errors
def error_response(
    status: int, message: str, field: str = "", headers: dict[str, str] | None = None
) -> JSONResponse:
    body: dict[str, str] = {"error": bounded(message)}
    if field:
        body["field"] = bounded(field)
    return JSONResponse(body, status_code=status, headers=headers)


_TYPE_WORDS = {
    "int_type": "must be a whole number",
    "int_parsing": "must be a whole number",
    "int_from_float": "must be a whole number",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "string_type": "must be text",
    "dict_type": "must be a JSON object",
    "list_type": "must be a list",
}


def validation_sentence(exc: RequestValidationError) -> tuple[int, str, str]:
    """(status, sentence, field) for the first problem FastAPI found."""
    errors = list(exc.errors())
    if not errors:
        return 422, "The request is not valid.", ""
    err = errors[0]
    kind = str(err.get("type", ""))
    loc = list(err.get("loc", ()))
    where, parts = (str(loc[0]), loc[1:]) if loc else ("body", [])
    if kind == "json_invalid":
        return 400, "The request body is not valid JSON.", ""
    if where == "path":
        # Too long, empty or with a control character: no such thing can
        # exist, and the value must not reach the file system.
        name = str(parts[0]) if parts else "path parameter"
        return (
            400,
            f"The {name.replace('_', ' ')} in the path must be 1 to "
            f"{MAX_PATH_PARAM_CHARS} characters with no control characters, "
            f"not {quoted(err.get('input'), 60)}.",
            name,
        )
    if where == "body" and not parts:
        if kind == "missing":
            return 422, "The request needs a JSON object body.", ""
        return 400, "The request body must be a JSON object.", ""
    # steps[3].reward: list indices in brackets
    name = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    name = name.lstrip(".") or where
    value = err.get("input")
    if kind == "missing":
        return 422, f"{name} is required.", name
    if kind == "extra_forbidden":
        return 422, f"Unknown field {quoted(name)}.", name
    if kind in _TYPE_WORDS:
        shown = json.dumps(value) if _jsonable(value) else repr(value)
        if len(shown) > 80:
            shown = f"{shown[:80]}... ({len(shown):,} characters)"
        return 422, f"{name} {_TYPE_WORDS[kind]}, not {shown}.", name
    message = str(err.get("msg", "is not valid")).rstrip(".")
    return 422, f"{name}: {message[:1].lower()}{message[1:]}.", name


def _parse(model: type[_Model], raw: dict[str, Any]) -> _Model:
    """``raw`` as ``model``; its problems as FastAPI's own (one sentence)."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e["loc"])} for e in exc.errors()]
        raise RequestValidationError(errors) from None


class BodyRefused(StarletteHTTPException):
    """A JSON body refused as it is parsed (not JSON, not UTF-8, a lone
    surrogate, NaN, an integer beyond 64 bits, nested too deeply)."""

    def __init__(self, status: int, message: str, field: str = "") -> None:
        super().__init__(status, message)
        self.field = field


class UntrustedJsonRequest(Request):
    """A request whose JSON body is parsed by :func:`engine.untrusted.loads`
    (FastAPI's own parse takes NaN, Infinity and lone surrogates, which
    then fail far from the request, or are stored and can never be read
    back)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = untrusted.loads(body, "The request body")
            except untrusted.UntrustedDataError as exc:
                # A value of a field that JSON or the engine cannot hold is
                # that field's problem (422); a body that is no text, no
                # JSON, or holds text that is not Unicode is malformed (400).
                malformed = not exc.field or "Unicode" in str(exc)
                raise BodyRefused(
                    400 if malformed else 422, str(exc), exc.field
                ) from None
        return self._json


class UntrustedJsonRoute(APIRoute):
    """Every route parses its JSON body with :class:`UntrustedJsonRequest`."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()

        async def route(request: Request) -> Response:
            return await handler(UntrustedJsonRequest(request.scope, request.receive))

        return route


def _cut(text: str, limit: int = MAX_PATH_PARAM_CHARS) -> str:
    """``text`` from the request line, cut for a sentence."""
    return text if len(text) <= limit else f"{text[:limit]}..."


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def _status_of(exc: EngineError) -> int:
    if isinstance(
        exc,
        NotFound | UnknownRunError | UnknownTrajectoryError | UnknownAgent | NoMockData,
    ):
        return 404
    if isinstance(exc, ActFailed):
        return 503
    if isinstance(exc, ConfigError):
        return 422
    return 409  # the request does not fit the state: a run not running, ...


# ------------------------------------------------------------ gatekeeping
class Gate:
    """ASGI middleware answering before any route: 401 without the bearer
    token (when there is one; compared in constant time), 413 for a body
    larger than :data:`MAX_BODY_BYTES`. Plain ASGI, not
    ``@app.middleware``: that wraps every request in a task group and
    streams, which cost more than a whole trajectory step.

    The body is counted as its ``http.request`` messages arrive, whatever
    its framing: a declared ``Content-Length`` over the limit is refused
    before a byte is read, and a chunked body as soon as its count passes
    the limit, the rest unread (uvicorn drops what still comes). A body
    within the limit is handed to the app whole, as one message."""

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app = app
        self.expected = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal: JSONResponse | None = None
        if self.expected is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.expected
            ):
                refusal = error_response(
                    401,
                    "This server needs the header 'Authorization: Bearer <token>' "
                    "with its token.",
                    headers={"WWW-Authenticate": "Bearer"},
                )
        length = headers.get("content-length", "")
        if (
            refusal is None
            and length.isdigit()
            and (len(length) > 18 or int(length) > MAX_BODY_BYTES)
        ):
            refusal = _too_large()
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away before its body was sent
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                await _too_large()(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        pending: list[Message] = [
            {"type": "http.request", "body": b"".join(chunks), "more_body": False}
        ]

        async def replay() -> Message:
            # The body once; then what the server says (a disconnect).
            return pending.pop() if pending else await receive()

        await self.app(scope, replay, send)


def _too_large() -> JSONResponse:
    return error_response(
        413, f"The request body is larger than {MAX_BODY_BYTES:,} bytes."
    )


# --------------------------------------------------------------------- app
def create_app(service: Service, token: str | None = None) -> FastAPI:
    """The app serving ``service``: the gate (token, body size), the error
    handlers, then each group of routes."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        # Here, not after uvicorn returns: uvicorn re-raises the signal that
        # stopped it (SIGTERM ends the process) once serving is over.
        await asyncio.to_thread(service.close)

    app = FastAPI(
        lifespan=lifespan,
        title="RL Studio engine",
        version=API_VERSION,
        description="Train, watch and stop the runs of one RL Studio project.",
    )

    app.router.route_class = UntrustedJsonRoute
    app.add_middleware(Gate, token=token)
    _add_error_handlers(app)
    # Registration order is matching order: /training/status before
    # /training/{job_id}.
    _add_health_route(app, service)
    _add_training_routes(app, service)
    _add_run_routes(app, service)
    _add_catalog_routes(app, service)
    _add_jira_routes(app, service)
    _add_trajectory_routes(app, service)
    _add_agent_routes(app, service)
    return app


def _add_error_handlers(app: FastAPI) -> None:
    """Turn every failure into one status and ``{"error": "<sentence>"}``."""

    @app.exception_handler(EngineError)
    async def on_engine_error(request: Request, exc: EngineError) -> JSONResponse:
        return error_response(_status_of(exc), str(exc), getattr(exc, "field", ""))

    @app.exception_handler(DatabaseUnavailable)
    async def on_database_gone(
        request: Request, exc: DatabaseUnavailable
    ) -> JSONResponse:
        # The server rolled the transaction back: the client may send the
        # same request again once the database is back.
        return error_response(503, str(exc))

    @app.exception_handler(RequestValidationError)
    async def on_invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        status, message, field = validation_sentence(exc)
        content_type = request.headers.get("content-type", "")
        if status == 400 and not field and "json" not in content_type:
            status = 415
            message = "Send the body as JSON, with 'Content-Type: application/json'."
        return error_response(status, message, field)

    @app.exception_handler(StarletteHTTPException)
    async def on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        method, path = _cut(request.method), _cut(request.url.path)
        if isinstance(exc, BodyRefused):
            return error_response(exc.status_code, str(exc.detail), exc.field)
        if exc.status_code == 404:
            message = f"There is no route {method} {path}."
        elif exc.status_code == 405:
            message = f"{path} does not answer {method}."
        else:
            message = str(exc.detail).rstrip(".") + "."
        return error_response(exc.status_code, message)

    @app.exception_handler(Exception)
    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        return error_response(
            500,
            f"The engine failed on {_cut(request.url.path)}: {type(exc).__name__}.",
        )


def _add_health_route(app: FastAPI, service: Service) -> None:
    @app.get("/health")
    def health() -> dict[str, Any]:
        """Readiness: the project is open and the service answers."""
        return {
            "status": "ok",
            "project": str(service.project.path),
            "api_version": API_VERSION,
            "pid": os.getpid(),
            "active_runs": service.supervisor.active_runs(),
            "database": service.database,
            # Heavy libraries belong in job processes; listed so that a test
            # can see none crept into the service.
            "heavy_modules": sorted(m for m in HEAVY_MODULES if m in sys.modules),
        }


def _add_training_routes(app: FastAPI, service: Service) -> None:
    """Start, watch and stop training; retraining's status, settings and
    trigger."""

    @app.post("/train/{env:path}", status_code=201)
    def train(
        env: PathText, body: Annotated[TrainRequest | None, Body()] = None
    ) -> dict[str, str]:
        """Start training ``env`` (a designed env's name, or a Gymnasium id)."""
        req = body or TrainRequest()
        job_id = service.start_training(
            env, algo=req.algo, steps=req.steps, settings=req.settings, name=req.name
        )
        return {"job_id": job_id}

    def training_status() -> dict[str, Any]:
        """Readiness (``ready``, ``reason``, ``stats``), the current and
        last completed retraining, model versions, data rates, schedule."""
        return service.retraining.status()

    def retrain_settings() -> dict[str, Any]:
        return service.retraining.settings()

    def configure_retraining(
        body: Annotated[dict[str, Any], Body()],
    ) -> dict[str, Any]:
        """Change the readiness rules and the training flow (fields left
        out keep their value)."""
        return service.retraining.configure(body)

    def trigger(
        body: Annotated[TriggerRequest | None, Body()] = None,
    ) -> dict[str, Any]:
        """Start the training flow when the data is ready (or forced);
        409 with the reason otherwise."""
        req = body or TriggerRequest()
        return service.retraining.trigger(force=req.force, batch_size=req.batchSize)

    def training(job_id: PathText) -> dict[str, Any]:
        """Status, progress, rate, ETA, latest metrics and error of a run."""
        return service.job(job_id)

    def stop(job_id: PathText) -> dict[str, str]:
        """Ask a run to save and stop (by force after a timeout)."""
        service.stop(job_id)
        return {"job_id": job_id, "status": "stopping"}

    for prefix in TRAINING_PREFIXES:
        # Registration order is matching order: status before {job_id}.
        app.get(f"{prefix}/status")(training_status)
        app.get(f"{prefix}/settings")(retrain_settings)
        app.put(f"{prefix}/settings")(configure_retraining)
        app.post(f"{prefix}/trigger", status_code=201)(trigger)
        app.get(f"{prefix}/{{job_id}}")(training)
        app.post(f"{prefix}/{{job_id}}/stop", status_code=202)(stop)


def _add_run_routes(app: FastAPI, service: Service) -> None:
    """The project's runs, their metrics (paged or streamed) and flow runs."""

    @app.get("/runs", response_model=None)
    def runs() -> dict[str, list[contract.RunRow]]:
        return {"runs": [r.to_dict() for r in service.runs()]}

    @app.get("/runs/{run_id}", response_model=None)
    def run(run_id: PathText) -> contract.RunRow:
        return service.run(run_id).to_dict()

    @app.get("/runs/{run_id}/metrics")
    def metrics(
        run_id: PathText,
        since: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=MAX_METRIC_ROWS)] = MAX_METRIC_ROWS,
    ) -> dict[str, Any]:
        """Metric rows from index ``since``; ``next`` is where to go on."""
        rows, next_index = service.metrics(run_id, since, limit)
        return {"run_id": run_id, "rows": rows, "next": next_index}

    @app.get("/runs/{run_id}/events")
    async def events(
        run_id: PathText, since: Annotated[int, Query(ge=0)] = 0
    ) -> StreamingResponse:
        """Server-Sent Events: ``metrics`` (new rows and ``next``),
        ``status`` (when it changes) and a last ``end`` once the run ended
        and every row was sent."""
        path = await asyncio.to_thread(service.metrics_path, run_id)  # 404 early
        return StreamingResponse(
            _event_stream(service, run_id, MetricsTail(path, skip=since), since),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post("/flows/{name}/run", status_code=201)
    def run_flow(
        name: PathText, body: Annotated[FlowRunRequest | None, Body()] = None
    ) -> dict[str, str]:
        """Run the project's flow ``flows/<name>.flow.json``."""
        req = body or FlowRunRequest()
        job_id = service.start_flow(
            name,
            overrides=req.overrides,
            only_stale=req.only_stale,
            targets=req.targets,
            agent=req.agent,
        )
        return {"job_id": job_id}


def _add_catalog_routes(app: FastAPI, service: Service) -> None:
    """What the project holds: flows, models and environments."""

    @app.get("/flows")
    def flows() -> dict[str, list[dict[str, Any]]]:
        return {"flows": service.flows()}

    @app.get("/models", response_model=None)
    def models() -> dict[str, list[contract.ModelRow]]:
        return {"models": [m.to_dict() for m in service.project.list_models()]}

    @app.get("/envs")
    def envs() -> dict[str, list[dict[str, Any]]]:
        return {"envs": service.envs()}


def _add_jira_routes(app: FastAPI, service: Service) -> None:
    """The RL Hub's mock-data console: the mock data the project holds, and
    a workflow env made of posted mock data (:mod:`engine.envs.jira`)."""

    @app.get("/jira-mock-data")
    def jira_mock_data(env: Annotated[str, Query(max_length=64)] = "") -> Any:
        """The RL Hub's file (``data/jira_mock_data.json``), or the mock
        data the workflow env ``env`` reads."""
        return project_mock_data(service.project.path, env)

    @app.post("/jira-mock-data/import", status_code=201)
    def import_jira_mock_data(
        body: Annotated[Any, Body()],
        name: Annotated[str, Query(max_length=64)] = "",
    ) -> dict[str, Any]:
        """Make a workflow env of the posted mock data: ``envs/NAME.env.json``
        and ``data/jira/NAME.json``; ``name`` refused when taken, or
        ``jira`` suffixed until free."""
        made = import_jira(
            service.project.path,
            check_mock_data(body),
            name=name,
            source="posted to /jira-mock-data/import",
        )
        return made.to_dict()


def _add_trajectory_routes(app: FastAPI, service: Service) -> None:
    """Record an agent's trajectories step by step, list and read them."""

    @app.post("/trajectories", status_code=201)
    def start_trajectory(raw: Annotated[dict[str, Any], Body()]) -> dict[str, str]:
        """Start recording a trajectory (:class:`TrajectoryStart`, or the
        recorder's names); its id."""
        body = _parse(TrajectoryStart, recorder_names(raw))
        trajectory_id = service.trajectories.start(
            body.agent,
            scenario=body.scenario,
            window=body.window,
            env=body.env,
            meta=body.meta,
        )
        return {"trajectory_id": trajectory_id}

    @app.post(
        "/trajectories/{trajectory_id}/steps",
        status_code=201,
        response_model=dict[str, Any],
    )
    def add_step(
        trajectory_id: PathText, raw: Annotated[dict[str, Any], Body()]
    ) -> Response:
        """Record one step (a :class:`TrajectoryStep`, or the recorder's
        names), or several (``{"steps": [...]}``, at most 1,000, all or
        none); answered once committed with the index ``t`` of the (first)
        step."""
        # The answer as a response already: FastAPI's check and encoding of
        # a returned dict against the response model was a seventh of the
        # service's time per request at the ingest rate.
        if "steps" in raw:
            given = raw["steps"]
            if isinstance(given, list):
                given = [recorder_names(s) if isinstance(s, dict) else s for s in given]
            batch = _parse(TrajectorySteps, {**raw, "steps": given})
            first = service.trajectories.add_steps(
                trajectory_id, [s.fields() for s in batch.steps]
            )
            return JSONResponse(
                {"trajectory_id": trajectory_id, "t": first, "count": len(batch.steps)},
                201,
            )
        body = _parse(TrajectoryStep, recorder_names(raw))
        t = service.trajectories.add_step(trajectory_id, **body.fields())
        return JSONResponse({"trajectory_id": trajectory_id, "t": t}, 201)

    @app.post("/trajectories/{trajectory_id}/end")
    def end_trajectory(
        trajectory_id: PathText, raw: Annotated[dict[str, Any], Body()]
    ) -> dict[str, Any]:
        """End it (``status`` or the recorder's ``finalStatus``): its
        episode goes to its agent's trace file."""
        body = _parse(TrajectoryEnd, recorder_names(raw))
        return service.trajectories.end(
            trajectory_id, status=body.status, total_reward=body.total_reward
        )

    @app.get("/trajectories")
    def list_trajectories(
        agent: str = "",
        status: str = "",
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
    ) -> dict[str, list[dict[str, Any]]]:
        rows = service.trajectories.list_trajectories(agent, status, limit)
        return {"trajectories": rows}

    @app.get("/trajectories/{trajectory_id}")
    def trajectory(trajectory_id: PathText) -> dict[str, Any]:
        """The trajectory as a trace episode, steps included."""
        return service.trajectories.episode(trajectory_id)


def _add_agent_routes(app: FastAPI, service: Service) -> None:
    """Agents: their versions, routing between them, and acting."""

    @app.get("/agents")
    def agents() -> dict[str, list[str]]:
        return {"agents": service.project.agent_catalog.names()}

    @app.get("/agents/{name}")
    def agent(name: PathText) -> dict[str, Any]:
        """Versions (lineage, evaluation, live outcomes) and routing."""
        return service.agents.describe(name)

    @app.put("/agents/{name}")
    def configure_agent(name: PathText, body: AgentUpdate) -> dict[str, Any]:
        """Pin a version (or follow the latest), name a candidate and the
        percentage of requests it gets."""
        changes = {k: getattr(body, k) for k in body.model_fields_set}
        return service.agents.configure(name, changes)

    @app.post("/agents/{name}/versions", status_code=201)
    def add_version(name: PathText, body: VersionRequest) -> dict[str, Any]:
        return service.agents.add_version(
            name, body.model_id, ollama_model=body.ollama_model, host=body.host
        )

    @app.post("/agents/{name}/promote")
    def promote(name: PathText, body: PromoteRequest) -> dict[str, Any]:
        """Make a version current by hand (logged with who and why)."""
        return service.agents.promote(name, body.version, body.by, body.why)

    @app.post("/agents/{name}/rollback")
    def rollback(name: PathText, body: RollbackRequest) -> dict[str, Any]:
        """Back to the version promoted before the current one (logged)."""
        return service.agents.rollback(name, body.by, body.why)

    @app.get("/agents/{name}/settings")
    def agent_settings(name: PathText) -> dict[str, Any]:
        return dict(service.agents.describe(name)["settings"])

    @app.put("/agents/{name}/settings")
    def configure_agent_settings(
        name: PathText, body: Annotated[dict[str, Any], Body()]
    ) -> dict[str, Any]:
        """The gate's tolerance and metric, the agent's switch, its base
        model and rule env (fields left out keep their value)."""
        return service.agents.configure_settings(name, body)

    @app.get("/serving", response_model=None)
    def serving() -> dict[str, Any]:
        """The project's switch (``rl_enabled``), ``fallback_to_base`` and
        ``base_model``."""
        return as_dict(serving_settings(service.project))

    @app.put("/serving")
    def configure_serving_settings(
        body: Annotated[dict[str, Any], Body()],
    ) -> dict[str, Any]:
        return configure_serving(service.project, body)

    @app.get("/alerts")
    def alert_settings() -> dict[str, Any]:
        """The webhooks told of the :data:`engine.alerts.EVENTS`: the
        project's, and how many the environment adds."""
        stored = service.project.setting(alerts.SETTING_KEY)
        mine = alerts.check_urls(stored.get("webhooks", []))
        told = alerts.webhook_urls(stored)
        return {
            "webhooks": mine,
            "from_environment": len(told) - len(mine),
            "events": list(alerts.EVENTS),
        }

    @app.put("/alerts")
    def configure_alerts(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        """``{"webhooks": [URL, ...]}``: the project's webhooks."""
        unknown = set(body) - {"webhooks"}
        if unknown:
            raise ConfigError(
                sorted(unknown)[0], "Only webhooks can be set under /alerts."
            )
        urls = alerts.check_urls(body.get("webhooks", []))
        service.project.set_setting(alerts.SETTING_KEY, {"webhooks": urls})
        return alert_settings()

    @app.post("/agents/{name}/act")
    def act(name: PathText, body: ActRequest) -> dict[str, Any]:
        """Answer with the version routing picks, down the fallback chain
        when it fails (previous version, base model, rule policy); every
        decision is logged."""
        return service.agents.act(
            name,
            observation=body.observation,
            messages=body.messages,
            state=body.state,
            key=body.key,
            deterministic=body.deterministic,
            max_new_tokens=body.max_new_tokens,
        )


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def _event_stream(
    service: Service, run_id: str, tail: MetricsTail, since: int
) -> AsyncIterator[bytes]:
    """Poll the run's row and metrics file. A client that goes away only
    ends this generator (Starlette cancels it); the run goes on."""
    last_status: dict[str, Any] | None = None
    next_index = since
    quiet_since = time.monotonic()
    while True:
        job = await asyncio.to_thread(service.job, run_id)
        rows = await asyncio.to_thread(tail.read, MAX_METRIC_ROWS)
        if rows:
            next_index += len(rows)
            quiet_since = time.monotonic()
            yield _sse("metrics", {"rows": rows, "next": next_index})
        status = {k: job[k] for k in ("status", "progress", "steps_per_s", "eta_s")}
        if status != last_status:
            last_status = status
            quiet_since = time.monotonic()
            yield _sse("status", {**status, "error": job["error"]})
        if job["status"] not in contract.ACTIVE_STATUSES and not rows:
            # Rows written just before the end were read above: all sent.
            yield _sse("end", {"status": job["status"], "next": next_index})
            return
        if time.monotonic() - quiet_since > SSE_KEEPALIVE_S:
            quiet_since = time.monotonic()
            yield b": keep-alive\n\n"
        await asyncio.sleep(SSE_POLL_S)
