"""``make studio`` and the launcher name the X11 libraries Qt needs (issue 29,
item 7): Qt's xcb plugin aborts on a missing one and names only
``xcb-cursor0``; a minimal Debian also lacks ``libxcb-icccm4`` and
``libxcb-keysyms1``. The check runs against a fake loader that lacks them."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest

from studio import platform_check
from studio.platform_check import XCB_LIBRARIES, missing_packages, sentence, uses_xcb

MINIMAL_DEBIAN = {"libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
"""What a minimal Debian with X lacks of what the plugin links."""
SENTENCE = (
    "RL Studio cannot open a window: Qt needs the X11 libraries libxcb-cursor0, "
    "libxcb-icccm4 and libxcb-keysyms1; install them with `sudo apt-get install "
    "libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1` and start it again."
)


def lacking(sonames: set[str]) -> Any:
    return lambda soname: soname not in sonames


def test_the_missing_libraries_are_named_by_their_packages() -> None:
    assert missing_packages(lacking(set())) == []
    missing = missing_packages(lacking(MINIMAL_DEBIAN))
    assert missing == ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"]
    assert sentence(missing) == SENTENCE
    assert sentence(["libxcb-cursor0"]) == (
        "RL Studio cannot open a window: Qt needs the X11 library libxcb-cursor0; "
        "install it with `sudo apt-get install libxcb-cursor0` and start it again."
    )
    # every library of the real plugin is found on this machine, or named
    assert set(missing_packages()) <= set(XCB_LIBRARIES.values())


def test_only_an_xcb_window_needs_them() -> None:
    assert uses_xcb({}) and uses_xcb({"QT_QPA_PLATFORM": "xcb"})
    assert not uses_xcb({"QT_QPA_PLATFORM": "offscreen"})
    assert not uses_xcb({"WAYLAND_DISPLAY": "wayland-0"})
    assert uses_xcb({"WAYLAND_DISPLAY": "wayland-0", "QT_QPA_PLATFORM": "xcb"})


def test_the_launcher_says_one_sentence_instead_of_qt_s_abort(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from studio.app import main

    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    monkeypatch.setattr(platform_check, "loadable", lacking(MINIMAL_DEBIAN))
    assert main([]) == 1  # before any QApplication: Qt would abort
    assert capsys.readouterr().err.strip() == SENTENCE


def test_make_studio_installs_them_as_root_or_names_the_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("QT_QPA_PLATFORM", "xcb")
    absent = set(MINIMAL_DEBIAN)
    monkeypatch.setattr(platform_check, "loadable", lambda s: s not in absent)
    monkeypatch.setattr(platform_check.shutil, "which", lambda name: None)
    assert platform_check.main(["--install"]) == 1  # no apt: the command
    assert capsys.readouterr().err.strip() == SENTENCE
    installed: list[list[str]] = []

    def apt(cmd: list[str], check: bool) -> subprocess.CompletedProcess[str]:
        installed.append(cmd)
        absent.clear()
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(platform_check.shutil, "which", lambda name: "/usr/bin/apt-get")
    monkeypatch.setattr(platform_check.os, "geteuid", lambda: 0)
    monkeypatch.setattr(platform_check.subprocess, "run", apt)
    assert platform_check.main(["--install"]) == 0
    assert installed == [
        [
            "/usr/bin/apt-get",
            "install",
            "-y",
            "-qq",
            "libxcb-cursor0",
            "libxcb-icccm4",
            "libxcb-keysyms1",
        ]
    ]
    assert platform_check.main([]) == 0  # nothing missing now
