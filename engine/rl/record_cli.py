"""``rl-studio-engine record POLICY.zip --out FILE.mp4``: a saved policy
played in its env and recorded as an MP4 or GIF (:mod:`engine.rl.record`);
prints the recording's summary as JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.rl.record import RecordConfig


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("policy", type=Path, help="stable-baselines3 model .zip")
    parser.add_argument("--out", type=Path, required=True, help="output .mp4 or .gif")
    parser.add_argument(
        "--env", help="env id (default: the one in state.json beside the policy)"
    )
    parser.add_argument("--episodes", type=int, default=RecordConfig.episodes)
    parser.add_argument("--fps", type=int, default=None)
    parser.add_argument("--seed", type=int, default=RecordConfig.seed)
    parser.add_argument("--max-frames", type=int, default=RecordConfig.max_frames)
    parser.add_argument(
        "--sample", action="store_true", help="sample actions instead of the likeliest"
    )
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
            "env": args.env,
            "episodes": args.episodes,
            "out": str(args.out),
            "fps": args.fps,
            "deterministic": not args.sample,
            "seed": args.seed,
            "max_frames": args.max_frames,
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
