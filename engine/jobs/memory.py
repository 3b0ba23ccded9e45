"""Memory allocation in the processes that train: glibc's malloc kept from
handing freed buffers back to the system between steps.

A training step allocates and frees the same large buffers again and again
(a CnnPolicy minibatch of 256 stacked Atari frames is 29 MB as floats, its
first convolution's output 13 MB). glibc maps an allocation over its mmap
threshold with pages of its own and unmaps them when it is freed, and gives
back the free top of its heap beyond its trim threshold, so every step
touched fresh pages, one page fault each 4 KB. Its thresholds adapt, but
not fast enough for this: PPO on Pong (8 envs, 4,096 steps) made 1.3-2.0
million page faults, 2.4-3.4 s of its 17.6 s in the kernel. With the
thresholds fixed at :data:`MMAP_THRESHOLD` and :data:`TRIM_THRESHOLD` the
same run made 0.12 million and took 15.8 s, its peak memory no larger
(640 MB against 663 MB).

Set where a process starts to run jobs (the job runner, a sweep worker, the
command line), never in a process that only imports the engine (a test).
"""

from __future__ import annotations

import ctypes
import os
import platform

MMAP_THRESHOLD = 64 << 20
"""Allocations at least this large get pages of their own (glibc's default
starts at 128 KB and grows to at most 32 MB as such blocks are freed)."""
TRIM_THRESHOLD = 256 << 20
"""Free memory kept at the top of the heap before it is given back."""
_M_TRIM_THRESHOLD = -1  # glibc's <malloc.h>
_M_MMAP_THRESHOLD = -3
ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")
"""glibc's own settings of the same: where a user set one, theirs stands."""


def keep_freed_memory() -> bool:
    """Set this process's malloc thresholds; False where the C library is
    not glibc, a user set them in the environment, or glibc refused."""
    if platform.libc_ver()[0] != "glibc" or any(os.environ.get(n) for n in ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )
