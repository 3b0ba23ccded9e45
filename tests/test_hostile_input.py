"""Hostile input is one sentence: the protocol decoder's limits, the
engine's answers to malformed requests, and the file loaders' limits."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from engine_harness import ROOT, EngineProcess
from fuzz_support import FLOWS, ReplySink

from engine import flow, protocol, untrusted
from engine.envs.spec import SpecError, parse_spec, read_spec_json
from engine.server import Server


@pytest.mark.parametrize(
    ("line", "expected", "field"),
    [
        (b'{"type": "ping", "id": "\xc3\x28"}', "not UTF-8", ""),
        (b"[" * 5000 + b"]" * 5000, "nested too deeply", ""),
        (
            b'{"type": "ping", "id": "a", "x": ' + b"[" * 70 + b"]" * 70 + b"}",
            "'x" + "[0]" * 63 + "' is nested deeper than 64 levels",
            "x" + "[0]" * 63,
        ),
        (b'{"type": "ping", "n": ' + b"9" * 5000 + b"}", "'n' has an integer too", "n"),
        (b'{"type": "ping", "n": 9223372036854775808}', "integer too large", "n"),
        (b'{"type": "ping", "p": [NaN]}', "'p[0]' is not a finite number", "p[0]"),
        (b'{"type": "ping", "p": -Infinity}', "'p' is not a finite number", "p"),
        (b'{"type": "ping", "p": 1e999}', "'p' is not a finite number", "p"),
        (b'{"type": "ping", "id": "\\ud800"}', "'id' has text that is not valid", "id"),
        (b'{"type": "env.check", "steps": 1000000000}', "at most 10,000", "steps"),
        (b'{"type": "env.check", "steps": 1e9}', "'steps' of 'env.check' has", "steps"),
        (b'{"type": "env.catalog", "ids": [1]}', "'ids' of 'env.catalog' has", "ids"),
        (b'{"type": "run.stop", "timeout_s": -1}', "at least 0", "timeout_s"),
        (b'{"type": "ping", "payload": "' + b"x" * 70_000 + b'"}', "longer", "payload"),
    ],
)
def test_the_decoder_refuses_what_would_crash_or_starve(
    line: bytes, expected: str, field: str
) -> None:
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode(line)
    assert expected in str(info.value)
    assert info.value.field == field
    assert "\n" not in str(info.value)


def test_a_line_longer_than_the_limit_is_refused_before_parsing() -> None:
    line = b'{"type": "ping", "payload": "' + b"x" * protocol.MAX_LINE_BYTES + b'"}'
    with pytest.raises(protocol.ProtocolError, match="longer than 16,777,216 bytes"):
        protocol.decode(line)


@pytest.fixture
def server() -> Any:
    sink = ReplySink()
    srv = Server(sink)
    yield srv, sink
    srv.supervisor.shutdown(1.0)


def ask(server: Any, line: bytes | str) -> protocol.Message:
    srv, sink = server
    count = len(sink.answers) + 1
    srv.handle_line(line)
    assert sink.wait_for(count, 30)
    return sink.answers[count - 1]


@pytest.mark.parametrize(
    ("raw_id", "reply_to"),
    [
        (7, "7"),
        ({"a": 1}, '{"a": 1}'),
        (None, "null"),
        ("i" * 300, json.dumps("i" * 300)[:200]),
    ],
)
def test_a_malformed_id_is_answered_by_its_json_text(
    server: Any, raw_id: Any, reply_to: str
) -> None:
    answer = ask(server, json.dumps({"type": "ping", "id": raw_id, "payload": "p"}))
    assert isinstance(answer, protocol.Reply)
    assert answer.reply_to == reply_to and answer.result == {"payload": "p"}


def test_a_request_without_id_is_answered(server: Any) -> None:
    answer = ask(server, '{"type": "ping", "payload": "p"}')
    assert isinstance(answer, protocol.Reply) and answer.reply_to == ""


def test_a_refused_field_is_answered_to_its_request_with_the_field(server: Any) -> None:
    answer = ask(server, '{"type": "env.check", "id": "c1", "steps": 1000000000}')
    assert isinstance(answer, protocol.Error)
    assert answer.reply_to == "c1" and answer.field == "steps"
    assert answer.error_type == "ProtocolError" and "at most 10,000" in answer.message


@pytest.mark.parametrize(
    ("line", "reply_to"),
    [
        ('{"type": "ping", "id": "n1", "p": NaN}', "n1"),
        ('{"type": "ping", "id": "n2", "n": ' + "9" * 5000 + "}", "n2"),
        ('{"type": "ping", "id": "n3", "s": "\\ud800"}', "n3"),
        ('{"type": "ping", "id": "n4", "x": ' + "[" * 70 + "]" * 70 + "}", "n4"),
        ('{"type": "run.stop", "id": "n5", "timeout_s": -1}', "n5"),
        ('{"type": "ping", "id": "\\ud800", "p": NaN}', None),
        ('{"type": "ping", "id": "n6", "x": ' + "[" * 5000 + "]" * 5000 + "}", None),
    ],
)
def test_a_line_refused_while_parsing_is_answered_to_its_readable_id(
    server: Any, line: str, reply_to: str | None
) -> None:
    answer = ask(server, line)
    assert isinstance(answer, protocol.Error)
    assert answer.error_type == "ProtocolError" and answer.reply_to == reply_to


LONG = "x" * 5000


@pytest.mark.parametrize(
    "request_",
    [
        {"type": "run.start", "kind": "rl.train", "config": {LONG: 1}},
        {"type": "run.start", "kind": "rl.train", "config": {"env": LONG}},
        {"type": "run.start", "kind": "flow.run", "config": {"flow_path": LONG}},
        {"type": "run.start", "kind": "llm.train", "config": {"model": LONG}},
        {"type": LONG},
    ],
)
def test_an_error_quotes_at_most_200_characters_of_a_value(
    server: Any, tmp_path: Path, request_: dict[str, Any]
) -> None:
    project = {"type": "project.open", "id": "o", "path": str(tmp_path / "p")}
    opened = ask(server, json.dumps({**project, "create": True}))
    assert isinstance(opened, protocol.Reply)
    answer = ask(server, json.dumps({**request_, "id": "long"}))
    assert isinstance(answer, protocol.Error) and answer.reply_to == "long"
    assert len(answer.message) < 450 and "x" * 201 not in answer.message


def test_local_read_only_requests_never_wait_behind_network_calls() -> None:
    """Three chats with an Ollama server that accepts and never answers used
    to fill the read-only threads: a hardware query waited for them."""
    import socket

    engine = EngineProcess()
    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen()
        host = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        chats = [
            engine.send(
                protocol.Chat(
                    model="m", host=host, messages=[{"role": "user", "content": "hi"}]
                )
            )
            for _ in range(3)
        ]
        engine.send(protocol.SearchHub(query="qwen"))
        try:
            hardware = engine.call(protocol.DetectHardware(), timeout=60)
            catalog = engine.call(protocol.GetEnvCatalog(ids=["CartPole-v1"]), 60)
            assert hardware["cpu_logical_cores"] >= 1
            assert [e["id"] for e in catalog["envs"]] == ["CartPole-v1"]
            answered = {getattr(m, "reply_to", None) for m in engine._seen}
            assert not answered & set(chats), "the chats were answered first"
        finally:
            engine.close()


@pytest.mark.parametrize("path", ["/dev/zero", "/dev/null", "/proc/self/fd/0"])
def test_flow_validate_refuses_files_that_are_not_regular(
    server: Any, path: str
) -> None:
    start = time.monotonic()
    answer = ask(server, protocol.encode(protocol.ValidateFlow(id="v", path=path)))
    assert time.monotonic() - start < 10
    assert isinstance(answer, protocol.Error) and answer.error_type == "EngineError"
    assert "is not a regular file" in answer.message or "folder" in answer.message


def test_a_flow_file_over_the_size_limit_is_refused(
    server: Any, tmp_path: Path
) -> None:
    big = tmp_path / "big.flow.json"
    big.write_bytes(b" " * (untrusted.MAX_FILE_BYTES + 1))
    answer = ask(server, protocol.encode(protocol.ValidateFlow(id="v", path=str(big))))
    assert isinstance(answer, protocol.Error)
    assert answer.message == f"The flow file {big} is larger than 16 MiB."


def test_env_check_with_huge_steps_is_refused_and_shutdown_is_prompt(
    tmp_path: Path,
) -> None:
    spec = json.loads((ROOT / "resources/examples/envs/maze.env.json").read_text())
    lines = [
        json.dumps({"type": "env.check", "id": "c", "spec": spec, "steps": 10**9}),
        json.dumps({"type": "env.check", "id": "d", "spec": spec, "steps": 1e9}),
        protocol.encode(protocol.Shutdown(id="bye")),
    ]
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "serve"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 0 and time.monotonic() - start < 30
    answers = {m.reply_to: m for m in map(protocol.decode, proc.stdout.splitlines())}
    assert isinstance(answers["c"], protocol.Error) and answers["c"].field == "steps"
    assert isinstance(answers["d"], protocol.Error) and answers["d"].field == "steps"
    assert isinstance(answers["bye"], protocol.Reply)


def test_invalid_utf8_on_stdin_is_answered_and_the_engine_keeps_serving(
    tmp_path: Path,
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "serve"],
        input=b'{"type": "ping", "id": "\xff"}\n'
        + protocol.encode(protocol.Ping(id="p2", payload="ok")).encode()
        + b"\n",
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    first, second = map(protocol.decode, proc.stdout.splitlines())
    assert isinstance(first, protocol.Error) and "not UTF-8 text" in first.message
    assert isinstance(second, protocol.Reply) and second.result == {"payload": "ok"}


def test_an_over_long_line_on_stdin_is_skipped_with_an_error(tmp_path: Path) -> None:
    """The engine reads at most the limit of a line, answers, and goes on with
    the next line instead of holding the whole line in memory."""
    long_line = b'{"type": "ping", "id": "big", "payload": "' + b"x" * (
        protocol.MAX_LINE_BYTES + 10
    )
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "serve"],
        input=long_line
        + b'"}\n'
        + protocol.encode(protocol.Ping(id="p2", payload="ok")).encode()
        + b"\n",
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    first, second = map(protocol.decode, proc.stdout.splitlines())
    assert isinstance(first, protocol.Error)
    assert (
        first.message == "Malformed message: the line is longer than 16,777,216 bytes."
    )
    assert isinstance(second, protocol.Reply) and second.reply_to == "p2"


# ------------------------------------------------------------------ files
def nan_flow(tmp_path: Path) -> Path:
    text = FLOWS[0].read_text().replace('"total_steps": 30000', '"total_steps": NaN')
    path = tmp_path / "nan.flow.json"
    path.write_text(text)
    return path


def test_a_flow_with_nan_is_refused_naming_the_field_and_left_unchanged(
    tmp_path: Path,
) -> None:
    path = nan_flow(tmp_path)
    before = path.read_bytes()
    with pytest.raises(flow.FlowFormatError) as info:
        flow.load(path)
    assert str(info.value) == (
        "The flow file nan.flow.json: 'nodes[1].params.total_steps' is not a "
        "finite number (NaN)."
    )
    assert path.read_bytes() == before


def test_every_flow_that_opens_can_be_saved(tmp_path: Path) -> None:
    """What ``dumps`` writes ``load`` reads; a value neither takes is refused
    by ``dumps`` with a sentence, never written."""
    doc = flow.load(FLOWS[0])
    doc.nodes[1].params["total_steps"] = 10**30
    with pytest.raises(flow.FlowFormatError, match="total_steps' has an integer"):
        flow.save(doc, tmp_path / "x.flow.json")
    assert not (tmp_path / "x.flow.json").exists()
    doc.nodes[1].params["total_steps"] = 2**63 - 1
    flow.save(doc, tmp_path / "x.flow.json")
    assert flow.load(tmp_path / "x.flow.json").to_dict() == doc.to_dict()


@pytest.mark.parametrize(
    ("text", "field", "expected"),
    [
        (
            '{"format": 1, "name": "m", "kind": "grid", "grid": {"size": [NaN, 3]}}',
            "grid.size[0]",
            "is not a finite number",
        ),
        (
            '{"format": 1, "name": "m", "kind": "grid", "grid": {"size": [1e400, 3]}}',
            "grid.size[0]",
            "is not a finite number",
        ),
        (
            '{"format": 1, "name": "m", "kind": "grid", "grid": {"size": ['
            + "9" * 30
            + ", 3]}}",
            "grid.size[0]",
            "integer too large",
        ),
        (
            '{"format": 1, "name": "m", "kind": "grid", "grid": '
            + "[" * 80
            + "]" * 80
            + "}",
            "grid" + "[0]" * 63,
            "nested deeper than 64",
        ),
    ],
)
def test_env_spec_loader_names_the_field(
    tmp_path: Path, text: str, field: str, expected: str
) -> None:
    path = tmp_path / "m.env.json"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        parse_spec(read_spec_json(path))
    assert getattr(info.value, "field", None) == field
    assert expected in str(info.value) and f"'{field}'" in str(info.value)


def test_a_spec_given_in_memory_with_nan_is_a_problem_naming_the_field() -> None:
    data = {"format": 1, "name": "m", "kind": "grid", "grid": {"size": [1, 3]}}
    data["grid"]["size"][0] = float("nan")
    built, problems = parse_spec(data)
    assert built is None and problems[0].path == "grid.size[0]"


def test_a_form_refuses_whole_numbers_no_json_reader_takes() -> None:
    """The inspector and the run dialog cannot put a value into a flow or a
    config that the engine would refuse to read back."""
    from widgets.param_form import check_value

    schema = {"name": "total_steps", "type": "int"}
    assert check_value(schema, str(2**63 - 1)) == (2**63 - 1, "")
    assert check_value(schema, str(2**63)) == (
        None,
        "total_steps must be a whole number of at most 19 digits.",
    )


def test_shutdown_is_prompt_while_a_request_waits_on_a_stalled_server(
    tmp_path: Path,
) -> None:
    """A chat with an Ollama server that accepts and never answers would hold
    the engine for its whole timeout; shutdown answers it and exits."""
    import socket

    with socket.socket() as stalled:
        stalled.bind(("127.0.0.1", 0))
        stalled.listen()
        host = f"http://127.0.0.1:{stalled.getsockname()[1]}"
        chat = protocol.Chat(
            id="c", model="m", host=host, messages=[{"role": "user", "content": "hi"}]
        )
        lines = [chat, protocol.Ping(id="p"), protocol.Shutdown(id="bye")]
        start = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "engine", "serve"],
            input="".join(protocol.encode(m) + "\n" for m in lines),
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        elapsed = time.monotonic() - start
    answers = {m.reply_to: m for m in map(protocol.decode, proc.stdout.splitlines())}
    assert proc.returncode == 0 and elapsed < 20
    assert isinstance(answers["bye"], protocol.Reply)
    assert isinstance(answers["c"], protocol.Error)
    assert answers["c"].message == "The engine shut down before answering this request."


@pytest.mark.parametrize("ids", [[], [f"ALE/Game{i}-v5" for i in range(33)]])
def test_describing_env_spaces_needs_a_few_named_ids(
    server: Any, ids: list[str]
) -> None:
    """Describing makes each env (an Atari game loads its ROM): all 415
    installed took 47 s, past a client's patience, so a request names at most
    32; the cheap listing still covers every env."""
    start = time.monotonic()
    asked = protocol.GetEnvCatalog(id="c", ids=ids, with_spaces=True)
    answer = ask(server, protocol.encode(asked))
    assert time.monotonic() - start < 5
    assert isinstance(answer, protocol.Error) and answer.error_type == "EngineError"
    assert answer.message == (
        "Name the envs whose spaces you want in ids, at most 32: describing one "
        "means making it."
    )
    listed = ask(server, protocol.encode(protocol.GetEnvCatalog(id="l")))
    assert isinstance(listed, protocol.Reply) and len(listed.result["envs"]) > 300
