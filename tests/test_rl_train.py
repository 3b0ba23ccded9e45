"""The ``rl.train`` job with real stable-baselines3 training (a few hundred
steps each): metrics, evaluation, checkpoints, stop, resume, summary."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from engine import protocol
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind
from engine.rl import train as rltrain
from engine.rl.config import validate
from engine.store.atomic import atomic_write_json
from engine.store.metrics import read_metrics

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def make_run(
    project: Path, run_id: str, config: dict[str, Any]
) -> tuple[Path, dict[str, Any]]:
    cfg = validate(config)
    run_dir = project / "runs" / run_id
    run_dir.mkdir(parents=True)
    atomic_write_json(
        run_dir / "config.json", {"run_id": run_id, "kind": "rl.train", "config": cfg}
    )
    return run_dir, cfg


def run_in_process(
    run_dir: Path,
    cfg: dict[str, Any],
    *,
    resume: bool = False,
    ctx_cls: type = JobContext,
) -> dict[str, Any]:
    ctx = ctx_cls(run_dir.name, run_dir, "rl.train", cfg, resume=resume, events=None)
    try:
        # As the job process runs it: the typed config loaded from the record.
        return dict(get_kind("rl.train").entry(ctx))
    finally:
        ctx.close()


def run_job_process(run_dir: Path, *extra: str) -> list[protocol.Message]:
    """Run the job as the supervisor does and return its protocol events.

    stdin stays open until the job exits: the runner reads end of stdin as
    "the supervisor is gone" and stops the job.
    """
    with open(run_dir.parent.parent / f"{run_dir.name}.stderr", "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.jobs.runner", str(run_dir), *extra],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        assert proc.stdout is not None and proc.stdin is not None
        out = proc.stdout.read()
        code = proc.wait(timeout=120)
        proc.stdin.close()
        err.seek(0)
        assert code == 0, err.read()[-3000:]
    return [protocol.decode(line) for line in out.splitlines() if line.strip()]


def metric_keys(rows: list[dict[str, Any]]) -> set[str]:
    keys: set[str] = set()
    for row in rows:
        keys.update(row)
    return keys


def tensorboard_steps(path: Path, tag: str) -> list[int]:
    """The steps at which a TensorBoard event file holds scalar ``tag``."""
    from tensorboard.backend.event_processing.event_file_loader import (
        EventFileLoader,
    )

    return [
        int(event.step)
        for event in EventFileLoader(str(path)).Load()
        if any(v.tag == tag for v in event.summary.value)
    ]


def test_ppo_cartpole_through_a_job_process(tmp_path: Path) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "ppo1",
        {
            "env": "CartPole-v1",
            "algo": "PPO",
            "total_steps": 512,
            "seed": 7,
            "n_envs": 4,
            "eval_every_steps": 256,
            "eval_episodes": 2,
            "checkpoint_every_steps": 256,
            "hyperparameters": {"n_steps": 32, "batch_size": 64, "n_epochs": 2},
        },
    )
    events = run_job_process(run_dir)

    progress = [e for e in events if isinstance(e, protocol.RunProgress)]
    assert progress and progress[-1].done >= 512 and progress[-1].total == 512
    streamed = [
        row for e in events if isinstance(e, protocol.RunMetrics) for row in e.rows
    ]
    finished = [e for e in events if isinstance(e, protocol.RunFinished)]
    assert len(finished) == 1 and finished[0].status == "completed"

    rows = read_metrics(run_dir / "metrics.jsonl")
    assert rows == streamed  # the GUI sees what the file holds
    keys = metric_keys(rows)
    for key in (
        "rollout/ep_rew_mean",
        "rollout/ep_len_mean",
        "time/fps",
        "train/value_loss",
        "train/policy_gradient_loss",
        "train/entropy_loss",
        "train/approx_kl",
        "train/clip_fraction",
        "train/explained_variance",
        "train/learning_rate",
        "eval/mean_reward",
        "eval/std_reward",
        "eval/mean_ep_length",
    ):
        assert key in keys, key
    steps = [r["step"] for r in rows]
    assert steps == sorted(steps) and steps[-1] >= 512
    eval_steps = [r["step"] for r in rows if "eval/mean_reward" in r]
    assert eval_steps[:2] == [256, 512]

    (events_file,) = (run_dir / "tensorboard").glob("events.out.tfevents.*")
    tb_steps = tensorboard_steps(events_file, "eval/mean_reward")
    assert tb_steps == eval_steps  # TensorBoard gets what metrics.jsonl gets
    summary = finished[0].summary
    assert summary["stopped_by"] == "steps" and summary["total_steps"] >= 512
    assert summary["best_eval_reward"] >= summary["last_eval_reward"] > 0
    (model,) = summary["models"]
    assert model["kind"] == "sb3-policy" and model["algo"] == "PPO"
    assert Path(model["file"]).is_absolute() and Path(model["file"]).is_file()
    assert Path(model["file"]).is_relative_to(run_dir.resolve())
    assert model["metrics"]["eval/mean_reward"] == summary["best_eval_reward"]

    record = json.loads((run_dir / "reproduce.json").read_text())
    assert record["seed"] == 7
    # the job fills in the project folder (to find designed envs), nothing else
    assert record["config"] == {**cfg, "project_dir": str(tmp_path)}
    assert set(record["versions"]) >= {
        "python",
        "torch",
        "stable-baselines3",
        "gymnasium",
        "numpy",
    }
    assert record["env_spec_hash"].startswith("sha256:")
    assert record["command"].startswith(
        "rl-studio-engine train --env CartPole-v1 --algo PPO --steps 512 --seed 7"
    )
    assert "--set n_steps=32" in record["command"]


class StopAtStep(JobContext):
    """Presses Stop once the job reports ``STOP_AT`` steps done."""

    STOP_AT = 150

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        if done >= self.STOP_AT:
            self.request_stop()


def test_dqn_stop_saves_a_checkpoint_and_resume_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rltrain, "PROGRESS_INTERVAL_S", 0.0)  # progress every step
    run_dir, cfg = make_run(
        tmp_path,
        "dqn1",
        {
            "env": "CartPole-v1",
            "algo": "DQN",
            "total_steps": 300,
            "seed": 3,
            "eval_every_steps": 100,
            "eval_episodes": 2,
            "checkpoint_every_steps": 0,
            "hyperparameters": {
                "learning_starts": 50,
                "train_freq": 4,
                "gradient_steps": 1,
                "batch_size": 16,
                "net_arch": [32],
                "buffer_size": 5000,
                "exploration_fraction": 0.5,
            },
        },
    )
    first = run_in_process(run_dir, cfg, ctx_cls=StopAtStep)
    assert first["stopped_by"] == "user"
    stop_step = first["total_steps"]
    assert stop_step == StopAtStep.STOP_AT
    ckpt = run_dir / "checkpoints" / f"step-{stop_step:010d}"
    assert (ckpt / "model.zip").is_file() and (ckpt / "replay_buffer.pkl").is_file()
    assert json.loads((ckpt / "state.json").read_text())["step"] == stop_step
    rows_before = read_metrics(run_dir / "metrics.jsonl")
    assert max(r["step"] for r in rows_before) <= stop_step

    # Resume as the job runner does: resume flag, wall clock carried on.
    offset = max(r["time"] for r in rows_before)
    ctx = JobContext("dqn1", run_dir, "rl.train", cfg, resume=True, time_offset=offset)
    try:
        summary = rltrain.run(ctx)
    finally:
        ctx.close()
    assert summary["resumed_from"]["step"] == stop_step
    # The replay buffer came back: one transition per step, except the one
    # SB3 had not stored yet when the callback stopped it.
    assert summary["resumed_from"]["replay_buffer_transitions"] == stop_step - 1
    # SB3 collects train_freq (4) steps at a time, so it may pass 300 a bit
    assert 300 <= summary["total_steps"] < 304 and summary["stopped_by"] == "steps"

    rows = read_metrics(run_dir / "metrics.jsonl")
    steps = [r["step"] for r in rows]
    assert steps == sorted(steps), "the step axis went backwards after resume"
    assert steps[len(rows_before)] > stop_step
    assert 290 < steps[-1] <= summary["total_steps"]
    times = [r["time"] for r in rows]
    assert times == sorted(times), "wall time restarted after resume"
    keys = metric_keys(rows[len(rows_before) :])
    assert {"rollout/exploration_rate", "train/loss", "eval/mean_reward"} <= keys
    # evaluations continued on the same grid: 100, 200, 300
    assert [r["step"] for r in rows if "eval/mean_reward" in r] == [100, 200, 300]


def test_sac_with_vec_normalize_saves_statistics(tmp_path: Path) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "sac1",
        {
            "env": "Pendulum-v1",
            "algo": "SAC",
            "total_steps": 300,
            "seed": 1,
            "vec_normalize": True,
            "eval_every_steps": 300,
            "eval_episodes": 1,
            "env_kwargs": {"max_episode_steps": 50},
            "hyperparameters": {
                "learning_starts": 200,
                "batch_size": 32,
                "net_arch": [32, 32],
                "buffer_size": 1000,
            },
        },
    )
    summary = run_in_process(run_dir, cfg)
    assert summary["total_steps"] == 300
    keys = metric_keys(read_metrics(run_dir / "metrics.jsonl"))
    assert {
        "train/actor_loss",
        "train/critic_loss",
        "train/ent_coef",
        "eval/mean_reward",
    } <= keys
    (model,) = summary["models"]
    assert model["algo"] == "SAC"
    (stats,) = model["extra_files"]
    assert stats.endswith("vecnormalize.pkl") and Path(stats).is_file()
    latest = run_dir / "checkpoints" / "step-0000000300"
    assert (latest / "vecnormalize.pkl").is_file() and (
        latest / "replay_buffer.pkl"
    ).is_file()


def test_target_reward_and_convergence_stop_training(tmp_path: Path) -> None:
    base = {
        "env": "CartPole-v1",
        "algo": "A2C",
        "total_steps": 5000,
        "seed": 2,
        "n_envs": 2,
        "eval_every_steps": 50,
        "eval_episodes": 1,
    }
    run_dir, cfg = make_run(tmp_path, "a2c-target", {**base, "target_eval_reward": 1.0})
    summary = run_in_process(run_dir, cfg)
    assert summary["stopped_by"] == "target" and summary["total_steps"] == 50

    run_dir, cfg = make_run(
        tmp_path,
        "a2c-conv",
        {
            **base,
            "convergence_window": 1,
            "convergence_patience": 2,
            "convergence_min_delta": 1e9,
        },
    )
    summary = run_in_process(run_dir, cfg)
    # window mean set by eval 1; evals 2 and 3 do not beat it by 1e9
    assert summary["stopped_by"] == "convergence" and summary["total_steps"] == 150


class CountingMaskedEnv(gym.Env[np.ndarray, int]):
    """Six actions of which two are allowed per state; counts forbidden ones."""

    metadata = {"render_modes": ["rgb_array"]}

    forbidden_taken = 0
    steps_taken = 0

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(6,), dtype=np.float32)
        self.action_space = spaces.Discrete(6)
        self.state = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(6, dtype=np.float32)
        obs[self.state] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self.state = 0
        return self._obs(), {}

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(6, dtype=bool)
        mask[[self.state, (self.state + 1) % 6]] = True
        return mask

    def step(self, action: int):  # type: ignore[override]
        type(self).steps_taken += 1
        if not self.action_masks()[action]:
            type(self).forbidden_taken += 1
        reward = 1.0 if action == (self.state + 1) % 6 else 0.0
        self.state = (self.state + 1) % 6
        done = self.state == 0
        return self._obs(), reward, done, False, {"is_success": done}


gym.register(
    "RLStudioTestMaskedTrain-v0", entry_point=CountingMaskedEnv, max_episode_steps=12
)


def test_maskable_ppo_is_chosen_for_masked_envs_and_never_takes_a_masked_action(
    tmp_path: Path,
) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "mask1",
        {
            "env": "RLStudioTestMaskedTrain-v0",
            "algo": "auto",
            "total_steps": 256,
            "seed": 0,
            "n_envs": 2,
            "eval_every_steps": 128,
            "eval_episodes": 2,
            "hyperparameters": {"n_steps": 64, "batch_size": 64, "n_epochs": 2},
        },
    )
    assert cfg["algo"] == "MaskablePPO"
    CountingMaskedEnv.forbidden_taken = CountingMaskedEnv.steps_taken = 0
    summary = run_in_process(run_dir, cfg)
    assert summary["algo"] == "MaskablePPO" and summary["total_steps"] == 256
    assert CountingMaskedEnv.steps_taken >= 256
    assert CountingMaskedEnv.forbidden_taken == 0
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert "eval/success_rate" in metric_keys(rows)
    assert summary["models"][0]["metrics"]["eval/success_rate"] == 1.0


class StopDuringFirstEval(JobContext):
    """Stop becomes true on the first check made inside the first evaluation
    (the job checks once per vectorized step before that)."""

    checks_before_eval = 32  # eval at step 64 with 2 envs = 32 steps

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checks = 0

    @property
    def should_stop(self) -> bool:
        self.checks += 1
        if self.checks > self.checks_before_eval:
            self.stop_reason = self.stop_reason or "user"  # as request_stop does
            return True
        return False


def test_stop_interrupts_a_long_evaluation(tmp_path: Path) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "stop-eval",
        {
            "env": "CartPole-v1",
            "algo": "PPO",
            "total_steps": 1000,
            "seed": 0,
            "n_envs": 2,
            "eval_every_steps": 64,
            "eval_episodes": 50,
            "hyperparameters": {"n_steps": 16, "batch_size": 32, "n_epochs": 1},
        },
    )
    summary = run_in_process(run_dir, cfg, ctx_cls=StopDuringFirstEval)
    assert summary["stopped_by"] == "user" and summary["total_steps"] == 64
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert "eval/mean_reward" not in metric_keys(rows)
    assert (run_dir / "checkpoints" / "step-0000000064" / "model.zip").is_file()


def test_checkpoints_keep_the_last_k_and_the_best(tmp_path: Path) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "keep",
        {
            "env": "CartPole-v1",
            "algo": "DQN",
            "total_steps": 320,
            "seed": 6,
            "eval_every_steps": 64,
            "eval_episodes": 1,
            "checkpoint_every_steps": 64,
            "keep_checkpoints": 2,
            "hyperparameters": {
                "learning_starts": 32,
                "train_freq": 4,
                "gradient_steps": 1,
                "batch_size": 16,
                "net_arch": [16],
                "buffer_size": 1000,
            },
        },
    )
    summary = run_in_process(run_dir, cfg)
    ckpt = run_dir / "checkpoints"
    periodic = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("step-"))
    assert periodic == ["step-0000000256", "step-0000000320"]
    assert sorted(p.name for p in ckpt.iterdir()) == ["best", *periodic]
    # Only the newest periodic checkpoint carries the replay buffer.
    assert (ckpt / "step-0000000320" / "replay_buffer.pkl").is_file()
    assert not (ckpt / "step-0000000256" / "replay_buffer.pkl").exists()
    # The best one is the evaluation with the highest mean reward, whenever
    # it happened, and is what the summary registers.
    rows = read_metrics(run_dir / "metrics.jsonl")
    evals = [
        (r["eval/mean_reward"], r["step"]) for r in rows if "eval/mean_reward" in r
    ]
    assert [s for _, s in evals] == [64, 128, 192, 256, 320]
    best_reward = max(r for r, _ in evals)
    best_step = next(s for r, s in evals if r == best_reward)
    state = json.loads((ckpt / "best" / "state.json").read_text())
    assert state["step"] == best_step and state["best_eval_reward"] == best_reward
    assert not (ckpt / "best" / "replay_buffer.pkl").exists()
    (model,) = summary["models"]
    assert Path(model["file"]) == (ckpt / "best" / "model.zip").resolve()
    assert summary["best_eval_reward"] == best_reward


@pytest.mark.parametrize("size", [0, 1, 7, 8, 255, 256, 700, 4096, 4097])
def test_event_file_crc_matches_tensorboard(size: int) -> None:
    """The studio's table CRC-32C gives what tensorboard's byte loop gives,
    below and above the table's length."""
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import (
        masked_crc32c as reference,
    )

    from engine.rl.tensorboard import masked_crc32c

    data = np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8)
    assert masked_crc32c(data.tobytes()) == reference(data.tobytes())


def test_event_file_writes_every_queued_event_in_order(tmp_path: Path) -> None:
    """Values queued faster than the writer wakes (once a second) all reach
    the file, in order, with their steps and values; the file is flushed
    while the writer runs, not only on close."""
    from tensorboard.backend.event_processing.event_file_loader import (
        RawEventFileLoader,
    )
    from tensorboard.compat.proto.event_pb2 import Event

    from engine.rl.tensorboard import EventFile

    events = EventFile(tmp_path)
    for step in range(50):
        events.scalars(step, {"train/loss": step / 4, "time/fps": 1000.0 + step})
    written = events.path.stat().st_size
    pause = threading.Event()  # never set: the wait between looks at the file
    deadline = time.monotonic() + 10 * EventFile.FLUSH_S
    while events.path.stat().st_size == written:  # until the writer's next wake
        assert time.monotonic() < deadline, "the writer never flushed the events"
        pause.wait(0.01)
    events.scalars(50, {"train/loss": 12.5})  # queued just before close
    events.close()
    assert events.error is None
    read = [Event.FromString(r) for r in RawEventFileLoader(str(events.path)).Load()]
    loaded = [e for e in read if e.summary.value]
    assert [int(e.step) for e in loaded] == list(range(51))
    assert [{v.tag: v.simple_value for v in e.summary.value} for e in loaded[:2]] == [
        {"train/loss": 0.0, "time/fps": 1000.0},
        {"train/loss": 0.25, "time/fps": 1001.0},
    ]
