"""Benchmark: recording a video against playing with frames (issue 31, item 4).

1,000 CartPole frames of a PPO policy, recorded to MP4 by ``rl.record``'s
``record_video`` (frames streamed to the bundled ffmpeg, encoded in its own
process), against the same policy, env, seeds and frames played with every
frame rendered but not encoded, as Play does. Alternating rounds; the
figure is the median of the rounds' time ratios. Target: recording takes at
most 1.5 times as long.

Run: .venv/bin/pytest tests/benchmarks/test_bench_record.py -s -o addopts=""
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest

from engine.rl import record

FRAMES = 1000
ROUNDS = 5
TARGET = 1.5  # record time / play-with-frames time


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> record.RecordConfig:
    from stable_baselines3 import PPO

    folder = tmp_path_factory.mktemp("policy")
    model = PPO("MlpPolicy", "CartPole-v1", seed=0, device="cpu")
    model.learn(2048)
    model.save(folder / "model.zip")
    (folder / "state.json").write_text(json.dumps({"env": "CartPole-v1"}))
    return record.validate(
        {"model": str(folder / "model.zip"), "episodes": FRAMES, "max_frames": FRAMES}
    )


def play_with_frames(cfg: record.RecordConfig) -> int:
    """The same episodes with every frame rendered and dropped: frames drawn."""
    from engine.envs.render import make_for_frames
    from engine.rl.policy import load_policy

    assert cfg.model is not None and cfg.env is not None
    policy = load_policy(cfg.model)
    env = make_for_frames(cfg.env).env
    frames = 0
    for episode in range(cfg.episodes):
        obs, _ = env.reset(seed=cfg.seed + episode)
        env.render()
        frames += 1
        done = False
        while not done and frames < cfg.max_frames:
            obs, _, terminated, truncated, _ = env.step(
                policy.act(obs, env, deterministic=cfg.deterministic)
            )
            env.render()
            frames += 1
            done = terminated or truncated
        if frames >= cfg.max_frames:
            break
    env.close()
    return frames


@pytest.mark.timeout(900)
def test_recording_costs_little_more_than_playing(
    config: record.RecordConfig, tmp_path: Path
) -> None:
    ratios: list[float] = []
    for i in range(ROUNDS):
        timed: dict[str, float] = {}
        order = ("record", "play") if i % 2 == 0 else ("play", "record")
        for what in order:
            t0 = time.perf_counter()
            if what == "record":
                done = record.record_video(config, tmp_path / f"r{i}.mp4")
                assert done is not None and done.frames == FRAMES
            else:
                assert play_with_frames(config) == FRAMES
            timed[what] = time.perf_counter() - t0
        ratios.append(timed["record"] / timed["play"])
        print(
            f"round {i}: record {timed['record']:.2f} s, play with frames "
            f"{timed['play']:.2f} s, ratio {ratios[-1]:.2f}"
        )
    ratio = statistics.median(ratios)
    print(
        f"{FRAMES:,} CartPole frames: record to MP4 / play with frames rendered = "
        f"{ratio:.2f} (target <= {TARGET:g})"
    )
    assert ratio <= TARGET
