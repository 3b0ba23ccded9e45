"""Curricula on the ``jax`` backend: each stage's twin (the designed env's
tables at that stage's difficulty) steps as the numpy env at that stage, on
every deterministic step and in law on drawn ones; a compiled run moves
through the stages on its evaluations as an SB3 run does, one program per
stage, and a resumed run continues at the stage it stood at."""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

import jax
from scipy import stats
from test_compiled_training import LoggedContext, _run, grid_steps_alike
from test_compiled_workflows import _draws_alike, _step_alike

from engine.envs.curriculum import STAGE_METRIC
from engine.envs.registry import register_spec
from engine.rl.compiled.envs import compiled_env
from engine.store.metrics import read_metrics

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"
PIPELINE_STAGE = {"max_task_difficulty": 2, "transition_noise": 0.3, "max_steps": 15}
MAZE_STAGE = {"size": [3, 3], "traps": False, "slip": 0.0, "max_steps": 12}


def test_a_workflow_stage_compiles_to_a_twin_that_steps_as_it_does() -> None:
    """The release pipeline with its hard issues rare, a step limit and
    transition noise (an outcome more for every valid tool): the same
    observations, masks, rewards and ends, drawn outcomes as often, and
    episodes starting on the same tasks as often."""
    env_id = register_spec(EXAMPLES / "envs" / "jira_release_pipeline.env.json")
    stage = compiled_env(env_id, difficulty=PIPELINE_STAGE)
    designed = compiled_env(env_id)
    assert stage is not None and designed is not None
    assert stage.identity != designed.identity  # a program of its own
    assert stage.max_episode_steps == 15
    assert _step_alike(env_id, seed=4, steps=300, difficulty=PIPELINE_STAGE) > 0
    assert _draws_alike(env_id, draws=1000, difficulty=PIPELINE_STAGE) > 3

    import gymnasium as gym

    env = gym.make(env_id)
    env.unwrapped.set_difficulty(PIPELINE_STAGE)
    u = env.unwrapped
    # the tasks drawn at reset: the twin's start statuses against the env's
    keys = jax.random.split(jax.random.PRNGKey(0), 2000)
    twin_start = np.asarray(jax.vmap(stage.reset)(keys)[0][:, 0])
    env_start = []
    for i in range(2000):
        env.reset(seed=20_000 + i)
        env_start.append(u._status)
    seen = sorted(set(twin_start) | set(env_start))
    table = np.array(
        [[np.sum(twin_start == s) for s in seen], [env_start.count(s) for s in seen]]
    )
    assert set(twin_start) == set(env_start)
    assert stats.chi2_contingency(table).pvalue > 1e-4, table


def test_a_grid_stage_compiles_to_a_twin_that_steps_as_it_does() -> None:
    """The maze shrunk to 3 x 3 around its goal, traps off, no slip and 12
    steps: from the env's own state, every step of the twin gives the same
    cell, reward and ends."""
    import gymnasium as gym

    env_id = register_spec(EXAMPLES / "envs" / "maze.env.json")
    twin = compiled_env(env_id, difficulty=MAZE_STAGE)
    assert twin is not None and twin.max_episode_steps == 12
    env = gym.make(env_id)
    env.unwrapped.set_difficulty(MAZE_STAGE)
    obs, _ = env.reset(seed=0)
    physics, _ = twin.reset(jax.random.PRNGKey(0))
    assert int(physics[0]) == int(obs)  # the start moved inside the area
    ends = grid_steps_alike(twin, env, np.random.default_rng(0))
    assert ends > 10  # episodes ended, at the goal and at the limit


def test_a_compiled_run_moves_through_the_stages_and_resumes_there(
    tmp_path: Path,
) -> None:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    config = {
        "env": "rlstudio/maze-v0",
        "algo": "PPO",
        "backend": "jax",
        "total_steps": 6144,
        "seed": 0,
        "n_envs": 4,
        "eval_every_steps": 1024,
        "eval_episodes": 10,
        "checkpoint_every_steps": 0,
        "project_dir": str(tmp_path),
        "hyperparameters": {"n_steps": 128, "batch_size": 128, "learning_rate": 3e-3},
        # two stages: each is a program (and an evaluation) compiled
        "curriculum": {"stages": [MAZE_STAGE, {}], "threshold": 0.8, "window": 10},
    }
    run_dir, summary = _run(tmp_path, "cur", config, ctx_cls=LoggedContext)
    rows = read_metrics(run_dir / "metrics.jsonl")
    stages = [r[STAGE_METRIC] for r in rows if STAGE_METRIC in r]
    assert stages[0] == 0 and max(stages) >= 1, stages
    assert all(b - a in (-1, 0, 1) for a, b in itertools.pairwise(stages))
    assert summary["curriculum"]["highest"] == max(stages)
    # every update row and every evaluation says the stage, as SB3 runs do
    assert all(STAGE_METRIC in r for r in rows if "train/loss" in r)
    assert all(STAGE_METRIC in r for r in rows if "eval/success_rate" in r)
    log = (run_dir / "lines.txt").read_text()
    assert "(curriculum stage 0) compiled" in log
    assert "(curriculum stage 1) compiled" in log
    assert "curriculum advanced to stage 1 of 1 at step " in log
    assert "at step 0" not in log
    reached = int(stages[-1])
    # resumed, it goes on at the stage it stood at, in that stage's twin
    cfg_file = run_dir / "config.json"
    saved = json.loads(cfg_file.read_text())
    saved["config"]["total_steps"] = 7168
    cfg_file.write_text(json.dumps(saved))
    _run(tmp_path, "cur", config, ctx_cls=LoggedContext, resume=True)
    later = [
        r for r in read_metrics(run_dir / "metrics.jsonl")
        if r["step"] > 6144 and STAGE_METRIC in r
    ]  # fmt: skip
    assert later and later[0][STAGE_METRIC] == reached
