"""What the GUI and the engine share, declared once: designed-env ids, the
run-folder layout, run statuses, the default Ollama host, atomic writes and
JSON reading, and the records the engine sends (project snapshot rows).

Standard library only, like :mod:`engine.protocol` and :mod:`engine.flow`:
the studio imports it (the import-linter contract in ``pyproject.toml`` names
the modules it may import), so it must never pull in numpy, torch or the
rest of the engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path
from typing import Any, TypedDict

from engine import untrusted

# --------------------------------------------------------------------------
# Where projects live
# --------------------------------------------------------------------------


def default_projects_root() -> Path:
    """The folder new projects go in unless the settings name another."""
    return Path.home() / "RLStudio"


def default_project() -> Path:
    """The project the command line opens without ``--project``."""
    return default_projects_root() / "default"


# --------------------------------------------------------------------------
# Designed environments
# --------------------------------------------------------------------------

ENV_NAMESPACE = "rlstudio"
"""Gymnasium namespace of the environments designed in a project."""

ENV_VERSION = 0
"""Gymnasium version of a designed env's id (``-v0``)."""

ENVS_FOLDER = "envs"
"""Project folder holding the designed envs' spec files."""

SPEC_SUFFIX = ".env.json"
"""Suffix of a designed env's spec file: ``envs/<name>.env.json``."""

SPEC_FORMAT = 1
"""The spec format the engine and the designer write; older files are
migrated on load (``engine.envs.spec.MIGRATIONS``)."""

ENV_KINDS = ("workflow", "grid", "gymnasium", "python")
"""The kinds of designed env; a spec holds its body under its kind's key."""

ENV_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$"
"""What a designed env's name may be (it becomes part of its Gymnasium id)."""

TOOL_NAME_PATTERN = r"^[A-Za-z_][\w\-]*$"
"""What a workflow tool's name may be."""

WILDCARD = "*"
"""A workflow transition's ``from`` or ``to`` meaning any status (``to``: the
same status)."""


def env_id(name: str) -> str:
    """The Gymnasium id a designed env ``name`` registers as:
    ``rlstudio/<name>-v0``."""
    return f"{ENV_NAMESPACE}/{name}-v{ENV_VERSION}"


def env_name(env_id: str) -> str | None:
    """The designed env's name in an id made by :func:`env_id`; None for any
    other id (``CartPole-v1``, ``ALE/Pong-v5``)."""
    prefix, suffix = f"{ENV_NAMESPACE}/", f"-v{ENV_VERSION}"
    if env_id.startswith(prefix) and env_id.endswith(suffix):
        name = env_id[len(prefix) : -len(suffix)]
        return name or None
    return None


PRESETS_FOLDER = "presets"
"""Project folder holding the training presets a sweep saved."""

DATASETS_FOLDER = "data/datasets"
"""Where a project keeps its training datasets (one folder each, as
``llm.dataset`` and ``llm.import`` write them)."""

PRESET_SUFFIX = ".preset.json"
"""Suffix of a project preset: ``presets/<name>.preset.json``."""


def preset_file(project_dir: str | os.PathLike[str], name: str) -> Path:
    """Where the project preset ``name`` is saved (it may not exist)."""
    return Path(project_dir) / PRESETS_FOLDER / f"{name}{PRESET_SUFFIX}"


def spec_file(project_dir: str | os.PathLike[str], name: str) -> Path:
    """Where the designed env ``name`` of a project is saved (it may not
    exist; a spec's ``name`` may also differ from its file's)."""
    return Path(project_dir) / ENVS_FOLDER / f"{name}{SPEC_SUFFIX}"


# --------------------------------------------------------------------------
# Run folders: runs/<run-id>/...
# --------------------------------------------------------------------------

CONFIG_FILE = "config.json"
"""The run's kind and config as started (``{"kind", "config", ...}``)."""
METRICS_FILE = "metrics.jsonl"
"""One JSON object per metrics row, appended while the run goes."""
LOG_FILE = "log.txt"
"""The run's log (the worker's output, kept by the supervisor or the CLI),
each line stamped by :func:`log_line` (a detached job's own output is not)."""
_LOG_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\.(\d{3}) ")
RESULT_FILE = "result.json"
"""The run's outcome, written once when it ends (status, summary)."""
REPORT_FILE = "report.json"
"""A check or evaluation report (``env.check``, ``llm.evaluate``)."""
PREVIEW_FILE = "preview.json"
"""Episodes played by ``env.preview`` (returns, lengths, step trace)."""
FRAMES_FILE = "frames.npz"
"""Rendered frames of a preview or a play, beside its JSON."""
FRAME_BUDGET_BYTES = 256 * 2**20
"""Raw frames a preview or play job holds in memory at most (they are stacked
to save); frames past it are not drawn."""
VIDEOS_FOLDER = "videos"
"""A training run's videos of its policy, one per evaluation
(``eval-<step>.mp4``) when the run asks for them (``eval_video_episodes``)."""
_EVAL_VIDEO = re.compile(r"^eval-(\d+)\.mp4$")


def eval_video_name(step: int) -> str:
    """``eval-<step>.mp4``, the video of the evaluation at ``step`` (zero
    padded, so the names sort in step order)."""
    return f"eval-{step:010d}.mp4"


def eval_video_step(name: str) -> int | None:
    """The step of an evaluation video's file name (None: not one; a video
    still being written has another name until it is whole)."""
    match = _EVAL_VIDEO.match(name)
    return int(match.group(1)) if match else None


FLOW_STATE_FILE = "flow_state.json"
"""A flow run's per-node states and outputs."""
STOP_REQUEST_FILE = "stop.request"
"""Created to ask a running job to stop at its next check."""
MLFLOW_RUN_FILE = "mlflow_run.json"
"""The MLflow run a run logs to (``{"uri", "run_id", "experiment_id"}``), so
that a resumed run continues it."""
MLFLOW_SPOOL_FILE = "mlflow_spool.jsonl"
"""What could not reach the MLflow server yet, replayed when it answers."""

ACTIVE_STATUSES = ("queued", "running")
"""Statuses of a run that has not ended."""
FINAL_STATUSES = ("completed", "stopped", "failed", "interrupted")
"""Statuses of a run that has ended."""

# --------------------------------------------------------------------------
# Ollama
# --------------------------------------------------------------------------

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
"""Where a local Ollama server listens unless told otherwise."""

# --------------------------------------------------------------------------
# Untrusted code (engine.confine)
# --------------------------------------------------------------------------

ALLOW_UNCONFINED_ENV = "RLSTUDIO_ALLOW_UNCONFINED"
"""Environment variable: 1 lets untrusted code run unconfined where neither
bubblewrap nor unshare works (the studio sets it from Settings)."""

# --------------------------------------------------------------------------
# Experiment tracking (engine.jobs.tracking)
# --------------------------------------------------------------------------

DEBUG_ENV = "RL_STUDIO_DEBUG"
"""Environment variable: set (to ``1``) by ``rl-studio-engine --debug``, and
so inherited by the processes a command starts: tracebacks are printed on the
terminal too, not only kept in the run's log."""

TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"
"""Environment variable: the MLflow tracking server every run logs to (the
studio sets it from Settings, the CLI from ``--mlflow-uri``); unset or empty,
nothing is tracked."""

# --------------------------------------------------------------------------
# Records the engine sends (project snapshot: project.open, project.snapshot)
# --------------------------------------------------------------------------


class RunRow(TypedDict):
    """A run as the engine sends it (``engine.store.project.RunRecord``)."""

    id: str
    name: str
    kind: str
    status: str
    created: float
    started: float | None
    ended: float | None
    pid: int | None
    exit_code: int | None
    signal: int | None
    reason: str
    config: dict[str, Any]
    summary: dict[str, Any]
    progress_done: float
    progress_total: float
    tags: list[str]
    note: str
    run_dir: str


class ModelRow(TypedDict):
    """A registered model (``engine.store.project.ModelRecord``)."""

    id: str
    name: str
    kind: str
    path: str
    created: float
    source_run: str | None
    env: str
    algo: str
    base: str
    metrics: dict[str, Any]
    size_bytes: int
    agent: str
    version: int


class ProjectSnapshot(TypedDict):
    """The reply to ``project.open`` and ``project.snapshot``. ``envs`` and
    ``flows`` list the documents (``name``, ``path``, ``kind``, ...)."""

    path: str
    name: str
    envs: list[dict[str, Any]]
    flows: list[dict[str, Any]]
    runs: list[RunRow]
    models: list[ModelRow]


class RunIdReply(TypedDict):
    """The reply to ``run.start``, ``run.stop`` and ``run.resume``."""

    run_id: str


class RunListReply(TypedDict):
    """The reply to ``run.list``."""

    runs: list[RunRow]


# --------------------------------------------------------------------------
# Files: atomic writes, temporary names, JSON reading
# --------------------------------------------------------------------------

TMP_MARK = ".tmp-"
"""Temporary files and folders carry this in their name (see
:func:`temp_path`); a crashed writer leaves them behind and
``engine.store.atomic.remove_stale_temp_files`` sweeps them once provably
dead."""

_TEMP_NAME = re.compile(
    rf"\.(?P<target>.+){re.escape(TMP_MARK)}(?:(?P<purpose>[a-z]+)-)?"
    r"(?P<pid>[0-9]{1,10})-(?P<tag>[0-9a-f]{8})"
)


def temp_path(target: str | os.PathLike[str], purpose: str = "") -> Path:
    """A fresh temporary name beside ``target``, owned by this process:
    ``.<name>.tmp-[<purpose>-]<pid>-<8 hex>``. The writer removes it when it
    fails; start-up cleanup removes it only once its owner is gone."""
    target = Path(target)
    tag = f"{purpose}-" if purpose else ""
    # os.urandom, as secrets.token_hex does (importing secrets, for hmac,
    # cost the studio's launch 17 ms).
    return target.with_name(
        f".{target.name}{TMP_MARK}{tag}{os.getpid()}-{os.urandom(4).hex()}"
    )


def temp_owner(name: str) -> int | None:
    """The pid that owns a :func:`temp_path` name; None for any other name
    (a user's ``results.tmp-final.csv`` is not a temporary file)."""
    match = _TEMP_NAME.fullmatch(name)
    return int(match["pid"]) if match else None


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` so that a reader sees the old file or the new one: a
    temporary file in the same folder, fsync, rename, fsync of the folder."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(target)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if os.name == "posix":  # directories cannot be fsync'ed on Windows
        dir_fd = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as indented JSON (NaN refused: other readers choke on it)."""
    atomic_write_text(path, json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_json(path: str | os.PathLike[str]) -> Any:
    """The JSON value in ``path``; None if it is missing, not a regular file,
    too big, not JSON or outside the limits of :mod:`engine.untrusted`.

    For files that may be absent or half-made (a run still writing, a model
    folder from elsewhere); where a bad file must be reported, use
    ``engine.untrusted.load_file``, which says why in one sentence."""
    try:
        return untrusted.load_file(path, str(path))
    except untrusted.UntrustedDataError:
        return None


def read_json_object(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """:func:`read_json`, kept only when it is a JSON object."""
    data = read_json(path)
    return data if isinstance(data, dict) else None


def log_line(text: str, when: float | None = None) -> str:
    """A line of a run's ``log.txt``: the local wall time to the millisecond
    (``2026-01-31 14:05:09.123``), a space, then ``text`` (no newline), so a
    log read again later shows when each line was written."""
    import time

    when = time.time() if when is None else when
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))
    return f"{stamp}.{int(when % 1 * 1000):03d} {text}"


def parse_log_line(line: str) -> tuple[float | None, str]:
    """``(wall time, text)`` of a ``log.txt`` line; ``(None, line)`` for a
    line without a stamp (written by the job itself, or by hand)."""
    import time

    match = _LOG_STAMP.match(line)
    if match is None:
        return None, line
    try:
        when = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
    except (ValueError, OverflowError):
        return None, line
    return when + int(match.group(2)) / 1000, line[match.end() :]


def read_log(path: Path, max_lines: int = 500) -> list[tuple[float | None, str]]:
    """The last ``max_lines`` lines of a ``log.txt`` as ``(time, text)``
    (split on newlines only: a carriage return inside a line stays)."""
    from collections import deque

    try:
        with open(path, encoding="utf-8", errors="replace", newline="\n") as fh:
            lines = deque(fh, maxlen=max_lines)
    except OSError:
        return []
    return [parse_log_line(line.rstrip("\n").rstrip("\r")) for line in lines]
