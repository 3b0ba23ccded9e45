"""sb3-contrib's algorithms in ``rl.train`` (RecurrentPPO, TQC, TRPO, QRDQN,
ARS, CrossQ): each trains a few hundred steps through the real job, its
saved policy loads through the one loader and plays an evaluation episode,
Play carries a recurrent policy's memory, ONNX exports the feed-forward ones
and refuses the recurrent one, and the forms, the Train node and sweeps
offer their settings."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind
from engine.rl.config import ALGO_CONFIGS, ALGO_FITS, fields_of, validate
from engine.rl.policy import evaluate, load_policy
from engine.settings import form_type
from engine.store.atomic import atomic_write_json

pytestmark = pytest.mark.slow

# algo -> (tiny settings that train in well under a second or two, n_envs)
CARTPOLE: dict[str, tuple[dict[str, Any], int]] = {
    "RecurrentPPO": (
        {"n_steps": 32, "batch_size": 64, "n_epochs": 1, "lstm_hidden_size": 16},
        2,
    ),
    "TRPO": ({"n_steps": 64, "batch_size": 64, "n_critic_updates": 1}, 2),
    "QRDQN": ({"learning_starts": 50, "n_quantiles": 10}, 1),
    "ARS": ({"n_delta": 2, "net_arch": []}, 1),  # RL Zoo's linear policy
}
PENDULUM: dict[str, tuple[dict[str, Any], int]] = {
    "TQC": (
        {
            "learning_starts": 50,
            "batch_size": 32,
            "net_arch": [32, 32],
            "n_quantiles": 5,
        },
        1,
    ),
    "CrossQ": (
        {
            "learning_starts": 50,
            "batch_size": 32,
            "net_arch": [32, 32],
            "critic_net_arch": [64, 64],
        },
        1,
    ),
}
ENV_OF = {
    **dict.fromkeys(CARTPOLE, "CartPole-v1"),
    **dict.fromkeys(PENDULUM, "Pendulum-v1"),
}


def _train(project: Path, env: str, algo: str, hp: dict[str, Any], n_envs: int) -> Path:
    """Run the ``rl.train`` job (its kind's entry, as the job process runs
    it) on a validated config; the final model's zip."""
    cfg = validate(
        {
            "env": env,
            "algo": algo,
            "total_steps": 300,
            "seed": 3,
            "n_envs": n_envs,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            "hyperparameters": hp,
        }
    )
    run_dir = project / "runs" / algo
    run_dir.mkdir(parents=True)
    atomic_write_json(
        run_dir / "config.json", {"run_id": algo, "kind": "rl.train", "config": cfg}
    )
    ctx = JobContext(algo, run_dir, "rl.train", cfg, resume=False, events=None)
    try:
        summary = dict(get_kind("rl.train").entry(ctx))
    finally:
        ctx.close()
    assert summary["algo"] == algo and summary["total_steps"] >= 300, summary
    zips = sorted(run_dir.rglob("model.zip"))
    assert zips, f"the {algo} run saved no model.zip"
    return zips[0]


@pytest.fixture(scope="module")
def cartpole_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    project = tmp_path_factory.mktemp("cartpole")
    return {
        a: _train(project, "CartPole-v1", a, hp, n) for a, (hp, n) in CARTPOLE.items()
    }


@pytest.fixture(scope="module")
def pendulum_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    project = tmp_path_factory.mktemp("pendulum")
    return {
        a: _train(project, "Pendulum-v1", a, hp, n) for a, (hp, n) in PENDULUM.items()
    }


@pytest.fixture
def model(
    request: pytest.FixtureRequest,
    cartpole_models: dict[str, Path],
    pendulum_models: dict[str, Path],
) -> tuple[str, Path]:
    algo = request.param
    return algo, {**cartpole_models, **pendulum_models}[algo]


ALGOS = [*CARTPOLE, *PENDULUM]


@pytest.mark.parametrize("model", ALGOS, indirect=True)
def test_a_trained_policy_loads_and_plays_an_evaluation_episode(
    model: tuple[str, Path],
) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    algo, path = model
    policy = load_policy(path)
    assert policy.recurrent == (algo == "RecurrentPPO")
    played = evaluate(policy, make_vec_env(ENV_OF[algo], n_envs=1, seed=5), episodes=1)
    assert len(played.rewards) == 1 and np.isfinite(played.rewards[0])
    assert played.lengths[0] >= 1
    # The studio reads which algorithm saved a zip without torch (Models).
    from studio.state.sb3_zip import read_sb3_zip

    assert read_sb3_zip(path).algo == algo


def test_play_carries_a_recurrent_policys_memory_and_forgets_it_per_episode(
    cartpole_models: dict[str, Path],
) -> None:
    from engine.envs.preview import PreviewConfig, preview

    policy = load_policy(cartpole_models["RecurrentPPO"])

    def played() -> list[Any]:
        """An episode's actions as Play (an ``env_preview`` job) takes them."""
        config = PreviewConfig(episodes=1, seed=11, trace_episodes=1)
        return [
            step["action"] for step in preview("CartPole-v1", config, policy)["trace"]
        ]

    actions = played()
    memory = policy._memory  # carried from step to step: (h, c) of the LSTM
    assert memory is not None
    # The same steps with the LSTM state threaded by hand through predict.
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=11)
    state, start, by_hand = None, np.array([True]), []
    for _ in actions:
        action, state = policy.predict(obs, state, start, deterministic=True)
        start = np.array([False])
        by_hand.append(int(action))
        obs, *_ = env.step(action)
    assert actions == by_hand
    np.testing.assert_allclose(np.stack(memory), np.stack(state))
    # The next episode starts from an empty memory, not the last one's: the
    # same actions and the same memory at its end.
    assert played() == actions
    np.testing.assert_allclose(np.stack(policy._memory), np.stack(memory))


@pytest.mark.parametrize(
    "model", ["TRPO", "QRDQN", "ARS", "TQC", "CrossQ"], indirect=True
)
def test_feed_forward_policies_export_to_onnx(
    model: tuple[str, Path], tmp_path: Path
) -> None:
    from engine.export.onnx_export import export_onnx

    report = export_onnx(model[1], tmp_path / "p.onnx", samples=8)
    assert report.verified and report.mismatches == 0


def test_a_recurrent_policy_is_refused_by_onnx_export_and_act_requests(
    cartpole_models: dict[str, Path], tmp_path: Path
) -> None:
    from engine.export.onnx_export import export_onnx
    from engine.rl.act_worker import act

    path = cartpole_models["RecurrentPPO"]
    out = tmp_path / "p.onnx"
    with pytest.raises(
        EngineError, match=r"^model\.zip holds a recurrent policy .*ONNX\.$"
    ):
        export_onnx(path, out)
    assert not out.exists()
    request = {"path": str(path), "observation": [0.0] * 4, "deterministic": True}
    with pytest.raises(EngineError, match=r"act requests do not carry"):
        act(request, {}, "")


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        (
            {"env": "CartPole-v1", "algo": "TQC"},
            "algo",
            "TQC needs a continuous action space (Box), but 'CartPole-v1' has a "
            "discrete one (Discrete); use PPO, A2C, DQN, RecurrentPPO, TRPO, QRDQN "
            "or ARS.",
        ),
        (
            {"env": "CartPole-v1", "algo": "CrossQ"},
            "algo",
            "CrossQ needs a continuous action space (Box)",
        ),
        (
            {"env": "Pendulum-v1", "algo": "qr-dqn"},
            "algo",
            "QRDQN needs a discrete action space (Discrete), but 'Pendulum-v1' has a "
            "continuous one (Box)",
        ),
        (
            {"env": "CartPole-v1", "algo": "ARS", "policy": "CnnPolicy"},
            "policy",
            "ARS trains MlpPolicy only, not CnnPolicy",
        ),
        (
            {"env": "Pendulum-v1", "algo": "TQC", "backend": "jax"},
            "algo",
            "The jax backend trains PPO and MaskablePPO only, not TQC; use "
            "backend sb3.",
        ),
        (
            {
                "env": "Pendulum-v1",
                "algo": "TQC",
                "hyperparameters": {"n_quantiles": 2},
            },
            "hyperparameters.top_quantiles_to_drop_per_net",
            "must be fewer than n_quantiles (2)",
        ),
        (
            {
                "env": "CartPole-v1",
                "algo": "RecurrentPPO",
                "hyperparameters": {"shared_lstm": True},
            },
            "hyperparameters.shared_lstm",
            "not both",
        ),
    ],
)
def test_an_algorithm_that_does_not_fit_is_one_sentence(
    config: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate(config)
    message = str(info.value)
    assert info.value.field == field and words in message, message
    assert message.endswith(".") and "\n" not in message


def test_every_algorithm_has_its_fit_and_auto_still_resolves() -> None:
    assert set(ALGO_FITS) == set(ALGO_CONFIGS)
    assert validate({"env": "Pendulum-v1"})["algo"] == "PPO"


def test_the_form_node_and_sweeps_offer_the_new_algorithms_settings() -> None:
    from engine.nodes.rl_nodes import HYPERPARAMETERS
    from engine.rl.config import preset_for
    from engine.rl.schema import schema
    from engine.rl.tune_space import default_space, parse_search
    from studio.state.env_preview import SB3_ALGOS

    assert tuple(ALGO_CONFIGS) == SB3_ALGOS  # the studio's copy of the list
    for algo in ALGOS:
        fields = {f["name"]: f for f in schema({"env": ENV_OF[algo], "algo": algo})}
        assert algo in fields["algo"]["choices"]
        for name, info in fields_of(ALGO_CONFIGS[algo]).items():
            assert name in HYPERPARAMETERS  # the Train node's parameters
            if form_type(info) is not None:  # (net_arch is the node's only)
                field = fields[f"hyperparameters.{name}"]
                # The form starts from the preset (RL Zoo's files cover most).
                preset = preset_for(ENV_OF[algo], algo)
                assert field["default"] == preset.get(name, info.default), (algo, name)
        assert default_space(algo), algo
    tqc = fields_of(ALGO_CONFIGS["TQC"])["n_quantiles"]
    assert tqc.default == 25  # sb3-contrib's TQC default
    [dim] = parse_search(["n_quantiles=10:50"], "TQC")
    assert (dim.name, dim.low, dim.high) == ("n_quantiles", 10, 50)
