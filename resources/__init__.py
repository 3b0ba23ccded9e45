"""Bundled files: icons, the .desktop file, stylesheet, example envs and flows.

A package only so that the files travel with an installed wheel; it holds no
code beyond locating them.
"""

from pathlib import Path

ROOT = Path(__file__).resolve().parent


def resource_path(*parts: str) -> Path:
    return ROOT.joinpath(*parts)
