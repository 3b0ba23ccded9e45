"""A short video of the policy after each evaluation of a training run
(issue 31, item 4), when the run asks for one (``eval_video_episodes``).

The trainer calls :meth:`EvalVideos.record` after it has logged an
evaluation: the live model (and its ``VecNormalize`` statistics) is saved
into a scratch folder and played by :func:`engine.rl.record.record_video`,
the one recorder, so the video shows what Models → Record video… would show
of that checkpoint. Each video lands in the run folder as
``videos/eval-<step>.mp4`` (renamed into place when whole), goes to
TensorBoard as an animated GIF in an image summary (``eval/video``, the way
TensorBoard shows videos) and, at the end of the run, to MLflow with the
run's other records (:mod:`engine.jobs.tracking`). An env that cannot draw
costs one sentence in the log and no more videos; a video never ends the
training.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import contract
from engine.errors import EngineError

MAX_FRAMES = 1000
"""Longest video of an evaluation, in frames (``huggingface_sb3``'s length)."""
TAG = "eval/video"
"""The TensorBoard image summary the videos go to."""
GIF_WIDTH = 240
"""Width of TensorBoard's GIF in pixels (its height keeps the aspect)."""
GIF_FPS = 15


def video_name(step: int) -> str:
    """``eval-<step>.mp4``, sorting in step order (named by the contract,
    which the studio's run page reads them by)."""
    return contract.eval_video_name(step)


class EvalVideos:
    """Records a run's evaluation videos (see the module's docstring)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        env: str,
        env_kwargs: dict[str, Any],
        episodes: int,
        seed: int,
        project_dir: Path | None,
        tensorboard_dir: Path,
        log: Callable[[str], None],
        should_stop: Callable[[], bool],
    ) -> None:
        self.folder = run_dir / contract.VIDEOS_FOLDER
        self.env, self.env_kwargs = env, env_kwargs
        self.episodes, self.seed = episodes, seed
        self.project_dir = project_dir
        self.tensorboard_dir = tensorboard_dir
        self.log, self.should_stop = log, should_stop
        self.disabled = False
        self._events: Path | None = None

    def record(self, model: Any, normalization: Any, step: int) -> Path | None:
        """A video of ``model`` at ``step`` (``normalization``: the training
        ``VecNormalize``, or None); None when none was made."""
        from engine.rl.policy import EVAL_SEED_OFFSET, VECNORMALIZE_FILE
        from engine.rl.record import RecordConfig, record_video

        if self.disabled:
            return None
        self.folder.mkdir(parents=True, exist_ok=True)
        out = self.folder / video_name(step)
        scratch = contract.temp_path(self.folder / f"policy-{step}")
        scratch.mkdir(parents=True)
        try:
            model.save(scratch / "model.zip")
            if normalization is not None:
                normalization.save(str(scratch / VECNORMALIZE_FILE))
            cfg = RecordConfig(
                model=str(scratch / "model.zip"),
                env=self.env,
                episodes=self.episodes,
                seed=self.seed + EVAL_SEED_OFFSET,
                max_frames=MAX_FRAMES,
            )
            made = record_video(
                cfg,
                out,
                project_dir=self.project_dir,
                should_stop=self.should_stop,
                env_kwargs=self.env_kwargs,
            )
        except EngineError as exc:
            self.disabled = True
            self.log(f"no evaluation videos: {exc}")
            return None
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        if made is None:
            return None
        self.log(
            f"video of the evaluation at step {step}: {out.name}, {made.frames} "
            f"frames, returns {', '.join(f'{r:.4g}' for r in made.returns)}"
        )
        self._to_tensorboard(out, step)
        return out

    def _to_tensorboard(self, video: Path, step: int) -> None:
        """The video as a GIF in an image summary (what TensorBoard plays)."""
        try:
            gif, size = _gif_of(video)
            self._write_event(step, gif, size)
        except (OSError, subprocess.SubprocessError, EngineError) as exc:
            self.log(f"the video at step {step} is not in TensorBoard: {exc}")

    def _write_event(self, step: int, gif: bytes, size: tuple[int, int]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary

        if self._events is None:
            self.tensorboard_dir.mkdir(parents=True, exist_ok=True)
            # A file of its own beside the scalars' (TensorBoard reads every
            # event file of the folder as one run).
            self._events = self.tensorboard_dir / (
                f"events.out.tfevents.{int(time.time()):010d}."
                f"{socket.gethostname()}.{os.getpid()}.videos"
            )
            _append(
                self._events, Event(wall_time=time.time(), file_version="brain.Event:2")
            )
        image = Summary.Image(
            height=size[1], width=size[0], colorspace=3, encoded_image_string=gif
        )
        summary = Summary(value=[Summary.Value(tag=TAG, image=image)])
        _append(self._events, Event(wall_time=time.time(), step=step, summary=summary))


def _append(path: Path, event: Any) -> None:
    from engine.rl.tensorboard import masked_crc32c

    data = event.SerializeToString()
    header = len(data).to_bytes(8, "little")
    with open(path, "ab") as fh:
        fh.write(
            header
            + masked_crc32c(header).to_bytes(4, "little")
            + data
            + masked_crc32c(data).to_bytes(4, "little")
        )


def _gif_of(video: Path) -> tuple[bytes, tuple[int, int]]:
    """A small GIF of ``video`` by the bundled ffmpeg, and its size."""
    import imageio_ffmpeg

    from engine.rl.record import GIF_PALETTE

    gif = video.with_name(f".{video.stem}.gif")
    try:
        subprocess.run(
            [
                imageio_ffmpeg.get_ffmpeg_exe(),
                "-loglevel", "error", "-y", "-i", str(video),
                "-vf", f"fps={GIF_FPS},scale={GIF_WIDTH}:-2,{GIF_PALETTE}",
                "-f", "gif", str(gif),
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )  # fmt: skip
        data = gif.read_bytes()
    finally:
        gif.unlink(missing_ok=True)
    if data[:6] not in (b"GIF87a", b"GIF89a"):
        raise EngineError("ffmpeg wrote no GIF")
    width = int.from_bytes(data[6:8], "little")
    height = int.from_bytes(data[8:10], "little")
    return data, (width, height)
