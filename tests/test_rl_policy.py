"""The one policy loader (engine.rl.policy): normalization from the saved
``vecnormalize.pkl``, action masks, ONNX export of both, and SB3 zips whose
pickles would run code."""

from __future__ import annotations

import base64
import io
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.errors import EngineError
from engine.jobs.context import JobContext
from engine.rl.config import validate

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = 300


@pytest.fixture(scope="module")
def normalized_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Pendulum-v1 PPO trained a few hundred steps by the studio's own
    ``rl.train`` with ``vec_normalize=true``; the model file it registers."""
    from engine.rl.train import run

    project = tmp_path_factory.mktemp("project")
    cfg = validate(
        {
            "env": "Pendulum-v1",
            "algo": "PPO",
            "total_steps": 512,
            "seed": 0,
            "vec_normalize": True,
            "eval_every_steps": 0,
            "project_dir": str(project),
        }
    )
    run_dir = project / "runs" / "r1"
    ctx = JobContext("r1", run_dir, "rl.train", cfg, events=None)
    summary = run(ctx)
    ctx.close()
    (model,) = summary["models"]
    assert model["extra_files"] == [
        str(Path(model["file"]).with_name("vecnormalize.pkl"))
    ]
    return Path(model["file"])


def real_pipeline(zip_path: Path, obs: np.ndarray) -> np.ndarray:
    """What training's eval does: VecNormalize.load(...).normalize_obs, then
    the algorithm's predict."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    venv = VecNormalize.load(
        str(zip_path.with_name("vecnormalize.pkl")),
        DummyVecEnv([lambda: gym.make("Pendulum-v1")]),
    )
    model = PPO.load(zip_path, device="cpu")
    actions, _ = model.predict(venv.normalize_obs(obs), deterministic=True)
    return np.asarray(actions)


def random_observations(space: Any, seed: int) -> np.ndarray:
    space.seed(seed)
    return np.stack([space.sample() for _ in range(SAMPLES)]).astype(np.float32)


def test_loader_applies_the_saved_normalization(normalized_policy: Path) -> None:
    from engine.rl.policy import load_policy

    loaded = load_policy(normalized_policy, project_dir=normalized_policy.parents[3])
    assert loaded.normalization is not None and not loaded.masked
    assert loaded.notice is None  # inside the project
    obs = random_observations(loaded.observation_space, 7)
    want = real_pipeline(normalized_policy, obs)
    got, _ = loaded.predict(obs, deterministic=True)
    assert np.abs(got - want).max() < 1e-5
    # Without the statistics the actions are different: the check means something.
    raw, _ = loaded.policy.predict(obs, deterministic=True)
    assert np.abs(raw - want).max() > 1e-2


def test_onnx_bakes_normalization_in(normalized_policy: Path, tmp_path: Path) -> None:
    import onnxruntime as ort

    from engine.export.onnx_export import export_onnx

    out = tmp_path / "pendulum.onnx"
    report = export_onnx(normalized_policy, out, samples=SAMPLES)
    assert report.verified and report.normalized and report.samples == SAMPLES
    assert "observation normalization included" in report.summary()
    obs = random_observations(
        __import__("gymnasium").make("Pendulum-v1").observation_space, 11
    )
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    got = sess.run(["action"], {"observation": obs})[0]
    want = real_pipeline(normalized_policy, obs)
    assert got.shape == want.shape == (SAMPLES, 1)
    assert np.abs(got - want).max() < 1e-4


def test_models_play_job_normalizes_like_training(
    normalized_policy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Models → Play (an ``env_preview`` job with a model) acts on the
    normalized observation, as the policy did in training, and says that a
    policy from another folder came from outside the project."""
    from engine.jobs.registry import get_kind, validate_config

    project = tmp_path / "project"
    config = validate_config(
        "env_preview",
        {
            "spec": "Pendulum-v1",
            "episodes": 1,
            "trace_episodes": 1,
            "seed": 3,
            "model": str(normalized_policy),
        },
    )
    run_dir = project / "runs" / "play"
    ctx = JobContext("play", run_dir, "env_preview", config, events=None)
    get_kind("env_preview").entry(ctx)
    ctx.close()
    trace = json.loads((run_dir / "preview.json").read_text())["trace"]
    obs = np.asarray([row["observation"] for row in trace], dtype=np.float32)
    actions = np.asarray([row["action"] for row in trace], dtype=np.float32)
    assert len(trace) == 200
    assert np.abs(actions - real_pipeline(normalized_policy, obs)).max() < 1e-5
    assert "comes from outside the project" in capsys.readouterr().err  # ctx.log


@pytest.fixture(scope="module")
def maskable_policy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.env_util import make_vec_env

    from engine.rl.env_info import register_designed_envs

    register_designed_envs(ROOT / "resources" / "examples")
    env_id = "rlstudio/jira_issue_resolution-v0"
    model = MaskablePPO(
        "MlpPolicy", make_vec_env(env_id, n_envs=1, seed=0), n_steps=64, seed=0
    )
    model.learn(64)
    path = tmp_path_factory.mktemp("masked") / "model.zip"
    model.save(path)
    return path, env_id


def test_onnx_of_maskable_ppo_respects_the_mask(
    maskable_policy: tuple[Path, str], tmp_path: Path
) -> None:
    import onnxruntime as ort

    from engine.export.onnx_export import export_onnx
    from engine.rl.policy import load_policy

    path, _env = maskable_policy
    out = tmp_path / "masked.onnx"
    report = export_onnx(path, out, samples=SAMPLES)
    assert report.verified and report.action_mask_input and report.mismatches == 0
    loaded = load_policy(path)
    n = int(loaded.action_space.n)
    obs = random_observations(loaded.observation_space, 3)
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    assert [i.name for i in sess.get_inputs()] == ["observation", "action_mask"]
    rng = np.random.default_rng(0)
    only = rng.integers(0, n, SAMPLES)
    single = np.zeros((SAMPLES, n), dtype=bool)
    single[np.arange(SAMPLES), only] = True
    got = sess.run(["action"], {"observation": obs, "action_mask": single})[0]
    assert (got == only).all()  # the one valid action, whatever the network says
    masks = rng.random((SAMPLES, n)) < 0.4
    masks[:, 0] = True
    got = sess.run(["action"], {"observation": obs, "action_mask": masks})[0]
    assert masks[np.arange(SAMPLES), got].all()
    want, _ = loaded.predict(obs, deterministic=True, action_masks=masks)
    assert (got == want).all()


def test_evaluate_plays_a_masked_policy_with_the_envs_masks(
    maskable_policy: tuple[Path, str],
) -> None:
    from stable_baselines3.common.env_util import make_vec_env

    from engine.rl.policy import evaluate, load_policy

    path, env_id = maskable_policy
    loaded = load_policy(path)
    seen: list[tuple[int, float, int]] = []
    venv = make_vec_env(env_id, n_envs=1, seed=1)
    result = evaluate(
        loaded,
        venv,
        episodes=3,
        masked=loaded.masked,
        on_episode=lambda i, r, n: seen.append((i, r, n)),
    )
    assert len(result.rewards) == 3 and not result.stopped
    assert [i for i, _, _ in seen] == [0, 1, 2]
    assert [r for _, r, _ in seen] == result.rewards
    stopped = evaluate(loaded, venv, episodes=3, should_stop=lambda: True)
    assert stopped.stopped and stopped.rewards == []


# --------------------------------------------------------------------------
# Files from elsewhere
# --------------------------------------------------------------------------


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def _with_entry(src: Path, dst: Path, key: str, payload: bytes) -> None:
    """A copy of the zip ``src`` whose ``data[key]`` is the pickle ``payload``."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            body = zin.read(item.filename)
            if item.filename == "data":
                data = json.loads(body)
                data[key] = {
                    ":type:": "<class 'function'>",
                    ":serialized:": base64.b64encode(payload).decode(),
                }
                body = json.dumps(data).encode()
            zout.writestr(item, body)


@pytest.mark.parametrize("entry", ["lr_schedule", "clip_range", "policy_kwargs"])
def test_a_pickle_that_runs_code_never_runs(
    normalized_policy: Path, tmp_path: Path, entry: str
) -> None:
    """A foreign zip with ``os.system`` in a pickled entry: entries the policy
    does not need are never unpickled; one it needs is refused by name.
    Either way the marker file never appears."""
    from engine.export.onnx_export import export_onnx
    from engine.rl.policy import load_policy

    marker = tmp_path / "marker"
    evil = tmp_path / "downloads" / "model.zip"
    evil.parent.mkdir()
    _with_entry(normalized_policy, evil, entry, pickle.dumps(_RunsCode(marker)))
    project = normalized_policy.parents[3]
    if entry == "policy_kwargs":
        with pytest.raises(EngineError, match=r"refers to posix\.system.*none of its"):
            load_policy(evil, project_dir=project)
        with pytest.raises(EngineError, match=r"refers to posix\.system"):
            export_onnx(evil, tmp_path / "out.onnx")
        assert not (tmp_path / "out.onnx").exists()
    else:
        loaded = load_policy(evil, project_dir=project)
        assert loaded.outside_project
        assert loaded.notice is not None and "outside the project" in loaded.notice
        report = export_onnx(evil, tmp_path / "out.onnx", project_dir=project)
        assert report.verified and report.warnings == [loaded.notice]
    assert not marker.exists()


def test_weights_that_run_code_are_refused(
    normalized_policy: Path, tmp_path: Path
) -> None:
    """``policy.pth`` is read with ``weights_only``: a pickle in it that
    would call ``os.system`` is refused."""
    import torch

    from engine.rl.policy import load_policy

    marker = tmp_path / "marker"
    evil = tmp_path / "model.zip"
    with zipfile.ZipFile(normalized_policy) as zin, zipfile.ZipFile(evil, "w") as zout:
        for item in zin.infolist():
            body = zin.read(item.filename)
            if item.filename == "policy.pth":
                buffer = io.BytesIO()
                torch.save({"w": _RunsCode(marker)}, buffer)
                body = buffer.getvalue()
            zout.writestr(item, body)
    with pytest.raises(EngineError, match="is not a stable-baselines3 model zip"):
        load_policy(evil)
    assert not marker.exists()


def test_a_normalization_file_that_runs_code_is_refused(
    normalized_policy: Path, tmp_path: Path
) -> None:
    from engine.rl.policy import load_policy

    marker = tmp_path / "marker"
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "model.zip").write_bytes(normalized_policy.read_bytes())
    (folder / "vecnormalize.pkl").write_bytes(pickle.dumps(_RunsCode(marker)))
    with pytest.raises(EngineError, match=r"normalization file .* refers to posix"):
        load_policy(folder / "model.zip")
    assert not marker.exists()


def test_damaged_files_are_one_sentence(tmp_path: Path) -> None:
    from engine.rl.policy import load_policy

    with pytest.raises(EngineError, match=r"^The policy file .* does not exist\.$"):
        load_policy(tmp_path / "nope.zip")
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(EngineError, match="is not a stable-baselines3 model zip"):
        load_policy(bad)
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zf:
        zf.writestr("other", "x")
    with pytest.raises(EngineError, match="holds no stable-baselines3 policy"):
        load_policy(empty)


def test_safe_unpickler_builds_data_but_never_rewires_objects() -> None:
    """Spaces and arrays are rebuilt; a pickle that gives a rebuilt object
    another class (or sets its internals) is refused."""
    import gymnasium as gym

    from engine.rl.safe_pickle import UnsafePickle, loads

    space = gym.spaces.Box(-1.0, 1.0, (3,))
    space.seed(0)
    assert loads(pickle.dumps(space), "A space") == space

    # NEWOBJ Discrete, then BUILD {"__class__": 1}
    rewired = (
        b"\x80\x02cgymnasium.spaces.discrete\nDiscrete\n)\x81}"
        b"X\x09\x00\x00\x00__class__K\x01sb."
    )
    with pytest.raises(UnsafePickle, match="class or internals"):
        loads(rewired, "A space")


# --------------------------------------------------------------------------
# Training's evaluation: all episodes at once
# --------------------------------------------------------------------------


def test_eval_env_count_plays_every_episode_in_the_fewest_equal_rounds() -> None:
    from engine.rl.policy import EVAL_ENVS_MAX, eval_env_count

    for episodes in range(1, 3 * EVAL_ENVS_MAX + 2):
        envs = eval_env_count(episodes)
        rounds = -(-episodes // envs)
        assert 1 <= envs <= min(episodes, EVAL_ENVS_MAX)
        assert rounds == -(-episodes // EVAL_ENVS_MAX)  # no round more than needed
        # shares differ by at most one episode, and none is idle
        assert envs * (rounds - 1) < episodes <= envs * rounds
    assert eval_env_count(10) == 10  # the default: one episode per env copy


def test_vectorized_evaluation_equals_episodes_played_one_by_one() -> None:
    """Each episode of an evaluation over N env copies (make_vec_env, seeds
    s..s+N-1) is the episode one env plays from ``reset(seed=s+i)`` with the
    same deterministic policy, SB3's plain ``predict`` choosing each action;
    the policy and torch are left as evaluating found them."""
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from torch.distributions import Distribution

    from engine.rl.policy import eval_env_count, evaluate

    episodes, seed = 10, 1_000_003
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, seed=3, device="cpu")
    # a deterministic policy that neither always pushes one way nor balances
    with torch.no_grad():
        for weight in model.policy.action_net.parameters():
            weight.mul_(30.0)
    venv = make_vec_env("CartPole-v1", n_envs=eval_env_count(episodes), seed=seed)
    result = evaluate(model, venv, episodes=episodes, should_stop=lambda: False)
    assert "set_training_mode" not in vars(model.policy)
    assert not model.policy.training and Distribution._validate_args

    expected = []
    env = gym.make("CartPole-v1")
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(int(action))
            total += float(reward)
            done = terminated or truncated
        expected.append(total)
    assert len(set(expected)) > 1  # the episodes differ, so the check has teeth
    assert sorted(result.rewards) == sorted(expected)
    assert np.mean(result.rewards) == np.mean(expected)

    stopped = evaluate(model, venv, episodes=episodes, should_stop=lambda: True)
    assert stopped.stopped
    assert "set_training_mode" not in vars(model.policy)
    assert Distribution._validate_args


def _played(kind: str, venv_of: Any, model: Any, **kwargs: Any) -> list[Any]:
    """Two evaluations in a row (the second starts from the env state the
    first left), every episode reported, by the lean loop or by SB3."""
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from engine.rl.policy import evaluate

    venv = venv_of()
    if kind == "sb3":  # a DummyVecEnv of another type is left to SB3's loop
        inner = venv.venv if isinstance(venv, VecNormalize) else venv
        inner.__class__ = type("SB3Driven", (DummyVecEnv,), {})
    played: list[Any] = []
    for _ in range(2):
        seen: list[tuple[int, float, int]] = []

        def report(i: int, reward: float, length: int, seen: list[Any] = seen) -> None:
            seen.append((i, reward, length))

        result = evaluate(model, venv, on_episode=report, **kwargs)
        played.append((result.rewards, result.lengths, result.successes, seen))
    return played


def test_the_lean_evaluation_plays_what_sb3s_evaluate_policy_plays(
    normalized_policy: Path, maskable_policy: tuple[Path, str]
) -> None:
    """Same episodes, rewards, lengths, successes and reports, in the same
    order, over two evaluations in a row: uneven shares of episodes (an env
    that has played its share is stepped on, as SB3 does), a normalized
    continuous policy (VecNormalize, clipped actions) and a masked one."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    from engine.rl.policy import load_policy

    cartpole = PPO("MlpPolicy", "CartPole-v1", n_steps=64, seed=3, device="cpu")
    masked_path, masked_env = maskable_policy
    pendulum = PPO.load(normalized_policy, device="cpu")

    def normalized() -> Any:
        return VecNormalize.load(
            str(normalized_policy.with_name("vecnormalize.pkl")),
            make_vec_env("Pendulum-v1", n_envs=2, seed=7),
        )

    cases: list[tuple[Any, Any, dict[str, Any]]] = [
        (
            lambda: make_vec_env("CartPole-v1", n_envs=3, seed=11),
            cartpole,
            {"episodes": 7},
        ),
        (normalized, pendulum, {"episodes": 3}),
        (
            lambda: make_vec_env(masked_env, n_envs=4, seed=2),
            load_policy(masked_path),
            {"episodes": 6, "masked": True},
        ),
    ]
    for venv_of, model, kwargs in cases:
        lean = _played("lean", venv_of, model, **kwargs)
        reference = _played("sb3", venv_of, model, **kwargs)
        assert lean == reference
        assert len(lean[0][0]) == kwargs["episodes"] and lean[0][3]
