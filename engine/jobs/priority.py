"""CPU priority of job processes: nicer, where Linux's scheduler looks.

With autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
on by default on desktop Linux) the CPU is shared between sessions first,
by each session's own nice value (``/proc/<pid>/autogroup``), and only then
between the processes of a session by theirs. A job runs in a session of
its own (the supervisor starts it so: a Ctrl-C in the studio's terminal
does not reach it), so a nice value on the process alone made it yield to
nothing outside that session: three training jobs took as much CPU as the
studio window and its engine. The job sets its session's nice value too.

Only a process that leads its session sets the session's value, so a job
started in a terminal's session (a test, a developer) leaves the
terminal's other programs alone.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_TRIES = 40
"""Linux lets an unprivileged process change an autogroup's nice value at
most once per 100 ms, machine-wide (``EAGAIN`` until then): jobs started
together take turns."""
AUTOGROUP_RETRY_S = 0.05


def lower_priority(increment: int) -> None:
    """Run ``increment`` nicer (at most 19), the session included when this
    process leads it (:func:`match_session_priority`)."""
    with contextlib.suppress(OSError, AttributeError):  # no os.nice on Windows
        os.nice(increment)
    match_session_priority()


def match_session_priority() -> bool:
    """Give this process's session (its autogroup) the process's nice value,
    when the process leads its session and the session is less nice; return
    whether the session's value is now at least the process's. Not Linux,
    or no autogroups: nothing to do (True)."""
    try:
        if os.getsid(0) != os.getpid():
            return False
        current = session_niceness()
        wanted = os.nice(0)
    except (OSError, AttributeError):
        return True
    if current is None or current >= wanted:
        return True
    for _ in range(AUTOGROUP_TRIES):
        try:
            AUTOGROUP.write_text(str(wanted), encoding="ascii")
            return True
        except BlockingIOError:  # EAGAIN: another job just set its own
            time.sleep(AUTOGROUP_RETRY_S)
        except OSError:
            return False
    return False


def session_niceness(pid: int | str = "self") -> int | None:
    """The nice value of a process's autogroup (None without autogroups)."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text(encoding="ascii")
    except OSError:
        return None
    # "/autogroup-5698 nice 5"
    parts = text.split()
    try:
        return int(parts[parts.index("nice") + 1])
    except (ValueError, IndexError):
        return None
