"""Difficulty of designed envs and curricula over it: the settings and their
bad input, the schedule's rules, what each difficulty does to the Jira and
maze envs, a real SB3 run that advances stages (and resumes at its stage),
language-model rollouts that advance, and the dashboard's grouping."""

from __future__ import annotations

import itertools
import json
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.envs.curriculum import (
    STAGE_METRIC,
    Schedule,
    check_curriculum,
)
from engine.envs.grid import GridEnv
from engine.envs.spec import load_spec
from engine.envs.workflow_env import WorkflowEnv, WorkflowVectorEnv
from engine.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"
RESOLUTION = EXAMPLES / "envs" / "jira_issue_resolution.env.json"
MAZE = EXAMPLES / "envs" / "maze.env.json"
PIPELINE = EXAMPLES / "envs" / "jira_release_pipeline.env.json"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    return tmp_path


def difficulties(env: WorkflowEnv) -> dict[str, int]:
    """Each task's difficulty by its id."""
    m = env.model
    return {t.id: d for t, d in zip(m.tasks, m.task_difficulty, strict=True)}


def schedule(**cfg: Any) -> Schedule:
    base: dict[str, Any] = {"stages": [{}, {}, {}], "threshold": 0.8, "window": 4}
    return Schedule(check_curriculum({**base, **cfg}, "workflow"))


# ------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("value", "field", "words"),
    [
        ({"stages": []}, "curriculum.stages", "stage range is empty"),
        ({}, "curriculum.stages", "stage range is empty"),
        ({"stages": [{}], "threshold": 1.5}, "curriculum.threshold", "at most 1"),
        ({"stages": [{}], "threshold": -0.1}, "curriculum.threshold", "at least 0"),
        (
            {"stages": [{}], "threshold": 0.5, "back_threshold": 0.6},
            "curriculum.back_threshold",
            "must be below threshold",
        ),
        ({"stages": [{}], "back_threshold": 2}, "curriculum.back_threshold", "at most"),
        ({"stages": [{}], "window": 0}, "curriculum.window", "at least 1"),
        ({"stages": [{}], "start_stage": 1}, "curriculum.start_stage", "0 to 0"),
        ({"stages": [{"size": [3, 3]}]}, "curriculum.stages[0].size", "not a"),
        (
            {"stages": [{"transition_noise": 1}]},
            "curriculum.stages[0].transition_noise",
            "less than 1",
        ),
        ({"stages": [{"max_steps": 0}]}, "curriculum.stages[0].max_steps", "at least"),
        ({"stages": "easy"}, "curriculum.stages", "stage range is empty"),
        ({"stages": [{}], "speed": 2}, "curriculum.speed", "not a curriculum setting"),
        ([{}], "curriculum", "an object"),
    ],
)
def test_bad_curricula_are_one_sentence(value: Any, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_curriculum(value, "workflow")
    message = str(exc.value)
    assert exc.value.field == field, message
    assert words in message, message
    assert message.endswith(".") and ". " not in message.rstrip(".")


def test_a_stage_the_env_cannot_play_is_refused_at_validation(project: Path) -> None:
    from engine.rl.config import validate

    base = {
        "env": "rlstudio/jira_issue_resolution-v0",
        "project_dir": str(project),
        "total_steps": 1000,
    }
    with pytest.raises(ConfigError) as exc:
        validate({**base, "curriculum": {"stages": [{"max_task_difficulty": 0}, {}]}})
    assert exc.value.field == "curriculum.stages[0].max_task_difficulty"
    assert str(exc.value) == (
        "No task of jira_issue_resolution is within max_task_difficulty 0: the "
        "easiest takes 1 steps."
    )
    with pytest.raises(ConfigError) as exc:
        validate({**base, "eval_every_steps": 0, "curriculum": {"stages": [{}]}})
    assert exc.value.field == "eval_every_steps"
    with pytest.raises(ConfigError) as exc:
        validate({"env": "CartPole-v1", "curriculum": {"stages": [{}]}})
    assert str(exc.value) == (
        "CartPole-v1 has no difficulty settings; a curriculum needs a designed "
        "workflow or grid env."
    )
    with pytest.raises(ConfigError) as exc:
        validate(
            {
                **base,
                "env": "rlstudio/maze-v0",
                "curriculum": {"stages": [{"size": [1, 1]}]},
            }
        )
    assert exc.value.field == "curriculum.stages[0].size"
    assert "has no free cell to start from" in str(exc.value)


# ------------------------------------------------------------ the schedule
def test_the_schedule_advances_on_a_full_window_at_the_threshold() -> None:
    s = schedule()
    assert s.record([True, True, True]) is None  # the window is not full yet
    assert s.record([True]) == 1 and s.stage == 1 and not s.window
    assert s.record([True, False, True, True]) is None  # 0.75 < 0.8
    assert s.last_rate == 0.75
    assert s.record([True]) is None  # the window slides: F, T, T, T
    assert s.record([True]) == 2  # 4 of the last 4
    assert s.last and s.record([True] * 8) is None  # the last stage stays
    restored = schedule()
    restored.restore(json.loads(json.dumps(s.state())))
    assert (restored.stage, restored.highest) == (2, 2)


def test_the_schedule_never_goes_back_more_than_one_stage() -> None:
    s = schedule(back_threshold=0.3, stages=[{}] * 4)
    for _ in range(3):
        s.record([True] * 4)
    assert s.stage == 3
    assert s.record([False] * 4) == 2
    assert s.record([False] * 4) is None and s.stage == 2  # highest 3, floor 2
    assert s.record([True] * 4) == 3


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.booleans(), min_size=0, max_size=6), max_size=40),
    st.integers(1, 5),
    st.floats(0.0, 1.0),
    st.one_of(st.none(), st.floats(0.0, 1.0)),
)
def test_schedule_moves_one_stage_at_a_time_within_one_of_the_highest(
    evals: list[list[bool]], window: int, threshold: float, back: float | None
) -> None:
    if back is not None and back >= threshold:
        back = None
    s = schedule(
        stages=[{}] * 5, window=window, threshold=threshold, back_threshold=back
    )
    for successes in evals:
        before = s.stage
        new = s.record(successes)
        assert new is None or abs(new - before) == 1
        assert 0 <= s.stage <= 4 and s.stage >= s.highest - 1
        if back is None:
            assert s.stage == s.highest


# ------------------------------------------------------- the envs' difficulty
def test_workflow_difficulty_weights_tasks_and_caps_steps() -> None:
    spec = load_spec(RESOLUTION)
    env = WorkflowEnv(spec)
    difficulty = difficulties(env)
    space = env.observation_space
    env.set_difficulty({"max_task_difficulty": 1, "max_steps": 3})
    assert env.observation_space == space
    seen = Counter()
    for seed in range(200):
        _, info = env.reset(seed=seed)
        seen[difficulty[info["task_id"]]] += 1
    assert set(seen) == {1}
    # truncated at the stage's step limit: add_comment never moves the issue
    comment = env.model.tool_index["add_comment"]
    env.reset(seed=0)
    ends = [env.step(comment)[3] for _ in range(3)]
    assert ends == [False, False, True]
    # harder tasks at a weight: some, fewer than uniform
    env.set_difficulty({"max_task_difficulty": 2, "harder_task_weight": 0.1})
    seen = Counter(difficulty[env.reset(seed=s)[1]["task_id"]] for s in range(400))
    assert 0 < seen[3] < seen[1] + seen[2]
    # the vector env samples the same way
    venv = WorkflowVectorEnv(spec, 64, seed=0)
    venv.set_difficulty({"max_task_difficulty": 1})
    venv.reset(seed=0)
    starts = {spec.body["statuses"][s] for s in venv.batch.status}
    assert starts == {"In Review"}
    env.set_difficulty(None)
    assert env.model.max_steps == spec.body["max_steps"] and env.model.task_p is None


def test_transition_noise_makes_valid_tools_fail() -> None:
    env = WorkflowEnv(load_spec(RESOLUTION))
    start = env.model.tool_index["start_progress"]

    def moved(noise: float) -> float:
        env.set_difficulty({"transition_noise": noise})
        n = 0
        for seed in range(400):
            env.reset(seed=seed, options={"task": 0})  # a To Do issue
            n += env.step(start)[4]["status"] == "In Progress"
        return n / 400

    assert moved(0.0) == 1.0
    assert 0.6 < moved(0.3) < 0.8
    venv = WorkflowVectorEnv(load_spec(RESOLUTION), 400, seed=1)
    venv.set_difficulty({"transition_noise": 0.3})
    venv.reset(seed=1)
    todo = venv.batch.status == load_spec(RESOLUTION).body["statuses"].index("To Do")
    venv.step(np.full(400, start))
    moved_rows = venv.batch.status[todo] != 0
    assert 0.55 < moved_rows.mean() < 0.85


def test_grid_difficulty_shrinks_the_area_and_drops_traps_and_slip() -> None:
    spec = load_spec(MAZE)
    env = GridEnv(spec)
    full_path = env.shortest_path_length()
    space = env.observation_space
    env.set_difficulty({"size": [3, 3], "traps": False, "slip": 0.0, "max_steps": 8})
    assert env.observation_space == space and env.slip == 0.0 and not env.traps
    assert env.max_steps == 8
    short = env.shortest_path_length()
    assert short is not None and full_path is not None and short < full_path
    env.reset(seed=0)
    assert env.pos == env.start and not env.walls[env.start]
    env.set_difficulty(None)
    assert env.shortest_path_length() == full_path and env.traps


def random_success(env: WorkflowEnv, episodes: int, tasks: list[int]) -> float:
    """Success rate of a policy picking uniformly among the valid tools, on
    the tasks ``tasks`` in turn."""
    rng = np.random.default_rng(0)
    wins = 0
    for i in range(episodes):
        env.reset(seed=i, options={"task": tasks[i % len(tasks)]})
        done = False
        while not done:
            action = rng.choice(np.flatnonzero(env.action_masks()))
            _, _, terminated, truncated, info = env.step(action)
            done = terminated or truncated
        wins += info["is_success"]
    return wins / episodes


def test_the_release_pipeline_is_long_and_sparse_and_short_at_easy_stages() -> None:
    """The hardest bundled Jira env: issues need up to nine transitions,
    most wait in the backlog (eight), and random tools almost never get a
    long one there; the short issues an easy stage plays are often won."""
    env = WorkflowEnv(load_spec(PIPELINE))
    difficulty = env.model.task_difficulty
    counts = Counter(difficulty)
    assert sorted(counts) == list(range(1, 10))
    assert sum(n for d, n in counts.items() if d >= 7) >= 0.8 * len(difficulty)
    long = [i for i, d in enumerate(difficulty) if d >= 7]
    short = [i for i, d in enumerate(difficulty) if d <= 2]
    assert random_success(env, 400, long) < 0.01
    assert random_success(env, 200, short) > 0.2


# ------------------------------------------------------------ the dashboard
def test_the_stage_has_its_own_chart_and_the_rate_sits_with_rates() -> None:
    from studio.training.metric_vocabulary import TRAINING_METRICS
    from studio.training.metric_vocabulary import group_of as group_for_key

    GROUP_AXES = TRAINING_METRICS.axes

    assert group_for_key(STAGE_METRIC) == "Curriculum stage"
    assert group_for_key("train/" + STAGE_METRIC) == "Curriculum stage"  # a node
    assert GROUP_AXES["Curriculum stage"] == "stage"
    assert group_for_key("curriculum/success_rate") == "Rates"


# ------------------------------------------------------------ real runs
def rows_of(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_an_sb3_run_advances_through_the_stages_and_resumes_there(
    project: Path, qtbot: Any
) -> None:
    from engine.jobs.context import JobContext
    from engine.rl import train as rltrain
    from engine.rl.config import validate

    cfg = validate(
        {
            "env": "rlstudio/maze-v0",
            "algo": "PPO",
            "total_steps": 12_000,
            "seed": 0,
            "n_envs": 4,
            "eval_every_steps": 1000,
            "eval_episodes": 10,
            "checkpoint_every_steps": 0,
            "torch_threads": 1,
            "project_dir": str(project),
            "curriculum": {
                "stages": [
                    {"size": [3, 3], "traps": False, "slip": 0.0},
                    {"size": [5, 5], "slip": 0.0},
                    {},
                ],
                "threshold": 0.8,
                "window": 10,
            },
        }
    )
    run_dir = project / "runs" / "cur"
    run_dir.mkdir(parents=True)

    def run(resume: bool) -> dict[str, Any]:
        ctx = JobContext("cur", run_dir, "rl.train", cfg, resume=resume, events=None)
        try:
            return rltrain.run(ctx)
        finally:
            ctx.close()

    summary = run(False)
    assert summary["curriculum"]["last_stage"] == 2
    rows = rows_of(run_dir)
    stages = [r[STAGE_METRIC] for r in rows if STAGE_METRIC in r]
    assert stages[0] == 0 and max(stages) >= 1, stages
    assert summary["curriculum"]["highest"] == max(stages)
    assert all(b - a in (0, 1) for a, b in itertools.pairwise(stages))
    evals = [r for r in rows if "eval/success_rate" in r]
    assert all(STAGE_METRIC in r for r in evals)
    reached = int(max(stages))
    # the dashboard draws the stage over time in its own chart
    from studio.training.metric_vocabulary import TRAINING_METRICS
    from widgets.live_plot import LivePlotPanel

    panel = LivePlotPanel(vocabulary=TRAINING_METRICS)
    qtbot.addWidget(panel)
    steps = np.array([r["step"] for r in rows if STAGE_METRIC in r], dtype=float)
    panel.set_curve("cur", STAGE_METRIC, steps, np.array(stages))
    panel.redraw_all()
    assert panel.group_titles() == ["Curriculum stage"]
    axis = panel.group_widget("Curriculum stage").plot.getPlotItem().getAxis("left")
    assert axis.labelText == "stage"
    assert panel.curve_data("cur", STAGE_METRIC)[1].tolist() == stages
    # resume: the schedule continues at the stage it stood at
    cfg["total_steps"] = 13_000
    run(True)
    later = [r for r in rows_of(run_dir) if r["step"] > 12_000 and STAGE_METRIC in r]
    assert later and later[0][STAGE_METRIC] == reached


@pytest.mark.slow
def test_maskable_ppo_on_the_release_pipeline_advances_a_stage(project: Path) -> None:
    """A curriculum on the hardest Jira env moves on once the short issues
    are learnt (the benchmark: tests/benchmarks/test_bench_curriculum.py)."""
    from engine.jobs.context import JobContext
    from engine.rl import train as rltrain
    from engine.rl.config import validate

    cfg = validate(
        {
            "env": "rlstudio/jira_release_pipeline-v0",
            "algo": "MaskablePPO",
            "total_steps": 4000,
            "seed": 0,
            "n_envs": 8,
            "eval_every_steps": 1000,
            "eval_episodes": 20,
            "checkpoint_every_steps": 0,
            "torch_threads": 1,
            "project_dir": str(project),
            "curriculum": {
                "stages": [{"max_task_difficulty": 2}, {"max_task_difficulty": 4}, {}],
                "threshold": 0.9,
                "window": 20,
            },
        }
    )
    run_dir = project / "runs" / "pipeline"
    run_dir.mkdir(parents=True)
    ctx = JobContext("pipeline", run_dir, "rl.train", cfg, events=None)
    try:
        summary = rltrain.run(ctx)
    finally:
        ctx.close()
    assert summary["curriculum"]["highest"] >= 1, summary["curriculum"]
    stages = [r[STAGE_METRIC] for r in rows_of(run_dir) if STAGE_METRIC in r]
    assert stages[0] == 0 and max(stages) >= 1, stages


def test_language_model_rollouts_advance_with_the_expert(project: Path) -> None:
    from engine.jobs.context import JobContext
    from engine.llm.rollouts import iter_traces, run_collect, validate_collect
    from engine.settings import as_dict

    cfg = validate_collect(
        {
            "env": str(project / "envs" / "jira_issue_resolution.env.json"),
            "policy": "expert",
            "noise": 0.0,
            "episodes": 24,
            "num_envs": 1,
            "seed": 0,
            "name": "cur",
            "curriculum": {
                "stages": [{"max_task_difficulty": 1}, {"max_task_difficulty": 2}, {}],
                "threshold": 0.9,
                "window": 6,
            },
        }
    )
    run_dir = project / "runs" / "collect"
    run_dir.mkdir(parents=True)
    ctx = JobContext("collect", run_dir, "llm.collect", as_dict(cfg), events=None)
    try:
        summary = run_collect(ctx, cfg)
    finally:
        ctx.close()
    assert summary["stats"]["curriculum_stage"] == 2
    stages = [ep["stage"] for ep in iter_traces(summary["traces"])]
    assert stages[:6] == [0] * 6 and stages[6:12] == [1] * 6 and stages[12:] == [2] * 12
    difficulty = difficulties(WorkflowEnv(load_spec(RESOLUTION)))
    first = [difficulty[ep["task_id"]] for ep in iter_traces(summary["traces"])][:6]
    assert set(first) == {1}
    metric_stages = [r[STAGE_METRIC] for r in rows_of(run_dir) if STAGE_METRIC in r]
    assert metric_stages[0] == 0 and metric_stages[-1] == 2


@pytest.mark.slow
def test_a_run_that_never_reaches_the_last_stage_says_so(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.jobs.context import JobContext
    from engine.rl import train as rltrain
    from engine.rl.config import validate

    cfg = validate(
        {
            "env": "rlstudio/maze-v0",
            "algo": "PPO",
            "total_steps": 1024,
            "seed": 0,
            "n_envs": 2,
            "eval_every_steps": 512,
            "eval_episodes": 2,
            "torch_threads": 1,
            "project_dir": str(project),
            "curriculum": {"stages": [{"size": [3, 3]}, {}], "window": 1000},
        }
    )
    run_dir = project / "runs" / "stuck"
    run_dir.mkdir(parents=True)
    ctx = JobContext("stuck", run_dir, "rl.train", cfg, events=None)
    try:
        summary = rltrain.run(ctx)
    finally:
        ctx.close()
    assert summary["curriculum"] == {"stage": 0, "last_stage": 1, "highest": 0}
    assert summary["best_eval_reward"] is None
    assert Path(summary["models"][0]["file"]).is_file()  # the last checkpoint
    assert (
        "warning: the curriculum ended at stage 0 of 1 without an evaluation of "
        "the env as designed" in capsys.readouterr().err
    )


def _farm(env: GridEnv) -> list[float]:
    """Walk next to the maze's reward cell (4, 7) without slipping, then step
    on, off and on it again twice; the cell reward of each entry."""
    env.slip = 0.0
    env.reset(seed=0)
    for action in [1] * 4 + [2, 2] + [1, 1] + [2, 2]:  # via (0,4) (2,4) (2,6)
        env.step(action)
    assert env.pos == (4, 6)
    paid = []
    for action in (1, 3, 1, 3, 1):  # on, off, on, off, on
        _, _, _, _, info = env.step(action)
        if info["cell"] == [4, 7]:
            paid.append(info["reward_breakdown"]["cell"])
    return paid


def test_a_once_cell_pays_on_the_first_entry_of_an_episode_only() -> None:
    doc = json.loads(MAZE.read_text())
    assert doc["grid"]["cell_rewards"] == [
        {"cell": [4, 7], "reward": 0.1, "once": True}
    ]
    env = GridEnv(load_spec(MAZE))
    assert _farm(env) == [0.1, 0.0, 0.0]
    assert "+" not in env.render_ansi()  # collected: drawn as floor
    saved = env.get_state()
    again = GridEnv(load_spec(MAZE))
    again.set_state(saved)
    assert again.collected == {(4, 7)}
    env.reset(seed=1)
    assert not env.collected and "+" in env.render_ansi()  # a new episode pays
    # A spec without 'once' (every file written before it) pays each entry.
    del doc["grid"]["cell_rewards"][0]["once"]
    assert _farm(GridEnv(doc, source=str(MAZE))) == [0.1, 0.1, 0.1]
