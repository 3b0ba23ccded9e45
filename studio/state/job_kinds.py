"""The engine's job kinds as the studio knows them: what its ``hello`` reply
lists (each kind's label, group, progress unit and resumability, declared
once by ``@job_kind`` beside the job's code in the engine).

Qt-free. :data:`JOB_KINDS` is filled by the session when the engine answers;
the lists of runs read it to tell training from other activity, to name a
run's kind and to know whether its progress counts training steps.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRAINING_GROUP = "training"
"""The group whose runs the Training list shows (the others: Activity)."""


class JobKindCatalog:
    """The job kinds one engine declared, by name."""

    def __init__(self) -> None:
        self._kinds: dict[str, dict[str, Any]] = {}

    def update(self, kinds: Mapping[str, Any]) -> None:
        """Take the ``job_kinds`` of an engine's hello reply."""
        self._kinds = {
            str(name): dict(entry)
            for name, entry in kinds.items()
            if isinstance(entry, Mapping)
        }

    def names(self) -> list[str]:
        return sorted(self._kinds)

    def label(self, kind: str) -> str:
        """What a run of ``kind`` is called (the kind's name when unknown)."""
        return str(self._kinds.get(kind, {}).get("label") or kind)

    def is_training(self, kind: str) -> bool:
        return self._kinds.get(kind, {}).get("group") == TRAINING_GROUP

    def unit(self, kind: str) -> str:
        """What a run's progress counts (``steps`` when the kind is unknown)."""
        return str(self._kinds.get(kind, {}).get("progress_unit") or "steps")

    def counts_steps(self, kind: str) -> bool:
        """Whether a run's progress counts training steps (a download's
        counts bytes, a flow's nodes)."""
        return self._kinds.get(kind, {}).get("progress_unit") == "steps"


JOB_KINDS = JobKindCatalog()
"""The kinds of the engine this studio talks to."""
