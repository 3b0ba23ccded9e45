"""Learned reward and auto-labeler (issue 17, items 2 and 3): a reward model
trained from manual labels — an MLP on CartPole observations (and the SB3
wrapper that adds it to the env reward), a LoRA reward head on a tiny
language model through TRL's RewardTrainer (and the ``learned`` GRPO reward)
— its held-out accuracy, its label suggestions and their review."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from tiny_models import build_tiny_model

from engine.errors import ConfigError
from engine.jobs.context import JobContext
from engine.jobs.registry import get_kind, validate_config
from engine.llm.rewards import build_rewards
from engine.rl.learned_reward import LearnedRewardWrapper, check_model
from engine.store.labels import Label, LabelStore, step_key


def run_job(project: Path, kind: str, config: dict[str, Any]) -> dict[str, Any]:
    cfg = validate_config(kind, config)
    run_id = f"{kind.replace('.', '-')}-{uuid.uuid4().hex[:6]}"
    run_dir = project / "runs" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    ctx = JobContext(run_id, run_dir, kind, cfg)
    try:
        summary: dict[str, Any] = get_kind(kind).entry(ctx)
    finally:
        ctx.close()
    json.dumps(summary)
    return summary


def good_push(obs: list[float], action: int) -> bool:
    """The labeller's rule: push the cart toward the side the pole leans."""
    return (obs[2] + 0.5 * obs[3] > 0) == (action == 1)


def cartpole_traces(project: Path, episodes: int = 12) -> tuple[Path, list[dict]]:
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    eps = []
    for e in range(episodes):
        obs, _ = env.reset(seed=e)
        steps = []
        for t in range(40):
            action = int(rng.integers(2))
            state = {"observation": [round(float(x), 5) for x in obs]}
            obs, reward, term, trunc, _ = env.step(action)
            steps.append({"t": t, "messages": [], "completion": "",
                          "action": action, "state": state,
                          "reward": float(reward), "valid": True})  # fmt: skip
            if term or trunc:
                break
        eps.append({"episode": e, "env": "CartPole-v1", "policy": "agent:random",
                    "steps": steps, "return": float(len(steps)),
                    "length": len(steps), "success": False})  # fmt: skip
    path = project / "data" / "traces" / "agent-cart.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(ep) + "\n" for ep in eps))
    return path, eps


def label_steps(project: Path, eps: list[dict], n: int, trace: str) -> int:
    store = LabelStore(project, who="tester")
    labels = []
    for e, ep in enumerate(eps):
        for t, st in enumerate(ep["steps"]):
            if len(labels) < n:
                good = good_push(st["state"]["observation"], st["action"])
                labels.append(Label("kto", trace, e, t, step_key(st),
                                    "good" if good else "bad"))  # fmt: skip
    stored = store.set_many(labels)
    store.close()
    return stored


def test_too_few_labels_is_one_sentence_with_the_number_needed(tmp_path: Path) -> None:
    project = tmp_path / "p"
    _, eps = cartpole_traces(project, episodes=2)
    label_steps(project, eps, 5, "agent-cart")
    with pytest.raises(ConfigError) as err:
        run_job(project, "reward.train", {"min_labels": 8})
    good = sum(
        good_push(st["state"]["observation"], st["action"])
        for st in eps[0]["steps"][:5]
    )
    assert str(err.value) == (
        "Training a reward model needs at least 8 labelled steps, some good and "
        f"some bad; the traces have 5 ({good} good, {5 - good} bad)."
    )
    store = LabelStore(project)
    assert store.count() == 5  # nothing lost
    store.close()
    with pytest.raises(ConfigError, match="needs base_model"):
        validate_config("reward.train", {"agent": "text"})


def test_control_reward_model_wrapper_and_auto_labeler(tmp_path: Path) -> None:
    project = tmp_path / "p"
    _, eps = cartpole_traces(project)
    total = sum(len(ep["steps"]) for ep in eps)
    assert label_steps(project, eps, 200, "agent-cart") == 200
    out = run_job(
        project,
        "reward.train",
        {"name": "cart", "epochs": 400, "seed": 0, "validation_fraction": 0.25},
    )
    report = out["report"]
    assert out["agent"] == "control" and report["held_out"] == 50
    assert report["train"] == 150 and report["accuracy"] >= 0.8, report
    folder = project / "data/reward_models/cart"
    assert json.loads((folder / "reward_model.json").read_text())["report"] == report

    # the auto-labeler: every unlabelled step has a suggestion, least sure first
    store = LabelStore(project, who="tester")
    sugg = store.suggestions()
    assert len(sugg) == out["suggestions"] == total - 200
    conf = [s.confidence for s in sugg]
    assert conf == sorted(conf) and all(0.5 <= c <= 1 for c in conf)
    right = sum(
        1
        for s in sugg
        if (s.value == "good")
        == good_push(
            eps[s.episode]["steps"][s.step]["state"]["observation"],
            eps[s.episode]["steps"][s.step]["action"],
        )
    )
    assert right / len(sugg) >= 0.75
    # review in bulk: accept the right ones, correct the wrong ones
    batch = sugg[:20]
    ok = [s for s in batch if (s.value == "good") == good_push(
        eps[s.episode]["steps"][s.step]["state"]["observation"],
        eps[s.episode]["steps"][s.step]["action"])]  # fmt: skip
    wrong = [s for s in batch if s not in ok]
    assert store.review(ok, wrong) == 20
    assert len(store.suggestions()) == len(sugg) - 20
    auto = [lb for lb in store.labels() if lb.source == "auto"]
    assert len(auto) == len(ok) and store.count() == 220
    history = store.agreement()
    assert [h.source for h in history] == ["held-out", "review"]
    assert (history[1].agreed, history[1].total) == (len(ok), 20)
    store.undo()  # the review as one step
    assert store.count() == 200 and len(store.suggestions()) == len(sugg)
    store.review(ok, wrong)
    store.close()
    # corrections retrain: a new model on 220 labels
    out2 = run_job(project, "reward.train", {"name": "cart2", "epochs": 400, "seed": 0})
    assert out2["report"]["labels"] == 220

    # the SB3 wrapper: env reward plus weight x p(good)
    env = LearnedRewardWrapper(gym.make("CartPole-v1"), str(folder), weight=0.5)
    obs, _ = env.reset(seed=3)
    pushes = []
    for _ in range(20):
        action = 1 if obs[2] > 0 else 0
        obs2, reward, term, trunc, info = env.step(action)
        assert reward == pytest.approx(
            info["env_reward"] + 0.5 * info["learned_reward"]
        )
        pushes.append(info["learned_reward"])
        obs = obs2
        if term or trunc:
            break
    assert sum(pushes) / len(pushes) > 0.5  # the good pushes score as good
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    wrapped = {"wrapper_class": LearnedRewardWrapper,
               "wrapper_kwargs": {"model": str(folder), "weight": 1.0}}  # fmt: skip
    venv = make_vec_env("CartPole-v1", n_envs=1, seed=0, **wrapped)
    PPO("MlpPolicy", venv, n_steps=64, batch_size=32, n_epochs=1, seed=0).learn(64)
    cfg = validate_config(
        "rl.train",
        {"env": "CartPole-v1", "algo": "PPO", "total_steps": 64,
         "learned_reward": str(folder), "learned_reward_weight": 0.5},
    )  # fmt: skip
    assert cfg["learned_reward"] == str(folder.resolve())
    relative = {"env": "CartPole-v1", "algo": "PPO", "total_steps": 64,
                "project_dir": str(project),
                "learned_reward": "data/reward_models/cart"}  # fmt: skip
    assert validate_config("rl.train", relative)["learned_reward"] == str(
        folder.resolve()
    )


def test_bad_learned_reward_models_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        check_model(str(tmp_path))
    assert "is not a reward model (no readable reward_model.json)" in str(err.value)
    (tmp_path / "reward_model.json").write_text('{"kind": "text"}')
    with pytest.raises(ConfigError, match="an SB3 run needs a control one"):
        check_model(str(tmp_path))
    with pytest.raises(ConfigError, match="needs model: a reward model folder"):
        build_rewards([{"name": "learned"}])
    with pytest.raises(ConfigError, match="is not a reward model"):
        build_rewards([{"name": "learned", "model": str(tmp_path / "none")}])


def text_traces(project: Path) -> list[dict]:
    eps = []
    for e in range(6):
        steps = []
        for t, answer in enumerate(["transition_issue", "add_comment", "hello"]):
            steps.append({
                "t": t,
                "messages": [{"role": "user", "content":
                              f"PROJ-{e} is in To Do. Choose the next tool."}],
                "completion": answer, "tool": answer, "parsed": True, "valid": True,
                "reward": 0.0,
            })  # fmt: skip
        eps.append({"episode": e, "env": "jira", "policy": "llm:tiny", "steps": steps,
                    "return": 0.0, "length": 3, "success": False})  # fmt: skip
    path = project / "data" / "traces" / "collect.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(ep) + "\n" for ep in eps))
    return eps


def test_text_reward_model_on_a_tiny_model_and_the_learned_grpo_reward(
    tmp_path: Path,
) -> None:
    project = tmp_path / "p"
    base = build_tiny_model(tmp_path / "base")
    eps = text_traces(project)
    store = LabelStore(project)
    labels = [
        Label("kto", "collect", e, t, step_key(eps[e]["steps"][t]),
              "good" if t == 0 else "bad")
        for e in range(5) for t in range(3)
    ]  # fmt: skip
    store.set_many(labels)
    store.close()
    out = run_job(
        project,
        "reward.train",
        {"base_model": str(base), "epochs": 2, "seed": 0, "lora_r": 4,
         "max_length": 64, "name": "text", "learning_rate": 1e-3},
    )  # fmt: skip
    assert out["agent"] == "text"
    report = out["report"]
    assert report["held_out"] == 3 and 0.0 <= report["accuracy"] <= 1.0
    folder = project / "data/reward_models/text"
    assert (folder / "adapter" / "adapter_config.json").is_file()
    assert out["suggestions"] == 3  # episode 5's steps
    (reward,) = build_rewards([{"name": "learned", "model": str(folder), "weight": 2}])
    assert reward.weight == 2.0
    prompt = [{"role": "user", "content": "PROJ-9 is in To Do. Choose the next tool."}]
    scores = reward(
        [prompt, prompt],
        [[{"role": "assistant", "content": "transition_issue"}],
         [{"role": "assistant", "content": "hello"}]],
    )  # fmt: skip
    assert len(scores) == 2 and all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] != scores[1]


def test_auto_labeler_in_the_traces_view(qtbot, tmp_path: Path) -> None:
    """Suggestions least confident first; A accepts and C corrects the
    selected ones (in the database at once, one undo step each); the
    agreement plot grows; Retrain asks for a reward.train run that
    validates."""
    from PySide6.QtCore import Qt

    from engine.llm.reward_model import train_reward_model, validate
    from studio.model_manager.trace_viewer import TraceViewer

    project = tmp_path / "p"
    _, eps = cartpole_traces(project, episodes=8)
    label_steps(project, eps, 60, "agent-cart")
    cfg = validate({"name": "cart", "epochs": 300, "seed": 0})
    train_reward_model(project, cfg, project / "data/reward_models/cart")
    viewer = TraceViewer()
    qtbot.addWidget(viewer)
    viewer.set_project(str(project))
    viewer.files.setCurrentRow(0)
    records = viewer.auto.suggestions.model.records
    total = sum(len(ep["steps"]) for ep in eps)
    assert len(records) == total - 60
    conf = [r["confidence"] for r in records]
    assert conf == sorted(conf)
    assert "least confident first" in viewer.auto.suggestion_info.text()
    # accept the three least confident with the keyboard
    view = viewer.auto.suggestions.view
    view.setFocus()
    viewer.auto.suggestions.select_keys(["0", "1", "2"])
    first = viewer.auto.selected_suggestions()
    qtbot.keyClick(view, Qt.Key.Key_A)
    store = LabelStore(project)
    for sug in first:
        label = store.get("kto", "agent-cart", sug.episode, sug.step)
        assert label is not None and label.value == sug.value and label.source == "auto"
    assert len(viewer.auto.suggestions.model.records) == total - 63
    # correct two: the opposite label, by hand
    viewer.auto.suggestions.select_keys(["0", "1"])
    two = viewer.auto.selected_suggestions()
    qtbot.keyClick(view, Qt.Key.Key_C)
    for sug in two:
        label = store.get("kto", "agent-cart", sug.episode, sug.step)
        assert label is not None and label.value != sug.value
        assert label.source == "manual"
    assert viewer.auto.agreement_points()[1] == [1.0, 0.0]
    # undo the correction: the two are suggestions again
    qtbot.keyClick(view, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    assert all(store.get("kto", "agent-cart", s.episode, s.step) is None for s in two)
    assert len(viewer.auto.suggestions.model.records) == total - 63
    store.close()
    with qtbot.waitSignal(viewer.retrain_requested) as asked:
        viewer.auto.retrain_button.click()
    config = asked.args[0]
    assert config["agent"] == "control"
    assert validate(config).traces == config["traces"]
