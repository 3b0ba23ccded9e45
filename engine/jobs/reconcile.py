"""Runs the project's database thinks are active but no live process owns,
settled from their run folders (the database is the index, the folders the
truth): a run that left a ``result.json`` is finished as its recorder would
have finished it, one that did not was interrupted.

The supervisor calls it when it opens a project and every few seconds after;
it finishes runs through :mod:`engine.jobs.lifecycle`, so the store below
knows nothing of how a run ends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from engine import contract
from engine.jobs import lifecycle
from engine.store.project import Project, process_owns_run

QUEUED_GRACE_S = 30.0
"""How long a ``queued`` row without a process is left alone by
:func:`reconcile_runs`: the row of a run is made before its process starts
and records its pid, and the process may belong to another engine on the
project (a studio beside ``serve-http``, a headless ``train``)."""


def reconcile_runs(project: Project, live_run_ids: Iterable[str] = ()) -> list[str]:
    """Settle runs the database thinks are active but no live process owns.

    A run that finished while nobody watched left a ``result.json``: it is
    finished as its recorder would have (models registered, final status;
    :func:`engine.jobs.lifecycle.finish`); a run without one was interrupted
    (engine killed, machine rebooted). A run whose recorded process is still
    alive (a headless ``rl-studio-engine train`` in a terminal, a job
    finishing after its engine died) is left as it is: it reports its own
    end, and so is a run queued less than :data:`QUEUED_GRACE_S` ago (its
    process is being started, perhaps by another engine). Returns the ids
    whose status changed.
    """
    live = set(live_run_ids)
    changed = []
    for run in project.list_runs():
        if run.status not in contract.ACTIVE_STATUSES or run.id in live:
            continue
        if process_owns_run(run):
            continue
        if run.status == "queued" and time.time() - run.created < QUEUED_GRACE_S:
            continue  # being started, maybe by another process
        outcome = lifecycle.read_outcome(project.run_dir(run.id))
        if outcome is not None:
            # The run's last step, which its recorder did not live to take:
            # its models registered, its final status.
            lifecycle.finish(project, run.id, outcome, exit_code=run.exit_code)
        else:
            # What it saved, not its previous attempt's summary (a resumed
            # run's): the summary its kind reads from its folder. A problem
            # reading it is told in the run's reason.
            _, problems = lifecycle.finish_from_disk(
                project,
                run.id,
                {},
                "ended without reporting a result",
                status="interrupted",
                reason="The run's process ended without reporting a result.",
            )
            if problems:
                project.update_run(run.id, reason=" ".join(problems))
        changed.append(run.id)
    return changed
