"""``rl-studio-engine hub``: the Hugging Face Hub from a shell.

* ``hub download REPO_ID``: a model into the Hugging Face cache
  (:mod:`engine.llm.hub_cli`); with ``--agent --project DIR`` a
  stable-baselines3 agent in the ``huggingface_sb3`` layout, registered as a
  model of the project (``rl.hub_download``, :mod:`engine.rl.hub`).
* ``hub push MODEL --repo ORG/NAME``: a policy evaluated, recorded and
  uploaded in that layout with its model card (``rl.hub_push``). ``MODEL`` is
  a policy ``.zip``, or with ``--project`` a registered model's id or name.

Each prints its summary as JSON; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from engine.llm import hub_cli as model_download
from engine.rl import hub
from engine.settings_cli import add_setting_options, setting_values

PUSH_OPTIONS = ("repo_id", "env", "algo", "eval_episodes", "video_frames", "private")
"""The settings of ``rl.hub_push`` the command offers as options of their own."""
PUSH_FLAGS = {"repo_id": "--repo", "eval_episodes": "--episodes"}


def configure(parser: argparse.ArgumentParser) -> None:
    subs = parser.add_subparsers(dest="hub_command", metavar="ACTION", required=True)
    down = subs.add_parser(
        "download",
        help="download a model repository into the Hugging Face cache, or an "
        "SB3 agent into a project (--agent)",
        description="Download a model repository into the Hugging Face cache "
        "($HF_HOME), from $HF_ENDPOINT (default huggingface.co), with $HF_TOKEN; "
        "with --agent, a stable-baselines3 agent in the huggingface_sb3 layout "
        "registered as a model of --project.",
    )
    model_download.configure_download(down)
    down.add_argument(
        "--agent",
        action="store_true",
        help="the repo is an SB3 agent (<algo>-<env>.zip, model card): register "
        "it as a model of --project",
    )
    down.add_argument(
        "--name", default="", help="the agent's model name (default: the repo's)"
    )
    push = subs.add_parser(
        "push",
        help="evaluate, record and upload an SB3 policy (huggingface_sb3 layout)",
        description="Evaluate an SB3 policy, record a video and upload them with "
        "config.json, results.json and a model card to $HF_ENDPOINT (default "
        "huggingface.co) with $HF_TOKEN, in the huggingface_sb3 layout.",
    )
    push.add_argument(
        "model",
        metavar="MODEL",
        help="a policy .zip, or a model id or name of --project",
    )
    push.add_argument("--project", type=Path, default=None, help="record it in DIR")
    add_setting_options(
        push, hub.HubPushConfig, PUSH_OPTIONS, flags=PUSH_FLAGS, required=("repo_id",)
    )
    push.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.hub_command == "push":
        return _push(args)
    if not args.agent:
        return model_download.run(args)
    from engine.errors import EngineError
    from engine.progress import ProgressBar

    if args.project is None:
        raise EngineError(
            "hub download --agent needs --project: the agent becomes a model of "
            "that project."
        )
    config = hub.validate_download(
        {"repo_id": args.repo_id, "revision": args.revision, "name": args.name}
    )
    bar = ProgressBar("download", quiet=args.quiet)
    result = model_download.in_project(
        args.project, hub.DOWNLOAD_KIND, config, f"Download {config.repo_id}", bar
    )
    print(json.dumps(result, indent=2))
    return 0


def _push(args: argparse.Namespace) -> int:
    from engine.progress import ProgressBar

    given: dict[str, Any] = {
        "model": args.model,
        **setting_values(args, PUSH_OPTIONS),
    }
    bar = ProgressBar("push", quiet=args.quiet)
    if args.project is not None:
        given.update(_registered(args.project, args.model))
        config = hub.validate_push(given)
        result = model_download.in_project(
            args.project, hub.PUSH_KIND, config, f"Push {config.repo_id}", bar
        )
    else:
        config = hub.validate_push(given)
        # A run needs a project: a passing one, removed with what it wrote.
        with tempfile.TemporaryDirectory(prefix="rlstudio-push-") as folder:
            result = model_download.in_project(
                Path(folder), hub.PUSH_KIND, config, f"Push {config.repo_id}", bar
            )
            result.pop("folder", None)
    print(json.dumps(result, indent=2), file=sys.stdout)
    return 0


def _registered(project_dir: Path, model: str) -> dict[str, Any]:
    """The file, env and algorithm of the project's model ``model`` (an id
    or a name), or nothing when ``model`` is a file."""
    from engine.errors import EngineError
    from engine.store.project import Project

    if Path(model).expanduser().is_file():
        return {}
    project = Project.open(project_dir)
    try:
        found = [m for m in project.list_models() if model in (m.id, m.name)]
    finally:
        project.close()
    policies = [m for m in found if m.kind == "sb3-policy"]
    if len(policies) != 1:
        raise EngineError(
            f"{model!r} is neither a policy file nor the id or name of one SB3 "
            f"policy of the project {project_dir} ({len(policies)} match)."
        )
    m = policies[0]
    return {"model": m.path, "env": m.env or None, "algo": m.algo or None}
