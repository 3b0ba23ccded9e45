"""Compiled envs: registration, stepping, masks, rewards, state, batch, grid."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import engine.envs
from engine.envs import load_spec, make, register_project_envs, workflow_batch
from engine.envs.workflow_model import REWARD_RULES

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"
NAMES = [
    "cartpole",
    "jira_comment_management",
    "jira_issue_resolution",
    "jira_release_pipeline",
    "jira_status_update",
    "maze",
]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project folder holding the bundled examples, laid out as the store does."""
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    return tmp_path


def _valid_action(env: gym.Env, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))


def test_register_project_envs_and_gym_make(project: Path) -> None:
    ids = register_project_envs(project)
    assert ids == [f"rlstudio/{n}-v0" for n in NAMES]
    for env_id in ids:
        env = gym.make(env_id)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        obs, reward, *_ = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert isinstance(float(reward), float)
        env.close()
    assert gym.make("rlstudio/cartpole-v0").spec.max_episode_steps == 500


def test_changed_spec_is_registered_again(project: Path) -> None:
    register_project_envs(project)
    path = project / "envs" / "jira_issue_resolution.env.json"
    doc = json.loads(path.read_text())
    assert gym.make("rlstudio/jira_issue_resolution-v0").unwrapped.model.max_steps == 20
    doc["workflow"]["max_steps"] = 7
    path.write_text(json.dumps(doc))
    register_project_envs(project)
    assert gym.make("rlstudio/jira_issue_resolution-v0").unwrapped.model.max_steps == 7
    (project / "envs" / "maze.env.json").unlink()
    assert "rlstudio/maze-v0" not in register_project_envs(project)
    assert "rlstudio/maze-v0" not in gym.registry


def test_import_engine_envs_registers_the_project_cheaply(project: Path) -> None:
    code = (
        "import sys, engine.envs, gymnasium as gym\n"
        "env = gym.make('rlstudio/jira_status_update-v0')\n"
        "print(env.reset(seed=0)[1]['task_id'], 'torch' in sys.modules)\n"
    )
    env = {**os.environ, "RL_STUDIO_PROJECT": str(project), "PYTHONPATH": str(ROOT)}
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    task, torch_loaded = out.stdout.split()
    assert task.startswith("RLHUB-") and torch_loaded == "False"
    # with no project, importing is free of gymnasium too
    code = "import sys, engine.envs; print('gymnasium' in sys.modules)"
    env.pop("RL_STUDIO_PROJECT")
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=project / "data",
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"


def _trajectory(env: gym.Env, seed: int, steps: int) -> list:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    rec: list = [obs.tolist(), info["task_id"]]
    for _ in range(steps):
        a = _valid_action(env, rng) if rng.random() < 0.9 else int(rng.integers(8))
        obs, r, term, trunc, info = env.step(a)
        rec.append((a, obs.tolist(), r, term, trunc, info["reward_breakdown"]))
        if term or trunc:
            obs, info = env.reset()
            rec.append((obs.tolist(), info["task_id"]))
    return rec


def test_determinism_over_many_steps_with_stochastic_transitions(project: Path) -> None:
    spec = load_spec(project / "envs" / "jira_issue_resolution.env.json")
    first = _trajectory(make(spec), 3, 2000)
    assert first == _trajectory(make(spec), 3, 2000)
    assert first != _trajectory(make(spec), 4, 2000)
    # the stochastic merge really went both ways
    env = make(spec).unwrapped
    outcomes = set()
    for seed in range(40):
        env.reset(seed=seed, options={"task": 0})
        for tool in ("start_progress", "submit_for_review", "merge"):
            _, _, _, _, info = env.step(env.model.tool_index[tool])
        outcomes.add(info["status"])
    assert outcomes == {"Done", "In Progress"}


def test_action_masks_follow_the_transitions(project: Path) -> None:
    env = make(project / "envs" / "jira_issue_resolution.env.json").unwrapped
    env.reset(seed=0, options={"task": 0})  # RLHUB-101 starts in To Do
    assert env.valid_tools() == ["start_progress", "close_wont_do", "add_comment"]
    mask = env.action_masks()
    assert mask.dtype == bool and mask.tolist() == [
        True, False, False, False, False, False, True, True
    ]  # fmt: skip
    env.step(env.model.tool_index["start_progress"])
    assert env.valid_tools() == ["flag_blocked", "submit_for_review", "add_comment"]


def test_reward_breakdown_and_success(project: Path) -> None:
    env = make(project / "envs" / "jira_issue_resolution.env.json").unwrapped
    env.reset(seed=1, options={"task": 0})
    tool = env.model.tool_index
    _, r, term, _, info = env.step(tool["merge"])  # not valid in To Do
    assert info["valid"] is False and info["status"] == "To Do"
    assert info["reward_breakdown"] == {
        "step": -0.02,
        "invalid_tool": -0.1,
        "transition": 0.0,
        "status": 0.0,
        "success": 0.0,
    }
    assert r == pytest.approx(-0.12)
    _, r, *_, info = env.step(tool["add_comment"])
    assert info["reward_breakdown"]["transition"] == -0.01 and info["status"] == "To Do"
    _, r, *_, info = env.step(tool["start_progress"])
    assert info["reward_breakdown"]["status"] == pytest.approx(
        0.1
    )  # potential 0 -> 0.1
    env.step(tool["submit_for_review"])
    while True:
        obs, r, term, trunc, info = env.step(tool["merge"])
        if info["status"] == "Done":
            break
        env.step(tool["submit_for_review"])
    assert term and not trunc and info["is_success"]
    assert set(info["reward_breakdown"]) == set(REWARD_RULES)
    assert r == pytest.approx(sum(info["reward_breakdown"].values()))
    assert info["reward_breakdown"]["success"] == 1.0
    labels = env.observation_labels()
    assert obs[labels.index("resolved")] == 1.0 and obs[labels.index("done")] == 1.0
    assert obs[labels.index("status=Done")] == 1.0
    assert obs[labels.index("last_tool=merge")] == 1.0


def test_failure_terminal_is_not_success(project: Path) -> None:
    env = make(project / "envs" / "jira_issue_resolution.env.json").unwrapped
    env.reset(seed=0, options={"task": 0})
    _, r, term, _, info = env.step(env.model.tool_index["close_wont_do"])
    assert term and not info["is_success"] and info["status"] == "Won't Do"
    # potential shaping: a terminal status has potential 0 (To Do's is 0
    # too), so the failure pays the step and forgoes the success bonus
    assert info["reward_breakdown"]["status"] == 0.0
    assert r == pytest.approx(-0.02)


def _episodes(
    env: gym.Env, task: int, depth: int
) -> list[tuple[list[str], float, bool]]:
    """Every episode of ``task`` that ends within ``depth`` valid steps: its
    statuses, its return and whether it succeeded."""
    out = []

    def walk(prefix: list[int]) -> None:
        env.reset(seed=0, options={"task": task})
        ret, statuses, done, info = 0.0, [], False, {}
        for a in prefix:
            _, r, term, trunc, info = env.step(a)
            ret += r
            statuses.append(info["status"])
            done = term or trunc
        if done:
            out.append((statuses, ret, bool(info["is_success"])))
            return
        if len(prefix) < depth:
            for a in np.flatnonzero(env.action_masks()):
                walk([*prefix, int(a)])

    walk([])
    return out


def test_potential_shaping_pays_the_shortest_successful_path_most(
    project: Path,
) -> None:
    env = make(project / "envs" / "jira_status_update.env.json").unwrapped
    difficulty = env.model.task_difficulty
    for task in range(len(env.model.tasks)):
        episodes = _episodes(env, task, depth=6)
        best = max(ret for _, ret, _ in episodes)
        shortest = [
            ret for path, ret, ok in episodes if ok and len(path) == difficulty[task]
        ]
        assert shortest and max(shortest) == pytest.approx(best)
        # every longer success and every failure (a detour that ends at
        # another terminal status) earns less
        for path, ret, ok in episodes:
            if not ok or len(path) > difficulty[task]:
                assert ret < best - 0.01, (task, path, ret, best)


def test_a_detour_to_done_pays_less_than_the_target(project: Path) -> None:
    env = make(project / "envs" / "jira_status_update.env.json").unwrapped
    data = json.loads((project / "data" / "jira_mock_data.json").read_text())
    task = next(
        i
        for i, t in enumerate(data["issues"])
        if (t["status"], t["target_status"]) == ("To Do", "Won't Do")
    )
    tool = env.model.tool_index

    def play(tools: list[str]) -> tuple[float, bool]:
        env.reset(seed=0, options={"task": task})
        ret, info = 0.0, {}
        for name in tools:
            _, r, *_, info = env.step(tool[name])
            ret += r
        return ret, bool(info["is_success"])

    target, ok = play(["move_to_wont_do"])
    detour, detour_ok = play(
        ["move_to_in_progress", "move_to_in_review", "move_to_done"]
    )
    assert ok and not detour_ok
    assert target == pytest.approx(-0.02 + 1.0)  # step, potential 0 -> 0, bonus
    assert detour == pytest.approx(-0.06)  # potentials sum to -phi(To Do) = 0
    # the batch pays the same, also when the target is not terminal (its
    # potential drops to 0 when the episode ends there)
    spec = load_spec(project / "envs" / "jira_status_update.env.json")
    batch = workflow_batch(spec, 32, seed=3)
    batch.reset()
    rng = np.random.default_rng(3)
    ended_at_target = 0
    for _ in range(60):
        actions = np.array(
            [rng.choice(np.flatnonzero(m)) for m in batch.action_masks()]
        )
        before, target_of = batch.status.copy(), batch.target.copy()
        _, reward, term, _, info = batch.step(actions)
        for i in range(32):
            state = env.get_state()
            state.update(
                status=env.model.statuses[before[i]],
                target=env.model.statuses[target_of[i]],
                steps=0,
                done=False,
            )
            env.set_state(state)
            _, r, t, *_ = env.step(int(actions[i]))
            assert (r, t) == (pytest.approx(reward[i]), term[i])
            if info["is_success"][i] and not env.model.terminal[env._status]:
                ended_at_target += 1
    assert ended_at_target > 0


def test_truncation_at_max_steps(project: Path) -> None:
    env = make(project / "envs" / "jira_comment_management.env.json").unwrapped
    env.reset(seed=0)
    for i in range(16):
        obs, _, term, trunc, _ = env.step(env.model.tool_index["add_label"])
        assert not term and trunc == (i == 15)
    assert obs[0] == 1.0


def test_task_targets_drive_success(project: Path) -> None:
    env = make(project / "envs" / "jira_status_update.env.json").unwrapped
    data = json.loads((project / "data" / "jira_mock_data.json").read_text())
    for i, issue in enumerate(data["issues"]):
        obs, info = env.reset(seed=i, options={"task": i})
        assert info["task_id"] == issue["id"] and info["status"] == issue["status"]
        labels = env.observation_labels()
        assert obs[labels.index(f"target={issue['target_status']}")] == 1.0
        assert issue["target_status"] in env.render_text()
    # RLHUB-102: To Do -> In Progress is one step and a success
    env.reset(seed=0, options={"task": 1})
    _, _, term, _, info = env.step(env.model.tool_index["move_to_in_progress"])
    assert term and info["is_success"]


def test_text_rendering_and_parsing(project: Path) -> None:
    env = make(project / "envs" / "jira_issue_resolution.env.json", text_in_info=True)
    _, info = env.reset(seed=0, options={"task": 0})
    text = info["text"]
    assert "Task RLHUB-101: Login page crashes" in text
    assert "Current status: 'To Do'" in text
    assert "- start_progress: Assign the issue" in text and "merge" not in text
    raw = env.unwrapped
    assert raw.action_from_text("I'll call start_progress.") == 0
    assert raw.action_from_text("no tool here") is None
    _, _, _, _, info = env.step(0)
    assert "Last tool: start_progress (valid)." in info["text"]
    ansi = make(project / "envs" / "jira_issue_resolution.env.json", render_mode="ansi")
    ansi.reset(seed=0)
    assert "Available tools:" in ansi.render()


def test_get_state_set_state_replays_a_completion(project: Path) -> None:
    spec = load_spec(project / "envs" / "jira_issue_resolution.env.json")
    env = make(spec).unwrapped
    rng = np.random.default_rng(0)
    env.reset(seed=5)
    for _ in range(2):
        env.step(_valid_action(env, rng))
    saved = json.dumps(env.get_state())  # JSON through and through
    actions = [int(a) for a in rng.integers(8, size=50)]
    original = []
    for a in actions:
        step = env.step(a)
        original.append((step[0].tolist(), *step[1:4], step[4]["reward_breakdown"]))
        if step[2] or step[3]:
            env.reset()
    other = make(spec).unwrapped
    other.reset(seed=99)
    obs = other.set_state(json.loads(saved))
    assert obs.shape == other.observation_space.shape
    replay = []
    for a in actions:
        step = other.step(a)
        replay.append((step[0].tolist(), *step[1:4], step[4]["reward_breakdown"]))
        if step[2] or step[3]:
            other.reset()
    assert replay == original
    with pytest.raises(ValueError, match="does not fit"):
        other.set_state({"status": "Nope"})


def test_replay_scores_language_model_completions(project: Path) -> None:
    """A GRPO-style reward: one saved prompt state, several completions."""
    env = make(project / "envs" / "jira_issue_resolution.env.json").unwrapped
    env.reset(seed=0, options={"task": 0})
    env.step(env.model.tool_index["start_progress"])
    prompt_state = json.loads(json.dumps(env.get_state()))
    completions = [
        "I will submit_for_review now.",
        "Let's merge it.",  # not valid in In Progress
        "Hmm, no idea.",  # names no tool
    ]
    results = [env.replay(prompt_state, c) for c in completions]
    rewards = [r[1] for r in results]
    assert results[0][4]["status"] == "In Review"
    assert rewards[0] == pytest.approx(-0.02 + 0.2)
    assert rewards[1] == pytest.approx(-0.12) and results[1][4]["tool"] == "merge"
    assert rewards[2] == pytest.approx(-0.12) and results[2][4]["tool"] is None
    assert results[2][4]["status"] == "In Progress"
    # the same completion from the same state always scores the same
    assert env.replay(prompt_state, completions[0])[1] == rewards[0]


def test_batch_matches_the_tables_and_resets(project: Path) -> None:
    spec = load_spec(project / "envs" / "jira_issue_resolution.env.json")
    batch = workflow_batch(spec, 64, seed=0)
    single = make(spec).unwrapped
    obs = batch.reset()
    assert obs.shape == (64, single.observation_space.shape[0])
    rng = np.random.default_rng(0)
    episodes = successes = 0
    for _ in range(150):
        masks = batch.action_masks()
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        before = batch.status.copy()
        obs, reward, term, trunc, info = batch.step(actions)
        assert np.all(info["valid"])
        # every step matches one outcome of the single env's table
        for i in range(0, 64, 7):
            outs = single._out[before[i]][actions[i]]
            assert any(
                abs(o[2] - reward[i]) < 1e-9 or abs(o[2] + 1 - reward[i]) < 1e-9
                for o in outs
            )
        done = term | trunc
        episodes += int(done.sum())
        successes += int(info["is_success"][done].sum())
        if done.any():
            assert info["final_observation"].shape == (int(done.sum()), obs.shape[1])
            assert np.all(obs[done, 0] == 0.0)  # auto-reset rows start over
    assert episodes > 50 and 0 < successes < episodes
    # same seed and actions -> same batch trajectory
    runs = []
    for _ in range(2):
        b = workflow_batch(spec, 16, seed=7)
        rec = [b.reset()]
        for t in range(100):
            rec.extend(b.step(np.full(16, t % 8))[:2])
        runs.append(rec)
    assert all(np.array_equal(x, y) for x, y in zip(*runs, strict=True))


def test_grid_env_renders_and_slips(project: Path) -> None:
    env = make(project / "envs" / "maze.env.json", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (7 * 16, 9 * 16, 3) and frame.dtype == np.uint8
    raw = env.unwrapped
    assert raw.render_ansi().splitlines()[0].startswith("A")
    moved = set()
    for seed in range(60):
        env.reset(seed=seed)
        _, _, _, _, info = env.step(1)  # right from (0, 0)
        moved.add(tuple(info["cell"]))
    assert (0, 1) in moved and (1, 0) in moved  # slip 0.1 sometimes goes down
    ansi = make(project / "envs" / "maze.env.json", render_mode="ansi")
    ansi.reset(seed=0)
    assert ansi.render().count("\n") == 7


def test_catalog_lists_gymnasium_envs_cheaply() -> None:
    rows = engine.envs.catalog()
    ids = {r["id"] for r in rows}
    assert {"CartPole-v1", "FrozenLake-v1", "MountainCar-v0"} <= ids
    cart = engine.envs.catalog(with_spaces=False)
    assert "observation_space" not in cart[0]
    from engine.envs.registry import describe_env

    d = describe_env("CartPole-v1")
    assert d["action_space"] == "Discrete(2)" and "Box" in d["observation_space"]
    assert describe_env("CartPole-v1") is not d  # a fresh dict from the cache


def test_gymnasium_vector_env_by_make_vec(project: Path) -> None:
    register_project_envs(project)
    env_id = "rlstudio/jira_comment_management-v0"

    def run() -> tuple[list[np.ndarray], int]:
        vec = gym.make_vec(env_id, num_envs=16, vectorization_mode="vector_entry_point")
        assert vec.single_action_space == gym.spaces.Discrete(8)
        obs, _ = vec.reset(seed=11)
        assert obs.shape == (16, *vec.single_observation_space.shape)
        rng = np.random.default_rng(0)
        record, finals = [obs], 0
        for _ in range(60):
            masks = vec.unwrapped.action_masks()
            actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
            obs, reward, term, trunc, infos = vec.step(actions)
            record += [obs, reward]
            assert infos["is_success"].shape == (16,)
            if "final_obs" in infos:
                done = term | trunc
                assert np.array_equal(infos["_final_obs"], done)
                for i in np.flatnonzero(done):
                    assert infos["final_obs"][i][1] == 1.0  # the done flag
                    assert vec.single_observation_space.contains(infos["final_obs"][i])
                finals += int(done.sum())
        vec.close()
        return record, finals

    first, finals = run()
    second, _ = run()
    assert finals > 20
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
