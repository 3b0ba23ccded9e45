"""engine.contract: what the GUI and the engine share, declared once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import get_type_hints

from hypothesis import given
from hypothesis import strategies as st

from engine import contract
from engine.envs.spec import designed_spec_file
from engine.store.project import ModelRecord, RunRecord

NAMES = st.from_regex(r"[A-Za-z][A-Za-z0-9_.\-]{0,30}", fullmatch=True)


@given(NAMES)
def test_a_designed_env_name_round_trips_through_its_id(name: str) -> None:
    env_id = contract.env_id(name)
    assert env_id == f"rlstudio/{name}-v0"
    assert contract.env_name(env_id) == name


def test_other_ids_name_no_designed_env() -> None:
    for other in ("CartPole-v1", "ALE/Pong-v5", "rlstudio/-v0", "rlstudio/x-v1", ""):
        assert contract.env_name(other) is None


def test_the_records_the_engine_sends_have_the_fields_of_its_rows() -> None:
    """The TypedDicts the GUI reads and the dataclasses the engine stores
    cannot drift apart."""
    for record, row in (
        (RunRecord, contract.RunRow),
        (ModelRecord, contract.ModelRow),
    ):
        fields = [f.name for f in dataclasses.fields(record)]
        assert fields == list(get_type_hints(row))
    run = RunRecord("r1", "run", "rl.train", "running", 1.0)
    assert set(run.to_dict()) == set(contract.RunRow.__annotations__)


def test_read_json_gives_none_for_what_is_not_there_or_not_json(
    tmp_path: Path,
) -> None:
    good = tmp_path / "good.json"
    good.write_text('{"a": 1}')
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "nan.json").write_text('{"a": NaN}')
    assert contract.read_json(good) == {"a": 1}
    assert contract.read_json_object(good) == {"a": 1}
    assert contract.read_json(tmp_path / "list.json") == [1, 2]
    assert contract.read_json_object(tmp_path / "list.json") is None
    for missing in ("bad.json", "nan.json", "absent.json", ""):
        assert contract.read_json(tmp_path / missing) is None


def test_an_atomic_write_leaves_the_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "run" / contract.RESULT_FILE
    contract.atomic_write_json(target, {"status": "completed"})
    contract.atomic_write_json(target, {"status": "failed"})
    assert json.loads(target.read_text()) == {"status": "failed"}
    assert [p.name for p in target.parent.iterdir()] == [contract.RESULT_FILE]
    tmp = contract.temp_path(target, "x")
    assert contract.temp_owner(tmp.name) is not None
    assert contract.temp_owner("results.tmp-final.csv") is None


def test_a_designed_env_is_found_by_its_name_in_a_file_named_otherwise(
    tmp_path: Path,
) -> None:
    envs = tmp_path / contract.ENVS_FOLDER
    envs.mkdir()
    (envs / f"broken{contract.SPEC_SUFFIX}").write_text("{")
    other = envs / f"renamed{contract.SPEC_SUFFIX}"
    other.write_text(json.dumps({"name": "maze"}))
    assert designed_spec_file(contract.env_id("maze"), tmp_path) == other
    assert designed_spec_file(contract.env_id("absent"), tmp_path) is None
    assert designed_spec_file("CartPole-v1", tmp_path) is None
    direct = contract.spec_file(tmp_path, "maze")
    direct.write_text(json.dumps({"name": "maze"}))
    assert designed_spec_file(contract.env_id("maze"), tmp_path) == direct
