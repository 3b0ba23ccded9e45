"""``rl-studio-engine`` — everything the studio does, headless.

Each subcommand lives with its capability as a module exposing
``configure(parser)`` and ``run(args) -> int``; they are listed in
``SUBCOMMANDS`` and a module is imported only when its command runs (or for
``--help``), so those modules must import heavy libraries inside ``run`` only.
Every command exits non-zero with one clear sentence on bad input (an
``EngineError``), never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from engine.contract import DEBUG_ENV
from engine.errors import EngineError, bounded

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    # name: (module, one-line help)
    "serve": (
        "engine.server",
        "speak the studio protocol (JSON Lines) on stdin/stdout",
    ),
    "serve-http": (
        "engine.service.cli",
        "serve a project's engine over HTTP (FastAPI: train, watch, stop runs)",
    ),
    "hardware": (
        "engine.rl.hardware_cli",
        "the detected hardware and settings as JSON; hardware profiles of rl.train",
    ),
    "models": ("engine.store.cli", "list the models registered in a project"),
    "store": (
        "engine.store.database_cli",
        "where a project's trajectories, decisions and labels are: `store copy "
        "--from FOLDER|URL --to URL|FOLDER`, `store use --project P URL|sqlite`",
    ),
    "agent": (
        "engine.service.agent_cli",
        "an agent's versions and gate decisions; promote or roll back by hand",
    ),
    "compare": (
        "engine.store.compare_cli",
        "two or more runs of a project: differing settings and outcomes as JSON",
    ),
    "train": ("engine.rl.cli", "train a stable-baselines3 agent with a progress bar"),
    "tune": (
        "engine.rl.tune",
        "an Optuna sweep over a training run's settings, trials as project runs",
    ),
    "env": (
        "engine.envs.cli",
        "designed environments: `env check FILE` validates a spec",
    ),
    "export-gguf": (
        "engine.export.cli_gguf",
        "convert a HF model or LoRA adapter to GGUF",
    ),
    "deploy-ollama": ("engine.export.cli_ollama", "create an Ollama model from a GGUF"),
    "export-ollama": (
        "engine.export.cli_export_ollama",
        "merge, export to GGUF and deploy to Ollama in one command",
    ),
    "export-onnx": ("engine.export.cli_onnx", "export an SB3 policy to ONNX"),
    "record": (
        "engine.rl.record_cli",
        "record a saved policy playing its env as an MP4 or GIF video",
    ),
    "hub": (
        "engine.rl.hub_cli",
        "`hub download REPO_ID`: a model from the Hugging Face Hub, resumable; "
        "`hub push MODEL --repo ORG/NAME`: an SB3 agent to the Hub",
    ),
    "data": (
        "engine.llm.data_cli",
        "`data import FILE|HUB_ID`: a data file or Hub dataset as a training dataset",
    ),
    "llm-train": (
        "engine.llm.train_cli",
        "fine-tune a language model (SFT, DPO, KTO, GRPO) on a dataset or data file",
    ),
    "worker": (
        "engine.llm.distributed",
        "this machine's processes of a multi-machine llm.train run (machine 1..)",
    ),
    "run": (
        "engine.nodes.cli",
        "run a workflow (.flow.json) headless with per-node progress",
    ),
}


TRACKED_COMMANDS = ("train", "llm-train", "run", "tune", "serve", "serve-http")
"""Commands that run jobs, and so take ``--mlflow-uri``: every run they start
logs to that MLflow server (:mod:`engine.jobs.tracking`)."""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser (``only`` None), or one where only the subcommand
    ``only`` is configured and the others are listed by name, so running one
    command imports only its own module (``serve`` starts fast and never
    depends on the others)."""
    parser = argparse.ArgumentParser(
        prog="rl-studio-engine",
        description="RL Studio engine: train, evaluate and export agents headless.",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        help="print tracebacks of failures (otherwise one sentence each; a run's "
        "log.txt keeps them)",
    )
    subs = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub = subs.add_parser(name, help=help_text, description=help_text)
        if name in TRACKED_COMMANDS:
            sub.add_argument(
                "--mlflow-uri",
                metavar="URI",
                help="log every run to this MLflow tracking server (default: "
                "$MLFLOW_TRACKING_URI; needs rl-studio[mlflow])",
            )
        if only is None or name == only:
            module = importlib.import_module(module_name)
            module.configure(sub)
            sub.set_defaults(_module=module)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Configure only the command being run; an unknown command or a bare
    # --help needs no module at all.
    command = [a for a in argv if a != "--debug"]
    wanted = command[0] if command and command[0] in SUBCOMMANDS else ""
    args = build_parser(wanted).parse_args(argv)
    if args.debug:
        os.environ[DEBUG_ENV] = "1"
    debug = bool(os.environ.get(DEBUG_ENV))
    try:
        if getattr(args, "mlflow_uri", None) is not None:
            from engine.contract import TRACKING_URI_ENV
            from engine.jobs.tracking import check_uri

            # Jobs read it from the environment, as job processes inherit it.
            os.environ[TRACKING_URI_ENV] = check_uri(args.mlflow_uri)
        code: int = args._module.run(args)
    except EngineError as exc:
        if debug:
            traceback.print_exc()
        print(f"rl-studio-engine {args.command}: {bounded(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rl-studio-engine {args.command}: interrupted.", file=sys.stderr)
        return 130
    except Exception as exc:
        # A bug, not bad input: still one sentence, the traceback on request.
        if debug:
            traceback.print_exc()
        print(
            f"rl-studio-engine {args.command}: failed with {type(exc).__name__}: "
            f"{bounded(str(exc))}"
            + ("" if debug else " (run with --debug for the traceback)."),
            file=sys.stderr,
        )
        return 1
    return code


def program() -> int:
    """``rl-studio-engine`` and ``python -m engine``: :func:`main` in a process
    of its own, whose malloc keeps what training frees
    (:func:`engine.jobs.memory.keep_freed_memory`)."""
    from engine.jobs.memory import keep_freed_memory

    keep_freed_memory()
    return main()


if __name__ == "__main__":
    raise SystemExit(program())
