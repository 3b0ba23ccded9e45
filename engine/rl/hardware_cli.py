"""``rl-studio-engine hardware``: the hardware report (:mod:`engine.hardware`)
and the hardware profiles of ``rl.train`` (:mod:`engine.rl.hardware_profiles`).

It lives with ``rl.train`` because a profile is a set of its settings:
``--profiles`` lists every profile with the settings a run gets from it,
``--save-profile NAME --set key=value ...`` saves one in the user's config
folder. Without those options it is :mod:`engine.hardware`'s command, which
imports nothing of ``rl.train`` (the torch worker runs it).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from engine import hardware
from engine.errors import ConfigError, EngineError


def configure(parser: argparse.ArgumentParser) -> None:
    hardware.configure(parser)
    parser.add_argument(
        "--profiles",
        action="store_true",
        help="list the hardware profiles of rl.train (built-in and saved) with "
        "the settings a run gets from each (PPO and no preset unless --algo)",
    )
    parser.add_argument(
        "--algo",
        default="PPO",
        help="with --profiles: the algorithm whose parallel envs are shown",
    )
    parser.add_argument(
        "--save-profile",
        metavar="NAME",
        help="save a hardware profile fixing the --set settings (device, "
        "torch_threads, n_envs, backend) in the user's config folder",
    )
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="with --save-profile: a setting the profile fixes (repeatable)",
    )


def run(args: argparse.Namespace) -> int:
    if args.save_profile is not None:
        return _save(args)
    if args.settings:
        raise EngineError("--set goes with --save-profile NAME.")
    if args.profiles:
        return _list(args)
    return hardware.run(args)


def _list(args: argparse.Namespace) -> int:
    from engine.rl import hardware_profiles
    from engine.rl.config import ALGO_CONFIGS
    from engine.rl.schema import profile_previews

    if args.algo not in ALGO_CONFIGS:
        raise ConfigError(
            "algo",
            f"--algo must be one of {', '.join(ALGO_CONFIGS)}, not {args.algo!r}.",
        )
    saved = hardware_profiles.load_saved()
    previews = profile_previews(args.algo, {}, saved)
    out: dict[str, Any] = {
        "file": str(hardware_profiles.profiles_file()),
        "profiles": [{"name": name, **preview} for name, preview in previews.items()],
        "problems": list(saved.problems),
    }
    print(json.dumps(out, indent=None if args.compact else 2))
    return 0


def _save(args: argparse.Namespace) -> int:
    from engine.rl import hardware_profiles
    from engine.rl.cli import parse_settings
    from engine.rl.config import check_profile_settings

    top, hyper = parse_settings(args.settings)
    wrong = [*hyper, *(k for k in top if k not in hardware_profiles.PROFILE_SETTINGS)]
    if wrong:
        raise ConfigError(
            "hardware_profile",
            f"A hardware profile cannot set {wrong[0]!r}; it sets "
            f"{', '.join(hardware_profiles.PROFILE_SETTINGS)}.",
        )
    path = hardware_profiles.save_profile(
        args.save_profile, top, check_profile_settings
    )
    print(f"saved the hardware profile {args.save_profile!r} in {path}")
    return 0
