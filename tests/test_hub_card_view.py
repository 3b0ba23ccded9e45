"""The Models workspace's side of sharing on the Hub (issue 31, item 5): Push
to the Hub… is offered for an SB3 policy whose algorithm is known, and a
push's model card (written by engine.rl.hub.model_card) is rendered from its
Markdown in the results pane. With ``RLSTUDIO_SCREENSHOTS=DIR`` the pane is
saved as ``DIR/hub-model-card.png``."""

from __future__ import annotations

import os
from pathlib import Path

from engine.rl.hub import model_card
from studio.model_manager.actions import enabled_actions
from studio.model_manager.run_results import RunResultsPane


def test_push_is_offered_for_a_policy_with_its_algorithm() -> None:
    policy = {"kind": "sb3-policy", "env": "CartPole-v1", "algo": "PPO"}
    assert enabled_actions(policy)["push"]
    assert not enabled_actions({**policy, "algo": ""})["push"]
    assert not enabled_actions({"kind": "gguf", "path": "x.gguf"})["push"]


def test_a_pushed_model_card_is_rendered(qtbot, tmp_path: Path) -> None:
    folder = tmp_path / "hub"
    folder.mkdir()
    settings = {"learning_rate": 0.0003, "n_steps": 64, "total_steps": 256}
    card = model_card("PPO", "CartPole-v1", 104.0, 43.46, 10, settings, "replay.mp4")
    (folder / "README.md").write_text(card)
    pane = RunResultsPane()
    qtbot.addWidget(pane)
    pane.resize(900, 700)
    pane.show()
    pane.show_card(
        {
            "folder": str(folder),
            "repo_id": "org/agent",
            "commit": "337500c7915335ec7ad7e2b0b3d23d831f84e3e5",
            "url": "http://127.0.0.1:9/org/agent",
            "mean_reward": 104.0,
            "std_reward": 43.46,
            "n_eval_episodes": 10,
        }
    )
    assert pane.card.isVisible()
    text = pane.card.toPlainText()
    assert "PPO agent playing CartPole-v1" in text  # the heading, rendered
    assert "**" not in text.split("library_name")[-1].split("Usage")[0]
    assert "Mean reward 104.00 ± 43.46 over 10" in text
    assert "library_name: stable-baselines3" in text  # the metadata block
    assert "learning_rate" in text and "0.0003" in text  # the settings table
    label = pane.result_label.text()
    assert "org/agent" in label and "104.00" in label and "Open on the Hub" in label
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        pane.grab().save(str(Path(shots) / "hub-model-card.png"))
