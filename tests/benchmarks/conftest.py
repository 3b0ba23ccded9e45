"""What every benchmark shares.

Processes are timed as a user's machine runs them: with Python's bytecode
cache. This sandbox sets ``PYTHONDONTWRITEBYTECODE``, under which every
engine or studio process a benchmark starts would compile the project's
sources again (about half a second an engine process, against a bare script
whose libraries were compiled when pip installed them), a cost no installed
copy pays after its first start. So it is unset for the benchmarks and the
processes they start.
"""

from __future__ import annotations

import os

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
