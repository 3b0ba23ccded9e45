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

__all__ = ["env_jobs", "export_jobs", "ollama_job", "selftest"]

legacy(
    "rl.train",
    "engine.rl.train:run",
    "engine.rl.config:validate",
    "RL training",
    "training",
    "Trains a stable-baselines3 agent (PPO, A2C, DQN, SAC, TD3, "
    "MaskablePPO) on a Gymnasium or designed environment.",
    schema="engine.rl.schema:schema",
    project_field="project_dir",
    default_name="{algo} {env}",
    resumable=True,
    summary_on_disk="engine.rl.checkpoints:summary_on_disk",
)
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
legacy(
    "llm.collect",
    "engine.llm.rollouts:run_collect",
    "engine.llm.rollouts:validate_collect",
    "Collect rollouts",
    "data",
    "Records episodes of a language-model (or rule-based) policy in an env "
    "as JSONL traces in the project's data/traces/.",
    resumable=True,
    progress_unit="episodes",
)
legacy(
    "llm.dataset",
    "engine.llm.datasets:run_dataset",
    "engine.llm.datasets:validate_dataset",
    "Dataset",
    "data",
    "Builds an SFT, KTO, DPO or GRPO dataset (JSONL + parquet) from traces.",
    progress_unit="items",
)
legacy(
    "reward.train",
    "engine.llm.reward_model:run",
    "engine.llm.reward_model:validate",
    "Reward model",
    "training",
    "Trains a reward model from the traces' manual labels (a LoRA reward "
    "head on a language model, or an MLP on observations), reports its "
    "held-out accuracy and suggests labels for unlabelled steps.",
)
legacy(
    "llm.train",
    "engine.llm.train:run",
    "engine.llm.train:validate",
    "LLM fine-tuning",
    "training",
    "Fine-tunes a language model with a LoRA adapter through TRL "
    "(GRPO, KTO, DPO or SFT).",
    resumable=True,
)
legacy(
    "llm.merge",
    "engine.llm.merge:run",
    "engine.llm.merge:validate",
    "Merge",
    "export",
    "Merges a LoRA adapter into its base model as a new HF folder.",
    progress_unit="items",
)
legacy(
    "llm.evaluate",
    "engine.llm.evaluate:run",
    "engine.llm.evaluate:validate",
    "Evaluation",
    "evaluation",
    "Runs language-model policies in an env: success rate, return, "
    "invalid actions, before/after report.",
    progress_unit="episodes",
)
legacy(
    "hub.download",
    "engine.llm.hub:run",
    "engine.llm.hub:validate",
    "Hub download",
    "data",
    "Downloads a model from the Hugging Face Hub into the HF cache "
    "(progress in bytes; a stopped download resumes).",
    schema="engine.llm.hub:schema",
    progress_unit="bytes",
)
