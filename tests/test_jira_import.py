"""RL Hub Jira mock data made into workflow envs (issue 32, item 4): the
command ``rl-studio-engine env import-jira``, the service's ``GET
/jira-mock-data`` and ``POST /jira-mock-data/import`` on a real server, and
bad mock data (malformed JSON, no issues, unknown statuses) refused in one
sentence with nothing written. The Environments workspace's button is in
tests/test_jira_import_gui.py.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_http_service import REPO, Served, assert_refusals, one_sentence, serve

from engine.envs.check import check_spec
from engine.envs.jira import import_jira, parse_mock_data, read_mock_data_file
from engine.envs.spec import SpecError

MOCK = REPO / "resources" / "examples" / "data" / "jira_mock_data.json"


def mock() -> dict[str, Any]:
    return copy.deepcopy(json.loads(MOCK.read_text()))


def files(project: Path) -> list[str]:
    """Every file under the project's envs/ and data/jira/ (temporary ones
    too)."""
    return sorted(
        str(p.relative_to(project))
        for folder in ("envs", "data/jira")
        if (project / folder).is_dir()
        for p in (project / folder).iterdir()
    )


def import_cli(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "env",
            "import-jira",
            *args,
            "--project",
            str(project),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ------------------------------------------------------------------ bad data
def bad_cases(tmp_path: Path) -> list[tuple[str, str]]:
    """(file text, the sentence it is refused with)."""
    unknown = mock()
    unknown["issues"][1]["status"] = "Escalated"
    target = mock()
    target["issues"][0]["target_status"] = "Shipped"
    weights = mock()
    weights["reward_config"]["status_reward_weights"]["Archived"] = 0.5
    empty = {**mock(), "issues": []}
    rewards = mock()
    rewards["reward_config"]["per_step_base"] = "a little"
    first_id = mock()["issues"][1]["id"]
    statuses = mock_statuses()
    return [
        (
            '{"issues": [',
            "The mock data file m.json is not valid JSON (line 1, column 13: "
            "Expecting value).",
        ),
        (
            json.dumps(empty),
            "The mock data file m.json has no issues (its 'issues' list is empty).",
        ),
        ("[1, 2]", "The mock data file m.json must be a JSON object with 'issues'."),
        (
            json.dumps(unknown),
            f"The mock data file m.json's issue {first_id!r} has the status "
            f"'Escalated', which its valid_transitions do not know (statuses: "
            f"{statuses}).",
        ),
        (
            json.dumps(target),
            "The mock data file m.json's issue "
            f"{mock()['issues'][0]['id']!r} has the target status 'Shipped', which "
            f"its valid_transitions do not know (statuses: {statuses}).",
        ),
        (
            json.dumps(weights),
            "The mock data file m.json's status_reward_weights names the status "
            f"'Archived', which its valid_transitions do not know (statuses: "
            f"{statuses}).",
        ),
        (
            json.dumps(rewards),
            "The mock data file m.json's reward_config.per_step_base must be a "
            "number, not 'a little'.",
        ),
    ]


def mock_statuses() -> str:
    from engine.envs.jira import workflow_from_jira

    known = workflow_from_jira(mock(), name="x", data_ref="")["workflow"]["statuses"]
    return ", ".join(repr(s) for s in known[:8]) + (", ..." if len(known) > 8 else "")


def test_bad_mock_data_is_one_sentence_and_writes_nothing(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "envs").mkdir(parents=True)
    for text, sentence in bad_cases(tmp_path):
        file = tmp_path / "m.json"
        file.write_text(text)
        with pytest.raises(SpecError) as err:
            import_jira(project, read_mock_data_file(file), default_name="m")
        assert str(err.value) == sentence
        assert one_sentence(str(err.value))
        assert files(project) == []
    # The command line: the same sentence, exit status 2, nothing written.
    text, sentence = bad_cases(tmp_path)[3]
    (tmp_path / "m.json").write_text(text)
    done = import_cli(project, str(tmp_path / "m.json"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == f"rl-studio-engine env: {sentence}"
    assert files(project) == []
    missing = import_cli(project, str(tmp_path / "none.json"))
    assert missing.returncode == 2
    assert "The mock data file none.json does not exist." in missing.stderr


# ------------------------------------------------------------ command line
def test_the_command_writes_a_checked_env_and_suffixes_a_taken_name(
    tmp_path: Path,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    first = import_cli(project, str(MOCK))
    assert first.returncode == 0, first.stderr
    made = json.loads(first.stdout)
    assert made["name"] == "jira_mock_data"
    assert made["env_id"] == "rlstudio/jira_mock_data-v0"
    assert made["issues"] == len(mock()["issues"]) and made["statuses"] == 6
    spec = json.loads(Path(made["spec_file"]).read_text())
    assert spec["kind"] == "workflow"
    assert spec["workflow"]["tasks"]["data"] == "data/jira/jira_mock_data.json"
    assert json.loads(Path(made["data_file"]).read_text()) == mock()
    report = check_spec(made["spec_file"], env_checks=False)
    assert report.ok, report.format_text()
    # The name made from the file's is suffixed; one asked for is refused.
    second = json.loads(import_cli(project, str(MOCK)).stdout)
    assert second["name"] == "jira_mock_data_2"
    before = files(project)
    taken = import_cli(project, str(MOCK), "--name", "jira_mock_data")
    assert taken.returncode == 2
    assert taken.stderr.strip() == (
        "rl-studio-engine env: There is already an environment (or its mock data) "
        "named jira_mock_data; choose another name."
    )
    bad = import_cli(project, str(MOCK), "--name", "9 lives")
    assert bad.returncode == 2 and "must start with a letter" in bad.stderr
    assert (
        files(project)
        == before
        == [
            "data/jira/jira_mock_data.json",
            "data/jira/jira_mock_data_2.json",
            "envs/jira_mock_data.env.json",
            "envs/jira_mock_data_2.env.json",
        ]
    )
    named = json.loads(import_cli(project, str(MOCK), "--name", "triage").stdout)
    assert named["spec_file"] == str(project / "envs" / "triage.env.json")


def test_parse_mock_data_refuses_text_that_is_not_json() -> None:
    with pytest.raises(SpecError) as err:
        parse_mock_data("not json")
    assert str(err.value) == (
        "The mock data is not valid JSON (line 1, column 1: Expecting value)."
    )


# ---------------------------------------------------------------- service
@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("jira")
    served = serve(root / "project", root / "server.log")
    yield served
    served.stop_cleanly()


def test_the_mock_data_console_and_import_routes(server: Served) -> None:
    client = server.client()
    project = Path(client.health()["project"])
    # The RL Hub's file, as the project holds it (copied with the examples).
    assert client.request("GET", "/jira-mock-data") == mock()
    posted = mock()
    posted["issues"] = posted["issues"][:3]
    made = client.request("POST", "/jira-mock-data/import?name=console", posted)
    assert made["name"] == "console" and made["issues"] == 3
    assert Path(made["spec_file"]) == project / "envs" / "console.env.json"
    assert client.request("GET", "/jira-mock-data?env=console") == posted
    envs = {e["name"] for e in client.request("GET", "/envs")["envs"]}
    assert "console" in envs
    unnamed = client.request("POST", "/jira-mock-data/import", posted)
    assert unnamed["name"] == "jira"
    before = files(project)
    unknown = mock()
    unknown["issues"][0]["status"] = "Escalated"
    assert_refusals(
        client,
        [
            ("POST", "/jira-mock-data/import?name=console", posted, 422,
             "There is already an environment (or its mock data) named console"),
            ("POST", "/jira-mock-data/import", unknown, 422,
             "has the status 'Escalated', which its valid_transitions do not know"),
            ("POST", "/jira-mock-data/import", {**posted, "issues": []}, 422,
             "The mock data has no issues"),
            ("POST", "/jira-mock-data/import", [1], 422,
             "The mock data must be a JSON object with 'issues'."),
            ("GET", "/jira-mock-data?env=nothing", None, 404,
             "There is no environment nothing in this project."),
            ("GET", "/jira-mock-data?env=CartPole", None, 404,
             "There is no environment CartPole in this project."),
        ],
    )  # fmt: skip
    assert files(project) == before


def test_a_malformed_body_is_one_sentence(server: Served) -> None:
    request = urllib.request.Request(
        server.url + "/jira-mock-data/import",
        data=b'{"issues": [',
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=30)
    assert err.value.code == 400  # as every route answers a body that is not JSON
    message = json.loads(err.value.read())["error"]
    assert "not valid JSON" in message and one_sentence(message)
