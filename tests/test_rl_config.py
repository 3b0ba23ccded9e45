"""Validation of ``rl.train`` configs: defaults, presets and every refusal."""

from __future__ import annotations

import dataclasses
import json
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces

from engine.errors import ConfigError
from engine.jobs.registry import get_kind, validate_config
from engine.rl import config as rlconfig
from engine.rl import job as rl_job
from engine.rl.cli import build_config, configure
from engine.rl.config import ALGO_CONFIGS, TrainConfig, validate
from engine.rl.presets import (
    BundledPresetError,
    builtin_presets,
    load_presets,
    presets_folder,
)
from engine.rl.train import reproduce_argv
from engine.settings import field_docs, fields_of

EXAMPLES = Path(__file__).resolve().parents[1] / "resources" / "examples"


class MaskedEnv(gym.Env[np.ndarray, int]):
    """Four actions, of which only two are allowed in each state."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(4,), dtype=np.float32)
        self.action_space = spaces.Discrete(4)
        self.state = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(4, dtype=np.float32)
        obs[self.state] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):  # type: ignore[override]
        super().reset(seed=seed)
        self.state = 0
        return self._obs(), {}

    def step(self, action: int):  # type: ignore[override]
        self.state = (self.state + 1) % 4
        return self._obs(), 1.0, False, False, {}

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(4, dtype=bool)
        mask[[self.state, (self.state + 1) % 4]] = True
        return mask


gym.register("RLStudioTestMaskedCfg-v0", entry_point=MaskedEnv, max_episode_steps=8)


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        (
            {"env": "CartPole-v1", "hyperparameters": {"learning_rate": -0.1}},
            "hyperparameters.learning_rate",
            "greater than 0",
        ),
        (
            {"env": "CartPole-v1", "hyperparameters": {"learning_rate": 0}},
            "hyperparameters.learning_rate",
            "greater than 0",
        ),
        (
            {
                "env": "CartPole-v1",
                "algo": "PPO",
                "n_envs": 2,
                "hyperparameters": {"n_steps": 16, "batch_size": 64},
            },
            "hyperparameters.batch_size",
            "larger than the rollout",
        ),
        ({"env": "Pendulum-v1", "algo": "DQN"}, "algo", "discrete action space"),
        ({"env": "CartPole-v1", "algo": "SAC"}, "algo", "continuous action space"),
        ({"env": "CartPole-v1", "algo": "TD3"}, "algo", "continuous action space"),
        ({"env": "CartPol-v1"}, "env", "'CartPole-v1'"),
        ({"env": ""}, "env", "Choose an environment"),
        ({"env": "CartPole-v1", "algo": "XPO"}, "algo", "Unknown algorithm"),
        (
            {"env": "CartPole-v1", "hyperparameters": {"learnin_rate": 0.1}},
            "hyperparameters.learnin_rate",
            "did you mean 'learning_rate'",
        ),
        (
            {"env": "CartPole-v1", "algo": "DQN", "hyperparameters": {"n_steps": 5}},
            "hyperparameters.n_steps",
            "Unknown hyperparameter",
        ),
        ({"env": "CartPole-v1", "total_steps": 0}, "total_steps", "at least 1"),
        ({"env": "CartPole-v1", "n_envs": 0}, "n_envs", "at least 1"),
        ({"env": "CartPole-v1", "seed": -3}, "seed", "at least 0"),
        ({"env": "CartPole-v1", "gamma": 0.9}, "gamma", "Unknown setting"),
        (
            {"env": "CartPole-v1", "hyperparameters": {"gamma": 1.5}},
            "hyperparameters.gamma",
            "at most 1",
        ),
        ({"env": "CartPole-v1", "algo": "MaskablePPO"}, "algo", "action_masks()"),
        (
            {"env": "CartPole-v1", "target_eval_reward": 400, "eval_every_steps": 0},
            "eval_every_steps",
            "needs evaluations",
        ),
        (
            {"env": "CartPole-v1", "hyperparameters": {"net_arch": [64, -1]}},
            "hyperparameters.net_arch",
            "Each item of net_arch must be at least 1",
        ),
        (
            {"env": "CartPole-v1", "hyperparameters": {"n_epochs": "ten"}},
            "hyperparameters.n_epochs",
            "whole number",
        ),
        (
            {
                "env": "CartPole-v1",
                "algo": "DQN",
                "hyperparameters": {"gradient_steps": 0},
            },
            "hyperparameters.gradient_steps",
            "-1 or at least 1",
        ),
        (
            {
                "env": "Pendulum-v1",
                "algo": "SAC",
                "hyperparameters": {"ent_coef": "lots"},
            },
            "hyperparameters.ent_coef",
            "'auto'",
        ),
        (
            {"env": "CartPole-v1", "env_kwargs": {"no_such_arg": 1}},
            "env_kwargs",
            "arguments",
        ),
        ({"env": "CartPole-v1", "device": "tpu"}, "device", "auto, cpu"),
        (
            {"env": "CartPole-v1", "hyperparameters": {"use_sde": True}},
            "hyperparameters.use_sde",
            "continuous",
        ),
    ],
)
def test_impossible_settings_are_refused_naming_the_field(
    config: dict, field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate(config)
    assert info.value.field == field
    message = str(info.value)
    assert words in message
    # one sentence: ends with a full stop or a question mark, no line breaks
    assert message[-1] in ".?" and "\n" not in message


def test_unknown_env_suggests_close_names() -> None:
    with pytest.raises(ConfigError) as info:
        validate({"env": "Pendulum-v2"})
    assert "did you mean" in str(info.value) and "'Pendulum-v1'" in str(info.value)


def test_defaults_come_from_the_preset_and_hardware() -> None:
    cfg = validate({"env": "CartPole-v1", "algo": "ppo"})
    assert cfg["algo"] == "PPO"
    hp = cfg["hyperparameters"]
    assert hp["n_steps"] == 64 and hp["n_epochs"] == 5 and hp["gamma"] == 0.98
    assert cfg["n_envs"] == 8 and cfg["total_steps"] == 100_000
    assert isinstance(cfg["seed"], int) and cfg["seed"] >= 0
    assert cfg["torch_threads"] >= 1
    assert set(hp) == {f.name for f in dataclasses.fields(ALGO_CONFIGS["PPO"])}
    # an env without a preset gets dataclass defaults and hardware n_envs
    other = validate({"env": "MountainCarContinuous-v0", "algo": "SAC", "seed": 4})
    assert other["seed"] == 4 and other["n_envs"] == 1
    assert other["hyperparameters"]["learning_rate"] == 3e-4


def test_validate_is_idempotent_and_json_clean() -> None:
    import json

    cfg = validate({"env": "Pendulum-v1", "algo": "TD3", "seed": 5})
    assert validate(json.loads(json.dumps(cfg))) == cfg


def test_user_values_override_the_preset_and_ints_become_floats() -> None:
    cfg = validate(
        {
            "env": "CartPole-v1",
            "algo": "PPO",
            "hyperparameters": {"learning_rate": 1, "n_epochs": 3},
        }
    )
    assert cfg["hyperparameters"]["learning_rate"] == 1.0
    assert isinstance(cfg["hyperparameters"]["learning_rate"], float)
    assert cfg["hyperparameters"]["n_epochs"] == 3


def test_preset_batch_shrinks_to_a_small_rollout_but_a_user_batch_is_refused() -> None:
    cfg = validate({"env": "CartPole-v1", "algo": "PPO", "n_envs": 2})
    assert cfg["hyperparameters"]["batch_size"] == 128  # 64 steps * 2 envs
    with pytest.raises(ConfigError):
        validate(
            {
                "env": "CartPole-v1",
                "algo": "PPO",
                "n_envs": 2,
                "hyperparameters": {"batch_size": 256},
            }
        )


def test_masked_env_gets_maskable_ppo() -> None:
    assert validate({"env": "RLStudioTestMaskedCfg-v0"})["algo"] == "MaskablePPO"
    assert (
        validate({"env": "RLStudioTestMaskedCfg-v0", "algo": "PPO"})["algo"]
        == "MaskablePPO"
    )
    assert validate({"env": "RLStudioTestMaskedCfg-v0", "algo": "DQN"})["algo"] == "DQN"
    assert validate({"env": "CartPole-v1", "algo": "auto"})["algo"] == "PPO"


def test_every_field_has_a_docstring() -> None:
    # Its own docstring, or that of the setting it is the same as (same_setting).
    for cls in (TrainConfig, *ALGO_CONFIGS.values()):
        missing = [name for name, info in fields_of(cls).items() if not info.help]
        assert not missing, f"{cls.__name__} lacks docs for {missing}"
    assert "steps" in field_docs(rlconfig.PPOConfig)["n_steps"]


def test_registered_as_a_resumable_job_kind() -> None:
    kind = get_kind("rl.train")
    assert kind.resumable and kind.run is rl_job.run
    assert kind.config is TrainConfig and kind.progress_unit == "steps"
    cfg = validate_config("rl.train", {"env": "Acrobot-v1", "algo": "DQN", "seed": 1})
    assert cfg["hyperparameters"]["target_update_interval"] == 250


def test_a_checked_config_is_typed_and_loads_back_from_its_record() -> None:
    cfg = rlconfig.check({"env": "Acrobot-v1", "algo": "DQN", "seed": 1})
    assert isinstance(cfg, TrainConfig) and cfg.algo == "DQN"
    assert isinstance(cfg.hyperparameters, rlconfig.DQNConfig)
    assert cfg.hyperparameters.target_update_interval == 250
    recorded = json.loads(json.dumps(validate(rlconfig.as_dict(cfg))))
    # The job process rebuilds the algorithm's dataclass from the record.
    assert get_kind("rl.train").load(recorded) == cfg
    with pytest.raises(ConfigError) as info:
        rlconfig.check({"env": "CartPole-v1", "hyperparameters": {"gamma": 2}})
    assert info.value.field == "hyperparameters.gamma"
    assert str(info.value) == "gamma must be at most 1, not 2."


def test_reproduce_command_rebuilds_the_same_config(tmp_path) -> None:
    import argparse

    cfg = validate(
        {
            "env": "Pendulum-v1",
            "algo": "SAC",
            "total_steps": 1234,
            "seed": 9,
            "env_kwargs": {"g": 9.0},
            "target_eval_reward": -200,
            "project_dir": str(tmp_path),
            "hyperparameters": {"net_arch": [32, 32], "ent_coef": "auto_0.5"},
        }
    )
    argv = reproduce_argv(get_kind("rl.train").load(cfg))
    assert shlex.join(argv).startswith(
        "rl-studio-engine train --env Pendulum-v1 --algo SAC --steps 1234 --seed 9"
    )
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(argv[2:])
    again = validate(build_config(args, tmp_path))
    # The command spells out the fitted values, so nothing is fitted again.
    assert cfg["notes"] and again["notes"] == []
    assert {**again, "notes": cfg["notes"]} == cfg


def test_engine_modules_import_without_heavy_libraries() -> None:
    import subprocess

    code = (
        "import sys, engine.rl.config, engine.rl.train, engine.rl.cli;"
        "heavy = [m for m in ('torch', 'stable_baselines3', 'gymnasium', 'sb3_contrib')"
        " if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def _runnable(env_id: str) -> str:
    """``env_id``, or where this Gymnasium retired it (Taxi-v3 in 1.x) the
    alias its preset file names, which holds the same presets."""
    try:
        gym.make(env_id).close()
    except gym.error.DeprecatedEnv:
        (alias,) = [
            other
            for other, by_algo in builtin_presets().items()
            if other != env_id and by_algo is builtin_presets()[env_id]
        ]
        return alias
    return env_id


@pytest.mark.parametrize(
    ("env_id", "algo"),
    [(env, algo) for env, by_algo in builtin_presets().items() for algo in by_algo],
)
def test_every_built_in_preset_validates_and_says_where_it_comes_from(
    env_id: str, algo: str, tmp_path: Path
) -> None:
    where = builtin_presets()[env_id][algo]["provenance"]
    # The keys provenance_text shows where presets are chosen and in --help.
    if "study" in where:  # tuned here: the whole record
        for key in ("trials", "steps_per_trial", "date", "objective", "result"):
            assert where[key], key
        assert "tuned by the sweep" in rlconfig.provenance_text(where)
    else:  # honestly untuned, and says why
        assert where["source"] in ("RL Zoo settings", "hand-set")
        assert where["detail"]
        assert (
            rlconfig.provenance_text(where) == f"{where['source']} ({where['detail']})"
        )
    text = rlconfig.preset_provenance(env_id, algo)
    assert text.startswith(f"The built-in preset for {algo} on {env_id}: ")
    assert "provenance" not in rlconfig.preset_for(env_id, algo)
    project: dict[str, str] = {}
    if env_id.startswith("rlstudio/"):  # a bundled designed env
        shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
        shutil.copytree(EXAMPLES / "data", tmp_path / "data")
        project["project_dir"] = str(tmp_path)
    else:  # every family is in the default install (Box2D's LunarLander too)
        env_id = _runnable(env_id)
    cfg = validate({"env": env_id, "algo": algo, "seed": 1, **project})
    assert "provenance" not in cfg["hyperparameters"]
    assert cfg["algo"] == algo


def test_the_built_in_presets_are_read_once_and_shared_by_their_aliases() -> None:
    presets = builtin_presets()
    assert builtin_presets() is presets  # cached: one dict, mutable in place
    assert presets["Taxi-v4"] is presets["Taxi-v3"]  # Gymnasium 1.x's name
    assert "Taxi-v4" not in rlconfig.builtin_presets_text()
    # A provenance named in sources.json is that shared record, resolved.
    assert presets["CartPole-v1"]["A2C"]["provenance"]["source"] == "RL Zoo settings"


def _break(folder: Path, name: str, edit: str | Callable[[dict], object]) -> Path:
    """A copy of the bundled presets in ``folder`` with file ``name``'s JSON
    object changed by ``edit`` (or its text replaced, given a string)."""
    shutil.copytree(presets_folder(), folder)
    path = folder / name
    if isinstance(edit, str):
        path.write_text(edit)
    else:
        record = json.loads(path.read_text())
        edit(record)
        path.write_text(json.dumps(record))
    return path


@pytest.mark.parametrize(
    ("name", "edit", "problem"),
    [
        ("CartPole-v1.json", "{not json", "cannot be read"),
        ("CartPole-v1.json", "[]", "does not hold a JSON object"),
        ("CartPole-v1.json", lambda r: r.update(format=2), "'format' must be 1"),
        ("CartPole-v1.json", lambda r: r.update(env="Acrobot-v1"), "'env' must match"),
        ("Taxi-v3.json", lambda r: r.update(aliases="Taxi-v4"), "'aliases' must be"),
        ("Acrobot-v1.json", lambda r: r.update(presets={}), "'presets' must map"),
        (
            "Acrobot-v1.json",
            lambda r: r["presets"].update(PPO=[1]),
            "'presets.PPO' must be an object",
        ),
        (
            "Acrobot-v1.json",
            lambda r: r["presets"]["A2C"].update(provenance="rl-zo"),
            "'presets.A2C.provenance' names 'rl-zo', which sources.json does not",
        ),
        (
            "Acrobot-v1.json",
            lambda r: r["presets"]["A2C"].pop("provenance"),
            "'presets.A2C.provenance' must be a record",
        ),
        ("sources.json", lambda r: r.pop("sources"), "'sources' must map"),
    ],
)
def test_a_malformed_preset_file_is_one_sentence_naming_file_and_key(
    tmp_path: Path, name: str, edit: str | Callable[[dict], object], problem: str
) -> None:
    path = _break(tmp_path / "presets", name, edit)
    with pytest.raises(BundledPresetError) as caught:
        load_presets(path.parent)
    message = str(caught.value)
    assert message.startswith(f"The bundled preset file {path} ")
    assert problem in message
    assert message.endswith(".") and "\n" not in message


def test_two_files_for_one_env_are_refused(tmp_path: Path) -> None:
    path = _break(tmp_path / "presets", "Taxi-v3.json", lambda r: None)
    (path.parent / "Taxi-v4.json").write_text(
        json.dumps({"format": 1, "env": "Taxi-v4", "presets": {"PPO": {
            "provenance": "hand-set"}}})
    )  # fmt: skip
    with pytest.raises(BundledPresetError, match="'env' repeats 'Taxi-v4'"):
        load_presets(path.parent)


def test_the_preset_provenance_is_shown_in_the_form_and_the_help(tmp_path) -> None:
    from engine.rl.config import save_preset
    from engine.rl.schema import schema

    def note(values: dict) -> str:
        (field,) = [f for f in schema(values) if f["name"] == "preset"]
        return str(field["note"])

    assert note({"env": "Taxi-v3", "algo": "DQN"}) == (
        "The built-in preset for DQN on Taxi-v3: hand-set (not in RL Zoo's "
        "tables, not tuned)."
    )
    # Neither a bundled preset nor one from RL Zoo's files (tests/test_zoo_presets.py).
    assert note({"env": "Pusher-v5", "algo": "SAC"}).startswith(
        "There is no built-in preset for SAC on Pusher-v5"
    )
    save_preset(
        tmp_path, "mine", env="CartPole-v1", algo="PPO",
        settings={"n_epochs": 5},
        provenance={"study": "s1", "trials": 8, "steps_per_trial": 2000,
                    "date": "2026-11-24", "value": 3.25},
    )  # fmt: skip
    chosen = {"env": "CartPole-v1", "algo": "PPO", "project_dir": str(tmp_path)}
    assert note({**chosen, "preset": "mine"}) == (
        "The project preset 'mine': tuned by the sweep 's1', 8 trials of up to "
        "2,000 steps, on 2026-11-24; best value 3.25."
    )
    # A preset that cannot be read says so in one sentence, nothing else.
    assert note({**chosen, "preset": "gone"}).startswith(
        "The built-in preset for PPO on CartPole-v1"
    )
    assert rlconfig.preset_provenance("CartPole-v1", "PPO", tmp_path, "gone") == (
        f"There is no preset 'gone' in this project "
        f"({tmp_path / 'presets' / 'gone.preset.json'})."
    )
    import argparse

    parser = argparse.ArgumentParser()
    configure(parser)
    text = rlconfig.builtin_presets_text()
    assert text.startswith("Built-in presets: tuned here: ")  # in file-name order
    assert "PPO on CartPole-v1 (the sweep 'ppo-cartpole-" in text
    assert "".join(text.split()) in "".join(parser.format_help().split())


def test_the_settings_passed_to_sb3_and_the_compiled_program_by_name_exist() -> None:
    """The argument lists of ``model_kwargs`` and ``settings_of`` name real
    settings of every algorithm they are passed for (a typo would fail only
    when a run of that algorithm starts)."""
    from engine.rl import train
    from engine.rl.compiled import learner
    from engine.rl.config import (
        A2CConfig,
        ARSConfig,
        CrossQConfig,
        DQNConfig,
        MaskablePPOConfig,
        PPOConfig,
        QRDQNConfig,
        RecurrentPPOConfig,
        SACConfig,
        TD3Config,
        TQCConfig,
        TRPOConfig,
    )

    takers = {
        train.ON_POLICY_ARGS: (
            PPOConfig,
            MaskablePPOConfig,
            A2CConfig,
            RecurrentPPOConfig,
        ),
        train.OFF_POLICY_ARGS: (
            DQNConfig,
            SACConfig,
            TD3Config,
            QRDQNConfig,
            TQCConfig,
        ),
        train.DQN_ARGS: (DQNConfig, QRDQNConfig),
        train.TD3_ARGS: (TD3Config,),
        train.TRPO_ARGS: (TRPOConfig,),
        train.ARS_ARGS: (ARSConfig,),
        train.CROSSQ_ARGS: (CrossQConfig,),
        train.LSTM_POLICY_ARGS: (RecurrentPPOConfig,),
        train.CROSSQ_POLICY_ARGS: (CrossQConfig,),
        learner.SAME_NAMED_SETTINGS: (PPOConfig, MaskablePPOConfig),
    }
    for names, classes in takers.items():
        for cls in classes:
            assert set(names.split()) <= set(fields_of(cls)), (names, cls)
