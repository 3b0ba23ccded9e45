"""Spec files: schema, field errors naming the field, migrations, importer."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from engine.envs import load_spec
from engine.envs.jira import workflow_from_jira_file
from engine.envs.schema import FORMAT_VERSION, SCHEMA, schema_problems
from engine.envs.spec import MIGRATIONS, SpecError, migrate, parse_spec
from engine.errors import EngineError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"


def _doc(name: str) -> dict:
    return json.loads((EXAMPLES / "envs" / f"{name}.env.json").read_text())


def _write(tmp_path: Path, doc: dict | str, name: str = "x", data: bool = True) -> Path:
    if data and not (tmp_path / "data").exists():
        shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    envs = tmp_path / "envs"
    envs.mkdir(exist_ok=True)
    p = envs / f"{name}.env.json"
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def _error(tmp_path: Path, doc: dict | str, data: bool = True) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(_write(tmp_path, doc, data=data))
    return info.value


def test_bundled_specs_match_the_schema() -> None:
    for path in sorted((EXAMPLES / "envs").glob("*.env.json")):
        assert schema_problems(json.loads(path.read_text())) == [], path.name
        spec = load_spec(path)
        assert spec.env_id == f"rlstudio/{spec.name}-v0"
        assert path.name == f"{spec.name}.env.json"


def test_exported_schema_file_is_current() -> None:
    exported = json.loads((ROOT / "resources/schemas/env.schema.json").read_text())
    assert exported == json.loads(json.dumps(SCHEMA))


def test_malformed_json_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as info:
        load_spec(_write(tmp_path, '{"format": 1, "name": '))
    msg = str(info.value)
    assert "not valid JSON" in msg and "line 1" in msg and "\n" not in msg


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="does not exist"):
        load_spec(tmp_path / "nope.env.json")


def test_unknown_kind_names_the_field(tmp_path: Path) -> None:
    doc = _doc("maze")
    doc["kind"] = "spreadsheet"
    err = _error(tmp_path, doc)
    assert err.field == "kind"
    assert "'spreadsheet'" in str(err) and "workflow" in str(err)


def test_transition_to_unknown_status(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][3]["to"] = "Shipped"
    err = _error(tmp_path, doc)
    assert err.field == "workflow.transitions[3].to"
    assert "'Shipped'" in str(err) and "not a status" in str(err)


def test_transition_with_unknown_tool(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][0]["tool"] = "teleport"
    assert _error(tmp_path, doc).field == "workflow.transitions[0].tool"


def test_negative_probability(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][4]["probability"] = -0.2
    err = _error(tmp_path, doc)
    assert err.field == "workflow.transitions[4].probability"
    assert ">= 0" in str(err)


def test_probabilities_over_one(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][7]["probability"] = 0.9  # merge: 0.9 + 0.25
    err = _error(tmp_path, doc)
    assert err.field == "workflow.transitions[8].probability"
    assert "sum to 1.15, more than 1" in str(err)
    assert "'In Review' with tool 'merge'" in str(err)


def test_probabilities_under_one(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][7]["probability"] = 0.5
    err = _error(tmp_path, doc)
    assert "sum to 0.75, not 1" in str(err)


def test_missing_probability_takes_the_rest(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    del doc["workflow"]["transitions"][8]["probability"]
    from engine.envs.workflow_model import WorkflowModel

    m = WorkflowModel(load_spec(_write(tmp_path, doc)))
    s, a = m.status_index["In Review"], m.tool_index["merge"]
    assert [round(o.probability, 6) for o in m.outcomes[s][a]] == [0.75, 0.25]


def test_negative_max_steps(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["max_steps"] = -5
    err = _error(tmp_path, doc)
    assert err.field == "workflow.max_steps"
    assert str(err).endswith("workflow.max_steps is -5; it must be >= 1.")


def test_unknown_field_and_missing_field(tmp_path: Path) -> None:
    doc = _doc("maze")
    doc["grid"]["colour"] = "red"
    assert _error(tmp_path, doc).field == "grid.colour"
    doc = _doc("maze")
    del doc["grid"]["start"]
    err = _error(tmp_path, doc)
    assert err.field == "grid.start" and "missing 'start'" in str(err)


def test_grid_cell_outside(tmp_path: Path) -> None:
    doc = _doc("maze")
    doc["grid"]["goals"] = [[6, 8], [9, 9]]
    err = _error(tmp_path, doc)
    assert err.field == "grid.goals[1]" and "outside the 7x9 grid" in str(err)


def test_python_file_that_fails_to_import(tmp_path: Path) -> None:
    (tmp_path / "broken_env.py").write_text("import gymnasium\nx = 1 / 0\n")
    doc = {
        "format": 1,
        "name": "broken",
        "kind": "python",
        "python": {"file": "broken_env.py", "class": "Broken"},
    }
    spec = load_spec(_write(tmp_path, doc))  # the file exists: fields are fine
    from engine.envs.remote import load_env_class

    with pytest.raises(SpecError) as info:  # imported in an env process
        load_env_class(spec.resolve("broken_env.py"), "Broken")
    assert info.value.field == "python.file"
    assert "failed to import at line 2: ZeroDivisionError" in str(info.value)
    doc["python"]["file"] = "missing.py"
    assert _error(tmp_path, doc).field == "python.file"


def test_mock_data_missing(tmp_path: Path) -> None:
    doc = _doc("jira_issue_resolution")
    err = _error(tmp_path, doc, data=False)  # no data/ folder beside envs/
    assert err.field == "workflow.tasks.data" and "does not exist" in str(err)


def test_newer_format_is_refused(tmp_path: Path) -> None:
    doc = _doc("maze")
    doc["format"] = FORMAT_VERSION + 1
    err = _error(tmp_path, doc)
    assert err.field == "format" and "newer" in str(err)


FORMAT_0 = {
    "version": 0,
    "name": "old_ticket",
    "type": "workflow",
    "states": ["open", "doing", "closed"],
    "actions": ["start", "finish"],
    "transitions": [
        {"state": "open", "action": "start", "next": "doing"},
        {"state": "doing", "action": "finish", "next": "closed", "p": 0.5},
        {"state": "doing", "action": "finish", "next": "doing", "p": 0.5},
    ],
    "initial_state": "open",
    "terminal_states": ["closed"],
    "max_steps": 10,
    "rewards": {"step": -0.1, "states": {"closed": 1.0}, "invalid_action": -0.5},
}


def test_migration_from_format_0(tmp_path: Path) -> None:
    assert set(MIGRATIONS) == set(range(FORMAT_VERSION))
    migrated, old = migrate(FORMAT_0)
    assert old == 0 and migrated["format"] == FORMAT_VERSION
    assert schema_problems(migrated) == []
    body = migrated["workflow"]
    assert body["statuses"] == ["open", "doing", "closed"]
    assert body["tools"] == [{"name": "start"}, {"name": "finish"}]
    assert body["transitions"][1] == {
        "from": "doing",
        "tool": "finish",
        "to": "closed",
        "probability": 0.5,
    }
    assert body["rewards"] == {
        "per_step": -0.1,
        "status": {"closed": 1.0},
        "invalid_tool": -0.5,
    }
    spec = load_spec(_write(tmp_path, FORMAT_0, "old_ticket"))
    assert spec.migrated_from == 0 and spec.body == body
    assert FORMAT_0["version"] == 0 and "workflow" not in FORMAT_0  # input untouched

    from engine.envs import make

    env = make(spec)
    env.reset(seed=0)
    _, reward, *_ = env.step(0)
    assert reward == pytest.approx(-0.1)


def test_parse_collects_every_problem() -> None:
    doc = _doc("jira_issue_resolution")
    doc["workflow"]["transitions"][0]["to"] = "Nowhere"
    doc["workflow"]["terminal"].append("Gone")
    doc["workflow"]["tasks"] = {}
    _, problems = parse_spec(copy.deepcopy(doc))
    paths = {p.path for p in problems if p.severity == "error"}
    assert {"workflow.transitions[0].to", "workflow.terminal[2]"} <= paths


def test_jira_importer_reproduces_the_bundled_status_update_env() -> None:
    bundled = _doc("jira_status_update")
    made = workflow_from_jira_file(
        EXAMPLES / "data" / "jira_mock_data.json",
        name="jira_status_update",
        description=bundled["description"],
        max_steps=bundled["workflow"]["max_steps"],
    )
    assert made == bundled
    body = made["workflow"]
    data = json.loads((EXAMPLES / "data" / "jira_mock_data.json").read_text())
    assert body["rewards"]["per_step"] == data["reward_config"]["per_step_base"]
    assert body["rewards"]["status"] == data["reward_config"]["status_reward_weights"]
    assert len(body["transitions"]) == sum(
        len(v) for v in data["valid_transitions"].values()
    )
    assert body["terminal"] == ["Done", "Won't Do"]
