"""Fuzz of every HTTP route of ``serve-http``, in process.

Each case is one request to the real ASGI app (``create_app`` on a real
:class:`~engine.service.state.Service`, a real project and its SQLite
stores), called with ``scope``/``receive``/``send`` as uvicorn calls it: a
route's path template filled with odd parameters (empty, 200 and 201
characters, 5,000, NUL, ``..``, percent-encoded bytes), a method drawn at
random now and then, a query, and a body that is valid for the route, a
mutation of one, random JSON, or hostile bytes (NaN and Infinity literals,
huge integers, lone surrogates, deep nesting, bytes that are no UTF-8,
truncation, bodies over the limit), sent in one message or in chunks as a
``Transfer-Encoding: chunked`` body arrives.

What counts: every request gets exactly one answer; no answer is a 500 or
another 5xx than the 503 of an agent that could not act; every error is one
sentence (quoting at most 200 characters of a value); and afterwards every
trajectory the fuzz managed to store can be read back. Job processes are
never spawned (a request that validates would train): the supervisor's
spawn refuses with an engine sentence, as in ``tests/test_fuzz.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fuzz_support import _deep
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import EngineError
from engine.service.app import MAX_BODY_BYTES, bounded, create_app
from engine.service.state import Service
from resources import resource_path

BATCHES = 250
CASES_PER_BATCH = 20  # 5,000 requests
MAX_SENTENCE_CHARS = 600
"""An error quotes at most 200 characters of a value; with its own words a
sentence stays well under this."""
CLOSED_PORT_HOST = "http://127.0.0.1:9"
"""An Ollama address nothing listens on: acting fails at once (503)."""

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)

# method, path template, body kind
ROUTES: list[tuple[str, str, str]] = [
    ("GET", "/health", ""),
    ("POST", "/train/{env}", "train"),
    ("GET", "/training/status", ""),
    ("GET", "/training/settings", ""),
    ("PUT", "/training/settings", "retrain"),
    ("POST", "/training/trigger", "trigger"),
    ("GET", "/training/{job_id}", ""),
    ("POST", "/training/{job_id}/stop", ""),
    ("GET", "/runs", ""),
    ("GET", "/runs/{run_id}", ""),
    ("GET", "/runs/{run_id}/metrics", ""),
    ("GET", "/runs/{run_id}/events", ""),
    ("POST", "/flows/{name}/run", "flow"),
    ("GET", "/flows", ""),
    ("GET", "/models", ""),
    ("GET", "/envs", ""),
    ("POST", "/trajectories", "start"),
    ("POST", "/trajectories/{trajectory_id}/steps", "step"),
    ("POST", "/trajectories/{trajectory_id}/steps", "steps"),
    ("POST", "/trajectories/{trajectory_id}/end", "end"),
    ("GET", "/trajectories", ""),
    ("GET", "/trajectories/{trajectory_id}", ""),
    ("GET", "/agents", ""),
    ("GET", "/agents/{name}", ""),
    ("PUT", "/agents/{name}", "agent"),
    ("POST", "/agents/{name}/versions", "version"),
    ("POST", "/agents/{name}/act", "act"),
    ("POST", "/agents/{name}/promote", "promote"),
    ("POST", "/agents/{name}/rollback", "rollback"),
    ("GET", "/agents/{name}/settings", ""),
    ("PUT", "/agents/{name}/settings", "agent_settings"),
    ("GET", "/serving", ""),
    ("PUT", "/serving", "serving"),
    ("GET", "/api/admin/training/status", ""),
    ("GET", "/api/admin/training/{job_id}", ""),
    ("POST", "/trajectories", "recorder_start"),
    ("POST", "/trajectories/{trajectory_id}/steps", "recorder_step"),
    ("POST", "/trajectories/{trajectory_id}/end", "recorder_end"),
    ("GET", "/openapi.json", ""),
    ("GET", "/no/such/route", ""),
]
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "TRACE"]

ODD_TEXT = [
    "",
    " ",
    ".",
    "..",
    "../../etc/passwd",
    "/",
    "\x00",
    "a\x00b",
    "\x7f",
    "\n",
    "\udc80",
    "\ud800x",
    "ü",
    "名前",
    "%2e%2e",
    "x" * 199,
    "x" * 200,
    "x" * 201,
    "x" * 255,
    "x" * 256,
    "y" * 5000,
    "CON",
    "nul.txt",
    "-v1",
]
NUMBERS = [0, 1, -1, 2**31, 2**63 - 1, 2**63, -(2**64), 10**20, 10**30, 0.5, 1e308]
RAW_BODIES = [
    b"",
    b"{",
    b"}",
    b"null",
    b"[]",
    b"42",
    b'"text"',
    b"{}",
    b'{"a": NaN}',
    b'{"reward": NaN, "action": 1}',
    b'{"reward": Infinity, "action": 1}',
    b'{"reward": -Infinity, "action": 1}',
    b'{"action": "\\ud800", "reward": 1}',
    b'{"action": "\\udfff\\ud800", "reward": 1}',
    b'{"action": {"\\ud800": 1}, "reward": 1}',
    b'{"agent": "a", "scenario": "\\udc80"}',
    b'{"agent": "\\ud800"}',
    b'{"steps": [{"action": "\\ud800", "reward": 1}]}',
    b'{"steps": 1e999}',
    b'{"action": 1, "reward": 1e999}',
    b'{"action": ' + b"9" * 4301 + b', "reward": 1}',
    b'{"steps": ' + b"9" * 30 + b"}",
    b'{"action": 1, "reward": ' + b"9" * 400 + b"}",
    b'{"action": 1, "reward": 1, "state": ' + _deep(100) + b"}",
    b'{"action": 1, "reward": 1, "state": ' + _deep(5000) + b"}",
    _deep(100_000),
    b"\xff\xfe\x00",
    b'{"agent": "\xc3\x28"}',
    b"\xef\xbb\xbf{}",
    b'{"agent": "a"} trailing',
    b'{"agent": "a", "agent": "b"}',
    b'{"name": "' + b"n" * 5000 + b'"}',
    b'{"status": "' + b"s" * 5000 + b'"}',
    b'{"' + b"k" * 5000 + b'": 1}',
    b'{"settings": {"' + b"k" * 5000 + b'": 1}}',
    b'{"rollout": "' + b"r" * 5000 + b'"}',
    b'{"pin": "v' + b"9" * 5000 + b'"}',
    b'{"model_id": "' + b"m" * 5000 + b'"}',
]


@dataclass
class Answer:
    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    starts: int = 0


async def call(
    app: Any,
    method: str,
    raw_path: str,
    query: str,
    chunks: list[bytes],
    headers: list[tuple[bytes, bytes]],
) -> Answer:
    """One request as uvicorn hands it to the app: ``path`` percent-decoded
    from ``raw_path``, the body in ``chunks`` (``more_body`` on all but the
    last), a disconnect once the answer is complete (a streamed answer is
    left after its first part)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": urllib.parse.unquote(raw_path),
        "raw_path": raw_path.encode("ascii"),
        "root_path": "",
        "query_string": query.encode("ascii"),
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8765),
        "state": {},
    }
    todo = list(chunks) or [b""]
    done = asyncio.Event()
    answer = Answer()

    async def receive() -> dict[str, Any]:
        if todo:
            chunk = todo.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(todo)}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            answer.starts += 1
            answer.status = message["status"]
            answer.headers = {
                k.decode("latin-1").lower(): v.decode("latin-1")
                for k, v in message.get("headers", [])
            }
        elif message["type"] == "http.response.body":
            answer.body += message.get("body", b"")
            # An event stream never ends by itself: its first part is enough.
            if not message.get("more_body") or answer.body:
                done.set()

    await asyncio.wait_for(app(scope, receive, send), timeout=60)
    return answer


# ------------------------------------------------------------------ cases
@dataclass
class Case:
    method: str
    raw_path: str
    query: str
    chunks: list[bytes]
    headers: list[tuple[bytes, bytes]]

    def short(self) -> str:
        body = b"".join(self.chunks)
        return (
            f"{self.method} {self.raw_path[:120]}?{self.query[:60]} "
            f"({len(self.chunks)} chunk(s)) {body[:160]!r}"
        )


class Cases:
    """Builds a case from a seed (plain ``random``: a hypothesis draw per
    choice would cost more than the request)."""

    def __init__(self, known: dict[str, list[str]]) -> None:
        self.known = known

    def text(self, rng: random.Random) -> str:
        pick = rng.randrange(4)
        if pick == 0:
            return rng.choice(ODD_TEXT)
        if pick == 1:
            n = rng.choice([1, 5, 50, 100, 101, 199, 200, 201, 300, 5000])
            alphabet = rng.choice(
                ["ab", "aZ09_-. ", "/.%", "\x00\x01\x7f a", "äß名\u202e", "\ud800a"]
            )
            return "".join(rng.choice(alphabet) for _ in range(n))
        return rng.choice(
            [
                "a",
                "bot",
                "cartpole_ppo",
                "CartPole-v1",
                "rlstudio/x-v0",
                "v1",
                "PPO",
                *self.known["trajectories"],
                *self.known["runs"],
            ]
        )

    def value(self, rng: random.Random, depth: int = 0) -> Any:
        kind = rng.randrange(9 if depth < 3 else 6)
        if kind == 0:
            return None
        if kind == 1:
            return rng.choice([True, False])
        if kind == 2:
            return rng.choice(NUMBERS)
        if kind == 3:
            return rng.choice([float("nan"), float("inf"), -float("inf")])
        if kind in (4, 5):
            return self.text(rng)
        if kind == 6:
            return [self.value(rng, depth + 1) for _ in range(rng.randrange(4))]
        return {
            self.text(rng)[:20]: self.value(rng, depth + 1)
            for _ in range(rng.randrange(4))
        }

    def body(self, rng: random.Random, kind: str) -> dict[str, Any]:
        """A body of ``kind`` that would be valid or nearly so."""
        v = self.value
        step = {"action": rng.choice([1, "tool", {"i": 1}]), "reward": 0.5}
        bodies: dict[str, dict[str, Any]] = {
            "train": {
                "algo": rng.choice(["PPO", "auto", "DQN", "X"]),
                "steps": rng.choice([1, 64, 10**20, -1, 2**63]),
                "settings": {"n_envs": rng.choice([1, 0, 10**9])},
                "name": "fuzz",
            },
            "retrain": {
                "flow": rng.choice(["", "cartpole_ppo", "nope"]),
                "agent": rng.choice(["", "bot", "../x"]),
                "min_trajectories": rng.choice([0, 1, 10**20]),
            },
            "trigger": {"force": True, "batchSize": rng.choice([1, 0, 10**20])},
            "flow": {
                "overrides": {},
                "only_stale": True,
                "targets": [],
                "agent": rng.choice(["", "bot"]),
            },
            "start": {"agent": "bot", "scenario": "s", "window": "w", "meta": {}},
            "step": {
                **step,
                "state": {"x": 1},
                "prompt": "p",
                "completion": "c",
                "valid": True,
                "info": {},
            },
            "steps": {"steps": [step] * rng.choice([1, 2, 1000, 1001])},
            "end": {"status": rng.choice(["completed", "failed", "done"])},
            "agent": {
                "pin": rng.choice([None, 1, "v1", "v0"]),
                "candidate": None,
                "rollout": rng.choice([0, 50, 101]),
            },
            "version": {
                "ollama_model": rng.choice(["fuzz", "bad name!", "x" * 300]),
                "host": CLOSED_PORT_HOST,
            },
            "promote": {"version": rng.choice([1, "v1", "v9"]), "why": "w"},
            "rollback": {"by": rng.choice(["fuzz", ""]), "why": "w"},
            "agent_settings": {
                "tolerance": rng.choice([0, -1, 1e308]),
                "rl_enabled": rng.choice([True, False]),
                "rule_env": rng.choice(["", "nope", "cartpole"]),
            },
            "serving": {
                "rl_enabled": rng.choice([True, False, "x"]),
                "base_model": rng.choice(["", "m-none"]),
            },
            "recorder_start": {"agentId": "bot", "scenarioId": "s", "windowId": "w"},
            "recorder_step": {
                **step,
                "stepNumber": rng.choice([0, -1, 10**20]),
                "environmentState": {"x": 1},
                "action": {"type": "tool", "params": {}},
            },
            "recorder_end": {
                "finalStatus": rng.choice(["completed", "done"]),
                "totalReward": rng.choice([1.0, "x"]),
            },
            "act": {
                "observation": [0.1, 0.2],
                "messages": [{"role": "user", "content": "hi"}],
                "key": "k",
                "deterministic": True,
                "max_new_tokens": rng.choice([1, 4096, 4097, 10**20]),
            },
        }
        body = dict(bodies.get(kind, {}))
        for _ in range(rng.randrange(4)):  # mutate: replace, drop or add
            choice = rng.randrange(3)
            if choice == 0 and body:
                body[rng.choice(list(body))] = v(rng)
            elif choice == 1 and body:
                del body[rng.choice(list(body))]
            else:
                body[self.text(rng)[:30]] = v(rng)
        if kind == "version":  # never an address that could be reached
            body["host"] = rng.choice(["", CLOSED_PORT_HOST, "not a url", "ftp://x"])
            if body["host"] == "":
                body["host"] = CLOSED_PORT_HOST
        return body

    def param(self, rng: random.Random) -> str:
        text = self.text(rng)
        how = rng.randrange(3)
        if how == 0:  # as a client quotes it
            return urllib.parse.quote(text, safe="", errors="surrogatepass")
        if how == 1:  # slashes left in (an env id has one)
            return urllib.parse.quote(text, safe="/", errors="surrogatepass")
        # hand-made escapes: NUL, a surrogate's UTF-8, bytes that are no UTF-8
        return rng.choice(
            ["%00", "a%00", "%ED%A0%80", "%FF%FE", "%2F..%2F", "%", "%zz", "x" * 5000]
        )

    def build(self, seed: int) -> Case:
        rng = random.Random(seed)
        method, template, kind = rng.choice(ROUTES)
        if rng.randrange(10) == 0:
            method = rng.choice(METHODS)
        raw_path = template
        for name in ("env", "job_id", "run_id", "name", "trajectory_id"):
            if "{" + name + "}" in raw_path:
                raw_path = raw_path.replace("{" + name + "}", self.param(rng))
        query = ""
        if rng.randrange(3) == 0:
            pairs = [
                (rng.choice(["since", "limit", "agent", "status", "x"]), str(v))
                for v in (
                    rng.choice([*NUMBERS, "a", "", "-1", "9" * 40, "\x00"])
                    for _ in range(rng.randrange(1, 3))
                )
            ]
            query = urllib.parse.urlencode(pairs)
        pick = rng.randrange(40)
        if pick < 20 and kind:
            body = json.dumps(self.body(rng, kind), allow_nan=True).encode(
                "utf-8", "surrogatepass"
            )
        elif pick < 28:
            body = json.dumps(self.value(rng), allow_nan=True).encode(
                "utf-8", "surrogatepass"
            )
        elif pick < 38:
            body = rng.choice(RAW_BODIES)
        else:
            body = b'{"name": "' + b"z" * rng.choice([MAX_BODY_BYTES, 3 << 20]) + b'"}'
        if rng.randrange(10) == 0 and body:  # a byte flipped or a cut
            i = rng.randrange(len(body))
            body = body[:i] + bytes([rng.randrange(256)]) + body[i + 1 :]
        headers = []
        content_type = rng.choice(
            [b"application/json"] * 6
            + [b"", b"text/plain", b"application/x+json", b"application/json; x"]
        )
        if content_type:
            headers.append((b"content-type", content_type))
        if rng.randrange(3) == 0:  # chunked: pieces of any size, no length
            chunks, rest = [], body
            while rest:  # at most about 64 pieces (a piece is a message)
                n = max(len(body) // 64, rng.choice([1, 7, 1024, 65536, 1 << 20]))
                chunks.append(rest[:n])
                rest = rest[n:]
            chunks.append(b"")
            headers.append((b"transfer-encoding", b"chunked"))
        else:
            chunks = [body]
            declared = rng.choice([len(body)] * 30 + [0, 10**30])
            headers.append((b"content-length", str(declared).encode()))
        return Case(method, raw_path, query, chunks, headers)


# -------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    root = tmp_path_factory.mktemp("http-fuzz")
    svc = Service(root / "project", examples=resource_path("examples"))

    def no_spawn(*args: Any, **kwargs: Any) -> None:
        raise EngineError("The fuzz suite starts no job processes.")

    svc.supervisor._spawn = no_spawn  # type: ignore[method-assign]
    yield svc
    svc.close(1.0)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def known_ids(service: Service) -> dict[str, list[str]]:
    """Real ids to aim at, so that cases reach past the 404s: an open and an
    ended trajectory, a run (queued: its process is never spawned), and an
    agent with a version served from an address nothing listens on."""
    store = service.trajectories
    open_id = store.start("bot", scenario="s")
    ended = store.start("bot", scenario="s")
    store.add_step(ended, action=1, reward=1.0)
    store.end(ended, status="completed")
    run = service.project.create_run("rl.train", {"env": "CartPole-v1"}, "fuzz")
    service.agents.add_version("bot", ollama_model="fuzz", host=CLOSED_PORT_HOST)
    return {"trajectories": [open_id, ended], "runs": [run.id]}


def one_sentence(message: Any) -> bool:
    return (
        isinstance(message, str)
        and message.endswith((".", "?"))
        and "\n" not in message
        and "Traceback" not in message
        and len(message) <= MAX_SENTENCE_CHARS
    )


# ------------------------------------------------------------------ test
def test_every_route_fuzzed_in_process(
    service: Service,
    loop: asyncio.AbstractEventLoop,
    capsys: pytest.CaptureFixture[str],
) -> None:
    app = create_app(service)
    cases = Cases(known_ids(service))
    tried = 0
    statuses: dict[int, int] = {}
    failures: list[str] = []

    def fail(kind: str, case: Case, answer: Answer | None = None) -> None:
        shown = "" if answer is None else f" -> {answer.status} {answer.body[:300]!r}"
        failures.append(f"{kind}: {case.short()}{shown}")

    @settings(FUZZ, max_examples=BATCHES)
    @given(
        st.lists(
            st.integers(0, 2**32 - 1),
            min_size=CASES_PER_BATCH,
            max_size=CASES_PER_BATCH,
        )
    )
    def batch(seeds: list[int]) -> None:
        nonlocal tried
        for seed in seeds:
            case = cases.build(seed)
            tried += 1
            try:
                answer = loop.run_until_complete(
                    call(
                        app,
                        case.method,
                        case.raw_path,
                        case.query,
                        case.chunks,
                        case.headers,
                    )
                )
            except Exception as exc:  # a raw exception out of the app
                fail(f"raised {type(exc).__name__}: {exc}"[:300], case)
                continue
            statuses[answer.status] = statuses.get(answer.status, 0) + 1
            if answer.starts != 1:
                fail(f"{answer.starts} answers", case, answer)
            elif answer.status >= 500 and answer.status != 503:
                fail("server error", case, answer)
            elif answer.status >= 400 and case.method != "HEAD":
                try:
                    error = json.loads(answer.body)["error"]
                except (ValueError, KeyError, TypeError):
                    fail("no error sentence", case, answer)
                    continue
                if not one_sentence(error):
                    fail("not one sentence", case, answer)

    batch()
    # Whatever was stored can be read back (a lone surrogate stored once
    # made its trajectory unreadable for good).
    unreadable = []
    listing = loop.run_until_complete(
        call(app, "GET", "/trajectories", "limit=10000", [], [])
    )
    assert listing.status == 200, listing.body[:300]
    rows = json.loads(listing.body)["trajectories"]
    for row in rows:
        tid = urllib.parse.quote(row["id"], safe="")
        got = loop.run_until_complete(
            call(app, "GET", f"/trajectories/{tid}", "", [], [])
        )
        if got.status != 200:
            unreadable.append(f"{row['id']}: {got.status} {got.body[:200]!r}")
    with capsys.disabled():
        print(
            f"\nHTTP fuzz: {tried} requests, "
            f"statuses {dict(sorted(statuses.items()))}, "
            f"{len(failures)} failures, {len(rows)} trajectories read back, "
            f"{len(unreadable)} unreadable"
        )
        for line in failures[:15]:
            print("   ", line)
    assert tried == BATCHES * CASES_PER_BATCH
    assert not failures, failures[:15]
    assert not unreadable, unreadable[:5]
    assert len(rows) > 2  # the fuzz did store trajectories of its own


# ----------------------------------------------------------- attack cases
def test_the_reported_attacks_get_one_sentence_and_store_nothing(
    service: Service, loop: asyncio.AbstractEventLoop
) -> None:
    """The cases of issue #26, in process: a chunked 64 MiB body is refused
    after its first MiB (the rest never read), a 5,000-character or NUL path
    parameter is a 400, a lone surrogate in a step is a 400 at intake (and
    the trajectory stays readable), a 5,000-character value is not echoed."""
    app = create_app(service)
    json_type = [(b"content-type", b"application/json")]

    def request(
        method: str, path: str, body: bytes | list[bytes] = b""
    ) -> tuple[int, dict[str, Any]]:
        chunks = body if isinstance(body, list) else [body]
        headers = json_type + (
            [(b"transfer-encoding", b"chunked")] if isinstance(body, list) else []
        )
        answer = loop.run_until_complete(call(app, method, path, "", chunks, headers))
        assert answer.starts == 1
        return answer.status, json.loads(answer.body)

    status, started = request("POST", "/trajectories", b'{"agent": "attack"}')
    assert status == 201
    tid = started["trajectory_id"]

    # 64 MiB, chunked: counted as it comes, refused once past the limit.
    mib = b'{"action": "' + b"a" * ((1 << 20) - 12)
    sent = [mib] + [b"a" * (1 << 20)] * 63 + [b'", "reward": 1}']
    pieces = list(sent)
    taken = 0

    async def counting_call() -> Answer:
        nonlocal taken
        answer = Answer()
        done = asyncio.Event()

        async def receive() -> dict[str, Any]:
            nonlocal taken
            if pieces:
                taken += 1
                return {
                    "type": "http.request",
                    "body": pieces.pop(0),
                    "more_body": bool(pieces),
                }
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer.starts += 1
                answer.status = message["status"]
            elif message["type"] == "http.response.body":
                answer.body += message.get("body", b"")
                done.set()

        scope = {
            "type": "http",
            "http_version": "1.1",
            "method": "POST",
            "path": f"/trajectories/{tid}/steps",
            "raw_path": f"/trajectories/{tid}/steps".encode(),
            "query_string": b"",
            "headers": [*json_type, (b"transfer-encoding", b"chunked")],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 80),
        }
        await app(scope, receive, send)
        return answer

    big = loop.run_until_complete(counting_call())
    assert big.status == 413, big.body
    assert "larger than 1,048,576 bytes" in json.loads(big.body)["error"]
    assert taken == 2, f"{taken} pieces of 64 read before the refusal"

    # Path parameters: too long, NUL, control characters.
    for path in (
        "/train/" + "x" * 5000,
        "/train/a%00b",
        "/runs/" + "r" * 201,
        "/agents/a%01b",
        f"/trajectories/{'t' * 5000}",
    ):
        status, error = request("POST" if "train" in path else "GET", path, b"{}")
        assert status == 400, (path, error)
        assert one_sentence(error["error"]) and len(error["error"]) < 400, error

    # A lone surrogate anywhere in a step: refused where it comes in.
    for body in (
        b'{"action": "\\ud800", "reward": 1}',
        b'{"action": 1, "reward": 1, "state": {"\\udfff": 1}}',
        b'{"action": 1, "reward": 1, "completion": "a\\udc80"}',
        b'{"steps": [{"action": 1, "reward": 1, "prompt": "\\ud800"}]}',
    ):
        status, error = request("POST", f"/trajectories/{tid}/steps", body)
        assert status == 400, (body, error)
        assert "not valid Unicode" in error["error"], error
    status, good = request(
        "POST",
        f"/trajectories/{tid}/steps",
        b'{"action": "\\ud83d\\ude00", "reward": 1}',
    )
    assert status == 201, good  # a surrogate pair is a character (an emoji)
    status, episode = request("GET", f"/trajectories/{tid}")
    assert status == 200 and [s["action"] for s in episode["steps"]] == ["😀"]

    # A 5,000-character value is quoted, not echoed.
    status, error = request(
        "POST", "/trajectories", b'{"agent": "a", "scenario": ["' + b"s" * 5000 + b'"]}'
    )
    assert status == 422 and error["error"].count("s") < 300, error
    # Sentences made deeper down (a flow's node ids, a job's settings) that
    # quote a value whole are cut where the service answers.
    long = "L" * 5000
    for path, body in (
        ("/flows/cartpole_ppo/run", {"targets": [long]}),
        ("/flows/cartpole_ppo/run", {"overrides": {long: 1}}),
        ("/training/settings", {long: 1}),
    ):
        method = "PUT" if path == "/training/settings" else "POST"
        status, error = request(method, path, json.dumps(body).encode())
        assert status == 422, error
        assert error["error"].count("L") <= 201 and one_sentence(error["error"])


def test_bounded_cuts_long_quoted_values_only() -> None:
    assert bounded("There is no run 'r1'.") == "There is no run 'r1'."
    cut = bounded(f"There is no node {'N' * 5000!r} in the flow.")
    assert cut == f"There is no node '{'N' * 200}...' (5,000 characters) in the flow."
    assert len(bounded("word " * 1000)) == 1000
