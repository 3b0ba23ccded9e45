"""Absurd numbers and hostile small files are refused in one sentence
(issue 26, item 6): every count a user sets has a declared upper bound,
``train --set`` never crashes whatever it is given, NaN metrics are stored
as null, and small files are read with a size limit."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from engine.envs.curriculum import (
    DIFFICULTY,
    WINDOW_MAX,
    CurriculumConfig,
    check_curriculum,
)
from engine.errors import ConfigError, EngineError, quoted
from engine.jobs.context import JobContext
from engine.rl import train as rltrain
from engine.rl.cli import parse_settings
from engine.rl.config import ALGO_CONFIGS, TrainConfig, validate
from engine.rl.learned_reward import check_model, load_control_scorer
from engine.rl.tune import TuneConfig
from engine.settings import (
    COUNT_MAX,
    STEPS_MAX,
    check_value,
    fields_of,
    setting,
)
from engine.store.atomic import json_safe, read_small_text

REPO = Path(__file__).resolve().parents[1]
CONFIGS = [
    TrainConfig,
    *ALGO_CONFIGS.values(),
    CurriculumConfig,
    *DIFFICULTY.values(),
    TuneConfig,
]


def one_sentence(message: str) -> bool:
    """A user-facing error: one line, ending like a sentence, not huge."""
    return "\n" not in message and message[-1:] in ".?" and len(message) <= 600


# ------------------------------------------------------------------ bounds
def test_every_count_has_a_declared_upper_bound() -> None:
    counts = [
        (cls.__name__, info)
        for cls in CONFIGS
        for info in fields_of(cls).values()
        if info.kind in ("int", "list[int]")
    ]
    assert len(counts) > 40
    unbounded = [name for name, info in counts if info.max is None]
    assert unbounded == []
    # The run dialog's form shows the same bound the check applies.
    steps = fields_of(TrainConfig)["total_steps"]
    assert steps.max == STEPS_MAX


def test_a_count_without_its_own_max_gets_the_default_one() -> None:
    @dataclasses.dataclass
    class Job:
        episodes: int = setting(3, min=1)

    info = fields_of(Job)["episodes"]
    assert info.max == COUNT_MAX
    with pytest.raises(ConfigError) as caught:
        check_value(info, COUNT_MAX + 1)
    assert str(caught.value) == (
        f"episodes must be at most {COUNT_MAX}, not {COUNT_MAX + 1}."
    )


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (10**20, "total_steps must be at most 10000000000, not 1000"),
        (1e30, "total_steps must be at most 10000000000, not 1000"),
        (10**5000, "not a number of about 5001 digits"),
        (float("nan"), "total_steps must be a whole number, not nan"),
        (float("inf"), "total_steps must be a whole number, not inf"),
        (-(10**30), "total_steps must be at least 1, not"),
    ],
    ids=["1e20-int", "1e30-float", "5001-digits", "nan", "inf", "-1e30"],
)
def test_absurd_steps_are_refused_in_one_sentence(value: Any, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "total_steps": value})
    message = str(caught.value)
    assert caught.value.field == "total_steps"
    assert words in message and one_sentence(message), message


def test_the_http_route_checks_steps_by_the_same_declaration() -> None:
    """``POST /train`` checks its ``steps`` with the total_steps setting
    under the route's name (engine.service.state.start_training)."""
    steps = dataclasses.replace(fields_of(TrainConfig)["total_steps"], name="steps")
    with pytest.raises(ConfigError) as caught:
        check_value(steps, 10**20)
    assert str(caught.value) == (
        "steps must be at most 10000000000, not 100000000000000000000."
    )
    assert check_value(steps, STEPS_MAX) == STEPS_MAX


def test_a_huge_float_setting_and_long_text_are_refused_without_echoing_them() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "hyperparameters": {"learning_rate": 10**400}})
    assert one_sentence(str(caught.value))
    assert "learning_rate must be a finite number" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "device": "x" * 5000})
    assert one_sentence(str(caught.value)) and len(str(caught.value)) < 300
    assert quoted("x" * 5000).endswith("…") and len(quoted("x" * 5000)) == 200


def test_a_lone_surrogate_in_text_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "name": "run \udcff"})
    assert caught.value.field == "name" and "lone surrogate" in str(caught.value)


def test_a_curriculum_window_of_1e30_is_refused_in_one_sentence() -> None:
    stages = [{"max_steps": 5}, {}]
    with pytest.raises(ConfigError) as caught:
        check_curriculum({"stages": stages, "window": 1e30}, "grid")
    assert caught.value.field == "curriculum.window"
    assert str(caught.value).startswith(f"window must be at most {WINDOW_MAX}, not ")
    assert one_sentence(str(caught.value))
    with pytest.raises(ConfigError) as caught:
        check_curriculum({"stages": [{}] * 5000}, "grid")
    assert "at most 1000 stages" in str(caught.value)


def test_list_settings_have_a_length_bound() -> None:
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "hyperparameters": {"net_arch": [8] * 100_000}})
    assert str(caught.value) == "net_arch may hold at most 256 items, not 100000."


def test_sweep_counts_are_checked_against_the_same_declaration(
    tmp_path: Path,
) -> None:
    """``tune --trials 10^20`` queued trials until killed."""
    for option, value, words in (
        ("--trials", str(10**20), "--trials must be at most 10000, not"),
        ("--steps", str(10**20), "--steps must be at most 10000000000, not"),
    ):
        argv = ["tune", "--env", "CartPole-v1", "--trials", "2", "--steps", "100"]
        argv[argv.index(option) + 1] = value
        done = subprocess.run(
            [sys.executable, "-m", "engine.cli", *argv, "--project", str(tmp_path)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], done.stderr


# -------------------------------------------------------------- --set fuzz
NASTY = [
    "1e20",
    str(10**20),
    "-1",
    str(-(10**20)),
    "NaN",
    "Infinity",
    "-Infinity",
    "1e30",
    "1e309",
    "-1e309",
    "0",
    "",
    " ",
    "x" * 5000,
    "9" * 5000,
    "[" * 5000,
    "\udcff",
    "\ud800abc",
    "[1e30]",
    "[64,64]",
    "[" + ",".join(["64"] * 10_000) + "]",
    "[-1]",
    "[0]",
    "[1e20]",
    "true",
    "null",
    "{}",
    '{"a": 1}',
    '"\\ud800"',
    "0.5",
    "3",
    "1e-3",
    "auto",
    "auto_0.1",
    "auto_-1",
    "2.5",
    "1" * 400,
    "-0",
    "1e-400",
    "cpu",
    "cuda:99",
]


def _random_value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.6:
        return rng.choice(NASTY)
    if roll < 0.75:
        return str(rng.choice([1, -1]) * 10 ** rng.randint(0, 60))
    if roll < 0.9:
        return repr(rng.random() * 10.0 ** rng.randint(-10, 300))
    return "".join(chr(rng.randint(0, 0x10FFFF)) for _ in range(rng.randint(0, 8)))


def _random_key(rng: random.Random, keys: list[str]) -> str:
    if rng.random() < 0.9:
        return rng.choice(keys)
    return rng.choice(["", " ", "x" * 300, "\udcff", "total_steps", "seed", "a b"])


def test_train_set_fuzz_every_case_is_accepted_or_refused_in_one_sentence(
    tmp_path: Path,
) -> None:
    """2,000 random ``--set`` lists through the command's own parsing and
    the job's validation, in this process: nothing escapes but a sentence."""
    keys = sorted(
        set(fields_of(TrainConfig))
        | {name for cls in ALGO_CONFIGS.values() for name in fields_of(cls)}
    )
    rng = random.Random(26)
    accepted = refused = 0
    failures: list[str] = []
    for _ in range(2000):
        items = [
            f"{_random_key(rng, keys)}={_random_value(rng)}"
            for _ in range(rng.randint(1, 3))
        ]
        try:
            top, hyper = parse_settings(items)
            config: dict[str, Any] = {
                "env": "CartPole-v1",
                "algo": rng.choice(["PPO", "A2C", "DQN", "auto"]),
                "total_steps": 1000,
                **top,
                "project_dir": str(tmp_path),  # as build_config sets it
            }
            if hyper:
                config["hyperparameters"] = hyper
            checked = validate(config)
            json.dumps(checked, allow_nan=False)  # what the run writes
            accepted += 1
        except EngineError as exc:
            refused += 1
            if not one_sentence(str(exc)):
                failures.append(f"{items!r:.200}: {str(exc)[:300]!r}")
        except Exception as exc:  # the failure this test looks for
            failures.append(f"{items!r:.200}: {type(exc).__name__}: {exc!s:.200}")
    assert failures == [], f"{len(failures)} failures, e.g. {failures[:5]}"
    assert accepted > 20 and refused > 1000


@pytest.mark.parametrize(
    ("setting_", "words"),
    [
        ("n_envs=1e30", "n_envs must be at most 1024, not"),
        (f"n_steps={'9' * 5000}", "n_steps must be a whole number, not '999"),
        ("eval_episodes=NaN", "eval_episodes must be a whole number, not nan."),
    ],
)
def test_absurd_set_values_from_the_real_command(
    setting_: str, words: str, tmp_path: Path
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine.cli",
            "train",
            "--env",
            "CartPole-v1",
            "--algo",
            "PPO",
            "--set",
            setting_,
            "--project",
            str(tmp_path),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and len(lines[0]) < 400, lines


# ------------------------------------------------------------ NaN metrics
class ZeroRewardEnv(gym.Env[np.ndarray, int]):
    """Pays 0 on every step: every return is equal, so SB3's explained
    variance of the value function is NaN."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)
        self.t = 0

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, dtype=np.float32), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return np.zeros(2, dtype=np.float32), 0.0, False, self.t >= 8, {}


gym.register("test-numbers/ZeroReward-v0", entry_point=ZeroRewardEnv)


@pytest.mark.slow
def test_ppo_on_an_env_that_always_pays_0_finishes(tmp_path: Path) -> None:
    config = validate(
        {
            "env": "test-numbers/ZeroReward-v0",
            "algo": "PPO",
            "total_steps": 128,
            "seed": 0,
            "n_envs": 1,
            "eval_every_steps": 64,
            "eval_episodes": 1,
            "checkpoint_every_steps": 64,
            "hyperparameters": {"n_steps": 32, "batch_size": 16, "n_epochs": 1},
        }
    )
    run_dir = tmp_path / "runs" / "zero"
    run_dir.mkdir(parents=True)
    ctx = JobContext("zero", run_dir, "rl.train", config, resume=False, events=None)
    try:
        summary = rltrain.run(ctx)
    finally:
        ctx.close()
    assert summary["total_steps"] == 128
    latest = sorted((run_dir / "checkpoints").glob("step-*"))[-1]
    state = json.loads((latest / "state.json").read_text())
    # SB3 logged NaN; the checkpoint holds null where it was.
    assert state["last_logged"]["train/explained_variance"] is None


def test_json_safe_replaces_every_non_finite_number_with_null() -> None:
    data = {
        "a": float("nan"),
        "b": [1.0, float("inf"), {"c": -float("inf")}],
        "d": np.float32("nan"),
        "e": np.float64(2.5),
        "f": (True, 3, "x"),
    }
    assert json_safe(data) == {
        "a": None,
        "b": [1.0, None, {"c": None}],
        "d": None,
        "e": 2.5,
        "f": [True, 3, "x"],
    }


# ------------------------------------------------------------- small files
def test_small_files_are_read_with_a_limit(tmp_path: Path) -> None:
    with pytest.raises(EngineError) as caught:
        read_small_text("/dev/zero", "The token file /dev/zero")
    assert str(caught.value) == "The token file /dev/zero is not a regular file."
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(EngineError, match="is not a regular file"):
        read_small_text(fifo, "The fifo")  # never opened: that would block
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    with pytest.raises(EngineError, match="is larger than 1,024 bytes"):
        read_small_text(big, "The big file", limit=1024)
    (tmp_path / "latin").write_bytes(b"\xff\xfe")
    with pytest.raises(EngineError, match="is not UTF-8 text"):
        read_small_text(tmp_path / "latin", "The latin file")
    assert read_small_text(big, "The big file") == "x" * 2048


def test_a_token_file_of_dev_zero_is_refused_at_once() -> None:
    """``serve-http --token-file /dev/zero`` read 9 GB before failing."""
    from engine.service.cli import read_token

    with pytest.raises(EngineError) as caught:
        read_token("/dev/zero", "127.0.0.1")
    assert "/dev/zero is not a regular file" in str(caught.value)
    assert one_sentence(str(caught.value))


# ----------------------------------------------------------- learned reward
def _control_meta(folder: Path) -> None:
    folder.mkdir(parents=True)
    meta = {"kind": "control", "features": {"obs_dim": 4, "actions": 2}, "hidden": 8}
    (folder / "reward_model.json").write_text(json.dumps(meta))


class Boom:
    """An object a pickle would rebuild by running code."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch pwned",))


def test_a_learned_reward_folder_without_weights_is_one_sentence(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "rm"
    _control_meta(folder)
    with pytest.raises(ConfigError) as caught:
        check_model(str(folder))
    assert str(caught.value) == (
        f"{str(folder)!r} has no mlp.pt (the control reward model's weights); "
        "train it again with reward.train."
    )
    with pytest.raises(ConfigError) as caught:
        validate({"env": "CartPole-v1", "learned_reward": str(folder)})
    assert caught.value.field == "learned_reward"


@pytest.mark.filterwarnings("ignore:Detected pickle protocol")
@pytest.mark.parametrize("how", ["raw pickle", "torch zip with code", "garbage"])
def test_a_learned_reward_with_a_pickle_is_refused_not_run(
    how: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    monkeypatch.chdir(tmp_path)
    folder = tmp_path / "rm"
    _control_meta(folder)
    weights = folder / "mlp.pt"
    if how == "raw pickle":
        weights.write_bytes(pickle.dumps(Boom()))
    elif how == "torch zip with code":
        torch.save({"state": Boom()}, weights)
    else:
        weights.write_bytes(b"\x00" * 100)
    with pytest.raises(ConfigError) as caught:
        load_control_scorer(str(folder))
    message = str(caught.value)
    assert message.startswith(f"{str(folder)!r}/mlp.pt is not a control reward")
    assert one_sentence(message), message
    assert not (tmp_path / "pwned").exists()
