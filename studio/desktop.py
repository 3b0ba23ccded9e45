"""Desktop integration: the launcher and icon for the current user (XDG)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from resources import resource_path


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def install_desktop_entry() -> Path:
    """Install ``rl-studio.desktop``, the icon and the file types so the app
    starts by double-click from the desktop's menu and opens a
    ``.flow.json`` or ``.env.json`` double-clicked in a file manager;
    returns the launcher's path.

    ``Exec`` names this interpreter explicitly so the launcher works from a
    virtual environment that is not on the desktop session's ``PATH``; its
    ``%F`` hands the app the files opened with it.
    """
    apps = data_home() / "applications"
    icons = data_home() / "icons" / "hicolor" / "scalable" / "apps"
    apps.mkdir(parents=True, exist_ok=True)
    icons.mkdir(parents=True, exist_ok=True)
    icon = icons / "rl-studio.svg"
    shutil.copyfile(resource_path("icons", "rl-studio.svg"), icon)
    exec_line = f"{shlex.quote(sys.executable)} -m studio %F"
    lines = []
    for line in resource_path("rl-studio.desktop").read_text().splitlines():
        if line.startswith("Exec="):
            line = f"Exec={exec_line}"
        elif line.startswith("Icon="):
            line = f"Icon={icon}"
        lines.append(line)
    target = apps / "rl-studio.desktop"
    target.write_text("\n".join(lines) + "\n")
    target.chmod(0o755)
    _install_file_types()
    _refresh(["update-desktop-database", str(apps)])
    return target


def _install_file_types() -> None:
    """The ``.flow.json`` and ``.env.json`` types (shared-mime-info), which
    the launcher's ``MimeType`` names."""
    mime = data_home() / "mime"
    packages = mime / "packages"
    packages.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(resource_path("rl-studio-mime.xml"), packages / "rl-studio.xml")
    _refresh(["update-mime-database", str(mime)])


def _refresh(command: list[str]) -> None:
    """Run a desktop database tool when the machine has it: without it the
    desktop picks the files up at its next scan."""
    if shutil.which(command[0]) is None:
        return
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(command, capture_output=True, timeout=30, check=False)
