"""Hostile inputs for the fuzz suite (tests/test_fuzz.py): protocol lines and
mutated env specs and flows, drawn by hypothesis.

Each protocol case is one line of bytes; the harness feeds it to the
engine's real dispatch (``Server.handle_line``) and classifies what came
back: a reply, an error sentence of the engine's own kind, a raw exception
(an error whose type is a Python exception, not an ``EngineError`` or a
protocol error), or a crash (no answer, or an exception out of the
dispatch).
"""

from __future__ import annotations

import json
import random
import threading
import traceback
import typing
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from engine import protocol
from engine.errors import EngineError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"
ENV_SPECS = sorted((EXAMPLES / "envs").glob("*.env.json"))
FLOWS = sorted((EXAMPLES / "flows").glob("*.flow.json"))

# Error types that are the engine's own sentences.
PROTOCOL_ERROR_TYPES = {"ProtocolError", "UnknownRequest"}


def engine_error_types() -> set[str]:
    """Names of every EngineError subclass (the engine's sentences)."""
    # Import the modules that define them, so the subclasses exist.
    import engine.envs.spec
    import engine.nodes
    import engine.ollama
    import engine.store.project  # noqa: F401

    names, todo = set(), [EngineError]
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return names | PROTOCOL_ERROR_TYPES


# ----------------------------------------------------------------- values
SURROGATE = st.characters(categories=["Cs"])
TEXT = st.one_of(
    st.text(max_size=12),
    st.text(st.one_of(st.characters(), SURROGATE), max_size=6),
    st.sampled_from(["", " ", "\x00", "../../etc/passwd", "/", "x" * 300]),
)
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63, -(2**64), 10**9, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
    ),
    max_leaves=10,
)


def hostile_paths(tmp: Path) -> st.SearchStrategy[str]:
    """Values for fields that name files or folders, kept inside ``tmp``
    (the fuzz must not create projects elsewhere) plus system files."""
    big = tmp / "big.json"
    if not big.exists():
        big.write_bytes(b"[" + b"0," * (9 * 1024 * 1024) + b"0]")
    (tmp / "folder").mkdir(exist_ok=True)
    return st.one_of(
        st.sampled_from(
            [
                "",
                str(tmp / "missing"),
                str(tmp / "folder"),
                str(big),
                "/dev/zero",
                "/dev/null",
                "/proc/self/status",
                str(ENV_SPECS[0]),
                str(FLOWS[0]),
                str(tmp / "\udc80bad"),
                str(tmp / ("x" * 5000)),
            ]
        ),
        st.builds(lambda s: str(tmp / "p" / s.replace("/", "_")), st.text(max_size=8)),
    )


HOSTS = st.sampled_from(
    ["", "http://127.0.0.1:9", "not a url", "http://[::1", "ftp://x"]
)


def value_for(hint: Any, name: str, paths: st.SearchStrategy[str]) -> st.SearchStrategy:
    """Mostly a value of the field's type (so handlers run), sometimes anything."""
    if name in ("path", "flow_path", "model"):
        typed: st.SearchStrategy = paths
    elif name == "host":
        typed = HOSTS
    elif hint is int:
        typed = st.one_of(
            st.integers(-10, 300),
            st.sampled_from([10**9, -(2**63), 2**63, 10**4000]),
        )
    elif hint is float:
        typed = st.one_of(st.floats(-100, 100), st.sampled_from([1e308, -1.0, 1e9]))
    elif hint is bool:
        typed = st.booleans()
    elif hint is str:
        typed = TEXT
    else:
        typed = JSON_VALUES
    return st.one_of(typed, typed, typed, JSON_VALUES)


def spec_documents() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in ENV_SPECS]


def flow_documents() -> list[dict[str, Any]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in FLOWS]


def request_dicts(paths: st.SearchStrategy[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Requests of every type the engine answers (not those that would stop
    it or train), their fields mostly well typed, each field present or not."""
    ids = st.one_of(
        st.builds(lambda n: f"f{n}", st.integers(0, 10**6)),
        st.just(None),
        NUMBERS,
        st.lists(st.integers(), max_size=2),
        st.just("i" * 10_000),
    )
    special = {
        "spec": st.one_of(st.sampled_from(spec_documents()), JSON_VALUES),
        "document": st.one_of(st.sampled_from(flow_documents()), JSON_VALUES),
        "steps": st.one_of(st.integers(-5, 50), st.sampled_from([10**9, 2**63])),
    }
    by_type = []
    for cls in protocol.message_types().values():
        if not issubclass(cls, protocol.Request) or cls in (
            protocol.Shutdown,
            protocol.StartRun,
            protocol.ResumeRun,
        ):
            continue
        hints = typing.get_type_hints(cls)
        optional = {
            f.name: special[f.name]
            if f.name in special
            else value_for(hints[f.name], f.name, paths)
            for f in fields(cls)
            if f.name != "id"
        }
        optional["id"] = ids
        by_type.append(
            st.fixed_dictionaries(
                {"v": st.just(1), "type": st.just(cls.TYPE)}, optional=optional
            )
        )
    return st.one_of(by_type)


def _deep(n: int, open_: str = "[", close: str = "]") -> bytes:
    return (open_ * n + close * n).encode()


RAW_LINES = st.sampled_from(
    [
        b"{",
        b"[]",
        b"null",
        b"42",
        b'"hello"',
        b"{}",
        b'{"type": 5}',
        b'{"type": "run.started"}',
        b'{"type": "no.such", "id": "u1"}',
        b'{"type": "ping", "id": "x", "payload": NaN}',
        b'{"type": "ping", "id": "x", "payload": Infinity}',
        b'{"type": "ping", "id": "x", "payload": -Infinity}',
        b'{"type": "ping", "id": "\\ud800"}',
        b'{"type": "ping", "id": "x", "payload": "\\udfff"}',
        b'{"type": "ping", "id": 7}',
        b'{"type": "ping", "id": {"a": 1}}',
        b'{"type": "ping", "id": "x", "payload": 1e999}',
        b"\xff\xfe\x00",
        b'{"type": "ping", "id": "\xc3\x28"}',
        b"\xef\xbb\xbf{}",
        _deep(900),
        _deep(1_100),
        _deep(100_000),
        b'{"a":' * 5_000 + b"1" + b"}" * 5_000,
        b'{"type": "ping", "id": "x", "payload": ' + _deep(800) + b"}",
        b'{"type": "ping", "id": "x", "n": ' + b"9" * 4_301 + b"}",
        b'{"type": "ping", "id": "x", "n": ' + b"9" * 50_000 + b"}",
        b'{"type": "env.check", "id": "x", "steps": ' + b"9" * 5_000 + b"}",
        b'{"type": "run.stop", "id": "x", "timeout_s": 1e308}',
        b'{"type": "env.catalog", "id": "x", "ids": [1, 2, null]}',
        b'{"type": "chat", "id": "x", "messages": [1, "a"]}',
        b'{"type": "flow.validate", "id": "x", "path": "/dev/zero"}',
        b'{"type": "env.check", "id": "x", "path": "/dev/zero"}',
    ]
)


@st.composite
def mutated_bytes(draw: Any, base: st.SearchStrategy[bytes]) -> bytes:
    data = bytearray(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        if not data:
            break
        i = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            data[i] = draw(st.integers(0, 255))
        elif op == 1:
            del data[i : i + draw(st.integers(1, 8))]
        else:
            data[i:i] = draw(st.sampled_from([b"[", b"{", b"\\u", b"\x80", b"9" * 30]))
    return bytes(data).replace(b"\n", b" ")


def protocol_lines(paths: st.SearchStrategy[str]) -> st.SearchStrategy[bytes]:
    dumped = request_dicts(paths).map(
        lambda d: json.dumps(d, allow_nan=True).encode("utf-8", "surrogatepass")
    )
    return st.one_of(dumped, dumped, dumped, RAW_LINES, mutated_bytes(dumped))


# ------------------------------------------------------------------ files
MUTANTS: list[Any] = [
    float("nan"),
    float("inf"),
    -float("inf"),
    10**30,
    -(2**64),
    None,
    "",
    "\udc80",
    [],
    {},
    True,
    "x" * 1000,
]


def _paths_of(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if len(prefix) > 40:  # a nested mutant of an earlier round
        return out
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths_of(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths_of(v, (*prefix, i)))
    return out


def mutated_documents(docs: list[dict[str, Any]]) -> st.SearchStrategy[bytes]:
    """One of ``docs`` with a few values replaced or deleted, as file bytes.

    Hypothesis draws the document and one seed; the mutation itself is
    plain ``random`` from that seed (a draw per choice would cost more than
    loading the file)."""
    texts = [json.dumps(d) for d in docs]
    return st.builds(_mutate, st.sampled_from(texts), st.integers(0, 2**32 - 1))


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 2 else 6)
    if kind < 6:
        scalars = [None, True, rng.randint(-(2**70), 2**70), rng.uniform(-1e9, 1e9)]
        return rng.choice([*scalars, "", "a", float("nan"), "\udc80"])
    if kind == 6:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {str(i): _random_json(rng, depth + 1) for i in range(rng.randrange(4))}


def _mutate(text: str, seed: int) -> bytes:
    rng = random.Random(seed)
    doc = json.loads(text)
    for _ in range(rng.randint(1, 3)):
        paths = _paths_of(doc)
        path = rng.choice(paths[1:] or paths)
        if not path:
            break
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        choice = rng.randrange(6)
        if choice == 0 and isinstance(parent, dict):
            del parent[key]
        elif choice == 1:
            parent[key] = f"@deep{rng.choice([70, 500, 2000])}@"
        elif choice == 2:
            parent[key] = _random_json(rng)
        else:
            parent[key] = rng.choice(MUTANTS)
    data = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    for n in (70, 500, 2000):  # nesting too deep for json.dumps to write
        data = data.replace(f'"@deep{n}@"'.encode(), b"[" * n + b"1" + b"]" * n)
    if rng.randrange(10) == 0:
        data = data.replace(b"1", b"9" * rng.choice([25, 5000]), 1)
    if rng.randrange(10) == 0:
        cut = rng.randrange(len(data) + 1)
        data = data[:cut] + rng.choice([b"", b"\xff", b"\x00"])
    return data


# -------------------------------------------------------------- counting
@dataclass
class Tally:
    """What came back for each case."""

    cases: int = 0
    replies: int = 0
    sentences: int = 0
    raw: Counter[str] = field(default_factory=Counter)
    crashes: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def raw_exception(self, kind: str, case: Any) -> None:
        self.raw[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"raw {kind}: {_short(case)}")

    def crash(self, kind: str, case: Any) -> None:
        self.crashes[kind] += 1
        if len(self.examples) < 20:
            self.examples.append(f"crash {kind}: {_short(case)}")

    def line(self, what: str) -> str:
        return (
            f"fuzz {what}: {self.cases} cases, {sum(self.crashes.values())} crashes, "
            f"{sum(self.raw.values())} raw exceptions "
            f"({self.replies} replies, {self.sentences} error sentences)"
            + (f" raw={dict(self.raw)}" if self.raw else "")
            + (f" crashes={dict(self.crashes)}" if self.crashes else "")
        )


def _short(case: Any) -> str:
    text = repr(case)
    return text if len(text) < 200 else text[:150] + f"... ({len(text)} chars)"


class ReplySink:
    """The server's stdout: strict UTF-8 like the real one, counting answers."""

    def __init__(self) -> None:
        self.answers: list[protocol.Message] = []
        self._cond = threading.Condition()

    def write(self, text: str) -> int:
        text.encode("utf-8")  # the real stream is strict UTF-8
        msg = protocol.decode(text)
        if isinstance(msg, protocol.Reply | protocol.Error):
            with self._cond:
                self.answers.append(msg)
                self._cond.notify_all()
        return len(text)

    def flush(self) -> None:
        pass

    def wait_for(self, count: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: len(self.answers) >= count, timeout)


def classify(tally: Tally, msg: protocol.Message, allowed: set[str], case: Any) -> None:
    if isinstance(msg, protocol.Reply):
        tally.replies += 1
    elif isinstance(msg, protocol.Error) and msg.error_type in allowed and msg.message:
        tally.sentences += 1
    else:
        assert isinstance(msg, protocol.Error)
        tally.raw_exception(msg.error_type, f"{msg.message} for {case!r}")


def run_loader(
    tally: Tally, load: Callable[[bytes], Any], allowed: tuple[type, ...], case: bytes
) -> None:
    """Count one file case: a result or an allowed error is fine."""
    tally.cases += 1
    try:
        load(case)
    except allowed as exc:
        if str(exc):
            tally.sentences += 1
        else:
            tally.raw_exception(f"empty {type(exc).__name__}", case)
        return
    except RecursionError:
        tally.crash("RecursionError", case)
        return
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        tally.raw_exception(
            type(exc).__name__, f"{exc} at {where.filename}:{where.lineno} for {case!r}"
        )
        return
    tally.replies += 1
