"""The CLI prints one sentence for a failure, a bug included; tracebacks
appear only with ``--debug`` (a run's log.txt keeps them either way)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine import cli, contract
from engine.jobs.lifecycle import HeadlessContext


@pytest.fixture
def boom_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A subcommand ``boom`` whose run raises a bug (a KeyError)."""
    (tmp_path / "boom_cmd.py").write_text(
        "def configure(parser):\n    pass\ndef run(args):\n    return {}['x' * 5000]\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.SUBCOMMANDS, "boom", ("boom_cmd", "fails"))
    # Set (empty: off) through monkeypatch, so that what main() writes for
    # --debug is undone and no later test's subprocess inherits it.
    monkeypatch.setenv(contract.DEBUG_ENV, "")


def test_a_bug_is_one_sentence_without_debug(
    boom_command: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["boom"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1
    assert err.startswith("rl-studio-engine boom: failed with KeyError: ")
    assert err.rstrip().endswith("(run with --debug for the traceback).")
    assert len(err) < 400 and "x" * 201 not in err  # the key is quoted short


def test_debug_prints_the_traceback(
    boom_command: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["--debug", "boom"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last):" in err and "boom_cmd.py" in err


def test_a_run_keeps_its_traceback_in_the_log_and_off_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    monkeypatch.setenv(contract.DEBUG_ENV, "")
    run_dir = tmp_path / "runs" / "r1"
    run_dir.mkdir(parents=True)
    ctx = HeadlessContext("r1", run_dir, "flow.run", {})
    trace = 'Traceback (most recent call last):\n  File "x.py"\nValueError: bad'
    ctx.log("node n1 failed: bad")
    ctx.log(trace)
    monkeypatch.setenv(contract.DEBUG_ENV, "1")
    ctx.log(trace)
    ctx.close()
    err = capsys.readouterr().err
    assert err.count("Traceback") == 1  # the --debug one
    assert f"(the traceback is in {run_dir / contract.LOG_FILE})" in err
    assert (run_dir / contract.LOG_FILE).read_text().count("ValueError: bad") == 2


def test_debug_is_off_for_the_tests_that_follow() -> None:
    """main(["--debug", ...]) above wrote the variable; monkeypatch undid it,
    else every later CLI test's subprocess would print tracebacks."""
    assert not os.environ.get(contract.DEBUG_ENV)
