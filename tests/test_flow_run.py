"""``rl-studio-engine run FLOW.json``: real headless runs of the bundled
CartPole flow (PPO, 256 steps) in a subprocess: node states, a registered
model, the cache on a re-run, a failing node, and bad files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from engine_harness import EngineProcess

from engine import contract, flow, protocol
from engine.store.project import Project

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "resources" / "examples" / "flows" / "cartpole_ppo.flow.json"
QUICK = ["--set", "train.total_steps=256", "--set", "evaluate.episodes=3"]


def engine_run(
    *args: str | Path, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(
        [sys.executable, "-m", "engine", "run", *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def summary_of(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project holding the example flow, after one real run of it."""
    root = tmp_path_factory.mktemp("flowrun") / "project"
    (root / "flows").mkdir(parents=True)
    shutil.copy(EXAMPLE, root / "flows" / EXAMPLE.name)
    return root


@pytest.fixture(scope="module")
def first_run(project: Path) -> subprocess.CompletedProcess[str]:
    return engine_run(project / "flows" / EXAMPLE.name, "--project", project, *QUICK)


def test_a_headless_run_trains_evaluates_and_registers(
    first_run: subprocess.CompletedProcess[str], project: Path
) -> None:
    assert first_run.returncode == 0, first_run.stderr[-3000:]
    summary = summary_of(first_run)
    assert summary["status"] == "completed"
    assert summary["order"] == ["env", "train", "evaluate", "register"]
    assert summary["ran"] == summary["order"]
    policy = summary["nodes"]["train"]["outputs"]["policy"]
    assert policy["algo"] == "PPO" and policy["total_steps"] == 256
    assert Path(policy["file"]).is_file()
    report = summary["nodes"]["evaluate"]["outputs"]["report"]
    assert report["episodes"] == 3 and len(report["rewards"]) == 3
    assert report["mean_reward"] > 0
    # the model is in the summary, and registered in the project
    (model,) = summary["models"]
    assert model["kind"] == "sb3-policy" and model["name"] == "PPO CartPole"
    assert model["metrics"]["eval/mean_reward"] == report["mean_reward"]
    (model_id,) = summary["registered_models"]
    with_project = Project.open(project)
    try:
        (record,) = with_project.list_models()
        (run,) = with_project.list_runs()
    finally:
        with_project.close()
    assert record.id == model_id and record.source_run == run.id
    assert Path(record.path).is_file()
    assert run.kind == "flow.run" and run.status == "completed"
    # per-node progress lines on stderr, then the final table
    err = first_run.stderr
    assert "train     Train (SB3)  done: Done in" in err
    assert "%" in err  # progress lines
    assert f"registered model {model_id}" in err
    state = json.loads((Path(run.run_dir) / "flow_state.json").read_text())
    assert {n: s["state"] for n, s in state["nodes"].items()} == dict.fromkeys(
        summary["order"], "done"
    )
    # log.txt holds each node's lines as a studio run's does (the editor
    # shows them per node after a restart)
    log = contract.read_log(Path(run.run_dir) / "log.txt", 10_000)
    assert any(text.startswith("[train] ") for _when, text in log), log[:20]
    # the training node's own folder holds its config and metrics
    train_dir = Path(run.run_dir) / "nodes" / "train"
    assert json.loads((train_dir / "config.json").read_text())["kind"] == "rl.train"
    assert (train_dir / "metrics.jsonl").stat().st_size > 0
    assert (
        "train/rollout/ep_rew_mean" in (Path(run.run_dir) / "metrics.jsonl").read_text()
    )


def test_a_rerun_skips_unchanged_nodes_and_a_param_change_reruns_downstream(
    first_run: subprocess.CompletedProcess[str], project: Path
) -> None:
    assert first_run.returncode == 0, first_run.stderr[-3000:]
    path = project / "flows" / EXAMPLE.name
    again = engine_run(path, "--project", project, *QUICK, "--quiet")
    assert again.returncode == 0, again.stderr[-3000:]
    summary = summary_of(again)
    assert summary["cached"] == ["train", "evaluate", "register"]
    assert summary["ran"] == ["env"]  # cheap, and always checked
    assert summary["models"] == [] and "registered_models" not in summary
    first_policy = summary_of(first_run)["nodes"]["train"]["outputs"]["policy"]
    assert summary["nodes"]["train"]["outputs"]["policy"] == first_policy
    assert "train     Train (SB3)  cached: Unchanged since run" in again.stderr

    # a new model name: only the Register node runs again
    renamed = engine_run(
        path, "--project", project, *QUICK, "--set", "register.name=Renamed", "--quiet"
    )
    assert renamed.returncode == 0, renamed.stderr[-3000:]
    summary = summary_of(renamed)
    assert summary["ran"] == ["env", "register"]
    assert summary["cached"] == ["train", "evaluate"]
    assert [m["name"] for m in summary["models"]] == ["Renamed"]


def test_a_failing_node_skips_downstream_and_names_the_node(
    first_run: subprocess.CompletedProcess[str], project: Path
) -> None:
    proc = engine_run(
        project / "flows" / EXAMPLE.name,
        "--project",
        project,
        "--set",
        "env.env=CartPol-v1",
        "--quiet",
    )
    assert proc.returncode == 1
    summary = summary_of(proc)
    assert summary["status"] == "failed" and summary["failed"] == ["env"]
    assert summary["nodes"]["env"]["message"].startswith(
        "Unknown environment 'CartPol-v1'; did you mean 'CartPole-v1'"
    )
    for node in ("train", "evaluate", "register"):
        assert summary["nodes"][node]["state"] == "skipped"
        assert (
            summary["nodes"][node]["message"] == "Not run: 'Environment' (env) failed."
        )
    assert summary["reason"].startswith("The node 'env' (Environment) failed: Unknown")
    assert proc.stderr.rstrip().splitlines()[-1] == summary["reason"]


def test_validation_errors_are_printed_per_node(tmp_path: Path) -> None:
    proc = engine_run(
        EXAMPLE,
        "--project",
        tmp_path / "p",
        "--set",
        "train.total_steps=0",
        "--set",
        "evaluate.bogus=1",
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "cartpole_ppo.flow.json: the flow cannot run:",
        "  train (Train (SB3)): total_steps must be at least 1, not 0.",
        "  evaluate (Evaluate policy): Unknown parameter 'bogus' for Evaluate policy.",
    ]
    assert not (tmp_path / "p").exists()  # nothing ran, nothing was created


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\x89PNG\r\n\x1a\n\x00garbage", "is not UTF-8 text."),
        (
            b'{"format": 1, "nodes": [',
            "is not valid JSON (line 1, column 25: Expecting value",
        ),
        (b'{"format": 7, "nodes": []}', "written by a newer RL Studio"),
        (None, "does not exist."),
    ],
)
def test_a_bad_file_is_one_sentence_and_exit_2(
    tmp_path: Path, content: bytes | None, expected: str
) -> None:
    path = tmp_path / "bad.flow.json"
    if content is not None:
        path.write_bytes(content)
    proc = engine_run(path, "--project", tmp_path / "p")
    assert proc.returncode == 2
    (line,) = proc.stderr.splitlines()
    assert line.startswith("rl-studio-engine run: ") and expected in line
    assert proc.stdout == ""


def test_overrides_are_checked(tmp_path: Path) -> None:
    proc = engine_run(EXAMPLE, "--set", "nonsense")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "rl-studio-engine run: --set takes node.param=value, not 'nonsense'."
    )
    proc = engine_run(EXAMPLE, "--set", "ghost.steps=3")
    assert proc.returncode == 2
    assert "There is no node 'ghost' in the flow." in proc.stderr
    doc = flow.load(EXAMPLE)
    assert doc.node("train") is not None


def failing_last() -> flow.FlowDocument:
    """The example flow (256 steps) with a last node that fails on bad input:
    the trained policy evaluated on an env with other observations."""
    doc = flow.load(EXAMPLE)
    doc.name = "fails_last"
    for key, value in (("train.total_steps", 256), ("evaluate.episodes", 3)):
        node_id, param = key.split(".")
        node = doc.node(node_id)
        assert node is not None
        node.params[param] = value
    doc.nodes.append(flow.Node("other_env", "env.environment", {"env": "Acrobot-v1"}))
    doc.nodes.append(flow.Node("check", "rl.evaluate", {"episodes": 1}))
    doc.links.append(flow.Link("train", "policy", "check", "policy"))
    doc.links.append(flow.Link("other_env", "env", "check", "env"))
    return doc


def test_an_onnx_node_exports_the_trained_policy_and_registers_it(
    tmp_path: Path,
) -> None:
    """Train → Export ONNX: the ONNX file is named after the model, checked
    against the policy, and registered beside it."""
    import numpy as np
    import onnxruntime as ort

    doc = flow.load(EXAMPLE)
    doc.name = "to_onnx"
    doc.nodes.append(flow.Node("onnx", "export.onnx", {"samples": 16}))
    doc.links.append(flow.Link("train", "policy", "onnx", "policy"))
    path = tmp_path / "flows" / "to_onnx.flow.json"
    path.parent.mkdir()
    flow.save(doc, path)
    proc = engine_run(path, "--project", tmp_path, *QUICK, "--quiet")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = summary_of(proc)
    report = summary["nodes"]["onnx"]["outputs"]["report"]
    assert report["verified"] and report["samples"] == 16
    assert Path(report["file"]).name == "PPO-CartPole.onnx"
    project = Project.open(tmp_path)
    try:
        models = {m.kind: m for m in project.list_models()}
    finally:
        project.close()
    onnx = models["onnx"]
    assert onnx.name == "PPO CartPole (ONNX)"
    assert (onnx.env, onnx.algo) == ("CartPole-v1", "PPO")  # its policy's
    assert Path(onnx.path).name == "PPO-CartPole.onnx"  # the project's copy
    session = ort.InferenceSession(onnx.path)
    (action,) = session.run(None, {"observation": np.zeros((1, 4), np.float32)})
    assert action.shape == (1,)


@pytest.mark.slow
def test_a_flow_failing_at_its_last_node_registers_the_earlier_models(
    tmp_path: Path,
) -> None:
    """The example flow plus a last node that fails on bad input (the trained
    policy evaluated on an env with other observations): the run fails, and
    the model its Register node made is registered, with its lineage."""
    path = tmp_path / "flows" / "fails_last.flow.json"
    path.parent.mkdir()
    flow.save(failing_last(), path)
    proc = engine_run(path, "--project", tmp_path, *QUICK, "--quiet")
    assert proc.returncode == 1, proc.stderr[-3000:]
    summary = summary_of(proc)
    assert summary["status"] == "failed" and summary["failed"] == ["check"]
    assert "The policy expects observations" in summary["reason"]
    assert summary["nodes"]["register"]["state"] == "done"
    (model_id,) = summary["registered_models"]
    project = Project.open(tmp_path)
    try:
        (run,) = project.list_runs()
        (model,) = project.list_models()
        lineage = project.lineage(model_id)
    finally:
        project.close()
    assert run.status == "failed" and run.reason == summary["reason"]
    assert run.summary["registered_models"] == [model_id]
    assert model.id == model_id and model.name == "PPO CartPole"
    assert model.source_run == run.id and Path(model.path).is_file()
    assert (run.id, model_id, "trained") in lineage
    assert json.loads((Path(run.run_dir) / "result.json").read_text()) == {
        "status": "failed",
        "summary": run.summary,
        "reason": run.reason,
    }
    # a re-run takes Register from the cache and registers nothing again
    again = engine_run(path, "--project", tmp_path, *QUICK, "--quiet")
    assert again.returncode == 1, again.stderr[-3000:]
    assert "registered_models" not in summary_of(again)


def test_a_studio_flow_run_failing_at_its_last_node_registers_the_earlier_models(
    project_dir: Path,
) -> None:
    """The same through the engine protocol, as the studio runs it: the job
    process records the failed flow's summary, the supervisor registers."""
    engine = EngineProcess()
    try:
        engine.call(protocol.Hello())
        engine.call(protocol.OpenProject(path=str(project_dir), create=True))
        config = {"document": failing_last().to_dict()}
        run_id = engine.call(protocol.StartRun(kind="flow.run", config=config))[
            "run_id"
        ]
        failed = engine.wait_for(
            lambda m: isinstance(m, protocol.RunFailed) and m.run_id == run_id,
            timeout=120,
        )
    finally:
        engine.close()
    # The node's sentence, as the flow recorded it: not the job's traceback
    # line ("The run failed: engine.nodes.executor.FlowFailed: ...").
    assert "The policy expects observations" in failed.reason
    assert "FlowFailed" not in failed.reason
    assert not failed.reason.startswith("The run failed")
    project = Project.open(project_dir)
    try:
        run = project.get_run(run_id)
        (model,) = project.list_models()
        lineage = project.lineage(model.id)
    finally:
        project.close()
    assert run.status == "failed" and run.summary["failed"] == ["check"]
    assert run.reason == failed.reason == run.summary["reason"]
    assert run.summary["registered_models"] == [model.id]
    assert model.name == "PPO CartPole" and model.source_run == run_id
    assert (run_id, model.id, "trained") in lineage
