"""Designed workflow envs on the ``jax`` backend: the compiled twin steps as
the numpy env on every deterministic step (observations, rewards, masks and
ends identical) and draws stochastic transitions as often (chi-square), for
every bundled workflow and random specs; MaskablePPO compiles with the masks
applied to the logits, and its ``model.zip`` is sb3-contrib's, acting as the
compiled policy does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

pytest.importorskip("jax")

import jax
import jax.numpy as jnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from test_compiled_training import SB3_PPO_KEYS, LoggedContext, _run
from test_envs_property import _valid_doc, workflow_docs

from engine.envs.registry import register_spec
from engine.rl.compiled import ppo
from engine.rl.compiled.envs import CompiledEnv, compiled_env
from engine.rl.compiled.sb3 import copy_from_sb3
from engine.rl.presets import builtin_presets
from engine.store.metrics import read_metrics

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted(
    p.name
    for p in (ROOT / "resources/examples/envs").glob("*.env.json")
    if json.loads(p.read_text())["kind"] == "workflow"
)
PIPELINE = "jira_release_pipeline.env.json"


def _physics(env: Any) -> Any:
    """The twin's physics of a WorkflowEnv's current state."""
    u = env.unwrapped
    return jnp.asarray(
        [u._status, u._target, u._last_tool, u._valid, u._resolved, u._done, u._steps],
        jnp.int32,
    )


def _twin(env_id: str, difficulty: dict[str, Any] | None = None) -> CompiledEnv:
    twin = compiled_env(env_id, difficulty=difficulty)
    assert twin is not None and twin.action_mask is not None
    return twin


def _env(env_id: str, difficulty: dict[str, Any] | None) -> Any:
    env = gym.make(env_id)
    env.unwrapped.set_difficulty(difficulty)
    return env


def _step_alike(
    env_id: str,
    seed: int,
    steps: int,
    jit: bool = True,
    difficulty: dict[str, Any] | None = None,
) -> int:
    """Drive the numpy env (at ``difficulty``, a curriculum stage) with random
    tools and compare the twin's step from the same state; returns the
    stochastic steps seen (compared in law by :func:`_draws_alike`, not step
    by step)."""
    twin = _twin(env_id, difficulty)
    step, observe, mask = twin.step, twin.observe, twin.action_mask
    assert mask is not None
    if jit:
        step, observe, mask = jax.jit(step), jax.jit(observe), jax.jit(mask)
    env = _env(env_id, difficulty)
    u = env.unwrapped
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    stochastic = 0
    for i in range(steps):
        physics = _physics(env)
        assert np.array_equal(np.asarray(observe(physics)), obs), (env_id, i)
        assert np.array_equal(np.asarray(mask(physics)), u.action_masks()), (env_id, i)
        a = int(rng.integers(u.model.n_tools))
        drawn = len(u.model.outcomes[u._status][a]) > 1
        (_, _), j_obs, j_reward, j_term, j_trunc = step(
            (physics, jnp.int32(u._steps)), jnp.int32(a), jax.random.PRNGKey(i)
        )
        obs, reward, terminated, truncated, _ = env.step(a)
        if drawn:
            stochastic += 1
        else:
            assert np.array_equal(np.asarray(j_obs), obs), (env_id, i)
            assert float(j_reward) == pytest.approx(reward, abs=1e-6), (env_id, i)
            assert (bool(j_term), bool(j_trunc)) == (terminated, truncated)
        if terminated or truncated:
            obs, _ = env.reset()
    return stochastic


def _draws_alike(
    env_id: str, draws: int = 2000, difficulty: dict[str, Any] | None = None
) -> int:
    """From every (status, tool) with several outcomes, ``draws`` steps of the
    twin and of the numpy env reach the next statuses alike (chi-square);
    returns the pairs compared."""
    twin = _twin(env_id, difficulty)
    env = _env(env_id, difficulty)
    env.reset(seed=0)
    u, m = env.unwrapped, env.unwrapped.model
    pairs = 0
    for s in range(m.n_statuses):
        for a in range(m.n_tools):
            if len(m.outcomes[s][a]) < 2:
                continue
            pairs += 1
            u._status, u._target, u._steps = s, -1, 0
            physics = _physics(env)
            keys = jax.random.split(jax.random.PRNGKey(s * 97 + a), draws)
            nxt = jax.vmap(lambda k, p=physics, a=a: twin.physics_step(p, a, k)[0][0])(
                keys
            )
            compiled = np.bincount(np.asarray(nxt), minlength=m.n_statuses)
            numpy_counts = np.zeros(m.n_statuses, int)
            for _ in range(draws):
                u._status, u._target, u._steps = s, -1, 0
                env.step(a)
                numpy_counts[u._status] += 1
            seen = (compiled + numpy_counts) > 0
            assert set(np.flatnonzero(compiled)) == set(np.flatnonzero(numpy_counts))
            table = np.stack([compiled[seen], numpy_counts[seen]])
            assert stats.chi2_contingency(table).pvalue > 1e-4, (env_id, s, a, table)
    return pairs


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_workflow_compiles_to_a_twin_that_steps_as_it_does(
    name: str,
) -> None:
    env_id = register_spec(ROOT / "resources/examples/envs" / name)
    _step_alike(env_id, seed=3, steps=400)
    _draws_alike(env_id)


def test_the_pipelines_review_and_qa_send_backs_are_drawn_as_often() -> None:
    env_id = register_spec(ROOT / "resources/examples/envs" / PIPELINE)
    assert _draws_alike(env_id) >= 3  # review, QA and the customer


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow],
)
@given(doc=workflow_docs(), seed=st.integers(0, 2**16))
def test_random_workflow_specs_compile_to_twins_that_step_as_they_do(
    doc: dict[str, Any], seed: int
) -> None:
    """Random statuses, tools, wildcards, probabilities, rewards by rule and
    both status modes: eager steps (no compiling per example) match."""
    if not _valid_doc(doc):
        return
    env_id = register_spec(doc)
    _step_alike(env_id, seed=seed, steps=40, jit=False)


def test_a_random_stochastic_spec_draws_its_outcomes_as_often() -> None:
    doc = {
        "format": 1,
        "name": "coin",
        "kind": "workflow",
        "workflow": {
            "statuses": ["a", "b", "c", "d"],
            "tools": [{"name": "flip"}, {"name": "roll"}],
            "transitions": [
                {"from": "a", "tool": "flip", "to": "b", "probability": 0.3},
                {"from": "a", "tool": "flip", "to": "c"},
                {"from": "*", "tool": "roll", "to": "a", "probability": 0.1},
                {"from": "*", "tool": "roll", "to": "b", "probability": 0.6},
                {"from": "*", "tool": "roll", "to": "d"},
            ],
            "start": "a",
            "terminal": ["d"],
        },
    }
    assert _draws_alike(register_spec(doc)) == 4  # flip from a, roll from a-c


# ------------------------------------------------------------ MaskablePPO


def _pipeline_config(total_steps: int) -> dict[str, Any]:
    env_id = register_spec(ROOT / "resources/examples/envs" / PIPELINE)
    preset = dict(builtin_presets()[env_id]["MaskablePPO"])
    preset.pop("provenance")
    hp = {
        k: preset.pop(k) for k in ("n_steps", "batch_size", "n_epochs", "learning_rate")
    }
    return {**preset, "env": env_id, "algo": "MaskablePPO", "backend": "jax",
            "seed": 0, "total_steps": total_steps, "eval_episodes": 10,
            "hyperparameters": hp}  # fmt: skip


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    project = tmp_path_factory.mktemp("pipeline")
    return _run(project, "m1", _pipeline_config(16_384), ctx_cls=LoggedContext)


def test_maskable_ppo_compiles_and_learns_the_release_pipeline(
    pipeline_run: tuple[Path, dict[str, Any]],
) -> None:
    run_dir, summary = pipeline_run
    assert summary["stopped_by"] == "steps"
    rows = read_metrics(run_dir / "metrics.jsonl")
    keys = {k for row in rows for k in row}
    assert keys >= SB3_PPO_KEYS | {"eval/success_rate"}, SB3_PPO_KEYS - keys
    evals = [r for r in rows if "eval/mean_reward" in r]
    # evaluated where an SB3 run would: the first rollout at or past each
    # 2,000 steps (rollouts of 128)
    assert [r["step"] for r in evals][:3] == [2048, 4096, 6016]
    # the preset's target, 0.8 (9 of 10 issues finished), is reached
    assert max(r["eval/mean_reward"] for r in evals) >= 0.8
    assert max(r["eval/success_rate"] for r in evals) >= 0.9
    log = (run_dir / "lines.txt").read_text()
    assert "backend jax" in log and "compiled as one program" in log


def test_the_masked_model_is_sb3_contribs_and_acts_as_the_compiled_policy(
    pipeline_run: tuple[Path, dict[str, Any]],
) -> None:
    import torch
    from sb3_contrib import MaskablePPO

    _, summary = pipeline_run
    model = MaskablePPO.load(summary["models"][0]["file"], device="cpu")
    twin = _twin(register_spec(ROOT / "resources/examples/envs" / PIPELINE))
    s = ppo.Settings(n_envs=4, n_steps=32, batch_size=128, n_epochs=2,
                     normalize_advantage=True, net_arch=(64, 64), activation="tanh",
                     ortho_init=True, log_std_init=0.0, learning_rate_linear=False,
                     clip_range_linear=False, masked=True)  # fmt: skip
    params, _ = copy_from_sb3(model, ppo.init_params(jax.random.PRNGKey(0), twin, s))
    rng = np.random.default_rng(0)
    obs = rng.uniform(0, 1, (1000, twin.obs_size)).astype(np.float32)
    masks = rng.uniform(size=(1000, twin.n_actions)) < 0.4
    masks[np.arange(1000), rng.integers(twin.n_actions, size=1000)] = True
    actions, probs = ppo.policy_outputs(
        params, jnp.asarray(obs), "tanh", False, jnp.asarray(masks)
    )
    sb3_actions, _ = model.predict(obs, deterministic=True, action_masks=masks)
    assert np.array_equal(np.asarray(actions), sb3_actions)
    assert masks[np.arange(1000), sb3_actions].all()
    with torch.no_grad():
        dist = model.policy.get_distribution(torch.as_tensor(obs), action_masks=masks)
        sb3_probs = dist.distribution.probs.numpy()
    assert np.abs(np.asarray(probs) - sb3_probs).max() < 1e-5


def test_masked_rollouts_never_take_a_masked_tool() -> None:
    env_id = register_spec(ROOT / "resources/examples/envs" / PIPELINE)
    twin = _twin(env_id)
    s = ppo.Settings(n_envs=8, n_steps=64, batch_size=512, n_epochs=1,
                     normalize_advantage=True, net_arch=(16,), activation="tanh",
                     ortho_init=True, log_std_init=0.0, learning_rate_linear=False,
                     clip_range_linear=False, masked=True)  # fmt: skip
    h = ppo.hyper(learning_rate=1e-3, clip_range=0.2, ent_coef=0.0, vf_coef=0.5,
                  gamma=0.99, gae_lambda=0.95, max_grad_norm=0.5,
                  total_steps=1e5)  # fmt: skip
    state = ppo.init_state(twin, s, 0)
    _, batch = jax.jit(lambda st: ppo._rollout(twin, s, h, st))(state)
    mask, action = np.asarray(batch["mask"]), np.asarray(batch["action"])
    assert mask[..., :].shape == (64, 8, twin.n_actions)
    assert np.take_along_axis(mask, action[..., None], -1).all()
    # masks are not all-true: the test would pass without masking otherwise
    assert not mask.all()


def test_compiled_evaluation_plays_as_sb3_evaluates_on_the_numpy_env(
    pipeline_run: tuple[Path, dict[str, Any]],
) -> None:
    """The trained policy's mean return over 300 episodes: compiled twin
    against sb3-contrib's evaluation on the Gymnasium env (Welch's t-test;
    the tasks drawn differ, their law does not)."""
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.evaluation import evaluate_policy
    from stable_baselines3.common.env_util import make_vec_env

    _, summary = pipeline_run
    model = MaskablePPO.load(summary["models"][0]["file"], device="cpu")
    env_id = register_spec(ROOT / "resources/examples/envs" / PIPELINE)
    twin = _twin(env_id)
    s = ppo.Settings(n_envs=4, n_steps=32, batch_size=128, n_epochs=2,
                     normalize_advantage=True, net_arch=(64, 64), activation="tanh",
                     ortho_init=True, log_std_init=0.0, learning_rate_linear=False,
                     clip_range_linear=False, masked=True)  # fmt: skip
    params, _ = copy_from_sb3(model, ppo.init_params(jax.random.PRNGKey(0), twin, s))
    evaluate = ppo.make_evaluate(twin, s, 300, deterministic=True)
    returns, lengths, won = (
        np.asarray(x) for x in evaluate(params, jax.random.PRNGKey(1))
    )
    venv = make_vec_env(env_id, n_envs=1, seed=7)
    sb3_returns, sb3_lengths = evaluate_policy(
        model,
        venv,
        n_eval_episodes=300,
        deterministic=True,
        return_episode_rewards=True,
    )
    assert stats.ttest_ind(returns, sb3_returns, equal_var=False).pvalue > 1e-3
    assert abs(np.mean(lengths) - np.mean(sb3_lengths)) < 1.0
    # a success is a return of 1 less the step costs: both say the same
    assert np.array_equal(won, returns > 0)
