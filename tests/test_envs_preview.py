"""Preview (episodes, trace, frames) and the env_check / env_preview jobs."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from engine import protocol
from engine.envs.job import run_check, run_preview, validate_check, validate_preview
from engine.envs.preview import PreviewConfig, preview
from engine.errors import ConfigError
from engine.jobs.context import JobContext

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    (tmp_path / "runs").mkdir()
    return tmp_path


def test_preview_workflow_trace(project: Path) -> None:
    result = preview(
        project / "envs" / "jira_issue_resolution.env.json",
        PreviewConfig(episodes=30, seed=1, trace_episodes=2),
    )
    json.dumps(result)
    assert len(result["episodes"]) == 30
    assert 0 < result["success_rate"] < 1
    assert result["length_mean"] == np.mean([e["length"] for e in result["episodes"]])
    trace = result["trace"]
    assert {row["episode"] for row in trace} == {0, 1}
    first_ep = [r for r in trace if r["episode"] == 0]
    assert len(first_ep) == result["episodes"][0]["length"]
    assert sum(r["reward"] for r in first_ep) == pytest.approx(
        result["episodes"][0]["return"]
    )
    for row in trace:
        assert len(row["observation"]) == len(result["observation_labels"])
        assert row["action_name"] == result["action_names"][row["action"]]
        assert row["reward"] == pytest.approx(sum(row["reward_breakdown"].values()))
        assert "Current status" in row["text"]
    assert first_ep[-1]["terminated"] or first_ep[-1]["truncated"]
    again = preview(
        project / "envs" / "jira_issue_resolution.env.json",
        PreviewConfig(episodes=30, seed=1, trace_episodes=2),
    )
    assert again == result


def test_preview_grid_frames(project: Path, tmp_path: Path) -> None:
    out = tmp_path / "frames.npz"
    result = preview(
        project / "envs" / "maze.env.json",
        PreviewConfig(episodes=3, frames=10),
        frames_path=out,
    )
    frames = np.load(result["frames"])["frames"]
    assert frames.shape == (10, 7 * 16, 9 * 16, 3) and frames.dtype == np.uint8
    assert (
        not np.array_equal(frames[0], frames[-1]) or result["episodes"][0]["length"] < 2
    )
    assert result["action_names"] == ["up", "right", "down", "left"]


def _ctx(project: Path, kind: str, config: dict) -> JobContext:
    run_dir = project / "runs" / f"{kind}-1"
    run_dir.mkdir(parents=True)
    return JobContext(f"{kind}-1", run_dir, kind, config)


def test_check_job(project: Path) -> None:
    cfg = validate_check({"spec": "envs/maze.env.json"})
    assert cfg == {"spec": "envs/maze.env.json", "steps": 200, "seed": 0}
    ctx = _ctx(project, "env_check", cfg)
    try:
        summary = run_check(ctx)
    finally:
        ctx.close()
    assert summary == {"ok": True, "errors": 0, "warnings": 0}
    report = json.loads((ctx.run_dir / "report.json").read_text())
    assert report["ok"] and report["env_id"] == "rlstudio/maze-v0"


def test_preview_job(project: Path) -> None:
    cfg = validate_preview({"spec": "rlstudio/jira_status_update-v0", "episodes": 5})
    assert isinstance(cfg["seed"], int)
    ctx = _ctx(project, "env_preview", cfg)
    try:
        summary = run_preview(ctx)
    finally:
        ctx.close()
    assert summary["episodes"] == 5
    saved = json.loads((ctx.run_dir / "preview.json").read_text())
    assert saved["env_id"] == "rlstudio/jira_status_update-v0"
    lines = (ctx.run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) >= 1 and "preview/return" in lines[-1]


@pytest.mark.parametrize(
    ("validator", "config", "field"),
    [
        (validate_check, {}, "spec"),
        (validate_check, {"spec": "envs/x.env.json", "steps": 0}, "steps"),
        (validate_check, {"spec": "envs/x.env.json", "colour": 1}, "colour"),
        (validate_preview, {"spec": "x", "episodes": -1}, "episodes"),
        # The policy zip names its own class: algo is no setting of a preview.
        (validate_preview, {"spec": "x", "model": "m.zip", "algo": "PPO"}, "algo"),
    ],
)
def test_job_validators_name_the_field(validator, config: dict, field: str) -> None:
    with pytest.raises(ConfigError) as info:
        validator(config)
    assert info.value.field == field and str(info.value).endswith(".")


def test_preview_job_plays_an_unsaved_document(project: Path) -> None:
    """The designer sends the spec as edited; relative paths (the mock data)
    resolve against the file it belongs to, and each episode reports
    progress."""
    path = project / "envs" / "jira_issue_resolution.env.json"
    spec = json.loads(path.read_text())
    spec["workflow"]["rewards"]["per_step"] = -0.5
    cfg = validate_preview(
        {"spec": spec, "source": str(path), "episodes": 4, "seed": 3}
    )
    events = io.StringIO()
    run_dir = project / "runs" / "env_preview-doc"
    run_dir.mkdir(parents=True)
    ctx = JobContext("env_preview-doc", run_dir, "env_preview", cfg, events=events)
    try:
        summary = run_preview(ctx)
    finally:
        ctx.close()
    assert summary["episodes"] == 4
    saved = json.loads((ctx.run_dir / "preview.json").read_text())
    assert saved["action_space"].startswith("Discrete(")
    assert all(row["reward_breakdown"]["step"] == -0.5 for row in saved["trace"])
    sent = [json.loads(line) for line in events.getvalue().splitlines()]
    progress = [e for e in sent if e["type"] == protocol.RunProgress.TYPE]
    assert progress and progress[-1]["done"] == progress[-1]["total"] == 4


def test_preview_validator_refuses_a_bad_document_naming_the_field(
    project: Path,
) -> None:
    path = project / "envs" / "jira_issue_resolution.env.json"
    spec = json.loads(path.read_text())
    spec["workflow"]["transitions"][0]["to"] = "Nowhere"
    with pytest.raises(ConfigError) as info:
        validate_preview({"spec": spec, "source": str(path)})
    assert info.value.field == "spec"
    assert "workflow.transitions[0].to" in str(info.value)
