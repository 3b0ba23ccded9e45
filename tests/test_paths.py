"""Path containment: every name or id that reaches a path is checked against
``engine.flow.PATH_NAME`` and its resolved path stays inside its root; a
violation is one sentence naming the field, and nothing outside is written
or deleted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engine import flow
from engine.errors import ConfigError
from engine.export.jobs import out_path
from engine.llm import datasets, merge, rollouts
from engine.llm import train as llm_train
from engine.store.paths import checked_name, child, inside

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"

# Names an attacker or a careless user might give; none may become a path.
ESCAPES = {
    "absolute": "/tmp/rlstudio-escape/X",
    "dotdot": "../../../../x",
    "dotdot inside": "models/../../x",
    "parent": "..",
    "self": ".",
    "hidden": ".bashrc",
    "backslashes": "..\\..\\x",
    "NUL": "model\0.txt",
    "newline": "a\nb",
    "very long": "a" * 300,
    "fullwidth solidus": "..\uff0f..\uff0fx",
    "division slash": "..\u2215x",
    "two-dot leader": "\u2025",
    "fullwidth letters": "\uff4d\uff4f\uff44\uff45\uff4c",
    "cyrillic lookalike": "m\u043edel",
    "right-to-left override": "model\u202egguf.exe",
    "empty": "",
    "blank": "   ",
    "trailing dot": "model.",
    "temporary name": ".m.tmp-1-0123abcd",
}

GOOD = [
    "PPO CartPole",
    "Jira GRPO agent merged",
    "train_2",
    "grpo-20261123-091502-3fa2.train",
    "qwen2.5-0.5b (q8_0)",
    "a" * 100,
]


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every entry below ``folder`` with a file's bytes (None: a folder)."""
    return {
        str(p.relative_to(folder)): None if p.is_dir() else p.read_bytes()
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the project that must never change."""
    folder = tmp_path / "outside"
    (folder / "victim").mkdir(parents=True)
    (folder / "victim" / "keep.txt").write_text("precious")
    (folder / "X.json").write_text("{}")
    return folder


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "a" / "b" / "c" / "project"
    for sub in ("models", "data/datasets", "data/traces", "runs"):
        (root / sub).mkdir(parents=True)
    return root


@pytest.mark.parametrize("name", GOOD)
def test_good_names_pass(name: str, project: Path) -> None:
    assert flow.path_name_problem("The name", name) is None
    assert child(project, "models", name, "name") == project / "models" / name


@pytest.mark.parametrize("label", ESCAPES)
def test_every_escape_is_one_sentence_naming_the_field(label: str) -> None:
    name = ESCAPES[label]
    with pytest.raises(ConfigError) as info:
        checked_name("name", name)
    assert info.value.field == "name"
    message = str(info.value)
    assert message.startswith("The name ") and message.endswith(".")
    assert "\n" not in message.replace("\\n", "") and "\0" not in message
    assert flow.PATH_NAME_RULE in message


VALIDATORS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "llm.merge": lambda name: merge.validate({"adapter": "/nowhere", "name": name}),
    "llm.dataset": lambda name: datasets.validate_dataset(
        {"traces": "/nowhere.jsonl", "name": name}
    ),
    "llm.collect": lambda name: rollouts.validate_collect(
        {"env": "CartPole-v1", "name": name}
    ),
    "llm.train": lambda name: llm_train.validate(
        {"model": "/nowhere", "dataset": "/nowhere", "name": name}, hardware={}
    ),
}


@pytest.mark.parametrize("kind", VALIDATORS)
@pytest.mark.parametrize("label", ["absolute", "dotdot", "NUL", "very long"])
def test_jobs_refuse_a_bad_name_before_anything_else(kind: str, label: str) -> None:
    with pytest.raises(ConfigError) as info:
        VALIDATORS[kind](ESCAPES[label])  # type: ignore[arg-type]
    assert info.value.field == "name"
    assert "cannot be used in a file name" in str(info.value)


@pytest.mark.parametrize("label", ESCAPES)
def test_flow_node_ids_are_checked_on_load(label: str) -> None:
    node_id = ESCAPES[label]
    doc = {"format": 1, "kind": "flow", "nodes": [{"id": node_id, "type": "x.y"}]}
    if not node_id.strip():
        with pytest.raises(flow.FlowFormatError, match="has no 'id'"):
            flow.loads(json.dumps(doc))
        return
    with pytest.raises(flow.FlowFormatError) as info:
        flow.loads(json.dumps(doc))
    assert str(info.value).startswith("The id of node 1 ")
    assert "cannot be used in a file name" in str(info.value)


def test_bundled_flows_and_generated_ids_stay_valid() -> None:
    for path in sorted((EXAMPLES / "flows").glob("*.flow.json")):
        doc = flow.load(path)
        assert doc.nodes, path
    doc = flow.FlowDocument()
    for node_type in ("rl.train", "rl.train", "llm.merge", "x.Weird-Type!"):
        node_id = doc.new_node_id(node_type)
        assert flow.path_name_problem("The id", node_id) is None
        doc.nodes.append(flow.Node(id=node_id, type=node_type))


def test_symlinks_that_escape_the_root_are_refused(
    project: Path, outside: Path
) -> None:
    before = snapshot(outside)
    (project / "models" / "evil").symlink_to(outside / "victim")
    (project / "data" / "traces" / "t.jsonl").symlink_to(outside / "X.json")
    with pytest.raises(ConfigError, match="leads outside") as info:
        child(project, "models", "evil", "name")
    assert info.value.field == "name"
    with pytest.raises(ConfigError, match="leads outside"):
        child(project, "data/traces", "t", "name", ".jsonl")
    # The job functions check before they write: merge into a models
    # folder that links out.
    shutil.rmtree(project / "models")
    (project / "models").symlink_to(outside)
    ctx = SimpleNamespace(
        project_dir=str(project), run_id="r1", progress=lambda *a: None
    )
    cfg = merge.MergeConfig(adapter="/nowhere/adapter", name="evil", base="/nowhere")
    with pytest.raises(ConfigError, match="leads outside"):
        merge.run(ctx, cfg)  # type: ignore[arg-type]
    # A folder of the layout itself may be a link out: refused as well.
    (project / "data" / "datasets").rmdir()
    (project / "data" / "datasets").symlink_to(outside)
    dataset = datasets.DatasetConfig(traces=[], name="victim", method="sft", seed=0)
    with pytest.raises(ConfigError, match="leads outside"):
        datasets.run_dataset(ctx, dataset)  # type: ignore[arg-type]
    assert snapshot(outside) == before


def test_relative_export_out_stays_in_the_project(project: Path) -> None:
    ctx = SimpleNamespace(project_dir=project)
    assert out_path(ctx, "exports/a.gguf") == project / "exports" / "a.gguf"  # type: ignore[arg-type]
    assert out_path(ctx, "/elsewhere/a.gguf") == Path("/elsewhere/a.gguf")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="leads outside") as info:
        out_path(ctx, "../../../../a.gguf")  # type: ignore[arg-type]
    assert info.value.field == "out"
    with pytest.raises(ConfigError, match="NUL"):
        inside(project, "a\0.gguf", "out")


def test_a_shared_flow_with_escaping_node_ids_writes_nothing_outside(
    tmp_path: Path, project: Path, outside: Path
) -> None:
    """The issue's reproduction: ``rl-studio-engine run`` of a shared flow
    whose node ids are an absolute path or ``../../../../x``."""
    data = json.loads((EXAMPLES / "flows" / "cartpole_ppo.flow.json").read_text())
    renames = {"train": str(outside / "X"), "evaluate": "../../../../x"}
    for node in data["nodes"]:
        node["id"] = renames.get(node["id"], node["id"])
    for link in data["links"]:
        for end in ("from", "to"):
            link[end]["node"] = renames.get(link[end]["node"], link[end]["node"])
    shared = tmp_path / "shared.flow.json"
    shared.write_text(json.dumps(data))
    before, project_before = snapshot(outside), snapshot(project)
    proc = subprocess.run(
        [sys.executable, "-m", "engine", "run", str(shared), "--project", str(project)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert proc.returncode != 0
    assert "The id of node 2 " in proc.stderr
    assert "cannot be used in a file name" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(outside) == before
    assert not (tmp_path / "x").exists() and not (tmp_path / "x.json").exists()
    assert snapshot(project) == project_before


def test_designed_env_ids_resolve_inside_the_project(
    project: Path, outside: Path
) -> None:
    from engine.envs.spec import designed_spec_file

    (project / "envs").mkdir()
    (outside / "evil.env.json").write_text("{}")
    for env_id in (
        "rlstudio/../../../../outside/evil-v0",
        f"rlstudio/{outside}/evil-v0",
    ):
        with pytest.raises(ConfigError, match="cannot be used in a file name") as info:
            designed_spec_file(env_id, project)
        assert info.value.field == "env"
    (project / "envs" / "linked.env.json").symlink_to(outside / "evil.env.json")
    with pytest.raises(ConfigError, match="leads outside"):
        designed_spec_file("rlstudio/linked-v0", project)
    assert designed_spec_file("rlstudio/missing-v0", project) is None


@pytest.mark.parametrize("label", ["absolute", "dotdot", "NUL", "empty"])
def test_run_ids_are_checked_where_they_become_folders(
    tmp_path: Path, label: str
) -> None:
    from engine.store.project import Project

    project = Project.open(tmp_path / "p", create=True)
    try:
        with pytest.raises(ConfigError) as info:
            project.run_dir(ESCAPES[label])
        assert info.value.field == "run id"
    finally:
        project.close()
