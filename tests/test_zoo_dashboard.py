"""An Atari game and a MuJoCo robot trained from the Training dashboard
against the real engine, their curves arriving live. With
``RLSTUDIO_SCREENSHOTS=DIR`` the window is saved mid-run as
``zoo-<family>-live.png`` (docs/screenshots/, by hand)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from studio_harness import build_main_window, start_on_project

from studio.main_window import MainWindow

pytestmark = pytest.mark.slow

RUNS = {
    # RL Zoo's atari entry (CnnPolicy, 8 envs) with rollouts of 8 x 32 steps,
    # so that curves grow in a short run: (env, steps, n_steps, curve, points).
    "atari": ("PongNoFrameskip-v4", 2048, 32, "train/value_loss", 5),
    # RL Zoo's HalfCheetah-v4 entry (1 env); episodes of 1,000 steps, the
    # mean reward from the 9th rollout on over two of them.
    "mujoco": ("HalfCheetah-v5", 4096, 128, "rollout/ep_rew_mean", 9),
}


@pytest.fixture
def window(qtbot, tmp_path: Path) -> Iterator[MainWindow]:  # type: ignore[no-untyped-def]
    win = build_main_window(qtbot, tmp_path)
    start_on_project(qtbot, win, tmp_path / "project", create=True)
    win.resize(1280, 800)
    win.show()
    win.set_workspace("training")
    yield win
    win.session.client.stop()


@pytest.mark.parametrize("family", list(RUNS))
def test_a_zoo_env_trains_live_in_the_dashboard(  # type: ignore[no-untyped-def]
    qtbot, window: MainWindow, family: str
) -> None:
    env_id, steps, n_steps, curve, points = RUNS[family]
    training = window.workspaces["training"]
    dialog = training.open_run_dialog(
        {
            "env": env_id,
            "algo": "PPO",
            "total_steps": steps,
            "eval_every_steps": 0,
            "hyperparameters": {"n_steps": n_steps},
        }
    )
    qtbot.waitUntil(
        lambda: "hyperparameters.learning_rate" in dialog.form.values(), timeout=30_000
    )
    assert dialog.form.is_valid(), dialog.form.errors()
    with qtbot.waitSignal(dialog.accepted, timeout=30_000):
        dialog.buttons.accepted.emit()
    run_id = dialog.started_run_id
    assert run_id
    state, store = window.session.state, window.session.metrics
    training.table.select_keys([run_id])

    # Live: its curves growing while the run still trains.
    qtbot.waitUntil(
        lambda: (
            store.length(run_id, curve) >= points
            or state.run(run_id).get("status") != "running"
        ),
        timeout=300_000,
    )
    log = Path(state.path) / "runs" / run_id / "log.txt"
    assert state.run(run_id).get("status") == "running", log.read_text()[-3000:]
    qtbot.waitUntil(lambda: "Losses" in training.plots.group_titles(), timeout=10_000)
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")
    if shots:
        window.grab().save(str(Path(shots) / f"zoo-{family}-live.png"))
    qtbot.waitUntil(
        lambda: state.run(run_id).get("status") != "running", timeout=300_000
    )
    assert state.run(run_id).get("status") == "completed", state.run(run_id)
    assert store.length(run_id, curve) >= points
    qtbot.waitUntil(lambda: len(state.models) == 1, timeout=10_000)
    assert state.models[0]["env"] == env_id
