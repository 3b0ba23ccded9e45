"""Command-line options derived from a config dataclass
(``engine.settings_cli``): the type, default and help of each option come
from the setting's declaration, so a command never lists them again."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import pytest

from engine.errors import EngineError
from engine.settings import setting
from engine.settings_cli import (
    add_set_option,
    add_setting_options,
    parse_sets,
    setting_values,
)


@dataclass(frozen=True)
class _Config:
    """Settings of a test job."""

    repo_id: str = setting("")
    """Where it goes, org/name."""
    episodes: int = setting(3, min=1, unit="episodes")
    """Episodes played. More are slower."""
    rate: float | None = setting(None)
    """A rate (None: the env's)."""
    private: bool = setting(False)
    """Keep it private."""
    net_arch: list[int] = setting(factory=lambda: [64, 64])
    """Layer widths."""


OPTIONS = ("repo_id", "episodes", "rate", "private")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_setting_options(
        parser, _Config, OPTIONS, flags={"repo_id": "--repo"}, required=("repo_id",)
    )
    add_set_option(parser)
    return parser


def test_options_take_their_type_default_and_help_from_the_declaration() -> None:
    parser = _parser()
    args = parser.parse_args(["--repo", "org/x", "--rate", "0.5", "--private"])
    assert setting_values(args, OPTIONS) == {
        "repo_id": "org/x",
        "episodes": 3,
        "rate": 0.5,
        "private": True,
    }
    args = parser.parse_args(["--repo", "o/y", "--episodes", "7", "--no-private"])
    assert args.episodes == 7 and args.private is False and args.rate is None
    text = parser.format_help()
    assert "--repo REPO" in text and "Where it goes, org/name" in text
    assert "Episodes played, in episodes; default 3" in text
    assert "--private, --no-private" in text
    with pytest.raises(argparse.ArgumentError):
        parser.parse_args(["--repo", "o/y", "--episodes", "many"])
    with pytest.raises(SystemExit):  # the required one missing
        parser.parse_args([])


def test_other_settings_go_through_set_and_a_list_setting_has_no_option() -> None:
    parser = _parser()
    args = parser.parse_args(["--repo", "o/y", "--set", "net_arch=[32,32]"])
    assert parse_sets(args.settings, _Config, {"repo_id": "--repo"}) == {
        "net_arch": [32, 32]
    }
    with pytest.raises(EngineError, match="Give repo_id with --repo"):
        parse_sets(["repo_id=a/b"], _Config, {"repo_id": "--repo"})
    with pytest.raises(EngineError, match="no such setting"):
        parse_sets(["size=3"], _Config, {})
    with pytest.raises(TypeError, match="net_arch"):
        add_setting_options(argparse.ArgumentParser(), _Config, ["net_arch"])
