"""The ``jax`` backend of ``rl.train``: compiled twins step exactly as their
Gymnasium envs, a compiled PPO run is an ordinary run (metrics with SB3's
keys, evaluation on the Gymnasium env, checkpoints, Stop and Resume, an SB3
``model.zip`` whose policy computes what the compiled one does), and
settings the backend lacks are one sentence naming them."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp

from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.rl import train as rltrain
from engine.rl.compiled import TWIN_IDS, ppo, sb3_file
from engine.rl.compiled.envs import compiled_env
from engine.rl.compiled.sb3 import copy_from_sb3
from engine.rl.config import validate
from engine.store.atomic import atomic_write_json
from engine.store.metrics import read_metrics

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

SB3_PPO_KEYS = {
    "rollout/ep_rew_mean",
    "rollout/ep_len_mean",
    "train/entropy_loss",
    "train/policy_gradient_loss",
    "train/value_loss",
    "train/approx_kl",
    "train/clip_fraction",
    "train/loss",
    "train/explained_variance",
    "train/learning_rate",
    "train/clip_range",
    "train/n_updates",
    "time/fps",
    "eval/mean_reward",
}
"""What an SB3 PPO run logs, which a compiled run logs too."""

SMALL = {
    "env": "CartPole-v1",
    "algo": "PPO",
    "backend": "jax",
    "n_envs": 4,
    "seed": 5,
    "eval_episodes": 2,
    "hyperparameters": {
        "n_steps": 128,
        "batch_size": 128,
        "n_epochs": 4,
        "learning_rate": 2.5e-3,
        "gamma": 0.98,
        "gae_lambda": 0.8,
    },
}


# ------------------------------------------------------------------ twins


@pytest.mark.parametrize("env_id", TWIN_IDS)
def test_every_twin_steps_as_its_gymnasium_env(env_id: str) -> None:
    """From the Gymnasium env's own state, one step of the twin gives the
    same observation, reward and ends, over 400 steps of random actions
    through resets and the time limit."""
    twin = compiled_env(env_id)
    assert twin is not None
    env = gym.make(env_id)
    env.action_space.seed(1)
    obs, _ = env.reset(seed=1)
    step = jax.jit(twin.step)
    t = 0
    for _ in range(400):
        physics = jnp.asarray(np.asarray(env.unwrapped.state, np.float32))
        assert np.allclose(np.asarray(twin.observe(physics)), obs, atol=1e-5)
        action = env.action_space.sample()
        jax_action = jnp.asarray(action, jnp.float32 if twin.continuous else jnp.int32)
        (_, t_next), j_obs, j_reward, j_term, j_trunc = step(
            (physics, jnp.int32(t)), jax_action, jax.random.PRNGKey(0)
        )
        obs, reward, terminated, truncated, _ = env.step(action)
        assert np.allclose(np.asarray(j_obs), obs, rtol=1e-4, atol=1e-4), env_id
        assert np.isclose(float(j_reward), reward, rtol=1e-4, atol=1e-4)
        assert bool(j_term) == terminated and bool(j_trunc) == truncated
        t = int(t_next)
        if terminated or truncated:
            obs, _ = env.reset()
            t = 0


@pytest.mark.parametrize("env_id", TWIN_IDS)
def test_twin_resets_draw_from_the_gymnasium_distribution(env_id: str) -> None:
    from scipy import stats

    twin = compiled_env(env_id)
    assert twin is not None
    draws = np.asarray(
        jax.vmap(twin.reset_physics)(jax.random.split(jax.random.PRNGKey(0), 4000))
    )
    env = gym.make(env_id)
    reference = []
    for seed in range(4000):
        env.reset(seed=seed)
        reference.append(np.asarray(env.unwrapped.state, np.float64))
    ref = np.asarray(reference)
    for dim in range(ref.shape[1]):
        if np.ptp(ref[:, dim]) == 0:  # MountainCar's velocity starts at 0
            assert np.all(draws[:, dim] == ref[0, dim])
            continue
        assert stats.ks_2samp(draws[:, dim], ref[:, dim]).pvalue > 1e-3, (env_id, dim)


def _grid_spec(rng: np.random.Generator, slip: float) -> dict[str, Any]:
    """A random grid spec: walls, traps, goals and cell rewards (some paid
    once) scattered over a grid of 3 to 7 rows and columns."""
    rows, cols = (int(x) for x in rng.integers(3, 8, 2))
    cells = [(r, c) for r in range(rows) for c in range(cols)]
    order = rng.permutation(len(cells))
    pick = [list(cells[i]) for i in order]
    n_walls = int(rng.integers(0, len(cells) // 4 + 1))
    return {
        "format": 1,
        "name": f"g{rows}x{cols}",
        "kind": "grid",
        "grid": {
            "size": [rows, cols],
            "start": pick[0],
            "goals": [pick[1]],
            "traps": [pick[2]],
            "walls": pick[3 : 3 + n_walls],
            "cell_rewards": [
                {"cell": pick[-1], "reward": 0.5, "once": True},
                {"cell": pick[-2], "reward": -0.2},
            ],
            "rewards": {
                "per_step": -0.01,
                "goal": 1.0,
                "trap": -1.0,
                "wall_bump": -0.05,
            },
            "slip": slip,
            "max_steps": int(rng.integers(5, 40)),
        },
    }


def _grid_physics(env: Any) -> Any:
    grid = env.unwrapped
    collected = np.zeros(grid.rows * grid.cols, np.int32)
    for r, c in grid.collected:
        collected[r * grid.cols + c] = 1
    pos = grid.pos[0] * grid.cols + grid.pos[1]
    return jnp.asarray(np.concatenate([[pos], collected]).astype(np.int32))


@pytest.mark.parametrize("seed", range(6))
def test_a_designed_grid_compiles_to_a_twin_that_steps_as_it_does(seed: int) -> None:
    """Random grid specs and the bundled maze without slip: from the env's
    own state, every step of the twin gives the same cell, reward and ends."""
    from engine.envs.registry import register_spec

    rng = np.random.default_rng(seed)
    if seed == 0:
        spec = json.loads((ROOT / "resources/examples/envs/maze.env.json").read_text())
        spec["grid"]["slip"] = 0.0
    else:
        spec = _grid_spec(rng, 0.0)
    env_id = register_spec(spec)
    twin = compiled_env(env_id)
    assert twin is not None and twin.obs_size == np.prod(spec["grid"]["size"])
    env = gym.make(env_id)
    env.reset(seed=seed)
    grid_steps_alike(twin, env, rng)


def grid_steps_alike(twin: Any, env: Any, rng: np.random.Generator) -> int:
    """300 random moves of a reset grid ``env``, the twin stepped from the
    env's own state each time: the same cell, reward and ends; returns the
    episodes that ended."""
    step = jax.jit(twin.step)
    t, ends = 0, 0
    for _ in range(300):
        action = int(rng.integers(4))
        (_, t_next), j_obs, j_reward, j_term, j_trunc = step(
            (_grid_physics(env), jnp.int32(t)), jnp.int32(action), jax.random.PRNGKey(t)
        )
        obs, reward, terminated, truncated, _ = env.step(action)
        assert int(np.argmax(np.asarray(j_obs))) == int(obs)
        assert np.isclose(float(j_reward), reward, atol=1e-5)
        assert (bool(j_term), bool(j_trunc)) == (terminated, truncated)
        t = int(t_next)
        if terminated or truncated:
            ends += 1
            env.reset()
            t = 0
    return ends


def test_a_slippery_grid_slips_as_often_and_as_far_as_its_env() -> None:
    """From one cell, 3,000 moves each: the cells reached are distributed
    alike (chi-square), slipping to either side of the intended move."""
    from scipy import stats

    from engine.envs.registry import register_spec

    spec = _grid_spec(np.random.default_rng(0), 0.3)
    spec["grid"].update(size=[5, 5], start=[2, 2], goals=[[0, 0]], traps=[[4, 4]],
                        walls=[], cell_rewards=[])  # fmt: skip
    env_id = register_spec(spec)
    twin = compiled_env(env_id)
    assert twin is not None
    env = gym.make(env_id)
    env.reset(seed=0)
    physics = _grid_physics(env)
    keys = jax.random.split(jax.random.PRNGKey(1), 3000)
    ends = jax.vmap(lambda k: twin.physics_step(physics, jnp.int32(1), k)[0][0])(keys)
    compiled_counts = np.bincount(np.asarray(ends), minlength=25)
    env_counts = np.zeros(25, int)
    for _ in range(3000):
        env.unwrapped.pos, env.unwrapped.steps = (2, 2), 0
        obs, *_ = env.step(1)
        env_counts[int(obs)] += 1
    seen = (compiled_counts + env_counts) > 0
    assert set(np.flatnonzero(seen)) == {7, 13, 17}  # right, or up / down
    table = np.stack([compiled_counts[seen], env_counts[seen]])
    assert stats.chi2_contingency(table).pvalue > 1e-3


# -------------------------------------------------------------- one run


def _run(project: Path, run_id: str, config: dict[str, Any], ctx_cls: type = JobContext,
         resume: bool = False) -> tuple[Path, dict[str, Any]]:  # fmt: skip
    run_dir = project / "runs" / run_id
    if not resume:
        cfg = validate(config)
        run_dir.mkdir(parents=True)
        atomic_write_json(
            run_dir / "config.json",
            {"run_id": run_id, "kind": "rl.train", "config": cfg},
        )
    else:
        cfg = json.loads((run_dir / "config.json").read_text())["config"]
    ctx = ctx_cls(run_id, run_dir, "rl.train", cfg, resume=resume, events=None)
    try:
        return run_dir, rltrain.run(ctx)
    finally:
        ctx.close()


class LoggedContext(JobContext):
    """Keeps its log lines (in the run's ``lines.txt``) for the test."""

    def log(self, text: str) -> None:
        with open(self.run_dir / "lines.txt", "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


class StopAtStep(LoggedContext):
    STOP_AT = 2048

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        if done >= self.STOP_AT:
            self.request_stop()


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    project = tmp_path_factory.mktemp("jaxproject")
    config = {**SMALL, "total_steps": 8192, "eval_every_steps": 4096}
    return _run(project, "j1", config, ctx_cls=LoggedContext)


def test_a_compiled_run_is_an_ordinary_run(
    jax_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = jax_run
    assert summary["total_steps"] == 8192 and summary["stopped_by"] == "steps"
    rows = read_metrics(run_dir / "metrics.jsonl")
    keys = {k for row in rows for k in row}
    assert keys >= SB3_PPO_KEYS, SB3_PPO_KEYS - keys
    assert "train/std" not in keys  # discrete actions, as SB3
    # one row per update, on SB3's step grid, and evaluation on its schedule
    update_steps = [r["step"] for r in rows if "train/loss" in r]
    assert update_steps == list(range(512, 8193, 512))
    assert [r["step"] for r in rows if "eval/mean_reward" in r] == [4096, 8192]
    log = (run_dir / "lines.txt").read_text()
    assert "backend jax, device cpu:0" in log and "jax backend on cpu" in log
    assert "compilation cache" in log
    # learning happened: CartPole returns grow well past random play (~22)
    returns = [r["rollout/ep_rew_mean"] for r in rows if "rollout/ep_rew_mean" in r]
    assert returns[-1] > 2 * returns[0]
    (model,) = summary["models"]
    assert Path(model["file"]).name == "model.zip"


def test_the_first_row_needs_no_sb3_model(
    jax_run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first update's row is written before torch and SB3 build the
    model (issue 27: a cached program's run shows a row at once)."""
    events: list[str] = []
    on_logged, build = rltrain.Trainer._on_logged, rltrain.Trainer._build

    def logged(self: rltrain.Trainer, step: int, values: dict[str, Any]) -> None:
        events.append("row")
        on_logged(self, step, values)

    def built(self: rltrain.Trainer) -> None:
        events.append("build")
        build(self)

    monkeypatch.setattr(rltrain.Trainer, "_on_logged", logged)
    monkeypatch.setattr(rltrain.Trainer, "_build", built)
    # no template of these settings (as for their first run), so SB3 builds
    monkeypatch.setattr(sb3_file, "templates_dir", lambda: tmp_path / "templates")
    config = {**SMALL, "total_steps": 1536, "eval_every_steps": 0}
    run_dir, summary = _run(tmp_path, "first", config)
    assert events == ["row", "build", "row", "row"]
    assert summary["total_steps"] == 1536
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows if "train/loss" in r] == [512, 1024, 1536]


def test_the_saved_model_is_sb3s_and_acts_as_the_compiled_policy(
    jax_run: tuple[Path, dict[str, Any]],
) -> None:
    from stable_baselines3 import PPO

    _, summary = jax_run
    model = PPO.load(summary["models"][0]["file"], device="cpu")
    twin = compiled_env("CartPole-v1")
    assert twin is not None
    s = ppo.Settings(**{**_settings_fields(), "net_arch": (64, 64)})
    like = ppo.init_params(jax.random.PRNGKey(0), twin, s)
    params, adam = copy_from_sb3(model, like)
    assert adam is not None and adam[2] > 0  # the Adam state was saved too
    obs = np.random.default_rng(0).uniform(-2, 2, (1000, 4)).astype(np.float32)
    actions, probs = ppo.policy_outputs(params, jnp.asarray(obs), "tanh", False)
    sb3_actions, _ = model.predict(obs, deterministic=True)
    assert np.array_equal(np.asarray(actions), sb3_actions)
    import torch

    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(obs))
        sb3_probs = dist.distribution.probs.numpy()
    assert np.abs(np.asarray(probs) - sb3_probs).max() < 1e-5


def test_runs_differing_in_continuous_settings_share_the_compiled_program(
    jax_run: tuple[Path, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The learning rate, clip range, entropy and value weights, gamma, GAE
    lambda, gradient clip, total steps and seed are values of the program,
    not part of it: a run differing in them in a new process loads it from
    the cache, and in the same process uses the one already compiled."""
    from engine.rl.compiled import learner

    hp = {**SMALL["hyperparameters"], "learning_rate": 1e-3, "gamma": 0.95,
          "gae_lambda": 0.9, "clip_range": 0.3, "ent_coef": 0.01}  # fmt: skip
    config = {**SMALL, "seed": 11, "total_steps": 4096, "eval_every_steps": 4096,
              "hyperparameters": hp}  # fmt: skip
    run_dir, summary = _run(tmp_path, "j3", config, ctx_cls=LoggedContext)
    assert summary["total_steps"] == 4096
    log = (run_dir / "lines.txt").read_text()
    assert "already compiled in this process" in log, log
    # as a new process would: nothing compiled in memory
    monkeypatch.setattr(learner, "_PROGRAMS", {})
    run_dir, _ = _run(tmp_path, "j4", {**config, "seed": 12}, ctx_cls=LoggedContext)
    log = (run_dir / "lines.txt").read_text()
    assert "loaded from the compilation cache" in log, log


def _settings_fields() -> dict[str, Any]:
    return {
        "n_envs": 4, "n_steps": 8, "batch_size": 8, "n_epochs": 1,
        "normalize_advantage": True, "net_arch": (64, 64), "activation": "tanh",
        "ortho_init": True, "log_std_init": 0.0, "learning_rate_linear": False,
        "clip_range_linear": False,
    }  # fmt: skip


def test_a_continuous_policy_maps_onto_sb3s_gaussian_policy() -> None:
    """Pendulum: SB3's means and log std read into the compiled policy give
    the same actions and log-probabilities."""
    import torch
    from stable_baselines3 import PPO

    model = PPO("MlpPolicy", "Pendulum-v1", seed=0, device="cpu",
                policy_kwargs={"net_arch": [32, 16], "log_std_init": -0.5})  # fmt: skip
    twin = compiled_env("Pendulum-v1")
    assert twin is not None
    s = ppo.Settings(**{**_settings_fields(), "net_arch": (32, 16)})
    params, _ = copy_from_sb3(model, ppo.init_params(jax.random.PRNGKey(0), twin, s))
    obs = np.random.default_rng(1).uniform(-1, 1, (200, 3)).astype(np.float32)
    means, _ = ppo.policy_outputs(params, jnp.asarray(obs), "tanh", True)
    actions = np.random.default_rng(2).uniform(-2, 2, (200, 1)).astype(np.float32)
    out, _ = ppo.forward(params, jnp.asarray(obs), "tanh")
    logp, _ = ppo.log_prob_entropy(params, out, jnp.asarray(actions), True)
    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(obs))
        sb3_means = dist.distribution.mean.numpy()
        sb3_logp = dist.log_prob(torch.as_tensor(actions)).numpy()
    assert np.abs(np.asarray(means) - sb3_means).max() < 1e-5
    assert np.abs(np.asarray(logp) - sb3_logp).max() < 1e-4


def test_stop_saves_a_checkpoint_and_resume_carries_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(rltrain, "PROGRESS_INTERVAL_S", 0.0)  # at every chunk
    config = {**SMALL, "total_steps": 6144, "eval_every_steps": 0,
              "checkpoint_every_steps": 1024}  # fmt: skip
    run_dir, first = _run(tmp_path, "j2", config, ctx_cls=StopAtStep)
    assert first["stopped_by"] == "user" and first["total_steps"] == 2048
    ckpt = run_dir / "checkpoints" / "step-0000002048"
    with zipfile.ZipFile(ckpt / "model.zip") as z:
        assert "policy.optimizer.pth" in z.namelist()
    _, summary = _run(tmp_path, "j2", {}, resume=True)
    assert summary["resumed_from"]["step"] == 2048
    assert summary["total_steps"] == 6144 and summary["stopped_by"] == "steps"
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if "train/loss" in r]
    assert [r["step"] for r in rows] == list(range(512, 6145, 512))
    # SB3's count of gradient epochs goes on across the resume (4 an update)
    assert [r["train/n_updates"] for r in rows] == list(range(4, 49, 4))


def test_stop_while_compiling_ends_the_run_without_waiting_for_xla() -> None:
    """Compiling takes seconds (tens on a busy machine): a Stop that comes
    meanwhile is seen within a tenth of a second, not after it."""
    import threading
    import time

    from engine.rl.compiled.learner import compile_unless_stopped

    release = threading.Event()

    def slow_build() -> str:
        release.wait(30)  # stands for XLA compiling
        return "program"

    class Stopped:
        should_stop = True

    class Going:
        should_stop = False

    t0 = time.perf_counter()
    assert compile_unless_stopped(slow_build, Stopped()) is None
    assert time.perf_counter() - t0 < 5
    release.set()
    assert compile_unless_stopped(slow_build, Going()) == "program"

    def broken() -> str:
        raise RuntimeError("XLA failed")

    with pytest.raises(RuntimeError, match="XLA failed"):
        compile_unless_stopped(broken, Going())


def test_a_stop_during_compilation_saves_a_checkpoint_at_step_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.rl.compiled import learner

    chunk_updates = learner.chunk_updates

    def stop_then_plan(cfg: dict[str, Any], rollout: int) -> int:
        contexts[0].request_stop()  # Stop pressed as compiling starts
        return chunk_updates(cfg, rollout)

    contexts: list[JobContext] = []

    class Remembered(LoggedContext):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            contexts.append(self)

    monkeypatch.setattr(learner, "chunk_updates", stop_then_plan)
    config = {**SMALL, "total_steps": 4096, "eval_every_steps": 0}
    run_dir, summary = _run(tmp_path, "j4", config, ctx_cls=Remembered)
    assert summary["stopped_by"] == "user" and summary["total_steps"] == 0
    assert (run_dir / "checkpoints" / "step-0000000000" / "model.zip").is_file()


# -------------------------------------------------------------- settings


@pytest.mark.parametrize(
    ("over", "field", "words"),
    [
        ({"algo": "DQN", "hyperparameters": {}}, "algo",
         "trains PPO and MaskablePPO only"),
        ({"env": "FrozenLake-v1"}, "env", "no compiled twin"),
        ({"env_kwargs": {"sutton_barto_reward": True}}, "env", "with env_kwargs"),
        ({"vec_normalize": True}, "vec_normalize", "does not support vec_normalize"),
        ({"hyperparameters": {**SMALL["hyperparameters"], "target_kl": 0.02}},
         "hyperparameters.target_kl", "does not support target_kl"),
        ({"hyperparameters": {**SMALL["hyperparameters"], "batch_size": 100}},
         "hyperparameters.batch_size", "to divide n_steps x n_envs (512)"),
    ],
)  # fmt: skip
def test_what_the_jax_backend_lacks_is_one_sentence_naming_it(
    over: dict[str, Any], field: str, words: str
) -> None:
    with pytest.raises(ConfigError) as info:
        validate({**SMALL, "total_steps": 10_000, **over})
    assert info.value.field == field and words in str(info.value)
    assert "\n" not in str(info.value)


def test_auto_compiles_long_ppo_runs_of_twinned_envs_and_says_why() -> None:
    base = {k: v for k, v in SMALL.items() if k != "backend"}
    short = validate({**base, "total_steps": 20_000})
    assert short["backend"] == "sb3"
    assert any("backend auto chose sb3: 20,000 steps" in n for n in short["notes"])
    long = validate({**base, "total_steps": 200_000})
    assert long["backend"] == "jax"
    assert "backend auto chose jax: CartPole-v1 and PPO compile" in long["notes"]
    dqn = validate(
        {**base, "algo": "DQN", "total_steps": 200_000, "hyperparameters": {}}
    )
    assert dqn["backend"] == "sb3"
    assert validate(long)["backend"] == "jax"  # validating again keeps it


def test_a_diverging_loss_is_one_sentence_and_keeps_the_last_finite_policy(
    tmp_path: Path,
) -> None:
    """A learning rate of 1e30 makes the first update's loss NaN: the run
    fails in one sentence naming the step and the setting to lower, and its
    last checkpoint holds the last finite weights (here the initial ones)."""
    from stable_baselines3 import PPO

    from engine.errors import EngineError

    hp = {**SMALL["hyperparameters"], "learning_rate": 1e30}
    config = {**SMALL, "total_steps": 4096, "eval_every_steps": 0,
              "checkpoint_every_steps": 1024, "hyperparameters": hp}  # fmt: skip
    with pytest.raises(EngineError) as info:
        _run(tmp_path, "nan", config, ctx_cls=LoggedContext)
    text = str(info.value)
    assert text.startswith("The loss became nan at step 512, so training stopped")
    assert "learning rate" in text and "\n" not in text
    (ckpt,) = (tmp_path / "runs/nan/checkpoints").glob("step-*/model.zip")
    model = PPO.load(ckpt, device="cpu")
    weights = [p.detach().numpy() for p in model.policy.parameters()]
    assert all(np.isfinite(w).all() for w in weights)
