"""Whether Qt can open a window here: the X11 (xcb) libraries its platform
plugin needs, checked before Qt starts.

Qt's xcb plugin aborts the process when a library it links is missing, and
its message names one package (``libxcb-cursor0``) whatever is missing; a
minimal Debian lacks ``libxcb-icccm4`` and ``libxcb-keysyms1`` too. The
launcher asks :func:`missing_packages` first and says in one sentence which
packages to install; ``make studio`` runs ``python -m studio.platform_check
--install``, which installs them as root with apt, or prints the command.

Standard library only: it runs before PySide6 is imported.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence

XCB_LIBRARIES: dict[str, str] = {
    "libxcb.so.1": "libxcb1",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
}
"""The system libraries PySide6's xcb platform plugin links (``ldd
libqxcb.so``; the wheel bundles Qt's own), by soname, and the Debian /
Ubuntu package of each."""


def loadable(soname: str) -> bool:
    """Whether the dynamic loader finds ``soname`` (as Qt's plugin would)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def uses_xcb(environ: Mapping[str, str] | None = None) -> bool:
    """Whether Qt will open its windows through xcb (X11) here: on Linux,
    unless a platform other than xcb is asked for, or a Wayland session
    leaves the choice to Qt."""
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return False
    asked = env.get("QT_QPA_PLATFORM", "")
    if asked:
        return asked.split(":")[0] == "xcb"
    return not env.get("WAYLAND_DISPLAY")


def missing_packages(have: Callable[[str], bool] | None = None) -> list[str]:
    """The packages of the xcb libraries ``have`` (default :func:`loadable`)
    does not find, in the order of :data:`XCB_LIBRARIES`."""
    found = have or loadable
    return [pkg for soname, pkg in XCB_LIBRARIES.items() if not found(soname)]


def install_command(packages: Sequence[str]) -> str:
    return "sudo apt-get install " + " ".join(packages)


def sentence(packages: Sequence[str]) -> str:
    """One sentence saying what to install, naming every package."""
    names = ", ".join(packages[:-1]) + (" and " if len(packages) > 1 else "")
    names += packages[-1]
    what, them = ("library", "it") if len(packages) == 1 else ("libraries", "them")
    return (
        f"RL Studio cannot open a window: Qt needs the X11 {what} {names}; "
        f"install {them} with `{install_command(packages)}` and start it again."
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m studio.platform_check [--install]``: exit 0 when Qt can
    open a window; with ``--install``, as root where apt-get is, install
    what is missing."""
    parser = argparse.ArgumentParser(prog="python -m studio.platform_check")
    parser.add_argument(
        "--install",
        action="store_true",
        help="install the missing packages with apt-get (as root)",
    )
    args = parser.parse_args(argv)
    if not uses_xcb():
        return 0
    missing = missing_packages()
    if not missing:
        return 0
    apt = shutil.which("apt-get")
    if args.install and apt and os.geteuid() == 0:
        print(f"Installing {' '.join(missing)} for Qt's windows…", file=sys.stderr)
        done = subprocess.run([apt, "install", "-y", "-qq", *missing], check=False)
        if done.returncode == 0 and not missing_packages():
            return 0
    print(sentence(missing), file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
