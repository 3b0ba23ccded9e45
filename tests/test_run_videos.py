"""The Training run page's Videos tab (issue 31, item 4): a run folder's
evaluation videos listed newest first with their step and the evaluation's
mean reward from the run's metrics, the one selected playing in the studio,
the list following a live run as it writes new ones. The videos are real
MP4s (a flat colour each) written by imageio-ffmpeg, as the engine's
recorder writes them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, QUrl
from test_video_player import centre, near, write_video

from engine import contract
from studio.engine_client import EngineClient
from studio.session import EVAL_REWARD, Session
from studio.settings import Settings
from studio.state.project_state import ProjectState
from studio.training.run_videos import NO_VIDEOS, eval_videos
from studio.training.workspace import TrainingWorkspace

REWARDS = {1000: 9.5, 2000: 31.25, 3000: 120.0}
COLOURS = {1000: (255, 0, 0), 2000: (0, 255, 0), 3000: (0, 0, 255)}


def make_run(folder: Path, steps: list[int], status: str) -> dict[str, Any]:
    """A run folder whose metrics hold an evaluation at each of ``steps``
    (and training rows between), with a video of each."""
    rows = []
    for step in steps:
        rows.append({"step": step - 500, "time": step / 100, "train/loss": 1.0})
        rows.append({"step": step, "time": step / 100, EVAL_REWARD: REWARDS[step]})
    folder.mkdir(parents=True)
    (folder / contract.METRICS_FILE).write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    videos = folder / contract.VIDEOS_FOLDER
    videos.mkdir()
    for step in steps:
        write_video(videos / contract.eval_video_name(step), [COLOURS[step]] * 4)
    # What is not a whole evaluation video is not listed.
    (videos / f".{contract.eval_video_name(9000)}.tmp-1-abcd").write_bytes(b"")
    (videos / "notes.txt").write_text("")
    return {
        "id": "r1",
        "name": "PPO CartPole-v1 · videos",
        "kind": "rl.train",
        "status": status,
        "run_dir": str(folder),
        "config": {"env": "CartPole-v1", "algo": "PPO", "eval_video_episodes": 1},
    }


def make_workspace(qtbot, tmp_path: Path, runs: list[dict]) -> TrainingWorkspace:  # type: ignore[no-untyped-def]
    settings = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat))
    state = ProjectState()
    ws = TrainingWorkspace(Session(EngineClient(), state, settings))
    qtbot.addWidget(ws)
    ws.resize(1200, 900)
    ws.show()
    state.load_snapshot({"path": str(tmp_path), "name": "p", "runs": runs})  # type: ignore[typeddict-item]
    return ws


def listed(ws: TrainingWorkspace) -> list[tuple[int, float | None]]:
    return [(r["step"], r["reward"]) for r in ws.videos.rows()]


def test_the_run_page_lists_and_plays_its_evaluation_videos(qtbot, tmp_path) -> None:
    run = make_run(tmp_path / "runs" / "r1", [1000, 2000], "running")
    ws = make_workspace(qtbot, tmp_path, [run])
    ws.show_run("r1")
    ws.tabs.setCurrentWidget(ws.videos)
    assert listed(ws) == [(2000, 31.25), (1000, 9.5)]  # newest first
    table = ws.videos.table
    assert table.shown_keys() == [contract.eval_video_name(s) for s in (2000, 1000)]
    assert ws.tabs.tabText(ws.tabs.indexOf(ws.videos)) == "Videos (2)"
    assert table.model.data(table.model.index(0, 1)) == "31.25"

    # Selecting a video plays it in place.
    player = ws.videos.player
    with qtbot.waitSignal(
        player.decoding_changed, check_params_cb=lambda d: not d, timeout=10_000
    ):
        table.select_keys([contract.eval_video_name(1000)])
    assert player.viewer.frame_count() == 4 and player.viewer.is_playing()
    assert near(centre(player), COLOURS[1000])
    opened: list[QUrl] = []
    ws.videos.open_url = opened.append
    player.open_button.click()
    assert [u.toLocalFile() for u in opened] == [
        str(Path(run["run_dir"]) / "videos" / contract.eval_video_name(1000))
    ]

    # The live run evaluates again: its video is listed, with its reward once
    # the metrics have it; what plays goes on.
    videos = Path(run["run_dir"]) / contract.VIDEOS_FOLDER
    write_video(videos / contract.eval_video_name(3000), [COLOURS[3000]] * 4)
    qtbot.waitUntil(lambda: listed(ws)[:1] == [(3000, None)], timeout=5000)  # tick
    ws._session.metrics.append_rows("r1", [{"step": 3000, EVAL_REWARD: 120.0}])
    assert listed(ws) == [(3000, 120.0), (2000, 31.25), (1000, 9.5)]
    assert ws.tabs.tabText(ws.tabs.indexOf(ws.videos)) == "Videos (3)"
    assert player.video() == videos / contract.eval_video_name(1000)
    assert table.selected_keys() == [contract.eval_video_name(1000)]


def test_a_run_without_videos_says_how_to_get_them(qtbot, tmp_path) -> None:
    folder = tmp_path / "runs" / "r1"
    run = make_run(folder, [1000], "completed")
    (folder / contract.VIDEOS_FOLDER / contract.eval_video_name(1000)).unlink()
    other = {**make_run(tmp_path / "runs" / "r2", [2000], "completed"), "id": "r2"}
    ws = make_workspace(qtbot, tmp_path, [run, other])
    ws.show_run("r2")
    assert listed(ws) == [(2000, 31.25)]
    ws.show_run("r1")
    assert listed(ws) == [] and ws.videos.table.empty_label.text() == NO_VIDEOS
    assert ws.tabs.tabText(ws.tabs.indexOf(ws.videos)) == "Videos"
    assert eval_videos(tmp_path / "nowhere") == []


def test_a_truncated_video_is_one_sentence_on_the_page(qtbot, tmp_path) -> None:
    run = make_run(tmp_path / "runs" / "r1", [1000], "completed")
    video = (
        Path(run["run_dir"]) / contract.VIDEOS_FOLDER / contract.eval_video_name(1000)
    )
    video.write_bytes(video.read_bytes()[:500])
    ws = make_workspace(qtbot, tmp_path, [run])
    ws.show_run("r1")
    player = ws.videos.player
    with qtbot.waitSignal(
        player.decoding_changed, check_params_cb=lambda d: not d, timeout=10_000
    ):
        ws.videos.table.select_keys([video.name])
    assert player.status_text() == (
        f"{video.name} cannot be played: it is incomplete or not a video."
    )


def test_models_results_play_a_recorded_mp4_in_the_same_player(qtbot, tmp_path) -> None:
    """Record video…'s MP4 plays in Models' results pane, as on the run
    page (it only offered the desktop's player before)."""
    from studio.model_manager.run_results import RunResultsPane

    video = write_video(tmp_path / "cart.mp4", [COLOURS[2000]] * 6)
    pane = RunResultsPane()
    qtbot.addWidget(pane)
    pane.resize(800, 600)
    pane.show()
    summary = {"file": str(video), "frames": 6, "seconds": 0.6, "fps": 10}
    with qtbot.waitSignal(
        pane.video.decoding_changed, check_params_cb=lambda d: not d, timeout=10_000
    ):
        pane.show_video({**summary, "width": 64, "height": 48, "returns": [6.0]})
    assert pane.video.isVisible() and pane.video.viewer.frame_count() == 6
    assert near(centre(pane.video), COLOURS[2000]) and pane.video.viewer.is_playing()
    assert "cart.mp4" in pane.result_label.text()
    opened: list[QUrl] = []
    pane.open_url = opened.append
    pane.video.open_button.click()
    assert [u.toLocalFile() for u in opened] == [str(video)]
    pane.show_play(None)  # an episode played afterwards takes its place
    assert not pane.video.isVisible() and pane.video.video() is None
