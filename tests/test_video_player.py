"""widgets.video_player: a real MP4 (a few frames of distinct colours, written
by imageio-ffmpeg as the engine's recorder writes them) decodes off the GUI
thread and plays in the widget; a truncated or missing file is one sentence
(issue 31, item 4)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from widgets import video_player
from widgets.video_player import VideoPlayer, decoded_width

COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255)]
FPS = 10
SIZE = (64, 48)


def write_video(path: Path, colours: list[tuple[int, int, int]] = COLOURS) -> Path:
    """An H.264 MP4 of one flat colour a frame."""
    import imageio_ffmpeg

    writer = imageio_ffmpeg.write_frames(str(path), SIZE, fps=FPS)
    writer.send(None)
    for colour in colours:
        writer.send(np.full((SIZE[1], SIZE[0], 3), colour, np.uint8).tobytes())
    writer.close()
    return path


def centre(player: VideoPlayer) -> tuple[int, int, int]:
    image = player.viewer.image.pixmap().toImage()
    colour = image.pixelColor(image.width() // 2, image.height() // 2)
    return colour.red(), colour.green(), colour.blue()


def near(got: tuple[int, int, int], wanted: tuple[int, int, int]) -> bool:
    """Equal but for the few levels H.264's colour conversion costs."""
    return all(abs(g - w) <= 12 for g, w in zip(got, wanted, strict=True))


@pytest.fixture
def player(qtbot) -> VideoPlayer:
    widget = VideoPlayer()
    qtbot.addWidget(widget)
    widget.resize(320, 280)
    widget.show()
    return widget


def decode(qtbot, player: VideoPlayer, path: Path, autoplay: bool = True) -> None:
    with qtbot.waitSignal(
        player.decoding_changed,
        check_params_cb=lambda decoding: not decoding,
        timeout=10_000,
    ):
        player.set_video(path, autoplay=autoplay)


def test_an_mp4_plays_frame_by_frame_and_pauses(qtbot, player, tmp_path) -> None:
    video = write_video(tmp_path / "eval-0000000100.mp4")
    decode(qtbot, player, video)
    assert player.viewer.frame_count() == len(COLOURS)
    assert player.status_text() == f"{video.name}: 5 frames at 10 frames/s"
    assert player.video() == video and player.viewer.is_playing()
    # Playing: the frames go by and come round to the first.
    seen: set[int] = set()
    player.frame_changed.connect(seen.add)
    qtbot.waitUntil(lambda: seen >= {1, 4, 0}, timeout=5000)
    player.set_playing(False)
    assert not player.viewer.is_playing()
    with qtbot.assertNotEmitted(player.frame_changed, wait=3 * 1000 // FPS):
        pass  # paused: three frames' time and no frame changes
    # Frame k, by the slider: its pixels, the counter.
    for k in (3, 1):
        with qtbot.waitSignal(player.frame_changed) as changed:
            player.viewer.slider.setValue(k)
        assert changed.args == [k]
        assert player.viewer.counter.text() == f"{k + 1} / 5"
        assert near(centre(player), COLOURS[k]), (k, centre(player))


def test_the_player_follows_the_last_video_asked_for(qtbot, player, tmp_path) -> None:
    first = write_video(tmp_path / "a.mp4", COLOURS[:2] * 20)
    second = write_video(tmp_path / "b.mp4", [(0, 0, 255)] * 3)
    player.set_video(first)
    decode(qtbot, player, second, autoplay=False)
    assert player.viewer.frame_count() == 3 and player.video() == second
    assert not player.viewer.is_playing() and player.viewer.counter.text() == "1 / 3"
    assert near(centre(player), (0, 0, 255))
    opened: list[str] = []
    player.open_requested.connect(opened.append)
    player.open_button.click()
    assert opened == [str(second)]


@pytest.mark.parametrize(
    ("make", "sentence"),
    [
        (
            lambda p: p.write_bytes(write_video(p).read_bytes()[:600]),
            "cannot be played: it is incomplete or not a video.",
        ),
        (lambda p: None, "cannot be played: the file does not exist."),
    ],
    ids=["truncated", "missing"],
)
def test_a_bad_file_is_one_sentence(qtbot, player, tmp_path, make, sentence) -> None:
    video = tmp_path / "eval-0000000200.mp4"
    make(video)
    decode(qtbot, player, video)
    assert player.status_text() == f"{video.name} {sentence}"
    assert player.viewer.image.text() == player.status_text()
    assert player.viewer.frame_count() == 0 and not player.viewer.is_playing()


def test_a_video_past_the_budget_shows_its_first_frames(
    qtbot, tmp_path, monkeypatch
) -> None:
    video = write_video(tmp_path / "long.mp4")
    # Frames at their own size, two frames' worth of memory.
    monkeypatch.setattr(video_player, "decoded_width", lambda size, *_: size[0])
    player = VideoPlayer(budget=2 * SIZE[0] * SIZE[1] * 3)
    qtbot.addWidget(player)
    decode(qtbot, player, video)
    assert player.viewer.frame_count() == 2
    assert player.status_text() == "long.mp4 is long: its first 2 frames are shown."


def test_decoded_width_fits_the_budget_and_the_player() -> None:
    budget = video_player.BUDGET_BYTES
    assert decoded_width((600, 400), 1000, budget, 480) == 316
    assert decoded_width((600, 400), 100, budget, 480) == 480
    assert decoded_width((64, 48), 5, budget, 480) == 64
    width = decoded_width((600, 400), 1000, budget, 480)
    assert 1000 * width * (width * 2 // 3) * 3 <= budget


def test_a_wide_video_is_decoded_at_the_players_width(qtbot, tmp_path) -> None:
    video = write_video(tmp_path / "wide.mp4")
    player = VideoPlayer(widest=32)
    qtbot.addWidget(player)
    player.resize(320, 280)
    player.show()
    decode(qtbot, player, video, autoplay=False)
    assert player.viewer.frame_count() == len(COLOURS)
    assert player.viewer.frame(0).shape == (24, 32, 3)
    assert near(centre(player), COLOURS[0])


def test_a_hidden_player_pauses_until_shown(qtbot, player, tmp_path) -> None:
    decode(qtbot, player, write_video(tmp_path / "a.mp4"))
    assert player.viewer.is_playing()
    player.hide()
    assert not player.viewer.is_playing()
    player.show()
    assert player.viewer.is_playing()
    player.set_playing(False)  # a pause chosen stays through hiding
    player.hide()
    player.show()
    assert not player.viewer.is_playing()
