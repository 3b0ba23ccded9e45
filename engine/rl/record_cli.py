"""``rl-studio-engine record POLICY.zip --out FILE.mp4``: a saved policy
played in its env and recorded as an MP4 or GIF (:mod:`engine.rl.record`);
prints the recording's summary as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.rl.record import RecordConfig
from engine.settings_cli import add_setting_options, setting_values

OPTIONS = ("env", "episodes", "fps", "deterministic", "seed", "max_frames")
"""The settings of ``rl.record`` the command offers as options of their own."""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", type=Path, help="stable-baselines3 model .zip")
    parser.add_argument("--out", type=Path, required=True, help="output .mp4 or .gif")
    add_setting_options(parser, RecordConfig, OPTIONS)
    parser.add_argument(
        "--project", type=Path, default=None, help="project whose designed envs to use"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-episode lines")


def run(args: argparse.Namespace) -> int:
    """``rl-studio-engine record``: prints the recording's summary as JSON."""
    from engine.rl.env_info import register_designed_envs
    from engine.rl.record import record_video, validate

    cfg = validate(
        {
            "model": str(args.policy),
            "out": str(args.out),
            **setting_values(args, OPTIONS),
        }
    )
    register_designed_envs(args.project)
    recording = record_video(
        cfg,
        Path(args.out),
        project_dir=args.project,
        log=(lambda text: None)
        if args.quiet
        else (lambda text: print(text, file=sys.stderr)),
    )
    assert recording is not None  # nothing stops a command but Ctrl+C
    print(json.dumps(recording.to_dict(), indent=2))
    return 0
