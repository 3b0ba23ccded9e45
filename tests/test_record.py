"""Videos of an agent (``rl.record``, ``rl-studio-engine record``): real SB3
policies played in real envs, encoded by the bundled ffmpeg, and read back by
independent readers (ffmpeg's decoder, Pillow)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind
from engine.rl import record

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CartPole PPO policy saved as a checkpoint is: ``state.json`` beside
    its ``model.zip`` names the env."""
    from stable_baselines3 import PPO

    folder = tmp_path_factory.mktemp("policy") / "checkpoints" / "best"
    folder.mkdir(parents=True)
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, seed=0)
    model.learn(64)
    model.save(folder / "model.zip")
    (folder / "state.json").write_text(json.dumps({"env": "CartPole-v1"}))
    return folder / "model.zip"


def _run(project: Path, config: dict[str, Any], ctx_cls: type = JobContext) -> Any:
    kind = get_kind("rl.record")
    cfg = kind.validate(config)
    run_dir = project / "runs" / "rec"
    ctx = ctx_cls("rec", run_dir, "rl.record", kind.record(cfg), events=None)
    try:
        return run_dir, record.run(ctx, cfg)
    finally:
        ctx.close()


def _decoded_frames(path: Path) -> tuple[int, tuple[int, int]]:
    """(frames, (width, height)) as ffmpeg's own decoder reads the file."""
    import imageio_ffmpeg

    reader = imageio_ffmpeg.read_frames(str(path))
    meta = reader.__next__()
    return sum(1 for _ in reader), tuple(meta["size"])


def test_an_mp4_of_the_policy_playing_its_env(policy: Path, tmp_path: Path) -> None:
    run_dir, summary = _run(tmp_path, {"model": str(policy), "episodes": 2, "fps": 25})
    video = run_dir / record.VIDEO_FILE
    assert summary["file"] == str(video) and summary["episodes"] == 2
    assert summary["fps"] == 25 and summary["seconds"] == summary["frames"] / 25
    # every step's frame and each episode's first: frames = steps + episodes
    assert summary["frames"] == sum(int(r) for r in summary["returns"]) + 2
    frames, size = _decoded_frames(video)
    assert frames == summary["frames"] and size == (600, 400)
    assert [p.name for p in run_dir.iterdir() if p.name.endswith(".part")] == []


def test_a_gif_inside_the_project_and_its_frame_limit(
    policy: Path, tmp_path: Path
) -> None:
    from PIL import Image

    config = {"model": str(policy), "out": "videos/cart.gif", "max_frames": 12}
    _, summary = _run(tmp_path, config)
    gif = tmp_path / "videos" / "cart.gif"
    assert summary["file"] == str(gif) and summary["frames"] == 12
    with Image.open(gif) as image:
        assert image.is_animated and image.n_frames == 12
        assert image.size == (600, 400)


def test_stop_leaves_no_video(policy: Path, tmp_path: Path) -> None:
    class StopAfterTenFrames(JobContext):
        def progress(self, done: float, total: float, message: str = "") -> None:
            super().progress(done, total, message)
            if done >= 10:
                self.request_stop()

    out = tmp_path / "stopped.mp4"
    config = {"model": str(policy), "out": str(out)}
    _, summary = _run(tmp_path, config, StopAfterTenFrames)
    assert summary["status"] == "stopped"
    assert list(tmp_path.glob("*.mp4*")) == [] and list(tmp_path.glob(".*part")) == []


def test_an_encoder_that_fails_is_one_sentence_and_keeps_the_old_video(
    policy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ffmpeg ending mid-video (here: an encoder it does not have) is said in
    one sentence with ffmpeg's own words; the video already at ``out`` stays
    as it was and no part file is left."""
    out = tmp_path / "agent.mp4"
    out.write_bytes(b"the video recorded before")
    broken = {
        **record.OUTPUT_OPTIONS,
        ".mp4": ("-vcodec", "no_such_encoder", "-f", "mp4"),
    }
    monkeypatch.setattr(record, "OUTPUT_OPTIONS", broken)
    cfg = record.validate({"model": str(policy), "episodes": 3, "max_frames": 300})
    with pytest.raises(EngineError) as caught:
        record.record_video(cfg, out)
    message = str(caught.value)
    assert message.startswith(("ffmpeg stopped encoding", "ffmpeg could not encode"))
    assert message.endswith("Unknown encoder 'no_such_encoder'."), message
    assert out.read_bytes() == b"the video recorded before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["agent.mp4"]


def test_bad_settings_are_one_sentence(policy: Path, tmp_path: Path) -> None:
    kind = get_kind("rl.record")
    with pytest.raises(ConfigError, match=r"out must name a \.mp4 or \.gif file"):
        kind.validate({"model": str(policy), "out": "x.avi"})
    with pytest.raises(ConfigError, match="does not exist"):
        kind.validate({"model": str(tmp_path / "none.zip")})
    bare = tmp_path / "bare.zip"
    bare.write_bytes(policy.read_bytes())
    with pytest.raises(ConfigError, match=r"has no state\.json beside it"):
        kind.validate({"model": str(bare)})
    assert (
        kind.validate({"model": str(bare), "env": "CartPole-v1"}).env == "CartPole-v1"
    )
    with pytest.raises(ConfigError, match="out"):
        _run(tmp_path / "project", {"model": str(policy), "out": "../outside.mp4"})
    assert not (tmp_path / "outside.mp4").exists()
    (tmp_path / "project" / "notes.txt").write_text("kept")
    with pytest.raises(ConfigError, match=r"lies under .*notes\.txt', which is a file"):
        _run(tmp_path / "project", {"model": str(policy), "out": "notes.txt/v.mp4"})
    assert (tmp_path / "project" / "notes.txt").read_text() == "kept"


class _Blind(gym.Env[Any, Any]):
    """CartPole's spaces, and no way to draw a frame."""

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(self, render_mode: str | None = None) -> None:
        cartpole = gym.make("CartPole-v1")
        self.observation_space = cartpole.observation_space
        self.action_space = cartpole.action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        return np.zeros(4, np.float32), 1.0, True, False, {}


def test_envs_that_cannot_be_recorded(policy: Path, tmp_path: Path) -> None:
    gym.register("BlindCartPole-v0", entry_point=_Blind)
    out = tmp_path / "v.mp4"
    for env, sentence in (
        ("BlindCartPole-v0", "BlindCartPole-v0 cannot draw frames: "),
        ("Pendulum-v1", "but Pendulum-v1 gives Box"),
    ):
        cfg = record.validate({"model": str(policy), "env": env})
        with pytest.raises(EngineError, match=sentence):
            record.record_video(cfg, out)
    assert list(tmp_path.iterdir()) == []


def test_the_command(policy: Path, tmp_path: Path) -> None:
    out = tmp_path / "cart.mp4"
    done = subprocess.run(
        [sys.executable, "-m", "engine", "record", str(policy), "--out", str(out),
         "--episodes", "1", "--max-frames", "30", "--quiet"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["frames"] == 30 and _decoded_frames(out)[0] == 30
