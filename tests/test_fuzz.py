"""Hostile input never crashes the engine and is answered in one sentence.

Protocol lines go through the engine's real dispatch in-process (volume),
and a smaller batch through a real ``python -m engine serve``; mutated env
specs and flows go through their loaders. Every case must end in a reply or
one of the engine's own error sentences: no crash, no raw exception. The
counts are printed. Hypothesis runs derandomized, so CI sees the same cases.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fuzz_support import (
    ReplySink,
    Tally,
    classify,
    engine_error_types,
    flow_documents,
    hostile_paths,
    mutated_documents,
    protocol_lines,
    run_loader,
    spec_documents,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import protocol
from engine.errors import EngineError

PROTOCOL_BATCHES = 500
LINES_PER_BATCH = 20  # 10,000 protocol cases in-process
SUBPROCESS_BATCHES = 15  # 300 lines through a real engine
FILE_BATCHES = 250
FILES_PER_BATCH = 10  # 2,500 env spec cases and 2,500 flow cases
ANSWER_TIMEOUT_S = 60.0

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def report(capsys: pytest.CaptureFixture[str], tally: Tally, what: str) -> None:
    with capsys.disabled():
        print("\n" + tally.line(what))
        for example in tally.examples[:10]:
            print("   ", example)


@pytest.fixture
def server(tmp_path: Path) -> Any:
    """The engine's server on a sink, with a project open in ``tmp_path``.

    Runs are never spawned (a fuzzed ``run.start`` that validates would
    train): the supervisor's spawn refuses with an engine sentence.
    """
    from engine.server import Server

    sink = ReplySink()
    srv = Server(sink)

    def no_spawn(*args: Any, **kwargs: Any) -> None:
        raise EngineError("The fuzz suite starts no job processes.")

    srv.supervisor._spawn = no_spawn  # type: ignore[method-assign]
    srv.handle_line(
        protocol.encode(
            protocol.OpenProject(id="open", path=str(tmp_path / "proj"), create=True)
        )
    )
    assert sink.wait_for(1, ANSWER_TIMEOUT_S)
    assert isinstance(sink.answers[0], protocol.Reply), sink.answers[0]
    sink.answers.clear()
    yield srv, sink
    srv.supervisor.shutdown(1.0)


@pytest.mark.slow
def test_protocol_fuzz_in_process(
    server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    srv, sink = server
    allowed = engine_error_types()
    tally = Tally()
    lines = protocol_lines(hostile_paths(tmp_path))

    @settings(FUZZ, max_examples=PROTOCOL_BATCHES)
    @given(st.lists(lines, min_size=LINES_PER_BATCH, max_size=LINES_PER_BATCH))
    def batch(cases: list[bytes]) -> None:
        for line in cases:
            tally.cases += 1
            expected = len(sink.answers) + 1
            try:
                srv.handle_line(line)
            except Exception as exc:
                tally.crash(type(exc).__name__, line)
                continue
            if not sink.wait_for(expected, ANSWER_TIMEOUT_S):
                tally.crash("no answer", line)
                del sink.answers[:]
                continue
            if len(sink.answers) > expected:
                tally.crash("two answers", line)
            classify(tally, sink.answers[expected - 1], allowed, line)

    batch()
    report(capsys, tally, "protocol (in-process)")
    assert tally.cases == PROTOCOL_BATCHES * LINES_PER_BATCH
    assert not tally.crashes and not tally.raw, tally.examples


@pytest.mark.slow
def test_protocol_fuzz_through_a_real_engine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A batch of hostile lines through stdin of a real engine: each gets one
    answer, and ``shutdown`` still ends the process promptly."""
    allowed = engine_error_types()
    lines = st.lists(
        protocol_lines(hostile_paths(tmp_path)),
        min_size=LINES_PER_BATCH,
        max_size=LINES_PER_BATCH,
    )
    cases: list[bytes] = []

    @settings(FUZZ, max_examples=SUBPROCESS_BATCHES)
    @given(lines)
    def draw(drawn: list[bytes]) -> None:
        cases.extend(drawn)

    draw()
    cases = [line for line in cases if line.strip()]  # blank lines are skipped
    payload = b"".join(line + b"\n" for line in cases)
    payload += protocol.encode(protocol.Shutdown(id="bye")).encode() + b"\n"
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "serve", "--stop-timeout", "2"],
        input=payload,
        capture_output=True,
        cwd=tmp_path,
        timeout=120,
    )
    tally = Tally(cases=len(cases))
    answers = []
    for raw in proc.stdout.splitlines():
        msg = protocol.decode(raw)
        if isinstance(msg, protocol.Reply | protocol.Error):
            answers.append(msg)
    if proc.returncode != 0:
        tally.crash(f"exit {proc.returncode}", proc.stderr.decode()[-2000:])
    if len(answers) != len(cases) + 1:
        tally.crash(f"{len(answers)} answers to {len(cases) + 1} lines", "")
    for msg in answers:
        if getattr(msg, "reply_to", None) != "bye":
            classify(tally, msg, allowed, msg)
    report(capsys, tally, "protocol (engine subprocess)")
    assert not tally.crashes and not tally.raw, tally.examples


def test_env_spec_and_flow_loaders_fuzz(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine import flow
    from engine.envs.spec import parse_spec, read_spec_json
    from engine.nodes import validate_flow
    from studio.state.env_design import DesignError, read_spec_file

    spec_file = tmp_path / "fuzzed.env.json"
    flow_file = tmp_path / "fuzzed.flow.json"

    def load_spec(data: bytes) -> None:
        parse_spec(read_spec_json(spec_file), source=spec_file)

    def load_spec_in_studio(data: bytes) -> None:
        read_spec_file(spec_file)

    def load_flow(data: bytes) -> None:
        flow_file.write_bytes(data)
        doc = flow.load(flow_file)
        flow.dumps(doc)  # what opens can be saved
        validate_flow(path=str(flow_file))

    specs, flows = Tally(), Tally()
    spec_docs = mutated_documents(spec_documents())
    flow_docs = mutated_documents(flow_documents())

    @settings(FUZZ, max_examples=FILE_BATCHES)
    @given(
        st.lists(spec_docs, min_size=FILES_PER_BATCH, max_size=FILES_PER_BATCH),
        st.lists(flow_docs, min_size=FILES_PER_BATCH, max_size=FILES_PER_BATCH),
    )
    def batch(spec_cases: list[bytes], flow_cases: list[bytes]) -> None:
        for case in spec_cases:
            spec_file.write_bytes(case)
            run_loader(specs, load_spec, (EngineError,), case)
            specs.cases -= 1  # one case, two loaders
            run_loader(specs, load_spec_in_studio, (DesignError,), case)
        for case in flow_cases:
            run_loader(flows, load_flow, (flow.FlowError, EngineError), case)

    batch()
    report(capsys, specs, "env spec files (engine and studio loader each)")
    report(capsys, flows, "flow files")
    assert specs.cases + flows.cases == FILE_BATCHES * FILES_PER_BATCH * 2
    assert not specs.crashes and not specs.raw, specs.examples
    assert not flows.crashes and not flows.raw, flows.examples
