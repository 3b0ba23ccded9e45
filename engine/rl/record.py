"""Videos of an agent (issue 31, item 4): a saved policy played in its env,
its frames encoded as they come to MP4 (H.264) or GIF by the ffmpeg that
``imageio-ffmpeg`` bundles, which runs as a process of its own beside the
play. The ``rl.record`` job does it with progress and Stop, for the Models
workspace's "Record video…"; ``rl-studio-engine record POLICY.zip --out
FILE.mp4`` does it from a shell. The file is written under a temporary name
and renamed into place when complete: a stop, a failure or a crash leaves no
half-written video.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine.errors import ConfigError, EngineError
from engine.jobs.context import JobContext
from engine.jobs.registry import job_kind
from engine.settings import build, setting

VIDEO_SUFFIXES = (".mp4", ".gif")
DEFAULT_FPS = 30
"""Frames a second when neither the settings nor the env's ``render_fps`` say."""
VIDEO_FILE = "video.mp4"
"""The video in the run folder when no ``out`` is given."""
GIF_PALETTE = "split[a][b];[a]palettegen=stats_mode=single[p];[b][p]paletteuse=new=1"
"""ffmpeg's filters for a GIF: each frame with a palette of its own colours
(a fixed 3-3-2 palette turned CartPole's black track yellow), frame by frame,
so nothing waits for the whole video."""


@dataclass(frozen=True)
class RecordConfig:
    """Settings of an ``rl.record`` job."""

    model: str | None = setting(None, label="Policy file")
    """The stable-baselines3 policy file (``model.zip``)."""
    env: str | None = setting(None, label="Environment")
    """The env id to play in (None: the env the run that saved the policy
    trained on, from the ``state.json`` beside it)."""
    episodes: int = setting(3, min=1, max=1000, unit="episodes")
    """Episodes recorded one after another."""
    out: str | None = setting(None, label="Output file")
    """The ``.mp4`` or ``.gif`` file to write (None: ``video.mp4`` in the run
    folder)."""
    fps: int | None = setting(None, min=1, max=240, unit="frames/s")
    """Frames a second of the video (None: the env's ``render_fps``)."""
    deterministic: bool = setting(True)
    """Play the policy's most likely action (False: sample as in training)."""
    seed: int = setting(0, min=0)
    """Seed of the first episode's reset; episode i resets with seed + i."""
    max_frames: int = setting(5000, min=1, max=1_000_000, unit="frames")
    """The video ends here even if episodes remain."""


@dataclass(frozen=True)
class Recording:
    """What :func:`record_video` wrote."""

    file: Path
    frames: int
    fps: int
    returns: list[float]
    size: tuple[int, int]
    """(width, height) in pixels."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": str(self.file),
            "frames": self.frames,
            "fps": self.fps,
            "seconds": self.frames / self.fps,
            "episodes": len(self.returns),
            "returns": self.returns,
            "width": self.size[0],
            "height": self.size[1],
        }


def trained_env(model: Path) -> str | None:
    """The env id the ``state.json`` beside a checkpoint's ``model.zip`` names."""
    from engine.rl.policy import state_beside

    env = state_beside(model).get("env")
    return env if isinstance(env, str) and env else None


def video_suffix(out: str | Path, field: str = "out") -> str:
    """``.mp4`` or ``.gif``, from the file name (else a ConfigError)."""
    suffix = Path(out).suffix.lower()
    if suffix not in VIDEO_SUFFIXES:
        raise ConfigError(
            field, f"{field} must name a .mp4 or .gif file, not {Path(out).name!r}."
        )
    return suffix


def validate(config: Any) -> RecordConfig:
    cfg = build(RecordConfig, config, "the record job")
    from engine.rl.policy import policy_file

    model = policy_file(cfg.model, "to record")
    if cfg.out is not None:
        video_suffix(cfg.out)
    env = cfg.env or trained_env(model)
    if env is None:
        from engine.rl.policy import STATE_FILE

        raise ConfigError(
            "env",
            f"env is required: {model.name} has no {STATE_FILE} beside it naming "
            "the env it was trained on.",
        )
    return replace(cfg, env=env)


@job_kind(
    "rl.record",
    check=validate,
    label="Record video",
    group="evaluation",
    progress_unit="frames",
)
def run(ctx: JobContext, cfg: RecordConfig) -> dict[str, Any]:
    """Plays a saved policy and records its frames as an MP4 or GIF."""
    from engine.rl.env_info import register_designed_envs
    from engine.store.paths import chosen_path

    register_designed_envs(ctx.project_dir)
    out = chosen_path(ctx.project_dir, cfg.out) if cfg.out else ctx.run_dir / VIDEO_FILE
    recording = record_video(
        cfg,
        out,
        project_dir=ctx.project_dir,
        progress=ctx.progress,
        should_stop=lambda: ctx.should_stop,
        log=ctx.log,
    )
    if recording is None:
        return {"status": "stopped", "reason": "stopped before the video was complete"}
    return recording.to_dict()


Progress = Callable[[float, float, str], None]


def record_video(
    cfg: RecordConfig,
    out: Path,
    *,
    project_dir: str | os.PathLike[str] | None = None,
    progress: Progress = lambda done, total, message: None,
    should_stop: Callable[[], bool] = lambda: False,
    log: Callable[[str], None] = lambda text: None,
    env_kwargs: Mapping[str, Any] | None = None,
) -> Recording | None:
    """Play the validated ``cfg``'s policy in its env (made with
    ``env_kwargs``, a training run's) and write the frames to ``out``
    (``.mp4`` or ``.gif``); None when ``should_stop`` ended it first
    (nothing is left at ``out`` then)."""
    from engine.envs.render import make_for_frames
    from engine.rl.policy import load_policy

    assert cfg.model is not None and cfg.env is not None  # validate fills them
    suffix = video_suffix(out)
    episodes, max_frames = cfg.episodes, cfg.max_frames
    policy = load_policy(Path(cfg.model).expanduser(), project_dir=project_dir)
    if policy.notice:
        log(policy.notice)
    made = make_for_frames(cfg.env, **dict(env_kwargs or {}))
    env = made.env
    try:
        if made.note:
            raise EngineError(made.note)
        policy.check_env(env, cfg.env)
        rate = cfg.fps or int((env.metadata or {}).get("render_fps") or DEFAULT_FPS)
        limit = env.spec.max_episode_steps if env.spec else None
        total = min(max_frames, episodes * (limit + 1)) if limit else max_frames
        part = out.with_name(f".{out.name}.part")
        out.parent.mkdir(parents=True, exist_ok=True)
        encoder = _Encoder(part, suffix, rate)
        returns: list[float] = []
        try:
            for episode in range(episodes):
                obs, _ = env.reset(seed=cfg.seed + episode)
                policy.start_episode()
                encoder.add(env.render())
                done, ret = False, 0.0
                while not done and encoder.frames < max_frames:
                    if should_stop():
                        return None
                    action = policy.act(obs, env, deterministic=cfg.deterministic)
                    obs, reward, terminated, truncated, _ = env.step(action)
                    ret += float(reward)
                    done = bool(terminated or truncated)
                    encoder.add(env.render())
                    progress(
                        encoder.frames, total, f"episode {episode + 1} of {episodes}"
                    )
                returns.append(ret)
                log(
                    f"episode {episode + 1}: return {ret:.4g}, "
                    f"{encoder.frames} frames so far"
                )
                if encoder.frames >= max_frames:
                    log(f"stopped at max_frames ({max_frames}) with the video full")
                    break
            encoder.finish()
            os.replace(part, out)
        finally:
            encoder.abort()
            part.unlink(missing_ok=True)
    finally:
        env.close()
    progress(encoder.frames, encoder.frames, "done")
    return Recording(out, encoder.frames, rate, returns, encoder.size)


OUTPUT_OPTIONS = {
    ".mp4": ("-vcodec", "libx264", "-pix_fmt", "yuv420p", "-preset", "ultrafast",
             "-crf", "23", "-threads", "1", "-f", "mp4"),
    ".gif": ("-vcodec", "gif", "-pix_fmt", "pal8", "-vf", GIF_PALETTE, "-f", "gif"),
}  # fmt: skip
"""ffmpeg's output options by the video's suffix (the part file's name says
no format). For an MP4, x264's ultrafast preset on one thread keeps the
encoder ahead of the play on one core and leaves the other to the play."""

PIPE_BYTES = 1 << 20
"""ffmpeg's input pipe is made this large where the system lets it (Linux's
limit for users: 1 MiB): a whole 600x400 frame fits, so writing one rarely
waits for ffmpeg to read the one before."""


class _Encoder:
    """Frames to ffmpeg as they come. A thread of its own writes them into
    ffmpeg's pipe, so the play goes on while ffmpeg (its own process) reads
    and encodes: written from the playing thread, each frame (600x400 RGB,
    720 KB, through a 64 KB pipe) held the play until ffmpeg had read it,
    and recording took twice the time of playing."""

    QUEUED_FRAMES = 16
    """Frames waiting for the pipe at most (CartPole's: 11 MB)."""

    def __init__(self, path: Path, suffix: str, fps: int) -> None:
        self.path, self.suffix, self.fps = path, suffix, fps
        self.frames = 0
        self.size = (0, 0)
        self._process: subprocess.Popen[bytes] | None = None
        self._errors: Any = None
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=self.QUEUED_FRAMES)
        self._feeder: threading.Thread | None = None
        self._failure: Exception | None = None

    def add(self, frame: Any) -> None:
        import numpy as np

        from engine.envs.render import frame_problem

        problem = frame_problem(frame)
        if problem is not None:
            raise EngineError(f"A frame could not be recorded: {problem}.")
        # H.264 in yuv420p wants even sides: one edge row or column more.
        h, w = frame.shape[:2]
        if h % 2 or w % 2:
            frame = np.pad(frame, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")
        if self._process is None:
            self._start(frame.shape[1], frame.shape[0])
        elif (frame.shape[1], frame.shape[0]) != self.size:
            raise EngineError(
                f"The env's frames changed size from {self.size[0]}x{self.size[1]} "
                f"to {frame.shape[1]}x{frame.shape[0]} pixels, which a video "
                "cannot hold."
            )
        self._raise_failure()
        # A copy: the feeder writes it later, and an env may draw into one
        # buffer again and again.
        self._queue.put(np.array(frame[..., :3], dtype=np.uint8, order="C"))
        self.frames += 1

    def _feed(self) -> None:
        """The feeder thread: queued frames into the pipe until ``None``; after
        a failure it only empties the queue, so ``add`` never waits on it."""
        while (frame := self._queue.get()) is not None:
            if self._failure is None:
                try:
                    self._process.stdin.write(frame)  # type: ignore[union-attr]
                except (OSError, ValueError) as exc:  # ffmpeg ended: add says so
                    self._failure = exc

    def _raise_failure(self) -> None:
        if self._failure is not None:
            self._stop_feeder(drop_queued=True)
            assert self._process is not None
            self._process.wait()
            raise EngineError(
                f"ffmpeg stopped encoding the video: {self._ffmpeg_said()}."
            )

    def _stop_feeder(self, *, drop_queued: bool) -> None:
        if self._feeder is None:
            return
        if drop_queued:
            with contextlib.suppress(queue.Empty):
                while True:
                    self._queue.get_nowait()
        self._queue.put(None)
        self._feeder.join()
        self._feeder = None

    def _start(self, width: int, height: int) -> None:
        try:
            import imageio_ffmpeg
        except ImportError:
            raise EngineError(
                "Recording needs imageio-ffmpeg (pip install imageio-ffmpeg)."
            ) from None
        self.size = (width, height)
        command = [
            imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-v", "error",
            "-f", "rawvideo", "-pix_fmt", "rgb24", "-s", f"{width}x{height}",
            "-r", str(self.fps), "-i", "-", "-an",
            *OUTPUT_OPTIONS[self.suffix], str(self.path),
        ]  # fmt: skip
        # Its complaints go to a file (closed by _close): a pipe nobody reads
        # while frames are written could fill and stop it.
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=self._errors,
            # A Ctrl-C in the terminal stops the play, which ends the video;
            # it must not kill the encoder first.
            start_new_session=True,
        )
        _widen_pipe(self._process.stdin)
        self._feeder = threading.Thread(
            target=self._feed, name="video-encoder-feed", daemon=True
        )
        self._feeder.start()

    def _ffmpeg_said(self) -> str:
        """ffmpeg's first complaint (the cause; the lines after it say what
        failed because of it), or its exit status."""
        assert self._process is not None and self._errors is not None
        self._errors.seek(0)
        said = self._errors.read().decode(errors="replace").splitlines()
        # "[vost#0:0 @ 0x55...] Unknown encoder 'x'": the part before is ffmpeg's
        lines = [re.sub(r"^\[[^]]* @ 0x[0-9a-f]+\] ", "", line) for line in said]
        first = next((line.strip() for line in lines if line.strip()), "")
        return first.rstrip(".") or f"exit status {self._process.returncode}"

    def finish(self) -> None:
        if self._process is None:
            raise EngineError("The env gave no frame to record.")
        self._stop_feeder(drop_queued=False)
        with contextlib.suppress(OSError):
            self._process.stdin.close()  # type: ignore[union-attr]
        self._process.wait()
        if self._failure is not None or self._process.returncode != 0:
            raise EngineError(
                f"ffmpeg could not encode the video: {self._ffmpeg_said()}."
            )
        self._close()

    def abort(self) -> None:
        """End a stopped or broken recording: ffmpeg killed, its file is
        removed by the caller."""
        if self._process is not None:
            # Killed first: a feeder held by a full pipe then fails and ends.
            self._process.kill()
            self._stop_feeder(drop_queued=True)
            self._process.wait()
            self._close()

    def _close(self) -> None:
        assert self._process is not None
        with contextlib.suppress(OSError):
            self._process.stdin.close()  # type: ignore[union-attr]
        if self._errors is not None:
            self._errors.close()
        self._process = self._errors = None


def _widen_pipe(pipe: Any) -> None:
    """Make ``pipe`` :data:`PIPE_BYTES` large where the system can (Linux)."""
    try:
        import fcntl

        fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # the default pipe: slower, as good
