"""Desktop integration: the launcher and icon for the current user (XDG)."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from resources import resource_path


def data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")


def install_desktop_entry() -> Path:
    """Install ``rl-studio.desktop`` and the icon so the app starts by
    double-click from the desktop's menu; returns the launcher's path.

    ``Exec`` names this interpreter explicitly so the launcher works from a
    virtual environment that is not on the desktop session's ``PATH``.
    """
    apps = data_home() / "applications"
    icons = data_home() / "icons" / "hicolor" / "scalable" / "apps"
    apps.mkdir(parents=True, exist_ok=True)
    icons.mkdir(parents=True, exist_ok=True)
    icon = icons / "rl-studio.svg"
    shutil.copyfile(resource_path("icons", "rl-studio.svg"), icon)
    exec_line = f"{shlex.quote(sys.executable)} -m studio"
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
    return target
