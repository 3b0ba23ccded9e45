"""MaskablePPO learns a bundled Jira env: the designed env is trainable."""

from __future__ import annotations

import shutil
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from engine.envs import register_project_envs

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "resources" / "examples"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "envs", tmp_path / "envs")
    shutil.copytree(EXAMPLES / "data", tmp_path / "data")
    return tmp_path


@pytest.fixture
def one_torch_thread():
    """Tiny networks train faster on one thread, and far faster on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.slow
def test_maskable_ppo_trains_on_issue_resolution(
    project: Path, one_torch_thread
) -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.maskable.utils import get_action_masks
    from stable_baselines3.common.env_util import make_vec_env

    register_project_envs(project)
    env_id = "rlstudio/jira_issue_resolution-v0"

    def success_rate(policy, episodes: int = 60) -> float:
        env = gym.make(env_id)
        wins = 0
        for ep in range(episodes):
            obs, _ = env.reset(seed=1000 + ep)
            done = False
            while not done:
                a = policy(obs, env.unwrapped.action_masks())
                obs, _, term, trunc, info = env.step(a)
                done = term or trunc
            wins += info["is_success"]
        return wins / episodes

    rng = np.random.default_rng(0)
    random_rate = success_rate(lambda obs, mask: int(rng.choice(np.flatnonzero(mask))))
    vec = make_vec_env(env_id, n_envs=4, seed=0)
    model = MaskablePPO(
        "MlpPolicy", vec, n_steps=128, batch_size=128, n_epochs=6, learning_rate=3e-3,
        seed=0, device="cpu",
    )  # fmt: skip
    assert get_action_masks(vec).shape == (4, 8)
    model.learn(1536)
    trained_rate = success_rate(
        lambda obs, mask: int(
            model.predict(obs, action_masks=mask, deterministic=True)[0]
        )
    )
    print(f"MaskablePPO success rate {trained_rate:.2f}, random {random_rate:.2f}")
    # the designer's preview can replay a saved model from the project
    from engine.envs.preview import PreviewConfig, preview
    from engine.rl.policy import load_policy

    model.save(project / "policy.zip")
    loaded = load_policy(project / "policy.zip", project_dir=project)
    assert loaded.masked and loaded.notice is None
    shown = preview(env_id, PreviewConfig(episodes=20, seed=5), policy=loaded.act)
    assert shown["success_rate"] >= 0.9
    assert trained_rate >= 0.9 and trained_rate > random_rate + 0.3, (
        trained_rate,
        random_rate,
    )
