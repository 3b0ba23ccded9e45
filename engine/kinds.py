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
from engine.llm import (
    data_import,
    datasets,
    evaluate,
    hub,
    merge,
    reward_model,
    rollouts,
    train,
)
from engine.nodes import executor
from engine.rl import hub as rl_hub
from engine.rl import job as rl_train
from engine.rl import record, tune

__all__ = [
    "data_import",
    "datasets",
    "env_jobs",
    "evaluate",
    "executor",
    "export_jobs",
    "hub",
    "merge",
    "ollama_job",
    "record",
    "reward_model",
    "rl_hub",
    "rl_train",
    "rollouts",
    "selftest",
    "train",
    "tune",
]
