"""What the agent sees: an image env's observations beside its screen.

The widget (widgets/image_stack.py) draws a stack's frames side by side,
pixel for pixel; the designer's Preview and Models' Play show a real Pong
preview's observations (engine.envs.preview) in it, following the frame
slider, and hide it for CartPole, whose observations are numbers.

With ``RLSTUDIO_SCREENSHOTS=DIR`` the Preview showing Pong's agent view is
saved as ``DIR/agent-view-pong.png`` (docs/screenshots/, by hand).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.envs.preview import PreviewConfig, preview
from studio.environments.preview import EnvPreviewPanel
from studio.model_manager.run_results import RunResultsPane
from widgets.image_stack import ImageStackView

ATARI = "PongNoFrameskip-v4"
FRAMES = 120
"""Frames of Pong recorded: past the serve, so the ball moves in the stack."""


def shown_pixels(view: ImageStackView, i: int) -> np.ndarray:
    """Frame ``i`` of ``view`` as drawn on screen, read back at the centre of
    each of its pixels (one grey value a pixel)."""
    h, w = view.images()[i].shape[:2]
    grabbed = view.grab().toImage()
    rect = view.tile_rect(i)
    sx, sy = rect.width() / w, rect.height() / h
    return np.array(
        [
            [
                grabbed.pixelColor(
                    rect.left() + int((x + 0.5) * sx), rect.top() + int((y + 0.5) * sy)
                ).red()
                for x in range(w)
            ]
            for y in range(h)
        ]
    )


def test_a_stack_is_drawn_frame_by_frame_pixel_for_pixel(qtbot) -> None:  # type: ignore[no-untyped-def]
    view = ImageStackView("Agent's view")
    qtbot.addWidget(view)
    view.resize(400, 160)
    rng = np.random.default_rng(0)
    stacks = rng.integers(0, 256, (3, 6, 5, 4), dtype=np.uint8)
    view.set_stacks(stacks, 1, "stack of 4 grey frames, oldest first")
    view.show()
    qtbot.waitExposed(view)
    assert view.labels() == ["t-3", "t-2", "t-1", "t"]
    assert view.heading() == "Agent's view · stack of 4 grey frames, oldest first"
    for k in (0, 2):
        view.show_stack(k)
        assert view.current() == k
        for i in range(4):
            assert np.array_equal(view.images()[i], stacks[k, ..., i])
            assert np.array_equal(shown_pixels(view, i), stacks[k, ..., i])
    # Scaled by whole pixels, side by side without overlap.
    rects = [view.tile_rect(i) for i in range(4)]
    assert rects[0].width() % 5 == 0 and rects[0].width() // 5 >= 2
    assert all(a.right() < b.left() for a, b in itertools.pairwise(rects))
    # RGB frames stacked: one image per three channels.
    view.set_stacks(rng.integers(0, 256, (1, 4, 4, 6), dtype=np.uint8), 3)
    assert [a.shape for a in view.images()] == [(4, 4, 3)] * 2
    assert view.labels() == ["t-1", "t"]
    view.set_stacks(None, empty_text="No observations here")
    assert view.images() == [] and view.stack_count() == 0


@pytest.fixture(scope="module")
def pong(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One real episode of Pong, its first frames and observations saved."""
    out = tmp_path_factory.mktemp("pong") / "frames.npz"
    return preview(
        ATARI,
        PreviewConfig(episodes=1, frames=FRAMES, max_trace_steps=FRAMES),
        frames_path=out,
    )


def moving_frame(observations: np.ndarray) -> int:
    """A frame whose four stacked frames all differ (the ball in flight)."""
    for k in range(len(observations) - 1, 0, -1):
        stack = observations[k]
        if all(not np.array_equal(stack[..., i], stack[..., i + 1]) for i in range(3)):
            return k
    pytest.fail(f"no frame of {len(observations)} shows four different frames")


def test_the_preview_shows_what_pong_gives_the_agent_and_follows_the_slider(
    qtbot, pong: dict[str, Any]
) -> None:
    panel = EnvPreviewPanel()
    qtbot.addWidget(panel)
    panel.resize(1280, 640)
    panel.show()
    qtbot.waitExposed(panel)
    panel.show_result(pong)
    view = panel.agent_view
    observations = np.load(pong["frames"])["observations"]
    assert view.isVisibleTo(panel) and panel.frames.isVisibleTo(panel)
    # Drawn bigger than the agent's 84 px, once the chart row is laid out.
    qtbot.waitUntil(lambda: view.tile_rect(0).height() > 84, timeout=5000)
    assert view.stack_count() == panel.frames.frame_count() == FRAMES
    assert "stack of 4 grey frames, oldest first" in view.heading()
    assert view.labels() == ["t-3", "t-2", "t-1", "t"]
    # The first row is selected: the reset's stack, three empty frames first.
    assert view.current() == 0
    assert [img.any() for img in view.images()] == [False, False, False, True]
    k = moving_frame(observations)
    panel.frames.slider.setValue(k)
    assert view.current() == k
    for i in range(4):
        assert np.array_equal(view.images()[i], observations[k, ..., i])
        assert np.array_equal(shown_pixels(view, i), observations[k, ..., i])
    # Choosing a step's row shows the frame and stack before its action.
    row = next(r for r in panel.trace_table.model.records if r["step"] == k)
    panel.trace_table.select_keys([row["id"]])
    assert panel.frames.current() == view.current() == k - 1
    panel.frames.slider.setValue(k)
    shots = os.environ.get("RLSTUDIO_SCREENSHOTS")  # docs/screenshots/, by hand
    if shots:
        panel.grab().save(str(Path(shots) / "agent-view-pong.png"))


def test_play_shows_the_agents_view_beside_the_screen(
    qtbot, pong: dict[str, Any]
) -> None:
    pane = RunResultsPane()
    qtbot.addWidget(pane)
    pane.resize(1100, 500)
    pane.show()
    qtbot.waitExposed(pane)
    pane.show_play(pong)
    observations = np.load(pong["frames"])["observations"]
    assert pane.agent_view.isVisibleTo(pane)
    # Played, the view follows each frame shown.
    pane.frames.set_playing(True)
    qtbot.waitUntil(lambda: pane.frames.current() >= 2, timeout=5000)
    pane.frames.set_playing(False)
    k = pane.frames.current()
    assert pane.agent_view.current() == k
    assert np.array_equal(pane.agent_view.images()[3], observations[k, ..., 3])
    # A step chosen in the trace shows the frame and stack before its action.
    row = next(r for r in pane.trace_table.model.records if r["step"] == 5)
    pane.trace_table.select_keys([row["id"]])
    assert pane.frames.current() == pane.agent_view.current() == 4
    assert np.array_equal(pane.agent_view.images()[0], observations[4, ..., 0])


def test_cartpoles_numbers_show_no_agents_view(qtbot, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    data = preview(
        "CartPole-v1",
        PreviewConfig(episodes=1, frames=3),
        frames_path=tmp_path / "frames.npz",
    )
    panel = EnvPreviewPanel()
    qtbot.addWidget(panel)
    panel.show()
    qtbot.waitExposed(panel)
    panel.show_result(data)
    assert panel.frames.isVisibleTo(panel) and panel.frames.frame_count() == 3
    assert not panel.agent_view.isVisibleTo(panel)
    pane = RunResultsPane()
    qtbot.addWidget(pane)
    pane.show_play(data)
    assert pane.frames.frame_count() == 3 and pane.agent_view.isHidden()
