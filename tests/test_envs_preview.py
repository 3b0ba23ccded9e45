"""Preview (episodes, trace, frames) and the env_check / env_preview jobs."""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path

import gymnasium
import numpy as np
import pytest

from engine import protocol
from engine.envs.job import (
    EnvCheckConfig,
    run_check,
    run_preview,
    validate_check,
    validate_preview,
)
from engine.envs.preview import PreviewConfig, preview
from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.settings import as_dict

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


@pytest.mark.parametrize(
    ("env_id", "shape"),
    [
        ("CartPole-v1", (400, 600, 3)),  # classic-control: pygame, headless
        ("FrozenLake-v1", (256, 256, 3)),  # toy-text: pygame and its sprites
        ("rlstudio/jira_issue_resolution-v0", None),  # a workflow draws too
    ],
)
def test_envs_that_render_give_frames(
    project: Path, tmp_path: Path, env_id: str, shape: tuple | None
) -> None:
    from engine.envs.registry import register_project_envs

    register_project_envs(project)
    result = preview(
        env_id, PreviewConfig(episodes=1, frames=30), frames_path=tmp_path / "f.npz"
    )
    assert result["frames_note"] is None
    # Their observations are no images: the file holds the screen alone.
    assert result["observation_frames"] is None
    assert list(np.load(result["frames"])) == ["frames"]
    frames = np.load(result["frames"])["frames"]
    n = min(30, result["episodes"][0]["length"] + 1)  # the reset frame, then steps
    assert len(frames) == n and frames.dtype == np.uint8 and frames.ndim == 4
    if shape is not None:
        assert frames.shape[1:] == shape
    assert frames[0].std() > 5  # a picture, not a blank canvas


class _AnsiOnly(gymnasium.Env):
    metadata = {"render_modes": ["ansi"], "render_fps": 4}
    observation_space = gymnasium.spaces.Discrete(2)
    action_space = gymnasium.spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode

    def reset(self, *, seed=None, options=None):  # type: ignore[no-untyped-def]
        super().reset(seed=seed)
        return 0, {}

    def step(self, action):  # type: ignore[no-untyped-def]
        return 0, 1.0, True, False, {}

    def render(self) -> str:
        return "x"


class _BlankRender(_AnsiOnly):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 4}

    def render(self):  # type: ignore[no-untyped-def]
        return None


@pytest.mark.filterwarnings("ignore:.*RGB-array rendering should return")
def test_an_env_that_cannot_draw_plays_on_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gymnasium.register("AnsiOnly-v0", entry_point=_AnsiOnly)
    gymnasium.register("BlankRender-v0", entry_point=_BlankRender)
    try:
        cases = {
            "AnsiOnly-v0": "AnsiOnly-v0 cannot draw frames: it has no rgb_array "
            "render mode (its modes: ansi).",
            "BlankRender-v0": "BlankRender-v0 cannot draw frames: its rgb_array "
            "render gave NoneType, not an image.",
        }
        for env_id, sentence in cases.items():
            out = tmp_path / f"{env_id}.npz"
            result = preview(
                env_id, PreviewConfig(episodes=2, frames=5), frames_path=out
            )
            assert result["frames_note"] == sentence
            assert result["frames"] is None and not out.exists()
            assert len(result["episodes"]) == 2  # played on, without frames
    finally:
        gymnasium.registry.pop("AnsiOnly-v0")
        gymnasium.registry.pop("BlankRender-v0")
    # pygame missing, as on an install without gymnasium[classic-control].
    monkeypatch.setitem(sys.modules, "pygame", None)
    result = preview(
        "CartPole-v1", PreviewConfig(episodes=1, frames=5), frames_path=tmp_path / "c"
    )
    assert result["frames_note"] == (
        "CartPole-v1 cannot draw frames: pygame is not installed "
        '(pip install "gymnasium[classic-control]").'
    )
    assert result["frames"] is None and result["episodes"][0]["length"] > 0


def test_preview_job_logs_why_there_are_no_frames(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sentence goes to the run's log as well as into preview.json."""
    (project / "envs" / "ansi.py").write_text(
        "import gymnasium as gym\n\n\n"
        "class Ansi(gym.Env):\n"
        "    metadata = {'render_modes': ['ansi']}\n"
        "    observation_space = gym.spaces.Discrete(2)\n"
        "    action_space = gym.spaces.Discrete(2)\n\n"
        "    def __init__(self, render_mode=None):\n"
        "        self.render_mode = render_mode\n\n"
        "    def reset(self, *, seed=None, options=None):\n"
        "        super().reset(seed=seed)\n"
        "        return 0, {}\n\n"
        "    def step(self, action):\n"
        "        return 0, 1.0, True, False, {}\n"
    )
    spec = {
        "format": 1,
        "name": "ansi",
        "kind": "python",
        "python": {"file": "ansi.py", "class": "Ansi"},
    }
    (project / "envs" / "ansi.env.json").write_text(json.dumps(spec))
    cfg = validate_preview({"spec": "envs/ansi.env.json", "episodes": 1, "frames": 9})
    ctx = _ctx(project, "env_preview", cfg)
    try:
        run_preview(ctx, cfg)
    finally:
        ctx.close()
    saved = json.loads((ctx.run_dir / "preview.json").read_text())
    sentence = (
        "rlstudio/ansi-v0 cannot draw frames: it has no rgb_array render mode "
        "(its modes: ansi)."
    )
    assert saved["frames_note"] == sentence and saved["frames"] is None
    assert sentence in capsys.readouterr().err


def _ctx(project: Path, kind: str, cfg: object) -> JobContext:
    run_dir = project / "runs" / f"{kind}-1"
    run_dir.mkdir(parents=True)
    return JobContext(f"{kind}-1", run_dir, kind, as_dict(cfg))


def test_check_job(project: Path) -> None:
    cfg = validate_check({"spec": "envs/maze.env.json"})
    assert cfg == EnvCheckConfig(spec="envs/maze.env.json", steps=200, seed=0)
    ctx = _ctx(project, "env_check", cfg)
    try:
        summary = run_check(ctx, cfg)
    finally:
        ctx.close()
    assert summary == {"ok": True, "errors": 0, "warnings": 0}
    report = json.loads((ctx.run_dir / "report.json").read_text())
    assert report["ok"] and report["env_id"] == "rlstudio/maze-v0"


def test_preview_job(project: Path) -> None:
    cfg = validate_preview({"spec": "rlstudio/jira_status_update-v0", "episodes": 5})
    assert isinstance(cfg.seed, int)
    ctx = _ctx(project, "env_preview", cfg)
    try:
        summary = run_preview(ctx, cfg)
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
    ctx = JobContext(
        "env_preview-doc", run_dir, "env_preview", as_dict(cfg), events=events
    )
    try:
        summary = run_preview(ctx, cfg)
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
