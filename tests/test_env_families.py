"""Box2D, MuJoCo and Atari environments (engine.envs.families): each family
builds and draws headless, an Atari game trains with RL Zoo's wrappers and
CnnPolicy and plays back through the one policy loader, and a simulator that
fails to load or a missing ROM is one sentence."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from engine.envs import families
from engine.envs.preview import PreviewConfig, preview
from engine.envs.registry import catalog, describe_env, make
from engine.errors import ConfigError
from engine.rl.config import validate
from engine.rl.policy import load_policy

sys.path.insert(0, str(Path(__file__).parent))
from test_rl_train import make_run, run_in_process

ATARI = "PongNoFrameskip-v4"


@pytest.mark.parametrize(
    ("env_id", "family", "obs_shape"),
    [
        ("LunarLander-v3", families.BOX2D, (8,)),
        ("HalfCheetah-v5", families.MUJOCO, (17,)),
        (ATARI, families.ATARI, (84, 84, families.FRAME_STACK)),
        ("ALE/Pong-v5", families.ATARI, (84, 84, families.FRAME_STACK)),
        ("CartPole-v1", None, (4,)),
    ],
)
def test_each_family_builds_and_draws_headless(
    env_id: str, family: str | None, obs_shape: tuple[int, ...]
) -> None:
    assert families.family(env_id) == family
    if family != families.ATARI:  # a whole game: the next test plays one
        result = preview(env_id, PreviewConfig(episodes=1, frames=3))
        assert result["frames_note"] is None
    # Played as its policies see it: an Atari game's 84x84 grey frames,
    # stacked four deep, channels last (RL Zoo's AtariWrapper, frame stack 4).
    env = make(env_id)
    try:
        obs, _ = env.reset(seed=0)
        assert obs.shape == obs_shape == env.observation_space.shape
        if family == families.ATARI:
            assert obs.dtype == np.uint8
            assert not obs[..., :-1].any() and obs[..., -1].any()  # zeros first
            obs, *_ = env.step(0)
            assert obs[..., -2].any()  # the previous frame moved down the stack
    finally:
        env.close()


def test_the_catalog_names_each_family_and_an_atari_trace_names_its_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    make("Ant-v5").close()  # its model warns of a deprecated attribute
    assert not (tmp_path / "MUJOCO_LOG.TXT").exists()  # MuJoCo's warnings: logged
    by_id = {e["id"]: e for e in catalog()}
    assert by_id[ATARI]["family"] == families.ATARI
    assert by_id["Ant-v5"]["family"] == families.MUJOCO
    assert by_id["BipedalWalker-v3"]["family"] == families.BOX2D
    # Each env's parameters for the designer's form, read from its class.
    for env_id, parameter in [
        ("HalfCheetah-v5", "forward_reward_weight"),
        ("LunarLander-v3", "gravity"),
        (ATARI, "repeat_action_probability"),
    ]:
        described = describe_env(env_id)
        assert "error" not in described, described
        assert parameter in {p["name"] for p in described["parameters"]}
    # The spaces a policy for it has: an Atari game's agent sees frames stacked.
    assert describe_env(ATARI)["observation_space"] == "Box(0, 255, (84, 84, 4), uint8)"
    frames = tmp_path / "frames.npz"
    result = preview(
        ATARI,
        PreviewConfig(episodes=1, frames=4, max_trace_steps=5),
        frames_path=frames,
    )
    # Play's frames are the game's own colour screen, not the agent's input.
    saved = np.load(frames)
    assert saved["frames"].shape == (4, 210, 160, 3)
    assert result["observation_space"] == "Box(0, 255, (84, 84, 4), uint8)"
    assert [r["observation"] for r in result["trace"]] == ["uint8 84x84x4"] * 5
    # The agent's input is saved beside it, one observation a frame, as the
    # wrapper stacks them.
    assert result["observation_frames"] == {
        "key": "observations",
        "stack": families.FRAME_STACK,
        "channels": 1,
        "text": "stack of 4 grey frames, oldest first",
    }
    seen = saved["observations"]
    assert seen.shape == (4, 84, 84, 4) and seen.dtype == np.uint8
    assert f"{seen.dtype} {'x'.join(map(str, seen.shape[1:]))}" == "uint8 84x84x4"
    # The reset's stack is one frame after zeros; each step shifts the stack
    # by a frame, the oldest out and the new one last.
    assert not seen[0, ..., :-1].any() and seen[0, ..., -1].any()
    for k in range(3):
        assert np.array_equal(seen[k + 1, ..., :-1], seen[k, ..., 1:])


@pytest.mark.slow
def test_ppo_with_cnn_policy_trains_on_an_atari_game_and_plays_back(
    tmp_path: Path,
) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "pong",
        {
            "env": ATARI,
            "algo": "PPO",
            "seed": 1,
            "total_steps": 64,
            "n_envs": 2,
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            "hyperparameters": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
        },
    )
    assert cfg["policy"] == "CnnPolicy"
    summary = run_in_process(run_dir, cfg)
    assert summary["total_steps"] == 64
    model = Path(summary["models"][0]["file"])
    policy = load_policy(model)
    # SB3 trained on the frames transposed to channels first.
    assert policy.observation_space.shape == (families.FRAME_STACK, 84, 84)
    env = make(ATARI)
    try:
        policy.check_env(env, ATARI)  # channels last is the same image
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            action = policy.act(obs, env)
            assert env.action_space.contains(int(action))
            obs, *_ = env.step(action)
    finally:
        env.close()


def test_vec_env_auto_takes_subprocesses_for_slow_simulators_with_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert families.vec_env_class("auto", "HalfCheetah-v5", 8)[0] == "subproc"
    assert families.vec_env_class("auto", "LunarLander-v3", 8)[0] == "subproc"
    assert families.vec_env_class("auto", ATARI, 8)[0] == "dummy"
    assert families.vec_env_class("auto", "LunarLander-v3", 1)[0] == "dummy"
    assert families.vec_env_class("dummy", "HalfCheetah-v5", 8)[0] == "dummy"
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    kind, why = families.vec_env_class("auto", "HalfCheetah-v5", 8)
    assert (kind, why) == ("dummy", "2 CPUs, subprocesses from 4")


@pytest.mark.slow
def test_subprocess_envs_train_and_the_log_says_so(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run_dir, cfg = make_run(
        tmp_path,
        "lander",
        {
            "env": "LunarLander-v3",
            "algo": "PPO",
            "seed": 1,
            "total_steps": 64,
            "n_envs": 2,
            "vec_env": "subproc",
            "eval_every_steps": 0,
            "checkpoint_every_steps": 0,
            "hyperparameters": {"n_steps": 32, "batch_size": 32, "n_epochs": 1},
        },
    )
    assert run_in_process(run_dir, cfg)["total_steps"] == 64
    # JobContext.log writes the run log's lines to stderr.
    assert "env copies: 2 in subproc vectorized envs (as set)" in capfd.readouterr().err


def test_a_missing_rom_and_a_simulator_that_fails_to_load_are_one_sentence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gym.register(
        id="RLStudioTestNoRom-v0",
        entry_point="ale_py.env:AtariEnv",
        kwargs={"game": "no_such_game"},
    )
    try:
        with pytest.raises(ConfigError) as rom:
            validate({"env": "RLStudioTestNoRom-v0"})
        assert str(rom.value) == (
            "Environment 'RLStudioTestNoRom-v0' has no ROM: ale-py holds none for "
            f"the game 'no_such_game' (it bundles {_rom_count()} games' ROMs)."
        )
        assert rom.value.field == "env"
    finally:
        gym.registry.pop("RLStudioTestNoRom-v0")
    # A simulator whose library cannot load (a broken binary reads the same).
    monkeypatch.setitem(
        families.SIMULATORS,
        families.MUJOCO,
        ("rlstudio_no_such_mujoco", "the MuJoCo simulator (mujoco 3.x)"),
    )
    with pytest.raises(ConfigError) as sim:
        validate({"env": "Hopper-v5"})
    assert str(sim.value) == (
        "Environment 'Hopper-v5' needs the MuJoCo simulator (mujoco 3.x), which "
        "failed to load (ModuleNotFoundError: No module named "
        "'rlstudio_no_such_mujoco')."
    )
    assert "\n" not in str(sim.value)


def _rom_count() -> int:
    from ale_py import roms

    return len(roms.get_all_rom_ids())
