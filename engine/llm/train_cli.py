"""``rl-studio-engine llm-train``: fine-tune a language model on a dataset
or a data file, the ``llm.train`` job in this process.

Example::

    rl-studio-engine llm-train --data chats.jsonl --base Qwen/Qwen3-0.6B \\
        --method sft --project P --set max_steps=200 --set learning_rate=1e-4

``--data`` is a dataset folder (as llm.dataset and llm.import write them),
the name of one in the project's ``data/datasets/``, or a file or Hub
dataset, imported first (an ``llm.import`` run, with its checks; ``--format``
and ``--map`` say how to read it). ``--set key=value`` sets any setting of
``llm.train`` (:class:`engine.llm.train.TrainConfig`). Both runs are runs of
``--project``; the adapter is registered in its models.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from engine.errors import EngineError
from engine.llm.data_cli import add_import_options, run_job
from engine.settings_cli import add_set_option, parse_sets

KIND = "llm.train"

OWN_OPTIONS = {"dataset": "--data", "model": "--base", "method": "--method"}


def configure(parser: argparse.ArgumentParser) -> None:
    from engine.llm.train import METHODS

    parser.add_argument(
        "--data",
        required=True,
        metavar="FILE|DATASET",
        help="a dataset folder or name in --project, or a data file or Hub "
        "dataset to import first",
    )
    parser.add_argument(
        "--base", required=True, metavar="MODEL", help="base model folder or hub id"
    )
    parser.add_argument("--method", default="sft", choices=METHODS, help="default: sft")
    parser.add_argument(
        "--project", type=Path, required=True, help="the project folder (created)"
    )
    add_import_options(parser)
    add_set_option(parser)


def dataset_folder(data: str, project_dir: Path) -> Path | None:
    """The dataset folder ``data`` names (a folder with a train file, or a
    dataset of the project), or None when it is to be imported."""
    from engine.llm.data_import import DATASETS_FOLDER
    from engine.llm.datasets import dataset_files

    for folder in (Path(data).expanduser(), project_dir / DATASETS_FOLDER / data):
        if folder.is_dir() and dataset_files(folder)[0].is_file():
            return folder.resolve()
    return None


def run(args: argparse.Namespace) -> int:
    from engine.llm import data_import, train
    from engine.settings import build

    project_dir = args.project.expanduser().resolve()
    given = parse_sets(args.settings, train.TrainConfig, OWN_OPTIONS)
    # The settings' types and bounds first: a refused run imports nothing.
    build(train.TrainConfig, {**given, "method": args.method}, KIND)
    folder = dataset_folder(args.data, project_dir)
    if folder is None:
        from engine.llm.data_cli import import_config

        cfg = data_import.validate_import(
            import_config(
                args,
                [],
                source=args.data,
                method=args.method,
                base_model=args.base,
                max_length=given.get("max_length", train.TrainConfig.max_length),
            )
        )
        imported = run_job(
            project_dir, data_import.KIND, cfg, f"Import {Path(cfg.source).name}"
        )
        folder = Path(imported["dataset"])
    elif args.format != "auto" or args.columns:
        raise EngineError(
            f"{args.data} is a dataset already; --format and --map are for a file "
            "to import."
        )
    if args.method == "grpo":
        _check_rewards(folder, given.get("rewards"))
    config: dict[str, Any] = {
        **given,
        "method": args.method,
        "model": args.base,
        "dataset": str(folder),
    }
    summary = run_job(project_dir, KIND, train.validate(config))
    print(json.dumps(summary, indent=2))
    return 0


def _check_rewards(folder: Path, rewards: Any) -> None:
    """Refuse GRPO rewards that score through an env on prompts that have
    none (imported from a file): every answer would score the same."""
    from engine.llm.datasets import dataset_files, read_rows
    from engine.llm.rewards import build_rewards

    train_file = dataset_files(folder)[0]
    if train_file.suffix == ".jsonl":
        with open(train_file, encoding="utf-8") as fh:
            line = fh.readline()  # the first row says it: one source, one kind
        rows = [json.loads(line)] if line.strip() else []
    else:
        rows = read_rows(train_file)
    if not rows or rows[0].get("env"):
        return
    needing = [r.name for r in build_rewards(rewards) if r.needs_env]
    if needing:
        raise EngineError(
            f"The prompts of {folder.name} have no env, so the reward(s) "
            f"{', '.join(needing)} cannot score answers; give others with --set "
            'rewards=[{"name": "efficiency"}] (or format, python_syntax, '
            "code_execution with a tests column, judge, learned)."
        )
