"""Training processes keep what they free (engine/jobs/memory.py): a buffer
allocated and freed again and again costs no page faults after the first.
Each check runs in a process of its own, as a job does: the test process's
own malloc is left as it is."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

CHURN = """
import resource, sys
import numpy as np
from engine.jobs.memory import keep_freed_memory
tuned = keep_freed_memory() if sys.argv[1] == "tuned" else None
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):  # 40 MB made and dropped a step: over glibc's adaptive 32 MB
    batch = np.ones(10_000_000, dtype=np.float32)
    del batch
print(tuned, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _churn(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHURN, mode],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, **env},
    )
    tuned, faults = done.stdout.split()
    return tuned, int(faults)


def test_a_freed_buffer_is_used_again_without_page_faults() -> None:
    _, untuned = _churn("plain")
    tuned, faults = _churn("tuned")
    assert tuned == "True"
    # Without, each step maps its buffer afresh; with, only the first does (a
    # ratio, whatever page size the kernel gives numpy's large arrays).
    assert untuned > 500 and faults < untuned / 10, (untuned, faults)


def test_the_users_own_malloc_settings_stand() -> None:
    tuned, _ = _churn("tuned", MALLOC_TRIM_THRESHOLD_="131072")
    assert tuned == "False"
