"""A video per evaluation during training (issue 31, item 4): a tiny PPO run
with ``eval_video_episodes`` keeps ``videos/eval-<step>.mp4`` per evaluation
(read back by ffmpeg's decoder) and puts each in TensorBoard as a GIF image
summary (read back by TensorBoard's own event reader); the default records
none. MLflow's copy is tested with the real server in test_tracking.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine import contract
from engine.jobs.lifecycle import HeadlessContext, run_in_process
from engine.jobs.registry import run_name
from engine.rl.eval_video import TAG, video_name
from engine.store.project import Project

TINY_PPO: dict[str, Any] = {
    "env": "CartPole-v1",
    "algo": "PPO",
    "seed": 3,
    "n_envs": 2,
    "total_steps": 256,
    "eval_every_steps": 128,
    "eval_episodes": 2,
    "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 1},
}


def train(project_dir: Path, config: dict[str, Any]) -> Path:
    """A headless rl.train run in this process; its run folder."""
    from engine.rl import train as rl_train
    from engine.rl.config import validate

    project = Project.open(project_dir, create=True)
    try:
        config = validate({**config, "project_dir": str(project_dir)})
        record = project.create_run(
            "rl.train", config, name=run_name("rl.train", config)
        )
        ctx = HeadlessContext(
            record.id, Path(record.run_dir), "rl.train", config, project=project
        )
        ctx.say = lambda _text: None  # type: ignore[method-assign]
        outcome = run_in_process(project, record.id, ctx, rl_train.run)
    finally:
        project.close()
    assert outcome.error is None, outcome.reason
    return Path(record.run_dir)


def test_each_evaluation_keeps_a_video_in_the_run_and_tensorboard(
    tmp_path: Path,
) -> None:
    import imageio_ffmpeg
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    run_dir = train(tmp_path / "p", {**TINY_PPO, "eval_video_episodes": 1})
    steps = sorted(
        int(row["step"])
        for row in map(
            json.loads,
            (run_dir / contract.METRICS_FILE).read_text().splitlines(),
        )
        if "eval/mean_reward" in row
    )
    assert steps and len(steps) >= 2
    videos = sorted((run_dir / contract.VIDEOS_FOLDER).iterdir())
    assert [v.name for v in videos] == [video_name(s) for s in steps]
    for video in videos:
        reader = imageio_ffmpeg.read_frames(str(video))
        meta = next(reader)
        frames = sum(1 for _ in reader)
        assert tuple(meta["size"]) == (600, 400) and 2 <= frames <= 1000
    log = (run_dir / contract.LOG_FILE).read_text()
    assert f"video of the evaluation at step {steps[0]}: " in log
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    images = events.Images(TAG)
    assert [i.step for i in images] == steps
    for image in images:
        assert image.encoded_image_string[:6] == b"GIF89a"
        assert image.width == 240 and image.height == 160
    # The scalars are still there, beside the videos' own event file.
    assert "eval/mean_reward" in events.Tags()["scalars"]


def test_no_video_unless_asked(tmp_path: Path) -> None:
    run_dir = train(tmp_path / "p", {**TINY_PPO, "total_steps": 128})
    assert not (run_dir / contract.VIDEOS_FOLDER).exists()
