"""Every kind of job the engine runs: importing this module declares them all.

Each import below is a module that declares kinds with
:func:`engine.jobs.registry.job_kind` beside their job's code;
:func:`engine.jobs.registry.kinds` imports this module on first use. The
supervisor imports it, so every module listed keeps torch and the other heavy
libraries inside its job functions (``tests/test_job_kinds.py``).
"""

from __future__ import annotations

from engine.envs import job as env_jobs
from engine.export import jobs as export_jobs
from engine.export import ollama_job
from engine.jobs import selftest
from engine.jobs.registry import legacy
from engine.llm import datasets, evaluate, hub, merge, reward_model, rollouts, train
from engine.rl import job as rl_train

__all__ = [
    "datasets",
    "env_jobs",
    "evaluate",
    "export_jobs",
    "hub",
    "merge",
    "ollama_job",
    "reward_model",
    "rl_train",
    "rollouts",
    "selftest",
    "train",
]

legacy(
    "rl.tune",
    "engine.rl.tune:job",
    "engine.rl.tune:validate_job",
    "Sweep",
    "training",
    "An Optuna sweep over an rl.train run's settings: its "
    "trials are rl.train runs of the project, trained by worker processes.",
    schema="engine.rl.tune:schema",
    project_field="project_dir",
    default_name="sweep {study}",
    # Its workers get 60 s to stop (engine.rl.sweep_workers.WorkerGroup.stop).
    stop_grace_s=90.0,
    progress_unit="trials",
)
legacy(
    "rl.tune.preset",
    "engine.rl.tune:preset_job",
    "engine.rl.tune:validate_preset_job",
    "Sweep preset",
    "export",
    "Saves a sweep's best trial's settings as a project preset.",
    project_field="project_dir",
    default_name="preset {name}",
    progress_unit="items",
)
legacy(
    "flow.run",
    "engine.nodes.executor:run",
    "engine.nodes.executor:validate",
    "Workflow",
    "training",
    "Runs a workflow graph (.flow.json): its nodes in order, "
    "reusing the outputs of unchanged nodes.",
    progress_unit="nodes",
)
