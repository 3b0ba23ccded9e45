"""``rl-studio-engine train``: the ``rl.train`` job, in this process, with a
progress bar on stderr and the run summary as JSON on stdout.

The run is recorded in the project like a run started from the studio: a row
in the project's run list (status, progress, summary) and its best model
registered in the project's models, with the run as its lineage. The project
is ``--project DIR`` (created when missing), else a temporary folder.

Example::

    rl-studio-engine train --env CartPole-v1 --algo PPO --steps 20000 \\
        --seed 1 --set n_envs=4 --set learning_rate=0.001

Ctrl-C stops a run with a checkpoint; ``--resume RUN_ID --project P``
continues it (or any stopped, failed or interrupted run of the project, the
studio's included) with its step counter and curves carried on.

``--set key=value`` sets a top-level setting (``n_envs``, ``eval_every_steps``,
...) or else a hyperparameter of the algorithm; values are read as JSON when
they parse (``1e-3``, ``true``, ``[64,64]``), as text otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from engine import contract
from engine.errors import EngineError
from engine.jobs.lifecycle import HeadlessContext
from engine.jobs.registry import get_kind, named_run
from engine.rl.job import KIND  # declares the kind, so no other kind is imported
from engine.settings import as_dict
from engine.settings_cli import add_set_option, set_items, set_value
from engine.store.atomic import atomic_write_json

if TYPE_CHECKING:
    from engine.rl.config import TrainConfig
    from engine.store.project import Project


def configure(parser: argparse.ArgumentParser) -> None:
    from engine.rl.config import ALGO_NAMES, builtin_presets_text

    parser.add_argument(
        "--env", default=None, help="Gymnasium id or rlstudio/<name>-v0 (required)"
    )
    parser.add_argument(
        "--resume",
        metavar="RUN_ID",
        default=None,
        help="continue a stopped, failed or interrupted run of --project from its "
        "last checkpoint (--steps may change its total; nothing else may change)",
    )
    parser.add_argument(
        "--algo",
        default="auto",
        help=f"{', '.join(ALGO_NAMES[1:])} or auto (default: auto)",
    )
    parser.add_argument(
        "--steps",
        type=int,
        default=None,
        help="environment steps (default: the preset's)",
    )
    parser.add_argument(
        "--seed", type=int, default=None, help="random seed (default: drawn)"
    )
    parser.add_argument(
        "--preset",
        default=None,
        metavar="NAME",
        help="a preset of --project (saved by `tune --save-preset`) instead of "
        "the built-in one; it gives --env and --algo when they are left out. "
        "The run's log says where its preset comes from. "
        + builtin_presets_text().replace("%", "%%"),
    )
    add_set_option(
        parser, "a setting or hyperparameter, e.g. n_envs=4 or learning_rate=3e-4"
    )
    parser.add_argument(
        "--project",
        type=Path,
        default=None,
        help="project folder; the run goes to PROJECT/runs/<id> "
        "(default: a temporary one)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def parse_settings(items: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split ``key=value`` items into (top-level settings, hyperparameters),
    each value read as its setting is declared (``engine.rl.config``; see
    :func:`engine.settings_cli.set_value`)."""
    from engine.rl.config import ALGO_CONFIGS, TrainConfig
    from engine.settings import fields_of

    top_fields = fields_of(TrainConfig)
    hyper_fields = {
        name: info
        for cls in ALGO_CONFIGS.values()
        for name, info in fields_of(cls).items()
    }
    top: dict[str, Any] = {}
    hyper: dict[str, Any] = {}
    for key, raw in set_items(items):
        if key in ("env", "algo", "total_steps", "seed", "preset", "hyperparameters"):
            raise EngineError(f"Give {key} with its own option, not with --set.")
        value = set_value(raw, top_fields.get(key) or hyper_fields.get(key))
        if key in top_fields:
            top[key] = value
        else:
            hyper[key] = value
    return top, hyper


def build_config(args: argparse.Namespace, project_dir: Path) -> dict[str, Any]:
    """The raw ``rl.train`` config the command line asks for."""
    top, hyper = parse_settings(args.settings)
    options = {
        "total_steps": args.steps,
        "seed": args.seed,
        "preset": getattr(args, "preset", None) or None,
        "hyperparameters": hyper or None,
    }
    given = {k: v for k, v in options.items() if v is not None}
    return {
        "env": args.env,
        "algo": args.algo,
        **top,
        **given,
        "project_dir": str(project_dir),
    }


class ConsoleContext(HeadlessContext):
    """A headless run's context that also draws a progress bar (steps,
    steps/s, ETA) on ``stream``."""

    def __init__(self, *args: Any, stream: TextIO | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._stream = stream
        self._drawn_at = 0.0
        self._first: tuple[float, float] | None = None

    def say(self, text: str) -> None:
        if self._first is not None and self._stream is not None:
            self._stream.write("\n")  # keep the line off the progress bar
        super().say(text)

    def progress(self, done: float, total: float, message: str = "") -> None:
        super().progress(done, total, message)
        if self._stream is None:
            return
        now = time.monotonic()
        if self._first is None:
            self._first = (now, done)
        if now - self._drawn_at < 0.2 and done < total:
            return
        self._drawn_at = now
        t0, d0 = self._first
        rate = (done - d0) / (now - t0) if now > t0 else 0.0
        self._stream.write("\r" + progress_line(done, total, rate))
        self._stream.flush()

    def end_bar(self) -> None:
        if self._stream is not None and self._first is not None:
            self._stream.write("\n")
            self._stream.flush()


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def progress_line(done: float, total: float, rate: float, width: int = 30) -> str:
    """``[#####.....] 1200/20000 steps  850 steps/s  ETA 00:22``"""
    frac = min(max(done / total, 0.0), 1.0) if total > 0 else 0.0
    filled = round(frac * width)
    eta = _clock((total - done) / rate) if rate > 0 and done < total else "--:--"
    return (
        f"[{'#' * filled}{'.' * (width - filled)}] {int(done)}/{int(total)} steps"
        f"  {rate:,.0f} steps/s  ETA {eta}  "
    )


def project_folder(project: Path | None, temp_prefix: str) -> Path:
    """The ``--project`` folder (refused when it is a file), else a new
    temporary one. A folder not made yet will get the bundled examples, so
    their designed env ids (e.g. rlstudio/maze-v0) are registered now, before
    settings naming them are checked."""
    from engine.rl.env_info import register_designed_envs
    from resources import resource_path

    if project is None:
        return Path(tempfile.mkdtemp(prefix=temp_prefix))
    folder = project.expanduser().resolve()
    if folder.exists() and not folder.is_dir():
        raise EngineError(f"--project {str(project)!r} is a file, not a folder.")
    if not folder.exists():
        register_designed_envs(resource_path("examples"))
    return folder


@contextlib.contextmanager
def removed_on_error(folder: Path, temporary: bool) -> Iterator[None]:
    """Remove ``folder`` again when the block raises and the folder is the
    temporary one :func:`project_folder` made: a refused command leaves
    nothing behind in the temp folder."""
    try:
        yield
    except BaseException:
        if temporary:
            shutil.rmtree(folder, ignore_errors=True)
        raise


def run(args: argparse.Namespace) -> int:
    from engine.rl.config import check
    from engine.store.project import Project
    from resources import resource_path

    if args.resume is not None:
        return _resume(args)
    if args.env is None and not args.preset:
        raise EngineError("Give the environment with --env, e.g. --env CartPole-v1.")
    if args.preset and args.project is None:
        raise EngineError("--preset needs the --project that holds the preset.")
    project_dir = project_folder(args.project, "rlstudio-train-")
    examples = resource_path("examples")
    with removed_on_error(project_dir, temporary=args.project is None):
        # Refuse bad settings before anything is written to the project.
        cfg = check(build_config(args, project_dir))
        # A fresh project gets the bundled examples (envs, data), as in the studio.
        project = Project.open(project_dir, create=True, examples=examples)
    try:
        return _train_in_project(args, project, cfg)
    finally:
        project.close()


def _resume(args: argparse.Namespace) -> int:
    from engine.store.project import Project, process_owns_run

    if args.project is None:
        raise EngineError("--resume needs the --project that holds the run.")
    if (
        args.env
        or args.seed is not None
        or args.settings
        or args.algo != "auto"
        or args.preset
    ):
        raise EngineError(
            "A resumed run keeps its settings; give only --project, --resume "
            "and optionally --steps."
        )
    project = Project.open(args.project.expanduser().resolve())
    try:
        run = project.get_run(args.resume)
        if run.kind != KIND:
            raise EngineError(
                f"The run {run.id} is a {run.kind!r} run, not a training run."
            )
        if run.status == "completed" and args.steps is None:
            raise EngineError(
                f"The run {run.id} already completed; give a larger --steps to "
                "train it further."
            )
        if run.status in ("queued", "running") and process_owns_run(run):
            raise EngineError(f"The run {run.id} is still running (pid {run.pid}).")
        config = dict(run.config)
        if args.steps is not None:
            if args.steps < 1:
                raise EngineError(f"--steps must be at least 1, not {args.steps}.")
            config = {**config, "total_steps": args.steps}
            atomic_write_json(
                Path(run.run_dir) / contract.CONFIG_FILE,
                {"run_id": run.id, "kind": KIND, "name": run.name, "config": config},
            )
            project.update_run(run.id, config=config)
        (Path(run.run_dir) / contract.RESULT_FILE).unlink(missing_ok=True)
        cfg = get_kind(KIND).load(config)
        return _train_in_project(args, project, cfg, resume_id=run.id)
    finally:
        project.close()


def _train_in_project(
    args: argparse.Namespace,
    project: Project,
    cfg: TrainConfig,
    resume_id: str | None = None,
) -> int:
    from engine.jobs.lifecycle import resume_time_offset, run_in_process

    config = as_dict(cfg)
    if resume_id is None:
        name, config = named_run(KIND, config, taken=project.run_names())
        record = project.create_run(KIND, config, name=name)
    else:
        record = project.get_run(resume_id)
    run_dir = Path(record.run_dir)
    print(f"run folder: {run_dir}", file=sys.stderr, flush=True)
    ctx = ConsoleContext(
        record.id,
        run_dir,
        KIND,
        config,
        events=None,
        stream=None if args.quiet else sys.stderr,
        project=project,
        resume=resume_id is not None,
        time_offset=0.0 if resume_id is None else resume_time_offset(run_dir),
    )
    assert cfg.total_steps is not None  # filled by validation
    total = float(cfg.total_steps)
    outcome = run_in_process(
        project,
        record.id,
        ctx,
        get_kind(KIND).entry,
        trace=ctx.log_to_file,
        progress=lambda o: (
            None
            if o.error is not None
            else (min(float((o.summary or {}).get("total_steps", 0)), total), total)
        ),
    )
    ctx.end_bar()
    if outcome.error is not None:
        # The row says how it ended; the run can be inspected and resumed
        # from its last checkpoint in the studio.
        raise outcome.error
    print(json.dumps(outcome.summary, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.rl.cli`` — the same as ``rl-studio-engine train``."""
    parser = argparse.ArgumentParser(prog="rl-studio-engine train")
    configure(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except EngineError as exc:
        print(f"rl-studio-engine train: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
